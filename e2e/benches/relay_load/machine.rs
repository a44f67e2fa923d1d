//! The benchmark's threads and what they cost: each runtime on its own thread, pinned and
//! niced, and the CPU time of this process's threads and of the machine, from /proc.

use std::collections::BTreeMap;
use std::time::Duration;

use flux_hub::ops::metrics::Metrics;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

unsafe extern "C" {
    fn sched_setaffinity(pid: i32, cpusetsize: usize, mask: *const u64) -> i32;
    fn setpriority(which: i32, who: u32, prio: i32) -> i32;
}

/// Puts the calling thread on `cpu` (when pinning) at `nice`.
pub fn place_this_thread(cpu: Option<usize>, nice: i32) {
    if let Some(cpu) = cpu {
        let mask: u64 = 1 << cpu;
        // SAFETY: pid 0 is the calling thread; the mask is 8 valid bytes, as told.
        let rc = unsafe { sched_setaffinity(0, std::mem::size_of::<u64>(), &mask) };
        assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
    }
    if nice != 0 {
        // SAFETY: PRIO_PROCESS (0) of who 0 is the calling thread on Linux.
        let rc = unsafe { setpriority(0, 0, nice) };
        assert_eq!(rc, 0, "setpriority {nice}");
    }
}

/// A single-threaded runtime on its own thread `name` (its blocking pool `name-blocking`),
/// until the returned sender is dropped.
pub fn runtime_thread(name: &str, cpu: Option<usize>, nice: i32) -> (Handle, oneshot::Sender<()>) {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let blocking = format!("{name}-blocking");
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            place_this_thread(cpu, nice);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(blocking)
                .build()
                .expect("runtime");
            handle_tx.send(rt.handle().clone()).expect("handle");
            let _ = rt.block_on(stopped);
        })
        .expect("thread");
    (handle_rx.recv().expect("runtime started"), stop)
}

/// CPU time (user + system) of this process's threads, by name, from /proc/self/task.
pub fn thread_cpu() -> BTreeMap<String, Duration> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime: fields 14 and 15 of proc(5), 11 and 12 after the name.
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        // USER_HZ is 100 on Linux.
        *by_name.entry(name).or_insert(Duration::ZERO) += Duration::from_millis(ticks * 10);
    }
    by_name
}

/// CPU time of the whole machine (every core busy, user + system), and of this process.
pub fn machine_and_process_cpu() -> (Duration, Duration) {
    let ticks = |fields: &[&str], at: &[usize]| -> u64 {
        at.iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum()
    };
    let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<&str> = machine
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy = ticks(&cpu, &[1, 2, 3, 6, 7, 8]);
    let own = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = own.rsplit_once(')').map(|(_, a)| a).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let process = ticks(&fields, &[11, 12]);
    (
        Duration::from_millis(busy * 10),
        Duration::from_millis(process * 10),
    )
}

pub fn cpu_of(cpu: &BTreeMap<String, Duration>, names: &[&str]) -> Duration {
    names.iter().filter_map(|n| cpu.get(*n)).sum()
}

/// The sum of the hub's metric lines that start with `prefix`.
pub fn metric_sum(metrics: &Metrics, prefix: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
