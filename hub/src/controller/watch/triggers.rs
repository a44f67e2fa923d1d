//! Which watch events start a reconcile. Each reconcile renders the MiniCluster's objects
//! and compares them with the caches; the events that change nothing a reconcile reads
//! are dropped here, before they queue one: the echo of the hub's own writes (status,
//! children, `job-index` labels), a new resourceVersion of an object whose cached form
//! (see `cache`: a broker pod's status, say, is not kept) did not change, and pods that
//! concern no decision.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use flux_shared::api::MiniCluster;
use flux_shared::render::labels::{self, JOB_INDEX};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::controller::watch::echoes::Echoes;

/// What a reconcile reads of a MiniCluster, besides the status it writes itself: a
/// change of the spec (the generation), deletion, finalizers, labels or annotations
/// (`kubectl annotate` is how people ask for a reconcile).
pub fn minicluster(mc: &MiniCluster) -> Option<u64> {
    let meta = &mc.metadata;
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    Some(h.finish())
}

/// The MiniCluster a pod's events concern: the lead broker's (its node is the burst
/// endpoint), the services pod's (the hub's own object) and any broker pod still without
/// its `job-index` label (the reconcile adds it). Other pods change nothing the
/// controller decides.
pub fn pod_owner(pod: &Pod) -> Option<ObjectRef<MiniCluster>> {
    let pod_labels = pod.labels();
    let minicluster = pod_labels.get(labels::MINICLUSTER)?;
    let index = pod_labels.get(labels::COMPLETION_INDEX).map(String::as_str);
    let wanted = matches!(index, None | Some("0")) || !pod_labels.contains_key(JOB_INDEX);
    let namespace = pod.namespace()?;
    wanted.then(|| ObjectRef::new(minicluster).within(&namespace))
}

/// Which watch events of one managed kind wake the reconcile of their owner: an object
/// that is new, changed in something its cache keeps (the caches keep what a reconcile
/// reads, see `cache`), or deleted, unless the event is the echo of the hub's own write
/// ([`Echoes`]). A relist after a lost watch wakes the owners of what changed or vanished
/// meanwhile; the first list wakes nothing, since every MiniCluster is reconciled at start.
///
/// An event of an object the hub is writing waits until the write ends ([`Echoes`]),
/// and so do the later events of that object, to keep their order.
///
/// Call [`ChildEvents::before`] with each event before the cache applies it, and
/// [`Wake::objects`] after; [`ChildEvents::settle`] whenever a write ends.
pub struct ChildEvents<K: kube::Resource> {
    listed: bool,
    relist: Option<Relist<K>>,
    waiting: VecDeque<Waiting<K>>,
}

/// An event held back by a write in flight.
struct Waiting<K: kube::Resource> {
    object: ObjectRef<K>,
    resource_version: Option<String>,
    /// Whether it changed its cached form.
    changed: bool,
}

struct Relist<K: kube::Resource> {
    before: Vec<Arc<K>>,
    seen: HashSet<ObjectRef<K>>,
    changed: Vec<ObjectRef<K>>,
}

/// The objects whose owners an event wakes.
pub struct Wake<K: kube::Resource> {
    /// In the cache once the event is applied.
    cached: Vec<ObjectRef<K>>,
    /// No longer in the cache.
    gone: Vec<Arc<K>>,
}

impl<K: kube::Resource> Wake<K> {
    fn none() -> Self {
        Wake {
            cached: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// The objects to send, read from `cache` after it applied the event.
    pub fn objects(self, cache: &Store<K>) -> Vec<Arc<K>>
    where
        K: Clone,
        K::DynamicType: Eq + Hash + Clone,
    {
        let mut objects: Vec<Arc<K>> = self.cached.iter().filter_map(|r| cache.get(r)).collect();
        objects.extend(self.gone);
        objects
    }
}

impl<K> Default for ChildEvents<K>
where
    K: kube::Resource,
{
    fn default() -> Self {
        ChildEvents {
            listed: false,
            relist: None,
            waiting: VecDeque::new(),
        }
    }
}

impl<K> ChildEvents<K>
where
    K: kube::Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + PartialEq,
{
    /// What `event` wakes, decided against `cache` as it is before the event.
    pub fn before(
        &mut self,
        event: &watcher::Event<K>,
        cache: &Store<K>,
        echoes: &Echoes,
    ) -> Wake<K> {
        let mut wake = Wake::none();
        match event {
            watcher::Event::Apply(obj) => {
                let (ns, name, rv) = identity(obj);
                let object = ObjectRef::from_obj(obj);
                if echoes.in_flight(K::KIND, ns, name)
                    || self.waiting.iter().any(|w| w.object == object)
                {
                    self.waiting.push_back(Waiting {
                        object,
                        resource_version: rv.map(str::to_string),
                        changed: changed(cache, obj),
                    });
                } else if !echoes.is_echo(K::KIND, ns, name, rv) && changed(cache, obj) {
                    wake.cached.push(object);
                }
            }
            watcher::Event::Delete(obj) => {
                let (ns, name, _) = identity(obj);
                echoes.forget(K::KIND, ns, name);
                // Wakes its owner now: what waited for it is moot.
                let object = ObjectRef::from_obj(obj);
                self.waiting.retain(|w| w.object != object);
                wake.gone.push(Arc::new(obj.clone()));
            }
            watcher::Event::Init => {
                self.relist = self.listed.then(|| Relist {
                    before: cache.state(),
                    seen: HashSet::new(),
                    changed: Vec::new(),
                });
            }
            watcher::Event::InitApply(obj) => {
                if let Some(relist) = self.relist.as_mut() {
                    let r = ObjectRef::from_obj(obj);
                    if changed(cache, obj) {
                        relist.changed.push(r.clone());
                    }
                    relist.seen.insert(r);
                }
            }
            watcher::Event::InitDone => {
                self.listed = true;
                if let Some(relist) = self.relist.take() {
                    wake.cached = relist.changed;
                    wake.gone = relist
                        .before
                        .into_iter()
                        .filter(|o| !relist.seen.contains(&ObjectRef::from_obj(o)))
                        .collect();
                }
            }
        }
        wake
    }
}

impl<K> ChildEvents<K>
where
    K: kube::Resource<DynamicType = ()> + k8s_openapi::Resource,
{
    /// Whether events wait for writes in flight.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// What the events that waited wake, now that some writes ended: each of an object
    /// no longer written is an echo, or wakes its owner if it changed the cached form.
    pub fn settle(&mut self, echoes: &Echoes) -> Wake<K> {
        let mut wake = Wake::none();
        let mut still: VecDeque<Waiting<K>> = VecDeque::new();
        for w in std::mem::take(&mut self.waiting) {
            let ns = w.object.namespace.as_deref().unwrap_or_default();
            if echoes.in_flight(K::KIND, ns, &w.object.name)
                || still.iter().any(|s| s.object == w.object)
            {
                still.push_back(w);
            } else if !echoes.is_echo(K::KIND, ns, &w.object.name, w.resource_version.as_deref())
                && w.changed
                && !wake.cached.contains(&w.object)
            {
                wake.cached.push(w.object);
            }
        }
        self.waiting = still;
        wake
    }
}

fn identity<K: kube::Resource>(obj: &K) -> (&str, &str, Option<&str>) {
    let meta = obj.meta();
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.resource_version.as_deref(),
    )
}

/// Whether `obj` differs from its cached version in anything but the resourceVersion.
fn changed<K>(cache: &Store<K>, obj: &K) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone + PartialEq,
{
    let Some(cached) = cache.get(&ObjectRef::from_obj(obj)) else {
        return true;
    };
    if cached.meta().resource_version == obj.meta().resource_version {
        return false;
    }
    let mut same_version = obj.clone();
    same_version.meta_mut().resource_version = cached.meta().resource_version.clone();
    same_version != *cached
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::runtime::reflector::{self, store::Writer};

    fn pod(labels: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("hpc".into());
        pod.metadata.uid = Some("u-1".into());
        pod.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        pod
    }

    fn mc() -> MiniCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
            "metadata": {"name": "m", "namespace": "hpc", "generation": 1},
            "spec": {"size": 2, "containers": [{"image": "x"}]},
        }))
        .expect("a MiniCluster")
    }

    #[test]
    fn a_status_write_is_no_trigger_but_spec_deletion_and_annotations_are() {
        let before = mc();
        let mut status_only = before.clone();
        status_only.status = Some(Default::default());
        status_only.metadata.resource_version = Some("9".into());
        assert_eq!(minicluster(&before), minicluster(&status_only));

        let mut resized = before.clone();
        resized.metadata.generation = Some(2);
        let mut deleted = before.clone();
        deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let mut annotated = before.clone();
        annotated
            .annotations_mut()
            .insert("touch".into(), "1".into());
        let mut released = before.clone();
        released.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
        for changed in [resized, deleted, annotated, released] {
            assert_ne!(minicluster(&before), minicluster(&changed));
        }
    }

    #[test]
    fn lead_services_and_unlabelled_pods_concern_their_minicluster() {
        let owner = Some(ObjectRef::new("m").within("hpc"));
        let lead = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "0")]);
        assert_eq!(pod_owner(&lead), owner);
        let services = pod(&[(labels::MINICLUSTER, "m")]);
        assert_eq!(pod_owner(&services), owner);
        let new_worker = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "3")]);
        assert_eq!(
            pod_owner(&new_worker),
            owner,
            "it needs its job-index label"
        );
        let labelled_worker = pod(&[
            (labels::MINICLUSTER, "m"),
            (labels::COMPLETION_INDEX, "3"),
            (JOB_INDEX, "3"),
        ]);
        assert_eq!(pod_owner(&labelled_worker), None);
        assert_eq!(pod_owner(&pod(&[])), None);
    }

    fn cm(name: &str, rv: &str, value: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "hpc", "resourceVersion": rv},
            "data": {"k": value},
        }))
        .expect("a ConfigMap")
    }

    /// Feeds `event` as a watch would and returns the names of the objects it wakes.
    fn feed(
        events: &mut ChildEvents<ConfigMap>,
        (cache, writer): &mut (Store<ConfigMap>, Writer<ConfigMap>),
        echoes: &Echoes,
        event: watcher::Event<ConfigMap>,
    ) -> Vec<String> {
        let wake = events.before(&event, cache, echoes);
        writer.apply_watcher_event(&event);
        let mut names: Vec<String> = wake.objects(cache).iter().map(|o| o.name_any()).collect();
        names.sort();
        names
    }

    fn listed() -> (
        ChildEvents<ConfigMap>,
        (Store<ConfigMap>, Writer<ConfigMap>),
        Echoes,
    ) {
        let mut events = ChildEvents::default();
        let mut cache = reflector::store();
        let echoes = Echoes::default();
        for e in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("a", "1", "x")),
            watcher::Event::InitDone,
        ] {
            assert!(
                feed(&mut events, &mut cache, &echoes, e).is_empty(),
                "the first list wakes nothing"
            );
        }
        (events, cache, echoes)
    }

    #[test]
    fn new_changed_and_deleted_objects_wake_their_owner_and_a_new_version_alone_does_not() {
        let (mut events, mut cache, echoes) = listed();
        let mut feed = |e| feed(&mut events, &mut cache, &echoes, e);
        assert_eq!(feed(watcher::Event::Apply(cm("b", "2", "x"))), ["b"], "new");
        assert!(
            feed(watcher::Event::Apply(cm("b", "2", "x"))).is_empty(),
            "seen"
        );
        assert!(
            feed(watcher::Event::Apply(cm("b", "3", "x"))).is_empty(),
            "only the version"
        );
        assert_eq!(
            feed(watcher::Event::Apply(cm("b", "4", "y"))),
            ["b"],
            "changed"
        );
        assert_eq!(
            feed(watcher::Event::Delete(cm("a", "5", "x"))),
            ["a"],
            "deleted"
        );
    }

    #[test]
    fn the_echo_of_the_hubs_own_write_wakes_nothing_and_the_next_change_does() {
        let (mut events, mut cache, echoes) = listed();
        echoes.begin("ConfigMap", "hpc", "b").done(Some("2"));
        echoes.begin("ConfigMap", "hpc", "a").done(Some("3"));
        let mut feed = |e| feed(&mut events, &mut cache, &echoes, e);
        assert!(
            feed(watcher::Event::Apply(cm("b", "2", "x"))).is_empty(),
            "created by the hub"
        );
        assert!(
            feed(watcher::Event::Apply(cm("a", "3", "y"))).is_empty(),
            "applied by the hub"
        );
        assert_eq!(
            feed(watcher::Event::Apply(cm("a", "4", "z"))),
            ["a"],
            "someone else"
        );
    }

    #[test]
    fn a_relist_wakes_what_changed_or_vanished_while_the_watch_was_away() {
        let (mut events, mut cache, echoes) = listed();
        let mut feed = |e| feed(&mut events, &mut cache, &echoes, e);
        assert_eq!(feed(watcher::Event::Apply(cm("b", "2", "x"))), ["b"]);
        assert_eq!(feed(watcher::Event::Apply(cm("c", "3", "x"))), ["c"]);
        assert!(feed(watcher::Event::Init).is_empty());
        assert!(feed(watcher::Event::InitApply(cm("a", "1", "x"))).is_empty());
        assert!(
            feed(watcher::Event::InitApply(cm("b", "7", "changed"))).is_empty(),
            "woken at the end"
        );
        assert!(
            feed(watcher::Event::InitApply(cm("d", "8", "x"))).is_empty(),
            "woken at the end"
        );
        assert_eq!(
            feed(watcher::Event::InitDone),
            ["b", "c", "d"],
            "b changed, c was deleted, d was created; a is as it was"
        );
    }

    /// What the waiting events wake once the writes in flight ended.
    fn settle(
        events: &mut ChildEvents<ConfigMap>,
        (cache, _): &mut (Store<ConfigMap>, Writer<ConfigMap>),
        echoes: &Echoes,
    ) -> Vec<String> {
        let mut names: Vec<String> = events
            .settle(echoes)
            .objects(cache)
            .iter()
            .map(|o| o.name_any())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_echo_that_comes_before_the_answer_waits_for_it_and_wakes_nothing() {
        let (mut events, mut cache, echoes) = listed();
        let e = &echoes;
        use watcher::Event::{Apply, Delete};
        let create = echoes.begin("ConfigMap", "hpc", "b");
        assert!(
            feed(&mut events, &mut cache, e, Apply(cm("b", "2", "x"))).is_empty(),
            "waits for the answer"
        );
        assert!(events.waiting());
        // Someone else's change right after, before the answer: waits behind the echo.
        assert!(feed(&mut events, &mut cache, e, Apply(cm("b", "3", "y"))).is_empty());
        assert_eq!(
            cache
                .0
                .get(&ObjectRef::new("b").within("hpc"))
                .and_then(|c| c.data.as_ref()?.get("k").cloned()),
            Some("y".into()),
            "the cache is current"
        );
        assert!(
            settle(&mut events, &mut cache, e).is_empty(),
            "still in flight"
        );
        create.done(Some("2"));
        assert_eq!(
            settle(&mut events, &mut cache, e),
            ["b"],
            "the echo wakes nothing, the change after it does"
        );
        assert!(!events.waiting());

        let apply = echoes.begin("ConfigMap", "hpc", "a");
        assert!(feed(&mut events, &mut cache, e, Apply(cm("a", "4", "z"))).is_empty());
        drop(apply);
        assert_eq!(
            settle(&mut events, &mut cache, e),
            ["a"],
            "the write failed: the change was someone else's"
        );

        let apply = echoes.begin("ConfigMap", "hpc", "a");
        assert!(feed(&mut events, &mut cache, e, Apply(cm("a", "5", "w"))).is_empty());
        assert_eq!(
            feed(&mut events, &mut cache, e, Delete(cm("a", "6", "w"))),
            ["a"],
            "a deletion wakes at once"
        );
        apply.done(Some("5"));
        assert!(
            !events.waiting(),
            "what waited for the deleted object is dropped"
        );
    }
}
