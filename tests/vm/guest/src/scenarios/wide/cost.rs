//! The wide machine's benchmarks: scheduling cost against the kernel (`wide_bench`) and
//! what limited groups cost the unlimited rest (`wide_limited_rest`).

use super::*;
use crate::runner::{Ctx, WARMUP};

/// Scheduling cost at 8 vCPUs without limits, scx_bandwidth against the kernel's
/// scheduler and the floor scheduler alternately in one boot (bench.rs `compare`: 3 rounds
/// of 3 s each, medians):
/// pipe ping-pong of 8 pairs, 8 threads forking, messaging of 4 groups of 4 senders and 4
/// receivers (hackbench-like), and the wake-to-run latency of 16 workers woken every 2 ms
/// (schbench-like). A benchmark: the figures are reported (goals: throughput >= 0.95 of the
/// kernel's, wakeup p99 <= 1.2x); it fails only when a workload fails or hangs.
pub(super) fn wide_bench(ctx: &mut Ctx) -> Result<(), String> {
    require_wide()?;
    if !ctx.has_sched() {
        return Err("needs the scheduler (it compares with the kernel's itself)".into());
    }
    crate::scenarios::bench::compare(ctx, &crate::scenarios::bench::workloads(8, 4, 16))
}

/// `wide_limited_rest`'s groups beside the unlimited rest: each one hog thread limited to
/// REST_QUOTA_US per REST_PERIOD_US (0.1 CPU, throttled every period), or, as the
/// reference, one unlimited thread burning the same 10 ms every 100 ms.
const REST_GROUPS: [&str; 8] = ["t/l0", "t/l1", "t/l2", "t/l3", "t/l4", "t/l5", "t/l6", "t/l7"];
const REST_QUOTA_US: u64 = 10_000;
const REST_PERIOD_US: u64 = 100_000;

/// What 8 limited groups at their limit cost the unlimited rest of the machine, under
/// scx_bandwidth, alternately in one boot: pipe ping-pong of 8 pairs and messaging of 4
/// groups in t/o, 3 s each, beside 8 groups whose hogs are throttled every period
/// (`limited`) and beside 8 unlimited groups whose threads use the same CPU by burning
/// 10 ms every 100 ms (`free`); 3 rounds, medians. Reported: each workload's rate in both
/// and limited ÷ free (goal >= 0.95), and the CPU the 8 groups used in each. A benchmark:
/// it fails only when a workload fails or the limit is not held.
pub(super) fn wide_limited_rest(ctx: &mut Ctx) -> Result<(), String> {
    const SECS: u64 = 3;
    require_wide()?;
    if !ctx.has_sched() {
        return Err("needs the scheduler (it measures what its limits cost the others)".into());
    }
    let works = crate::scenarios::bench::workloads(8, 4, 16);
    let works: Vec<&crate::scenarios::bench::Compared> = works.iter().filter(|c| ["pingpong", "messaging"].contains(&c.label)).collect();
    // [work][limited, free] -> one rate per round; [limited, free] -> CPUs of the 8 groups
    let mut got = vec![[Vec::new(), Vec::new()]; works.len()];
    let mut used = [Vec::new(), Vec::new()];
    for _round in 0..3 {
        for (m, limited) in [true, false].into_iter().enumerate() {
            let from = ctx.nr_workloads();
            let secs = SECS * works.len() as u64 + 10;
            for g in REST_GROUPS {
                let work = if limited {
                    crate::cgroup::write_cpu_max(g, REST_QUOTA_US, REST_PERIOD_US)?;
                    Work::Hog { threads: 1 }
                } else {
                    crate::cgroup::write_cpu_max_unlimited(g)?;
                    Work::Pulse { threads: 1, burn_ms: 10, sleep_ms: 90 }
                };
                ctx.spawn(&Workload { cgroup: g, work, pin: None }, secs)?;
            }
            ctx.check_on_scx(from);
            sleep(WARMUP);
            let u0: Vec<u64> = REST_GROUPS.iter().map(|g| crate::cgroup::read_usage_usec(g)).collect::<Result<_, _>>()?;
            let t0 = crate::workload::mono_ns();
            for (i, c) in works.iter().enumerate() {
                got[i][m].push(crate::scenarios::bench::run_compared(ctx, c, SECS)?[0]);
            }
            let u1: Vec<u64> = REST_GROUPS.iter().map(|g| crate::cgroup::read_usage_usec(g)).collect::<Result<_, _>>()?;
            let secs = (crate::workload::mono_ns() - t0) as f64 / 1e9;
            ctx.kill_works(from);
            used[m].push(u0.iter().zip(&u1).map(|(a, b)| (b - a) as f64 / 1e6).sum::<f64>() / secs);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, c) in works.iter().enumerate() {
        let [l, f] = &mut got[i];
        let (l, f) = (med(l), med(f));
        ctx.figure(format!("{}.limited_per_s", c.label), format!("{l:.0}"));
        ctx.figure(format!("{}.free_per_s", c.label), format!("{f:.0}"));
        ctx.figure(format!("{}.ratio", c.label), format!("{:.3}", l / f.max(1e-9)));
    }
    let (lu, fu) = (med(&mut used[0]), med(&mut used[1]));
    ctx.figure("groups.limited_cpus", format!("{lu:.3}"));
    ctx.figure("groups.free_cpus", format!("{fu:.3}"));
    let limit = REST_GROUPS.len() as f64 * REST_QUOTA_US as f64 / REST_PERIOD_US as f64;
    if lu > limit * 1.05 {
        ctx.fail(format!("the 8 limited groups used {lu:.3} CPUs, over their {limit:.1} + 5 %"));
    }
    Ok(())
}
