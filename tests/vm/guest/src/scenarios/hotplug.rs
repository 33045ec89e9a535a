//! The CPU hotplug loop that `hotplug` (2 CPUs, lifecycle.rs) and `wide_hotplug` (8 CPUs,
//! wide/hotplug.rs) run once under the kernel's scheduler and once under ours, in the same
//! boot. Each toggle stops every CPU for a while (stop_machine), which under TCG is slow
//! enough that how much CPU the groups can get depends on the emulation: the kernel's
//! figures from the same boot are the reference for the shares.

use super::{Work, Workload};
use crate::runner::{Ctx, WARMUP};
use std::fs;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The shortest run that ends a hog's wait in `longest_off_ms`: one switched in only to be
/// stopped at once (its group throttled) still waits.
const MIN_RUN_NS: u64 = 500_000;

/// How long a hotplug loop toggles its CPU, every 500 ms.
pub(super) const HOTPLUG_LOOP: Duration = Duration::from_secs(20);

/// What a loop toggles and under what load: (cgroup, limit in CPUs, period in µs, hog
/// threads) per group, limits written to cpu.max, the last group the one that is never
/// throttled; and which of `check_against_kernel`'s optional checks apply.
pub(super) struct HotplugSetup {
    pub cpu: usize,
    pub groups: &'static [(&'static str, f64, u64, u32)],
    /// The never-throttled group must get at least 0.95 of the CPU the kernel gave it.
    pub check_unthrottled: bool,
    /// Each throttled group's hogs may wait for a CPU at most this much longer than under
    /// the kernel's scheduler (ms, `longest_off_ms`); None: printed only.
    pub hog_wait_slack_ms: Option<f64>,
}

/// Puts the toggled CPU back online when dropped, so a failed scenario leaves every CPU to
/// the next.
pub(super) struct CpuBack(pub usize);

impl Drop for CpuBack {
    fn drop(&mut self) {
        let _ = fs::write(cpu_online_path(self.0), "1");
    }
}

pub(super) fn cpu_online_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/online")
}

/// The CPU is there and online, and its limits are written to cpu.max.
pub(super) fn prepare(setup: &HotplugSetup) -> Result<CpuBack, String> {
    let online = cpu_online_path(setup.cpu);
    if !fs::read_to_string(&online).is_ok_and(|s| s.trim() == "1") {
        return Err(format!("{online}: CPU {} is not hot-pluggable or not online", setup.cpu));
    }
    for &(g, limit, period, _) in setup.groups {
        crate::cgroup::write_cpu_max(g, (limit * period as f64) as u64, period)?;
    }
    Ok(CpuBack(setup.cpu))
}

/// Idle and iowait ticks of the machine so far (/proc/stat's `cpu` line).
fn idle_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| crate::host::parse_proc_stat(&t))
        .map_or(0, |(total, busy, steal)| total - busy - steal)
}

fn nr_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// One hotplug loop's figures.
pub(super) struct HotplugRun {
    /// CPUs each group used (cpu.stat), in the setup's order.
    pub used: Vec<f64>,
    pub toggles: u32,
    /// Seconds from the first toggle to the CPU back online.
    pub secs: f64,
    /// CPUs idle over the loop (/proc/stat).
    pub idle: f64,
    /// CPUs that the never-throttled group's hogs waited beside while they were idle (the
    /// CPUs other than the toggled one; sched_switch trace): work left undone.
    pub idle_beside_waiting: f64,
    /// The busiest tasks other than the groups' hogs and idle, by comm up to its '/': (CPUs, comm).
    /// Printed: what took CPU from the groups (stop_machine's `migration`, the agent's threads).
    pub others: Vec<(f64, String)>,
    /// Per group, the longest its hog threads went without running on any CPU (ms,
    /// sched_switch trace).
    pub longest_off_ms: Vec<f64>,
    /// Hog workloads that did not exit 0 by themselves (a lost task hangs its workload).
    pub lost: Vec<String>,
}

impl HotplugRun {
    /// `others` as printed: "comm:CPUs,...".
    pub fn others_text(&self) -> String {
        self.others.iter().map(|(c, n)| format!("{n}:{c:.3}")).collect::<Vec<_>>().join(",")
    }

    /// The run's figures, each name prefixed with `prefix`, and each group's share of its limit.
    pub fn report(&self, ctx: &mut Ctx, setup: &HotplugSetup, prefix: &str) {
        ctx.figure(format!("{prefix}loop_s"), format!("{:.1}", self.secs));
        ctx.figure(format!("{prefix}idle_cpus"), format!("{:.3}", self.idle));
        ctx.figure(format!("{prefix}idle_beside_waiting"), format!("{:.4}", self.idle_beside_waiting));
        ctx.figure(format!("{prefix}others"), self.others_text());
        for ((&(g, limit, _, _), u), off) in setup.groups.iter().zip(&self.used).zip(&self.longest_off_ms) {
            ctx.figure(format!("{prefix}{g}.usage_cpus"), format!("{u:.3}"));
            ctx.figure(format!("{prefix}{g}.longest_off_ms"), format!("{off:.1}"));
            ctx.figure(format!("{prefix}{g}.ratio"), format!("{:.3}", u / limit));
        }
    }
}

/// One hotplug loop under whichever scheduler is in charge: the setup's hogs run for the
/// warm-up, the loop and 4 s more, and must then exit by themselves.
fn hotplug_once(ctx: &mut Ctx, setup: &HotplugSetup) -> Result<HotplugRun, String> {
    let from = ctx.nr_workloads();
    let hog_secs = (WARMUP + HOTPLUG_LOOP).as_secs() + 4;
    for &(g, _, _, n) in setup.groups {
        ctx.spawn(&Workload { cgroup: g, work: Work::Hog { threads: n }, pin: None }, hog_secs)?;
    }
    if ctx.has_sched() {
        ctx.check_on_scx(from);
    }
    sleep(WARMUP);
    let usage = || -> Result<Vec<u64>, String> {
        setup.groups.iter().map(|(g, _, _, _)| crate::cgroup::read_usage_usec(g)).collect()
    };
    let online = cpu_online_path(setup.cpu);
    let last = setup.groups.len() - 1;
    let pid = ctx.workload_pid(from + last).ok_or("the unthrottled group's hog has no pid")?;
    let hogs: Vec<u32> = crate::sched::threads(pid).into_iter().filter(|&t| t != pid).collect();
    if hogs.len() != setup.groups[last].3 as usize {
        return Err(format!("{}'s hog has {} threads besides its main one, not {}", setup.groups[last].0, hogs.len(), setup.groups[last].3));
    }
    let mut workers = Vec::new();
    let mut group_hogs = Vec::new();
    for i in 0..setup.groups.len() {
        let pid = ctx.workload_pid(from + i);
        let threads = pid.map(crate::sched::threads).unwrap_or_default();
        group_hogs.push(threads.iter().copied().filter(|&t| Some(t) != pid).collect::<Vec<u32>>());
        workers.extend(threads);
    }
    let all: Vec<usize> = (0..nr_cpus()).collect();
    let trace = crate::trace::Trace::start(&[crate::trace::SWITCH])?;
    crate::trace::poke_cpus(&all)?;
    let (t0, u0, i0) = (crate::workload::mono_ns(), usage()?, idle_ticks());
    let start = Instant::now();
    let (mut toggles, mut next, mut up) = (0u32, start, true);
    while start.elapsed() < HOTPLUG_LOOP || !up {
        up = !up;
        fs::write(&online, if up { "1" } else { "0" })
            .map_err(|e| format!("write {} to {online}: {e}", up as u8))?;
        toggles += 1;
        next += Duration::from_millis(500);
        sleep(next.saturating_duration_since(Instant::now()));
    }
    let (t1, u1, i1) = (crate::workload::mono_ns(), usage()?, idle_ticks());
    let switches = trace.stop();
    let mut lost = Vec::new();
    for (i, &(g, _, _, _)) in setup.groups.iter().enumerate() {
        let st = ctx.wait_workload(from + i, Duration::from_secs(hog_secs + 10))?;
        if st.code() != Some(0) {
            lost.push(format!("{g}'s hog {}", crate::sched::describe(st)));
        }
    }
    let secs = (t1 - t0) as f64 / 1e9;
    let steady: Vec<usize> = all.into_iter().filter(|&c| c != setup.cpu).collect();
    let sw = crate::trace::switches(&switches?);
    let beside = crate::trace::idle_beside_waiting(&sw, &steady, &hogs, t0, t1);
    let longest_off_ms = group_hogs
        .iter()
        .map(|tids| crate::trace::longest_off_cpu(&sw, tids, t0, t1, MIN_RUN_NS).into_iter().max().unwrap_or(0) as f64 / 1e6)
        .collect();
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    for c in 0..nr_cpus() {
        for (pid, (_, comm, ns)) in crate::trace::cpu_time(&sw, c, t0, t1) {
            if pid != 0 && !workers.contains(&pid) {
                *by.entry(comm.split('/').next().unwrap_or("").to_string()).or_default() += ns;
            }
        }
    }
    let mut others: Vec<(f64, String)> = by.into_iter().map(|(c, ns)| (ns as f64 / 1e9 / secs, c)).collect();
    others.sort_by(|a, b| b.0.total_cmp(&a.0));
    others.truncate(6);
    Ok(HotplugRun {
        used: u0.iter().zip(&u1).map(|(a, b)| (b - a) as f64 * 1e3 / (t1 - t0) as f64).collect(),
        toggles,
        secs,
        idle: (i1 - i0) as f64 / crate::sched::clock_ticks() as f64 / secs,
        idle_beside_waiting: beside / secs,
        others,
        longest_off_ms,
        lost,
    })
}

/// Both runs of a hotplug scenario, and the scheduler's statistics around ours.
pub(super) struct HotplugRuns {
    pub kernel: HotplugRun,
    pub ours: HotplugRun,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

/// The loop under the kernel's scheduler, then under ours (restarted) in the same boot, each
/// run's figures reported and `check_against_kernel` applied; None in --cfs mode, after the
/// kernel's run.
pub(super) fn kernel_then_ours(ctx: &mut Ctx, setup: &HotplugSetup) -> Result<Option<HotplugRuns>, String> {
    let attached = ctx.has_sched();
    if attached {
        ctx.stop_sched()?;
    }
    let kernel = hotplug_once(ctx, setup)?;
    kernel.report(ctx, setup, "kernel.");
    if !attached {
        return Ok(None);
    }
    ctx.start_sched(&[])?;
    let before = crate::stats::fetch()?;
    let ours = hotplug_once(ctx, setup)?;
    ours.report(ctx, setup, "");
    ctx.healthy()?;
    let after = crate::stats::fetch()?;
    ctx.figure("timer_late_p99_us", crate::stats::num(&after, "timer_late_p99_us")?);
    check_against_kernel(ctx, setup, &kernel, &ours, &before, &after)?;
    Ok(Some(HotplugRuns { kernel, ours, before, after }))
}

/// The checks both hotplug scenarios make of ours against the kernel's run `k`: each
/// throttled group at least the kernel's share of its limit less 0.05 and at most its limit
/// +5 %, its hogs waiting for a CPU at most `hog_wait_slack_ms` longer than the kernel's
/// (if set); the unthrottled one at least 0.95 of the CPU the kernel gave it (if
/// `check_unthrottled`); every hog exited by itself. `before`/`after`: the scheduler's
/// statistics around our loop: it saw every toggle, CPUs going offline gave local runtime
/// back to a pool, and the topology was read again.
fn check_against_kernel(
    ctx: &mut Ctx,
    setup: &HotplugSetup,
    k: &HotplugRun,
    o: &HotplugRun,
    before: &serde_json::Value,
    after: &serde_json::Value,
) -> Result<(), String> {
    let last = setup.groups.len() - 1;
    // Where a throttled group's share went, when it falls short: quota a refill capped away
    // while it was throttled, its longest throttle wait, and its periods that used less
    // than 90 % of the quota among the last ones the scheduler keeps.
    for &(g, limit, period, _) in &setup.groups[..last] {
        let discard = crate::stats::group_delta(before, after, g, "throttled_discard_usec")?;
        ctx.figure(format!("{g}.discard_ms"), format!("{:.1}", discard / 1e3));
        let ga = crate::stats::group(after, g)?;
        ctx.figure(format!("{g}.wait_max_ms"), format!("{:.1}", crate::stats::num(ga, "wait_max_us")? / 1e3));
        let quota = limit * period as f64;
        let hist: Vec<f64> = ga["history_usec"].as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).collect()).unwrap_or_default();
        let short: Vec<String> = hist.iter().filter(|&&u| u < 0.9 * quota).map(|u| format!("{:.0}", u / 1e3)).collect();
        ctx.figure(format!("{g}.short_periods"), format!("{}/{}:[{}]", short.len(), hist.len(), short.join(",")));
    }
    for (i, &(g, limit, _, _)) in setup.groups.iter().enumerate() {
        let (ours, kernel) = (o.used[i] / limit, k.used[i] / limit);
        if i < last && (ours < kernel - 0.05 || ours > 1.05) {
            ctx.fail(format!("{g}: {ours:.3} of its limit over the hotplug loop, the kernel's scheduler {kernel:.3} (want at least that - 0.05, at most 1.05)"));
        }
        if i < last {
            if let Some(slack) = setup.hog_wait_slack_ms {
                let (ow, kw) = (o.longest_off_ms[i], k.longest_off_ms[i]);
                if ow > kw + slack {
                    ctx.fail(format!("{g}: a hog waited {ow:.0} ms for a CPU over the hotplug loop, under the kernel's scheduler at most {kw:.0} ms (allowed {slack:.0} ms more)"));
                }
            }
        }
        if i == last && setup.check_unthrottled && o.used[i] < 0.95 * k.used[i] {
            ctx.fail(format!("{g} (never throttled): {:.3} CPUs over the hotplug loop, the kernel's scheduler gave it {:.3} (min 0.95 of it)", o.used[i], k.used[i]));
        }
    }
    for (who, run) in [("the kernel's scheduler", k), ("ours", o)] {
        if !run.lost.is_empty() {
            ctx.fail(format!("under {who}: {}", run.lost.join("; ")));
        }
    }
    let rescued = crate::stats::delta(before, after, "rescued")?;
    ctx.figure("rescued", rescued);
    let seen = crate::stats::delta(before, after, "hotplug")?;
    let returned = crate::stats::delta(before, after, "hotplug_returned_usec")?;
    ctx.figure("toggles", o.toggles);
    ctx.figure("hotplug_seen", seen);
    ctx.figure("returned_ms", format!("{:.1}", returned / 1e3));
    if seen != o.toggles as f64 {
        ctx.fail(format!("{} hotplug toggles, the scheduler saw {seen}: it was restarted or missed some", o.toggles));
    }
    if returned <= 0.0 {
        ctx.fail("CPUs going offline never gave local runtime back to a pool");
    }
    if !ctx.sched_output().contains("topology (after hotplug)") {
        ctx.fail("the scheduler did not read the topology again after hotplug");
    }
    Ok(())
}
