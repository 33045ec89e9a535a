//! Limits from cgroupfs: cpu.max and cpu.max.burst written as systemd, Docker and
//! Kubernetes write them, with no configuration file. Set before attach and while running,
//! freed with "max", deeper than a task's chain of limited groups holds (deep_cpu_max), and
//! on cgroups created and removed in a loop (churn). Under sched_ext the kernel does not
//! enforce cpu.max itself, so the scheduler has to pick it up wherever it is written.

use super::{hog, leak, measure_ratio, slots_back, Body, Scenario, Sleepers};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Limits written to cgroupfs, as systemd, Docker or Kubernetes do, with no configuration:
/// (1) a cpu.max set before the scheduler starts is enforced from attach on; (2) one written
/// while a group runs limits it within a period and then to ±2 %; (3) "max" frees it;
/// (4) cpu.max.burst lets a group that paused use more than its quota in a period: with
/// quota 35 ms + burst 20 ms the first period after a pause uses ~55 ms (plus what CPUs
/// still hold locally, ≤ 5 ms each); without the burst it could not pass 35 + 10 ms.
/// cpu.max can be written at any depth (a delegated subtree needs no root), so a path can
/// hold more limited cgroups than a task's chain (16). Then the outermost 16 are enforced,
/// and the agent logs an error and counts it; before, BPF called scx_bpf_error and the
/// whole scheduler was unloaded. Levels 1-15: 1.5 CPUs, level 16: 0.3, level 17 (the one
/// cut off): 0.1. A hog at level 17 must get 0.3 ±5 %.
fn deep_cpu_max(ctx: &mut Ctx) -> Result<(), String> {
    const LEVELS: usize = 17;
    let paths: Vec<&'static str> = (1..=LEVELS).map(|l| leak(format!("t{}", (1..=l).map(|i| format!("/c{i:02}")).collect::<String>()))).collect();
    crate::cgroup::create_tree(&[paths[LEVELS - 1]])?;
    for (i, p) in paths.iter().enumerate() {
        let quota = match i + 1 {
            16 => 30_000,
            17 => 10_000,
            _ => 150_000,
        };
        crate::cgroup::write_cpu_max(p, quota, 100_000)?;
    }
    let w = ctx.spawn(&hog(paths[LEVELS - 1], 1), 60)?;
    ctx.check_on_scx(w);
    sleep(crate::runner::WARMUP);
    let used = ctx.measure(&[paths[LEVELS - 1]], crate::runner::WINDOW)?[0];
    ctx.figure("usage_cpus", format!("{used:.3}"));
    ctx.figure("ratio_to_level16", format!("{:.3}", used / 0.3));
    if (used / 0.3 - 1.0).abs() > 0.05 {
        ctx.fail(format!("17 nested cpu.max: {used:.3} CPUs, expected level 16's 0.3 ±5 %"));
    }
    ctx.healthy()?;
    let deep = crate::stats::num(&crate::stats::fetch()?, "deep_chains")?;
    ctx.figure("deep_chains", deep);
    if deep < 1.0 {
        ctx.fail("no deep_chains counted");
    }
    let logged = ctx.sched_output().contains("limited cgroups on their path");
    ctx.figure("error_logged", logged);
    if !logged {
        ctx.fail("the cut chain was not reported in the scheduler's log");
    }
    ctx.kill_works(w);
    Ok(())
}

fn cpu_max(ctx: &mut Ctx) -> Result<(), String> {
    // (1) Limit in place before attach.
    ctx.stop_sched()?;
    crate::cgroup::create_tree(&["t/pre"])?;
    crate::cgroup::write_cpu_max("t/pre", 20_000, 100_000)?;
    ctx.start_sched(&[])?;
    let pre = ctx.spawn(&hog("t/pre", 2), 60)?;
    ctx.check_on_scx(pre);
    measure_ratio(ctx, "pre", "t/pre", 0.2, 0.02)?;
    ctx.kill_works(pre);

    // (2) Written while running.
    let w = ctx.spawn(&hog("t/a", 2), 60)?;
    ctx.check_on_scx(w);
    sleep(Duration::from_millis(500));
    crate::cgroup::write_cpu_max("t/a", 35_000, 100_000)?;
    sleep(Duration::from_millis(100));
    let first = ctx.measure(&["t/a"], Duration::from_secs(1))?[0];
    ctx.figure("written.first_s_cpus", format!("{first:.3}"));
    if first > 0.35 * 1.1 {
        ctx.fail(format!("cpu.max 35000 100000: {first:.3} CPUs in the first second after the write"));
    }
    measure_ratio(ctx, "written", "t/a", 0.35, 0.02)?;
    let m = crate::stats::fetch()?;
    let g = crate::stats::group(&m, "t/a")?;
    if g["source"] != "cpu.max" || g["quota_us"] != 35_000 {
        ctx.fail(format!("stats for t/a: source {} quota_us {}", g["source"], g["quota_us"]));
    }

    // (3) Unlimited again.
    crate::cgroup::write_cpu_max_unlimited("t/a")?;
    sleep(Duration::from_millis(300));
    let free = ctx.measure(&["t/a"], Duration::from_secs(2))?[0];
    ctx.figure("max.cpus", format!("{free:.3}"));
    if free < 1.5 {
        ctx.fail(format!("cpu.max max: 2 hogs got {free:.3} CPUs"));
    }

    // (4) Burst: pause the hogs for 5 periods, then let them run.
    crate::cgroup::write_cpu_max("t/a", 35_000, 100_000)?;
    crate::cgroup::write_cpu_max_burst("t/a", 20_000)?;
    sleep(Duration::from_millis(500));
    let pid = ctx.workload_pid(w).ok_or("hog gone")?;
    let before = crate::stats::fetch()?;
    crate::sched::signal(pid, libc::SIGSTOP);
    sleep(Duration::from_millis(500));
    crate::sched::signal(pid, libc::SIGCONT);
    sleep(Duration::from_millis(500));
    let after = crate::stats::fetch()?;
    let bursts = crate::stats::group_delta(&before, &after, "t/a", "used_nr_bursts")?;
    let g = crate::stats::group(&after, "t/a")?;
    // The 5 periods since the hogs resumed, from the scheduler's per-period usage.
    let peak = g["history_usec"]
        .as_array()
        .map(|h| h.iter().rev().take(5).filter_map(|v| v.as_u64()).max().unwrap_or(0))
        .unwrap_or(0);
    ctx.figure("burst.used_nr_bursts", bursts);
    ctx.figure("burst.burst_us", &g["burst_us"]);
    ctx.figure("burst.peak_period_ms", format!("{:.1}", peak as f64 / 1e3));
    if peak < 50_000 {
        ctx.fail(format!("cpu.max.burst 20000: the busiest period after a pause used {:.1} ms, not ~55", peak as f64 / 1e3));
    }
    Ok(())
}

/// Lifecycle under churn, limits from cgroupfs only. (1) A group throttled at 0.1 CPU is
/// emptied and removed while throttled, then created again with cpu.max 0.5: the hog moved
/// back gets 0.5 (±2 %). (2) For 30 s: 200 cgroups are created with cpu.max, the hog moves
/// into a new one every 50 ms, then all are removed, again and again. The scheduler stays
/// attached, the hog is never lost, and the number of enforced groups returns to its
/// baseline: every slot of a removed cgroup was given back.
fn churn(ctx: &mut Ctx) -> Result<(), String> {
    use crate::cgroup::{create_tree, remove_tree, write_cpu_max};
    let base = crate::stats::num(&crate::stats::fetch()?, "active_groups")?;
    // The hog lives in t/h between moves (t/c has children, so it may hold no task).
    let w = ctx.spawn(&hog("t/h", 2), 120)?;
    let pid = ctx.workload_pid(w).ok_or("hog gone")?;
    let move_to = |rel: &str| {
        std::fs::write(crate::cgroup::path(rel).join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("move hog to {rel}: {e}"))
    };

    // (1) Removed while throttled, re-created with another limit.
    create_tree(&["t/c/r"])?;
    write_cpu_max("t/c/r", 10_000, 100_000)?;
    move_to("t/c/r")?;
    sleep(Duration::from_millis(1500));
    let throttled = ctx.measure(&["t/c/r"], Duration::from_secs(1))?[0];
    ctx.figure("throttled_cpus", format!("{throttled:.3}"));
    if throttled > 0.15 {
        ctx.fail(format!("t/c/r not throttled: {throttled:.3} CPUs at a 0.1 limit"));
    }
    move_to("t/h")?;
    remove_tree("t/c/r")?;
    create_tree(&["t/c/r"])?;
    write_cpu_max("t/c/r", 50_000, 100_000)?;
    move_to("t/c/r")?;
    measure_ratio(ctx, "recreated", "t/c/r", 0.5, 0.02)?;
    move_to("t/h")?;
    remove_tree("t/c/r")?;

    // (2) 30 s of churn.
    let t0 = Instant::now();
    let (mut rounds, mut moves) = (0u64, 0u64);
    while t0.elapsed() < Duration::from_secs(30) {
        let names: Vec<String> = (0..200).map(|i| format!("t/c/g{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            create_tree(&[n.as_str()])?;
            write_cpu_max(n, 5_000 + (i as u64 % 20) * 5_000, 100_000)?;
        }
        for n in names.iter().step_by(10) {
            move_to(n)?;
            moves += 1;
            sleep(Duration::from_millis(50));
        }
        move_to("t/h")?;
        for n in &names {
            remove_tree(n)?;
        }
        rounds += 1;
    }
    ctx.figure("rounds", rounds);
    ctx.figure("moves", moves);
    ctx.healthy()?;
    for e in ctx.exited_works(w) {
        ctx.fail(e);
    }
    slots_back(ctx, base, "the churn");
    let lost = crate::stats::num(&crate::stats::fetch()?, "event_lost")?;
    ctx.figure("events_lost", lost);
    Ok(())
}

/// Idle groups with a burst cost the agent nothing: 50 cgroups with cpu.max 10/100 ms and
/// cpu.max.burst 10 ms, each holding a process that sleeps 10 s at a time. An unused group's
/// timer stops once its pool is at quota + burst (two refills), as a strict group's stops at
/// its quota; before, a group with a burst never stopped it, and 50 idle groups cost the agent
/// 500 refills a second. Checked over 3 s after a 3 s settle: at least 45 of the 50 idle (a
/// sleeper that wakes runs its group for a period or so), and at most 150 refills (a wake
/// costs a few; all 50 timers running would be 1,500).
fn idle_burst(ctx: &mut Ctx) -> Result<(), String> {
    const GROUPS: usize = 50;
    let groups: Vec<&'static str> = (0..GROUPS).map(|i| leak(format!("t/ib/g{i:02}"))).collect();
    crate::cgroup::create_tree(&groups)?;
    for g in &groups {
        crate::cgroup::write_cpu_max(g, 10_000, 100_000)?;
        crate::cgroup::write_cpu_max_burst(g, 10_000)?;
    }
    let _sleepers = Sleepers::spawn(&groups)?;
    sleep(Duration::from_secs(3));
    let before = crate::stats::fetch()?;
    sleep(Duration::from_secs(3));
    let after = crate::stats::fetch()?;
    let idle = crate::stats::num(&after, "idle_groups")?;
    let refills = crate::stats::delta(&before, &after, "refills")?;
    ctx.figure("active_groups", crate::stats::num(&after, "active_groups")?);
    ctx.figure("idle_groups", idle);
    ctx.figure("refills_3s", refills);
    ctx.figure("agent_wakeups_3s", crate::stats::delta(&before, &after, "agent_wakeups")?);
    if idle < 45.0 {
        ctx.fail(format!("{idle} of {GROUPS} idle groups with a burst have their timers stopped (want >= 45)"));
    }
    if refills > 150.0 {
        ctx.fail(format!("{refills} refills in 3 s for {GROUPS} idle groups (want <= 150)"));
    }
    Ok(())
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "deep_cpu_max",
            about: "cpu.max on 17 nested cgroups (one more than a chain holds): the scheduler stays, the 16 outermost limits are enforced (±5%), the cut is an error in the log and a stat",
            needs_sched: true,
            limits: vec![],
            // Only the top: the body creates the 17 levels (t/c01/../c17); the runner
            // removes the tree afterwards.
            cgroups: vec!["t/c01"],
            body: Body::Custom(deep_cpu_max),
        },
        Scenario {
            name: "cpu_max",
            about: "no config: cpu.max set before attach and written while running is enforced (±2%), \"max\" frees, cpu.max.burst lets a paused group burst",
            needs_sched: true,
            limits: vec![],
            cgroups: vec!["t/a"],
            body: Body::Custom(cpu_max),
        },
        Scenario {
            name: "idle_burst",
            about: "no config: 50 idle cgroups with cpu.max and cpu.max.burst stop their period timers once their pools are full (>= 45 idle, <= 150 refills in 3 s)",
            needs_sched: true,
            limits: vec![],
            cgroups: vec!["t/ib"],
            body: Body::Custom(idle_burst),
        },
        Scenario {
            name: "churn",
            about: "no config: 200 cpu.max-limited cgroups created and removed in a loop for 30 s while a hog moves between them; a group removed while throttled comes back with its new limit",
            needs_sched: true,
            limits: vec![],
            cgroups: vec!["t/h", "t/c"],
            body: Body::Custom(churn),
        },
    ]
}
