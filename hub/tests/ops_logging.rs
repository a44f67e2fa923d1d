//! `flux_shared::ops::logging::init` installs a global subscriber once and tolerates being
//! called again (its own process, as it sets process-wide state).

#[test]
fn init_twice_is_harmless() {
    flux_shared::ops::logging::init(true);
    flux_shared::ops::logging::init(false);
    assert!(tracing::dispatcher::has_been_set());
    tracing::info!("still logging");
}
