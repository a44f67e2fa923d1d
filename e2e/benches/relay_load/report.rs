//! What a run measured: each phase's row, and the summary against idle.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_hub::server::relay::Rates;

use crate::{MIB, Mode, WARM_UP};

/// (when, how long) samples.
pub type Samples = Arc<Mutex<Vec<(Instant, Duration)>>>;

/// The `p`th percentile of `sorted` (nearest rank), zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The samples taken within [from, to), sorted.
pub fn window(samples: &Samples, from: Instant, to: Instant) -> Vec<Duration> {
    let mut v: Vec<Duration> = samples
        .lock()
        .expect("samples")
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, d)| *d)
        .collect();
    v.sort();
    v
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One measured phase.
pub struct Phase {
    pub round: usize,
    pub mode: Mode,
    pub seconds: f64,
    pub relayed_mib: f64,
    pub frames_to_lead: u64,
    pub frames_from_lead: u64,
    pub greeted: u64,
    pub refused: u64,
    pub greeting: Vec<Duration>,
    pub hub_cpu: Duration,
    pub driver_cpu: Duration,
    /// Other processes' CPU meanwhile (the machine's busy time but this process's).
    pub others_cpu: Duration,
    pub ticks: Vec<Duration>,
    pub admin: Vec<Duration>,
}

impl Phase {
    pub fn hub_share(&self) -> f64 {
        self.hub_cpu.as_secs_f64() / self.seconds
    }

    fn achieved(&self) -> String {
        match self.mode {
            Mode::Idle => "-".into(),
            Mode::Calls | Mode::CallsSteady | Mode::CallsOver => format!(
                "{:.0} calls/s ({} refused)",
                self.greeted as f64 / self.seconds,
                self.refused
            ),
            Mode::Small | Mode::SmallFlood | Mode::SmallPulse | Mode::Large => format!(
                "{:.1} MiB/s ({:.0}k + {:.0}k frames/s)",
                self.relayed_mib / self.seconds,
                self.frames_to_lead as f64 / self.seconds / 1000.0,
                self.frames_from_lead as f64 / self.seconds / 1000.0,
            ),
        }
    }

    pub fn row(&self) -> String {
        let p = |v: &[Duration], q: f64| ms(percentile(v, q));
        let greeting = if self.greeting.is_empty() {
            String::new()
        } else {
            format!(
                "; greeted in p50 {:.1} / p99 {:.1} ms",
                p(&self.greeting, 50.0),
                p(&self.greeting, 99.0)
            )
        };
        format!(
            "| {} | {} | {}{} | {:.0}% | {:.0}% | {:.0}% | {:.2} / {:.2} / {:.1} | {:.2} / {:.2} / {:.1} |",
            self.round,
            self.mode.name(),
            self.achieved(),
            greeting,
            100.0 * self.hub_share(),
            100.0 * self.driver_cpu.as_secs_f64() / self.seconds,
            100.0 * self.others_cpu.as_secs_f64() / self.seconds,
            p(&self.ticks, 50.0),
            p(&self.ticks, 99.0),
            p(&self.ticks, 100.0),
            p(&self.admin, 50.0),
            p(&self.admin, 99.0),
            p(&self.admin, 100.0),
        )
    }
}

/// A p99 this many times idle's counts only when it is also this much above it: idle's p99
/// is 1 to 2.5 ms here, and one run's differs from the next by 2x; 5 ms is below one API
/// server round trip of the controller's and below what an admin at `flux-hub status`
/// notices.
const RATIO: f64 = 2.0;
const MARGIN_MS: f64 = 5.0;

/// Whether a phase affected the controller or the admin: either's p99 (loaded, idle; ms)
/// more than [`RATIO`] times and [`MARGIN_MS`] above idle's, or the hub's thread busy 90%
/// of the time.
fn affected(tick: (f64, f64), admin: (f64, f64), hub_share: f64) -> bool {
    let worse = |(loaded, idle): (f64, f64)| loaded > RATIO * idle && loaded > idle + MARGIN_MS;
    worse(tick) || worse(admin) || hub_share >= 0.9
}

/// Prints the run: its setting, every phase, each phase against idle (all idle phases
/// together), and each mode's median over rounds.
pub fn print(
    phases: &[Phase],
    modes: &[Mode],
    rates: &Rates,
    pinned: bool,
    seconds: u64,
    rounds: usize,
) {
    println!();
    println!(
        "Relay load on one spoke, hub on one thread{}: byte bound {:.2} MiB/s (burst {:.2} MiB), call bound {:.0}/s (burst {:.0}); {} s measured per phase ({} s warm-up for bytes), {} round(s)",
        if pinned {
            " pinned to CPU 0 (spoke, lead and admin on CPU 1)"
        } else {
            ""
        },
        rates.bytes_per_second / MIB,
        rates.byte_burst / MIB,
        rates.calls_per_second,
        rates.call_burst,
        seconds,
        WARM_UP.as_secs(),
        rounds,
    );
    println!();
    println!(
        "| round | mode | relayed (both ways) | hub CPU (one core = 100%) | spoke + lead CPU | other processes' CPU | tick delay p50 / p99 / max (ms) | admin ListMiniClusters p50 / p99 / max (ms) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for phase in phases {
        println!("{}", phase.row());
    }
    // Against every idle phase of the run together (one idle phase's p99 rests on a few
    // samples).
    let pooled = |pick: fn(&Phase) -> &Vec<Duration>| {
        let mut all: Vec<Duration> = phases
            .iter()
            .filter(|p| p.mode == Mode::Idle)
            .flat_map(|p| pick(p).iter().copied())
            .collect();
        all.sort();
        all
    };
    let (idle_ticks, idle_admin) = (pooled(|p| &p.ticks), pooled(|p| &p.admin));
    if idle_ticks.is_empty() {
        return;
    }
    println!();
    println!(
        "idle, all rounds: tick delay p50 / p99 {:.2} / {:.2} ms, admin p50 / p99 {:.2} / {:.2} ms",
        ms(percentile(&idle_ticks, 50.0)),
        ms(percentile(&idle_ticks, 99.0)),
        ms(percentile(&idle_admin, 50.0)),
        ms(percentile(&idle_admin, 99.0)),
    );
    for phase in phases.iter().filter(|p| p.mode != Mode::Idle) {
        let ratio = |a: &[Duration], b: &[Duration]| {
            ms(percentile(a, 99.0)) / ms(percentile(b, 99.0)).max(1e-3)
        };
        let (tick, admin) = (
            ratio(&phase.ticks, &idle_ticks),
            ratio(&phase.admin, &idle_admin),
        );
        let affected = affected(
            (
                ms(percentile(&phase.ticks, 99.0)),
                ms(percentile(&idle_ticks, 99.0)),
            ),
            (
                ms(percentile(&phase.admin, 99.0)),
                ms(percentile(&idle_admin, 99.0)),
            ),
            phase.hub_share(),
        );
        println!(
            "round {} {}: tick p99 {:.1}x idle, admin p99 {:.1}x idle, hub CPU {:.0}%: {}",
            phase.round,
            phase.mode.name(),
            tick,
            admin,
            100.0 * phase.hub_share(),
            if affected { "AFFECTED" } else { "unaffected" }
        );
    }
    // The median over rounds of each mode, against idle (all rounds together).
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            0.0
        } else if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        }
    };
    println!();
    println!("Median over rounds:");
    println!();
    println!(
        "| mode | relayed (both ways) | hub CPU | tick delay p50 / p99 / max (ms) | admin p50 / p99 / max (ms) | p99 against idle (tick, admin) | |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| idle | - | {:.0}% | {:.2} / {:.2} / {:.1} | {:.2} / {:.2} / {:.1} | | |",
        100.0
            * median(
                phases
                    .iter()
                    .filter(|p| p.mode == Mode::Idle)
                    .map(Phase::hub_share)
                    .collect()
            ),
        ms(percentile(&idle_ticks, 50.0)),
        ms(percentile(&idle_ticks, 99.0)),
        ms(percentile(&idle_ticks, 100.0)),
        ms(percentile(&idle_admin, 50.0)),
        ms(percentile(&idle_admin, 99.0)),
        ms(percentile(&idle_admin, 100.0)),
    );
    let mut seen = Vec::new();
    for &mode in modes.iter().filter(|m| **m != Mode::Idle) {
        if seen.contains(&mode) {
            continue;
        }
        seen.push(mode);
        let of: Vec<&Phase> = phases.iter().filter(|p| p.mode == mode).collect();
        let m = |f: &dyn Fn(&Phase) -> f64| median(of.iter().map(|p| f(p)).collect());
        let q = |pick: fn(&Phase) -> &Vec<Duration>, at: f64| {
            m(&|p: &Phase| ms(percentile(pick(p), at)))
        };
        let relayed = match mode {
            Mode::Calls | Mode::CallsSteady | Mode::CallsOver => format!(
                "{:.0} calls/s, {:.0} refused/s",
                m(&|p: &Phase| p.greeted as f64 / p.seconds),
                m(&|p: &Phase| p.refused as f64 / p.seconds),
            ),
            _ => format!(
                "{:.1} MiB/s, {:.0}k + {:.0}k frames/s",
                m(&|p: &Phase| p.relayed_mib / p.seconds),
                m(&|p: &Phase| p.frames_to_lead as f64 / p.seconds / 1000.0),
                m(&|p: &Phase| p.frames_from_lead as f64 / p.seconds / 1000.0),
            ),
        };
        let hub = m(&|p: &Phase| p.hub_share());
        let (tick_p99, admin_p99) = (q(|p| &p.ticks, 99.0), q(|p| &p.admin, 99.0));
        let tick = tick_p99 / ms(percentile(&idle_ticks, 99.0)).max(1e-3);
        let admin = admin_p99 / ms(percentile(&idle_admin, 99.0)).max(1e-3);
        let affected = affected(
            (tick_p99, ms(percentile(&idle_ticks, 99.0))),
            (admin_p99, ms(percentile(&idle_admin, 99.0))),
            hub,
        );
        println!(
            "| {} | {relayed} | {:.0}% | {:.2} / {tick_p99:.2} / {:.1} | {:.2} / {admin_p99:.2} / {:.1} | {tick:.1}x, {admin:.1}x | {} |",
            mode.name(),
            100.0 * hub,
            q(|p| &p.ticks, 50.0),
            q(|p| &p.ticks, 100.0),
            q(|p| &p.admin, 50.0),
            q(|p| &p.admin, 100.0),
            if affected { "affected" } else { "unaffected" },
        );
    }
}
