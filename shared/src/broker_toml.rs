//! broker.toml, the Flux broker's configuration (R, the other file Flux reads, is in
//! [`resource_set`](crate::resource_set)).
//!
//! Real brokers find their rank by matching their host name against the expanded
//! `[bootstrap] hosts` list, so every cluster gets the same names in the same order;
//! only a burst cluster's rank-0 entry differs, carrying a `connect` override to the
//! lead broker's external address.

use std::fmt::Write;

use crate::hostlist;
use crate::plan::{Plan, Target};

/// The broker.toml of one target: `flux.brokerConfig` verbatim when given, else generated.
pub fn render(plan: &Plan, target: &Target) -> String {
    if let Some(custom) = plan.spec.flux().broker_config() {
        return custom.to_string();
    }
    let layout = &plan.layout;
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "# Flux broker configuration for MiniCluster {ns}/{name}, Job {job}.\n\
         # Generated: rank order is identical in every cluster of the instance.\n\
         \n\
         [access]\n\
         allow-guest-user = true\n\
         allow-root-owner = true\n\
         \n\
         [resource]\n\
         path = {r}\n\
         # R is declared, not discovered, so brokers do not check it against their hardware.\n\
         noverify = true\n\
         \n\
         [bootstrap]\n\
         curve_cert = {cert}\n\
         default_port = {port}\n\
         default_bind = \"tcp://eth0:%p\"\n\
         default_connect = {connect}\n\
         hosts = [\n",
        ns = plan.namespace,
        name = plan.name,
        job = target.job,
        r = toml_string(layout.r_path()),
        cert = toml_string(layout.curve_cert()),
        port = crate::api::defaults::BROKER_PORT,
        connect = toml_string(&format!(
            "tcp://%h.{}.{}.svc.cluster.local:%p",
            target.headless, plan.namespace
        )),
    );
    match &target.lead {
        None => {
            let _ = writeln!(out, "  {{ host = {} }},", toml_string(&plan.hostlist));
        }
        Some(lead) => {
            let (first, rest) = plan
                .hosts
                .split_first()
                .map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
            let _ = writeln!(
                out,
                "  {{ host = {}, connect = {} }},",
                toml_string(first),
                toml_string(&lead.uri())
            );
            if !rest.is_empty() {
                let _ = writeln!(
                    out,
                    "  {{ host = {} }},",
                    toml_string(&hostlist::compress(rest))
                );
            }
        }
    }
    let _ = write!(
        out,
        "]\n\
         \n\
         [sched-fluxion-qmanager]\n\
         queue-policy = {}\n",
        toml_string(plan.spec.flux().queue_policy())
    );
    out
}

/// A TOML basic string. Ours rather than `toml`'s: `toml::Value` picks a literal or
/// multi-line string for some inputs, and `toml_writer` escapes `\b`, `\f` and C1
/// controls differently; the goldens fix this form.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MiniCluster;
    use crate::plan::{Endpoint, Role};

    fn plan(yaml: &str) -> Plan {
        let mc: MiniCluster = serde_yaml_ng::from_str(yaml).expect("test yaml");
        Plan::new(&mc).expect("valid test spec")
    }

    const BURSTING: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: { name: lead, namespace: hpc }
spec:
  size: 2
  maxSize: 3
  containers: [{ image: "ubuntu:noble", command: "hostname" }]
  flux:
    bursting:
      clusters:
        - { name: burst-a, size: 2 }
        - { name: burst-b, size: 1, cluster: gke }
"#;

    #[test]
    fn root_and_burst_configs_list_the_same_hosts_in_the_same_order() {
        let plan = plan(BURSTING);
        let lead = Endpoint {
            address: "10.0.0.7".into(),
            port: 30093,
        };
        let expand = |toml_text: &str| -> Vec<String> {
            let table: toml::Table = toml_text.parse().expect("valid toml");
            table["bootstrap"]["hosts"]
                .as_array()
                .expect("hosts array")
                .iter()
                .flat_map(|h| {
                    hostlist::expand(h["host"].as_str().expect("host")).expect("hostlist")
                })
                .collect()
        };
        let root = render(&plan, &plan.target(&Role::Root).expect("root"));
        assert_eq!(expand(&root), plan.hosts);
        assert_eq!(
            plan.hosts,
            [
                "lead-0",
                "lead-1",
                "lead-2",
                "burst-a-0",
                "burst-a-1",
                "burst-b-0"
            ]
        );
        for role in plan.roles(&lead).into_iter().skip(1) {
            let target = plan.target(&role).expect("burst");
            let text = render(&plan, &target);
            assert_eq!(expand(&text), plan.hosts, "{text}");
            let table: toml::Table = text.parse().expect("valid toml");
            let hosts = table["bootstrap"]["hosts"].as_array().expect("hosts");
            assert_eq!(hosts[0]["host"].as_str(), Some("lead-0"));
            assert_eq!(hosts[0]["connect"].as_str(), Some("tcp://10.0.0.7:30093"));
            assert!(hosts[1..].iter().all(|h| h.get("connect").is_none()));
            assert_eq!(
                table["bootstrap"]["default_connect"].as_str(),
                Some(format!("tcp://%h.{}.hpc.svc.cluster.local:%p", target.job).as_str())
            );
        }
    }

    #[test]
    fn root_config_has_expected_sections() {
        let plan = plan(BURSTING);
        let text = render(&plan, &plan.target(&Role::Root).expect("root"));
        let table: toml::Table = text.parse().expect("valid toml");
        assert_eq!(table["bootstrap"]["default_port"].as_integer(), Some(8050));
        assert_eq!(
            table["bootstrap"]["curve_cert"].as_str(),
            Some("/mnt/flux/config/curve/curve.cert")
        );
        assert_eq!(
            table["resource"]["path"].as_str(),
            Some("/mnt/flux/config/etc/flux/system/R")
        );
        assert_eq!(table["resource"]["noverify"].as_bool(), Some(true));
        assert_eq!(
            table["sched-fluxion-qmanager"]["queue-policy"].as_str(),
            Some("fcfs")
        );
        assert_eq!(table["access"]["allow-root-owner"].as_bool(), Some(true));
        assert_eq!(
            table["bootstrap"]["hosts"][0]["host"].as_str(),
            Some("lead-[0-2],burst-a-[0-1],burst-b-0")
        );
    }

    #[test]
    fn custom_broker_config_is_used_verbatim() {
        let yaml = BURSTING.replace(
            "  flux:\n",
            "  flux:\n    brokerConfig: |\n      [bootstrap]\n      hosts = [ { host = \"x\" } ]\n",
        );
        let plan = plan(&yaml);
        let text = render(&plan, &plan.target(&Role::Root).expect("root"));
        assert_eq!(text, "[bootstrap]\nhosts = [ { host = \"x\" } ]\n");
    }

    #[test]
    fn resource_set_covers_every_rank() {
        let yaml = BURSTING.replace("command: \"hostname\"", "command: \"hostname\", cores: 4");
        let plan = plan(&yaml);
        let r: serde_json::Value = serde_json::from_str(&plan.resources).expect("json");
        assert_eq!(r["version"], 1);
        assert_eq!(r["execution"]["R_lite"][0]["rank"], "0-5");
        assert_eq!(r["execution"]["R_lite"][0]["children"]["core"], "0-3");
        assert_eq!(
            r["execution"]["nodelist"][0],
            "lead-[0-2],burst-a-[0-1],burst-b-0"
        );
    }

    #[test]
    fn size_one_never_prints_a_malformed_range() {
        let plan = plan("metadata: {name: solo}\nspec:\n  containers: [{image: busybox}]\n");
        let text = render(&plan, &plan.target(&Role::Root).expect("root"));
        assert!(text.contains("{ host = \"solo-0\" }"), "{text}");
        assert!(plan.resources.contains("\"rank\":\"0\""));
    }

    #[test]
    fn toml_strings_escape_quotes_and_controls() {
        assert_eq!(toml_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
