//! Scenarios for machines with several LLCs and NUMA nodes (`scenarios --wide`, run by
//! .ci/run in a VM of 8 vCPUs in 2 sockets and 2 NUMA nodes: one LLC per socket). Each
//! checks first that the machine has what it is about (8 CPUs, 2 LLCs) and fails if not.
//! The wide set also runs a few of the 2-CPU scenarios there (`wide()` in mod.rs).
//!
//! With 8 vCPUs on 2 host cores the guest is oversubscribed: figures that depend on
//! emulation speed are compared with the kernel's in the same boot, not with constants.

mod cost;
mod hotplug;
mod placement;
mod shares;

use super::*;
use crate::runner::{Ctx, WARMUP};
use cost::{wide_bench, wide_limited_rest};
use hotplug::wide_hotplug;
use placement::{wide_locality, wide_spread};
use shares::wide_weights;
use std::fs;

/// What `wide` scenarios need of the machine.
const WIDE_CPUS: usize = 8;

fn nr_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// CPUs of a sysfs cpulist ("0-3,8,10-11").
fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            v.extend(a..=b);
        }
    }
    v
}

/// The CPUs of each LLC (shared_cpu_list of each CPU's last cache level), in order of
/// their first CPU.
fn llc_cpus() -> Vec<Vec<usize>> {
    let mut seen: Vec<Vec<usize>> = Vec::new();
    for cpu in 0..nr_cpus() {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        let mut idx: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("index"))
            .collect();
        idx.sort();
        if let Some(last) = idx.last() {
            if let Ok(l) = fs::read_to_string(format!("{dir}/{last}/shared_cpu_list")) {
                let cpus = parse_cpulist(&l);
                if !cpus.is_empty() && !seen.contains(&cpus) {
                    seen.push(cpus);
                }
            }
        }
    }
    seen
}

fn nr_llcs() -> usize {
    llc_cpus().len()
}

/// NUMA node of each CPU (index = CPU), from /sys/devices/system/node/nodeK/cpulist;
/// node 0 for CPUs no node lists.
fn cpu_nodes() -> Vec<usize> {
    let mut node = vec![0; nr_cpus()];
    for k in 0..64 {
        let Ok(l) = fs::read_to_string(format!("/sys/devices/system/node/node{k}/cpulist")) else {
            continue;
        };
        for c in parse_cpulist(&l) {
            if let Some(n) = node.get_mut(c) {
                *n = k;
            }
        }
    }
    node
}

fn require_wide() -> Result<(), String> {
    let (cpus, llcs) = (nr_cpus(), nr_llcs());
    if cpus < WIDE_CPUS || llcs < 2 {
        return Err(format!(
            "needs {WIDE_CPUS} CPUs in 2 LLCs or more, this machine has {cpus} in {llcs} (run with SCXBW_VM_SMP=8,sockets=2,cores=4 SCXBW_VM_NUMA=2, see tests/vm/README.md)"
        ));
    }
    Ok(())
}

/// Threads of a process: (tid, ns on CPU from schedstat, migrations from sched if shown).
fn threads_of(pid: u32) -> Vec<(u32, u64, Option<u64>)> {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    let mut v = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let ns = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|f| f.parse().ok()));
        let migr = fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.trim_start().starts_with("se.nr_migrations"))
                    .and_then(|l| l.rsplit(':').next().and_then(|v| v.trim().parse().ok()))
            });
        if let Some(ns) = ns {
            v.push((tid, ns, migr));
        }
    }
    v.sort();
    v
}

fn set_affinity_all(tid: u32) -> Result<(), String> {
    crate::sched::set_affinity(tid, &(0..nr_cpus()).collect::<Vec<_>>())
}

/// Confines every thread of each workload to its CPUs (one LLC's), lets them run there for
/// WARMUP, then allows them on every CPU and waits WARMUP again. The workloads were
/// spawned pinned to the first of those CPUs. Returns each thread's tid and workload index.
fn confine_then_free(ctx: &mut Ctx, procs: &[(usize, Vec<usize>)]) -> Result<Vec<(u32, usize)>, String> {
    sleep(Duration::from_millis(300));
    let mut tids = Vec::new();
    for (idx, cpus) in procs {
        let pid = ctx.workload_pid(*idx).ok_or("a workload has no pid")?;
        for (tid, _, _) in threads_of(pid) {
            crate::sched::set_affinity(tid, cpus)?;
            tids.push((tid, *idx));
        }
    }
    sleep(WARMUP);
    for (tid, _) in &tids {
        set_affinity_all(*tid)?;
    }
    sleep(WARMUP);
    Ok(tids)
}

fn wide_limits() -> Scenario {
    use Check::*;
    let phase = |label, workloads, checks| Phase {
        label,
        workloads,
        checks,
    };
    Scenario {
        name: "wide_limits",
        about: "8 CPUs, 2 LLCs, 2 nodes: limits held across queues: 1 hog at 0.3, 8 at 3.0, 12 at 5.0 CPUs (±3%), a 4-CPU parent over a 1.5-CPU child and an unlimited one",
        needs_sched: false,
        limits: vec![
            lim("t/w1", 30_000, 100_000),
            lim("t/w8", 300_000, 100_000),
            lim("t/w12", 500_000, 100_000),
            lim("t/wp", 400_000, 100_000),
            lim("t/wp/x", 150_000, 100_000),
        ],
        cgroups: vec![],
        body: Body::Phases(
            vec![
                phase("one", vec![hog("t/w1", 1)], vec![Ratio { cgroup: "t/w1", tol: 0.03 }]),
                phase("eight", vec![hog("t/w8", 8)], vec![Ratio { cgroup: "t/w8", tol: 0.03 }]),
                phase("twelve", vec![hog("t/w12", 12)], vec![Ratio { cgroup: "t/w12", tol: 0.03 }]),
                phase(
                    "nested",
                    vec![hog("t/wp/x", 6), hog("t/wp/y", 6)],
                    vec![
                        AtMostLimit { cgroup: "t/wp", tol: 0.03 },
                        AtLeastLimit { cgroup: "t/wp", tol: 0.05 },
                        AtMostLimit { cgroup: "t/wp/x", tol: 0.03 },
                    ],
                ),
            ],
            vec![],
        ),
    }
}

pub fn scenarios() -> Vec<Scenario> {
    vec![
        wide_limits(),
        Scenario {
            name: "wide_spread",
            about: "8 CPUs, 2 LLCs: 16 hogs started on CPU 0 then free: >= 0.95 of the CPU the kernel gives them in the same boot, every thread >= half its fair share, steals counted",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/u"],
            body: Body::Custom(wide_spread),
        },
        Scenario {
            name: "wide_locality",
            about: "8 CPUs, 2 LLCs in 2 nodes, the same load started in each LLC then free: >= 0.99 of dispatches from the CPU's own LLC queue, cross-node migrations/s within 10 of the kernel's in the same boot, CPU >= 0.95 of the kernel's",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/u"],
            body: Body::Custom(wide_locality),
        },
        Scenario {
            name: "wide_weights",
            about: "8 CPUs, 2 LLCs in 2 nodes: cpu.weight 100:300 and nice 0:5 between hogs started in different LLCs then free split 3.0 and 3.06 +-5 %, CPU >= 0.95 of the kernel's in the same boot",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/wa", "t/wb", "t/wn"],
            body: Body::Custom(wide_weights),
        },
        Scenario {
            name: "wide_hotplug",
            about: "8 CPUs, 2 nodes: CPU 4 offline/online every 500 ms for 20 s under cpu.max limits: throttled groups within 0.05 of the kernel's share in the same boot, the unthrottled one >= 0.95 of it and never waiting beside idle CPUs (<= 0.1 CPU), every toggle seen, runtime returned, topology re-read",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/a", "t/b", "t/c"],
            body: Body::Custom(wide_hotplug),
        },
    ]
}

/// The wide machine's benchmark (`scenarios --wide --bench`): not in the acceptance set, its
/// figures go to tests/bench/run's table.
pub fn bench_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "wide_bench",
            about: "8 CPUs, no limits, against the kernel's scheduler and the floor scheduler in one boot: pipe ping-pong 8 pairs, fork 8 threads, messaging 4x(4+4), wakeup latency of 16 workers; reports figures",
            needs_sched: true,
            limits: vec![],
            cgroups: vec!["t/o"],
            body: Body::Custom(wide_bench),
        },
        Scenario {
            name: "wide_limited_rest",
            about: "8 CPUs: ping-pong 8 pairs and messaging 4x(4+4) beside 8 groups throttled at 0.1 CPU each, against beside 8 unlimited groups burning the same 10 ms per 100 ms, alternately under scx_bandwidth; reports figures (goal >= 0.95)",
            needs_sched: true,
            limits: vec![],
            cgroups: vec!["t/o", "t/l0", "t/l1", "t/l2", "t/l3", "t/l4", "t/l5", "t/l6", "t/l7"],
            body: Body::Custom(wide_limited_rest),
        },
    ]
}
