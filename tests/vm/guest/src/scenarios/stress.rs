//! `stress`: a minute of mixed load on 20 limited groups (periods 1.25 ms-1 s, a 3-deep
//! chain, cgroup moves, a fork storm), every group within 5 % of its limit.

use super::{end_fork_storm, hog, leak, lim, process_cpu, Limit, Work, Workload};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The 20 limited groups of `stress`: a group with a 1.25 ms period (0.8 CPU; a quota is at
/// least 1 ms, as the kernel's), a 3-deep chain (0.45, 0.2 and 0.08 CPU with periods 20 ms,
/// 100 ms and 1 s), 13 small groups with periods 50 ms–1 s, two groups a hog is moved
/// between, and a fork storm's group. Limits add up to 1.55 CPUs of 2, and the rest is room
/// for the agent (0.11-0.22 CPU here: it books the short-period group's periods and runs ~200
/// unthrottles a second) and the kernel's threads (~0.05), so every group can reach its own.
/// With that group at 1 ms / 1 ms, a whole CPU (1.75 of 2), the room was not always there,
/// and that group, the largest and so the one the others' share comes out of, got 0.948 of its limit with the guest 1.5 % idle (the agent at 0.215 CPU), 0.957 at
/// 5.1 %, 0.971 at 4.9 % and at 10.3 % (2026-12-02/03). Each
/// level of the chain also has an unlimited leaf of equal weight: a limited child's fair
/// share of its parent (0.225, 0.1) is above its limit, and the parent's limit is reached
/// through the leaf. (In a chain whose outer period is the longest, the inner groups could
/// not reach theirs: the outer group spends its quota early in its period and everything
/// below waits for the rest of it. With a 10 ms outer period the chain's top reached only
/// 0.947–0.973 of its limit here, the kernel's CFS 0.988: the agent, busy with the 1 ms
/// group's 1,000 refills a second, is now and then late by more than a period, and a late
/// timer refills once, as the kernel's does.)
pub(super) fn stress_limits() -> Vec<Limit> {
    let mut v = vec![
        lim("t/s/p1ms", 1_000, 1_250),
        lim("t/s/n1", 9_000, 20_000),
        lim("t/s/n1/n2", 20_000, 100_000),
        lim("t/s/n1/n2/n3", 80_000, 1_000_000),
        lim("t/s/m1", 4_000, 200_000),
        lim("t/s/m2", 4_000, 200_000),
        lim("t/s/fork", 5_000, 100_000),
    ];
    let periods = [(1_000_000, 15_000), (500_000, 8_000), (200_000, 3_000), (100_000, 1_500), (50_000, 1_000)];
    for i in 0..13 {
        let (period, quota) = periods[i % periods.len()];
        v.push(lim(leak(format!("t/s/g{i:02}")), quota, period));
    }
    v
}

/// Sustained stress (see `stress_limits`): 39 hog threads — 3 in the short-period group, 2 in the
/// chain's innermost group and 2 in each of its unlimited leaves, 2 in each small group, 1 in m1 and m2 plus a 2-thread hog moved
/// between them every 100 ms — and a fork storm (1 thread), for 60 s. Checked: the
/// scheduler stays attached, no workload dies, every group's usage over the last 55 s is
/// within ±5 % of its limit. At 1 ms / 1 ms that group got 0.48-0.66 of it before its pool could be
/// overdrawn (the kernel's CFS 0.79-0.80 under TCG), 0.974 in 3 runs since (2026-12-01);
/// docs/design.md ("Short periods") says where the rest was lost. The fork
/// storm's group got 0.957-0.986 of its limit in 8 runs (0.945 in one CI run) while slack
/// was distributed only above a slice, as fair.c does (the kernel's CFS: 0.976-0.984 in 2),
/// its refills discarding 134 ms of returned runtime in the run that measured it; with slack above 1 ms distributed
/// 1.003-1.011 in 7 runs, 7-15 ms discarded (`small_quota` isolates this). `short_period` checks a 2 ms group alone, agent stopped or not.
pub(super) fn stress(ctx: &mut Ctx) -> Result<(), String> {
    const RUN: Duration = Duration::from_secs(60);
    const SKIP: Duration = Duration::from_secs(3);
    let limits = stress_limits();
    let secs = RUN.as_secs() + 5;
    // The hogs outlive the run by a minute (the runner kills them at the end): each spawn
    // may wait up to JOIN_TIMEOUT for its cgroup (see runner.rs), and hogs that
    // ran out of time before the window ended would make their groups look short. One CI
    // run saw joins of 2.7-5.2 s and 13 hogs exit early. The fork storm, spawned last,
    // keeps `secs`: its end is waited for.
    let hog_secs = secs + 60;
    let first = ctx.nr_workloads();
    ctx.spawn(&hog("t/s/p1ms", 3), hog_secs)?;
    ctx.spawn(&hog("t/s/n1/n2/n3", 2), hog_secs)?;
    ctx.spawn(&hog("t/s/n1/n2/u", 2), hog_secs)?;
    ctx.spawn(&hog("t/s/n1/u", 2), hog_secs)?;
    ctx.spawn(&hog("t/s/m1", 1), hog_secs)?;
    ctx.spawn(&hog("t/s/m2", 1), hog_secs)?;
    let mover = ctx.spawn(&hog("t/s/m1", 2), hog_secs)?;
    for l in &limits[7..] {
        ctx.spawn(&hog(l.cgroup, 2), hog_secs)?;
    }
    let storm = ctx.spawn(
        &Workload {
            cgroup: "t/s/fork",
            work: Work::Forks { threads: 1 },
            pin: None,
        },
        secs,
    )?;
    ctx.check_on_scx(first);
    let pid = ctx.workload_pid(mover).ok_or("moved hog gone")?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let moves = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<u64, String> {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let to = if n % 2 == 0 { "t/s/m2" } else { "t/s/m1" };
                std::fs::write(crate::cgroup::path(to).join("cgroup.procs"), pid.to_string())
                    .map_err(|e| format!("move hog to {to}: {e}"))?;
                n += 1;
                sleep(Duration::from_millis(100));
            }
            Ok(n)
        })
    };
    sleep(SKIP);
    let names: Vec<&str> = limits.iter().map(|l| l.cgroup).collect();
    let agent0 = ctx.sched_pid().and_then(process_cpu).map(|c| (Instant::now(), c));
    let stats0 = if ctx.has_sched() { crate::stats::fetch().ok() } else { None };
    let cpu0 = guest_cpu_ticks();
    let used = ctx.measure(&names, RUN - SKIP - Duration::from_secs(2));
    let stats1 = if stats0.is_some() { crate::stats::fetch().ok() } else { None };
    // Whether the machine was saturated meanwhile: the short-period group, the largest limit,
    // gets what the others (all below their fair share) and the agent leave.
    if let (Some((t0, b0)), Some((t1, b1))) = (cpu0, guest_cpu_ticks()) {
        ctx.figure("guest_idle_pct", format!("{:.1}", 100.0 * (1.0 - (b1 - b0) as f64 / (t1 - t0).max(1) as f64)));
    }
    // How much of a CPU the agent took meanwhile, and how often its threads ran: what
    // a period timer as short as 1 ms costs in user space here.
    if let Some((t0, (ns0, runs0))) = agent0 {
        if let Some((ns, runs)) = ctx.sched_pid().and_then(process_cpu) {
            let secs = t0.elapsed().as_secs_f64();
            ctx.figure("agent_cpus", format!("{:.3}", ns.saturating_sub(ns0) as f64 / 1e9 / secs));
            ctx.figure("agent_runs_per_s", format!("{:.0}", runs.saturating_sub(runs0) as f64 / secs));
            if let (Some(s0), Ok(s1)) = (&stats0, crate::stats::fetch()) {
                for (k, v) in crate::stats::agent_breakdown(s0, &s1, secs) {
                    ctx.figure(k, v);
                }
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let moves = moves.join().map_err(|_| "mover panicked".to_string())?;
    let used = used?;
    ctx.figure("moves", moves.as_ref().map_or_else(|e| e.clone(), |n| n.to_string()));
    if let Err(e) = moves {
        ctx.fail(e);
    }
    ctx.healthy()?;
    for e in ctx.exited_works(first) {
        ctx.fail(e);
    }
    let mut worst = 1.0f64;
    for (l, u) in limits.iter().zip(&used) {
        let r = u / l.cpus();
        let key = format!("{}.ratio", crate::runner::short(l.cgroup));
        ctx.figure(&key, format!("{r:.3}"));
        if (r - 1.0).abs() > (worst - 1.0).abs() {
            worst = r;
        }
        // With --kernel-ref (a retry on a busy host), a group may fall short as far as
        // the kernel's did in this boot, less STRESS_KERNEL_SLACK; never over.
        let kernel = ctx.kernel_f64(&key);
        let low = kernel.map_or(0.95, |k| (k - STRESS_KERNEL_SLACK).min(0.95));
        if (r - 1.0).abs() > 0.03 {
            if let (Some(s0), Some(s1)) = (&stats0, &stats1) {
                stress_budget(ctx, l, *u, RUN - SKIP - Duration::from_secs(2), s0, s1, crate::runner::short(l.cgroup));
            }
        }
        if r > 1.05 || r < low {
            let k = kernel.map_or(String::new(), |k| format!(" (the kernel in this boot: {k:.3} of it)"));
            ctx.fail(format!(
                "{}: {u:.3} CPUs over {}s, limit {:.3}: {r:.3} of it, outside {low:.3}-1.05{k}",
                l.cgroup,
                (RUN - SKIP).as_secs() - 2,
                l.cpus()
            ));
        }
    }
    ctx.figure("worst_ratio", format!("{worst:.3}"));
    if ctx.has_sched() {
        let m = crate::stats::fetch()?;
        for k in ["rescued", "safety_refills", "short_period_refills", "short_period_caught_up", "short_period_missed", "slice_timer_kicks", "timer_late_p99_us", "event_lost"] {
            ctx.figure(k, crate::stats::num(&m, k)?);
        }
        for (label, cgroup) in [("fork", "t/s/fork"), ("p1ms", "t/s/p1ms")] {
            let g = crate::stats::group(&m, cgroup)?;
            ctx.figure(format!("{label}.discard_ms"), format!("{:.1}", crate::stats::num(g, "throttled_discard_usec")? / 1e3));
        }
    }
    end_fork_storm(ctx, storm, 100, Duration::from_secs(15))
}

/// Where a group of `stress` far from its limit got its runtime from, as figures: what it
/// held at both ends of the window (pool plus CPUs' local runtime, debts negative), its
/// periods and safety-net refills in it, and `unexplained_ms`, the usage beyond what those
/// periods could grant (one quota each, no burst here) and the runtime it held: above a
/// quota or two (the snapshots straddle the usage samples by milliseconds) it ran on runtime
/// that no refill gave it. `charged_ms`: what BPF charged it against what its cgroup used.
fn stress_budget(ctx: &mut Ctx, l: &Limit, used_cpus: f64, window: Duration, s0: &serde_json::Value, s1: &serde_json::Value, key: String) {
    let (Ok(g0), Ok(g1)) = (crate::stats::group(s0, l.cgroup), crate::stats::group(s1, l.cgroup)) else {
        return;
    };
    let (Ok(h0), Ok(h1)) = (crate::stats::held_us(g0), crate::stats::held_us(g1)) else {
        return;
    };
    let delta = |f: &str| crate::stats::delta(g0, g1, f).unwrap_or(f64::NAN);
    let (periods, usage_us) = (delta("nr_periods"), delta("usage_usec"));
    ctx.figure(format!("{key}.held_ms"), format!("{:.1}/{:.1}", h0 / 1e3, h1 / 1e3));
    ctx.figure(format!("{key}.periods"), format!("{periods:.0}"));
    ctx.figure(format!("{key}.safety"), format!("{:.0}", delta("nr_safety_refills")));
    ctx.figure(format!("{key}.wait_max_ms"), format!("{:.0}", crate::stats::num(g1, "wait_max_us").unwrap_or(f64::NAN) / 1e3));
    let granted_us = periods * l.quota_us as f64 + h0 - h1;
    ctx.figure(format!("{key}.unexplained_ms"), format!("{:.1}", (usage_us - granted_us) / 1e3));
    // The cgroup's usage (what `used_cpus` measures) against what BPF charged the group.
    ctx.figure(format!("{key}.charged_ms"), format!("{:.1}/{:.1}", usage_us / 1e3, used_cpus * window.as_secs_f64() * 1e3));
}

/// How much further below its limit than the kernel's a group may fall in `stress` on a
/// busy host (--kernel-ref): about twice the spread of one group's ratio between runs of
/// ours under the same sustained host load (20 % of each host CPU: p1ms 0.957 and 0.949,
/// n1 0.982 and 0.968). The kernel's own figures moved more between runs (n1/n2 0.884 and
/// 0.970, p1ms 0.698 and 0.660), so the bound is its figure in the same boot.
const STRESS_KERNEL_SLACK: f64 = 0.03;

/// The guest's (total, busy) CPU ticks from /proc/stat.
fn guest_cpu_ticks() -> Option<(u64, u64)> {
    let (total, busy, _) = crate::host::parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some((total, busy))
}
