//! Scale: 1,026 limited groups at once, 16 of them nested in one chain, all enforced, and
//! the agent's CPU time meanwhile. Hosts run a cgroup per container or service, and the
//! agent's work each period grows with the number of limited groups.

use super::{hog, leak, lim, Body, Limit, Scenario, Sleepers};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::Instant;

/// Groups of the scale scenario: sleepers (one sleeping process each), busy ones (one hog
/// each) and a chain of limited groups nested SCALE_DEPTH deep.
const SCALE_SLEEPERS: usize = 1000;
const SCALE_BUSY: usize = 10;
const SCALE_DEPTH: usize = 16;
/// The run loop's CPU time on the cgroup poll (ms per s). The walk of the 1,026
/// configured paths is the walker thread's; done on the loop it cost 15-27 ms/s here
/// on a quiet host (a walk every 5 s, up to 0.7 s each under TCG, while every period
/// timer waited). Without it the poll cost 1.8-2.2 ms/s on a quiet host and 2.2-6.2
/// with the host loaded 20 % (a host stall that falls in a poll is charged to it).
const POLL_MS_S_MAX: f64 = 12.0;

fn scale_sleeper(i: usize) -> &'static str {
    leak(format!("t/s/g{i:04}"))
}

fn scale_busy(i: usize) -> &'static str {
    leak(format!("t/b/b{i}"))
}

/// Level `level` (1-based) of the deep chain t/d/l01/l02/...
fn scale_chain(level: usize) -> &'static str {
    leak(format!("t/d{}", (1..=level).map(|l| format!("/l{l:02}")).collect::<String>()))
}

fn scale_scenario() -> Scenario {
    let mut limits: Vec<Limit> = (0..SCALE_SLEEPERS).map(|i| lim(scale_sleeper(i), 10_000, 100_000)).collect();
    // 10 × 0.1 + 0.2 CPU: the hogs leave room on 2 CPUs for the agent and the rest, so
    // what is measured is enforcement, not how a saturated machine is shared.
    limits.extend((0..SCALE_BUSY).map(|i| lim(scale_busy(i), 10_000, 100_000)));
    // Outer levels are looser (0.95 CPU at l01 down to 0.2 at l16): the innermost binds.
    limits.extend((1..=SCALE_DEPTH).map(|l| lim(scale_chain(l), 20_000 + 5_000 * (SCALE_DEPTH - l) as u64, 100_000)));
    Scenario {
        name: "scale",
        about: "1,000 limited groups with a sleeping process each, 10 busy limited groups and a chain of 16 nested limits: all enforced (busy groups and the innermost level at limit ±5%), paths walked off the refill thread, agent CPU printed",
        needs_sched: true,
        limits,
        cgroups: vec![],
        body: Body::Custom(scale),
    }
}

/// Scale: 1,026 limited groups at once, 16 of them nested in one chain (the deepest
/// task's chain holds 16 limited ancestors). Each sleeper group holds a process that
/// wakes every 10 s; each busy group and the innermost chain level hold a hog. Checked
/// over the window: every group is enforced (the stats report all of them), the busy
/// groups and the innermost level use their limit ±5 %, no sleeper was lost, the cgroup
/// poll left the walk of paths to its thread. The agent's CPU time over the window is
/// printed (ms per s).
fn scale(ctx: &mut Ctx) -> Result<(), String> {
    let sleeper_groups: Vec<&'static str> = (0..SCALE_SLEEPERS).map(scale_sleeper).collect();
    let t = Instant::now();
    let sleepers = Sleepers::spawn(&sleeper_groups)?;
    ctx.figure("spawn_s", format!("{:.1}", t.elapsed().as_secs_f64()));
    let busy: Vec<&'static str> = (0..SCALE_BUSY).map(scale_busy).collect();
    let deep = scale_chain(SCALE_DEPTH);
    // 8 s: a 0.1-CPU group gets 10 ms per 100 ms period; what a window catches of the
    // periods at its two ends (up to a quota, plus the CPUs' local slices) is 5 % of 4 s.
    let window = crate::runner::WINDOW * 2;
    let seconds = (crate::runner::WARMUP + window).as_secs() + 5;
    let first = ctx.spawn(&hog(busy[0], 1), seconds)?;
    for b in &busy[1..] {
        ctx.spawn(&hog(b, 1), seconds)?;
    }
    ctx.spawn(&hog(deep, 1), seconds)?;
    ctx.check_on_scx(first);
    sleep(crate::runner::WARMUP);

    // On the kernel (--kernel-ref) there is no agent: only the shares are measured.
    let pid = ctx.sched_pid();
    let ticks0 = pid.map(|p| crate::sched::cpu_ticks(p).unwrap_or(0));
    let stats0 = pid.map(|_| crate::stats::fetch()).transpose()?;
    let throttles0 = chain_throttles(stats0.as_ref())?;
    let mut watched = busy.clone();
    watched.push(deep);
    let used = ctx.measure(&watched, window)?;
    let stats = pid.map(|_| crate::stats::fetch()).transpose()?;
    let throttles = chain_throttles(stats.as_ref())?;
    if let (Some(pid), Some(ticks0), Some(stats0), Some(m)) = (pid, ticks0, &stats0, &stats) {
        let ticks = crate::sched::cpu_ticks(pid).unwrap_or(0).saturating_sub(ticks0);
        let agent_ms_per_s = ticks as f64 * 1e3 / crate::sched::clock_ticks() as f64 / window.as_secs_f64();
        // Includes the agent's once-a-second statistics table (--stats 1) over all groups.
        ctx.figure("agent_ms_per_s", format!("{agent_ms_per_s:.1}"));
        for (k, v) in crate::stats::agent_breakdown(stats0, m, window.as_secs_f64()) {
            ctx.figure(k, v);
        }
        // How late the agent's period timers ran (its recent expiries): a loop held up by
        // other work releases throttled groups late, all at once.
        ctx.figure("timer_late_p99_us", crate::stats::num(m, "timer_late_p99_us")?);
        let poll = crate::stats::delta(stats0, m, "agent_poll_cpu_usec")? / 1e3 / window.as_secs_f64();
        if poll > POLL_MS_S_MAX {
            ctx.fail(format!("the cgroup poll took {poll:.1} ms per s of the agent's loop (at most {POLL_MS_S_MAX}): configured paths walked on the refill thread?"));
        }
        let enforced = crate::stats::num(m, "active_groups")?;
        let expected = (SCALE_SLEEPERS + SCALE_BUSY + SCALE_DEPTH) as f64;
        ctx.figure("active_groups", enforced);
        ctx.figure("idle_groups", crate::stats::num(m, "idle_groups")?);
        if enforced != expected {
            ctx.fail(format!("{enforced} groups enforced, {expected} configured"));
        }
    }
    let (mut worst, mut worst_cg) = (1.0f64, "");
    for (cg, u) in busy.iter().zip(&used) {
        let r = u / 0.1;
        if (r - 1.0).abs() > (worst - 1.0f64).abs() {
            (worst, worst_cg) = (r, cg);
        }
    }
    ctx.figure("busy.worst_ratio", format!("{worst:.3}"));
    ctx.figure("busy.total_cpus", format!("{:.3}", used[..SCALE_BUSY].iter().sum::<f64>()));
    let (tol, kernel) = kernel_aware(ctx, "busy.worst_ratio");
    if (worst - 1.0).abs() > tol {
        ctx.fail(format!("{worst_cg}: {:.3} of its 0.1-CPU limit, more than {:.1} % off{kernel}", worst, tol * 100.0));
    }
    // Which levels of the chain throttled it over the window, and for how long (summed
    // over CPUs): an outer level that throttles costs the task runtime of the innermost.
    let levels: Vec<String> = throttles
        .iter()
        .zip(&throttles0)
        .enumerate()
        .filter(|(_, (a, b))| a.0 > b.0 || a.1 > b.1)
        .map(|(i, (a, b))| format!("l{:02}:{}/{}ms", i + 1, a.0 - b.0, (a.1 - b.1) / 1000))
        .collect();
    ctx.figure("deep.throttled", if levels.is_empty() { "none".to_string() } else { levels.join(",") });
    let deep_used = used[SCALE_BUSY];
    ctx.figure("deep.usage_cpus", format!("{deep_used:.3}"));
    ctx.figure("deep.ratio", format!("{:.3}", deep_used / 0.2));
    let (tol, kernel) = kernel_aware(ctx, "deep.ratio");
    if (deep_used / 0.2 - 1.0).abs() > tol {
        ctx.fail(format!("{deep}: {deep_used:.3} CPUs for its 0.2 limit (16 nested limits), more than {:.1} % off{kernel}", tol * 100.0));
    }
    let alive = sleepers.alive();
    ctx.figure("sleepers_alive", alive);
    if alive != SCALE_SLEEPERS {
        ctx.fail(format!("{alive} of {SCALE_SLEEPERS} sleepers alive"));
    }
    drop(sleepers);
    Ok(())
}

/// The tolerance of a share's ratio to its limit (figure `key`), 5 %, and on a busy-host
/// retry (--kernel-ref) as far from the limit as the kernel's was in this boot plus
/// RATIO_KERNEL_SLACK, with the words that name the kernel's figure.
fn kernel_aware(ctx: &Ctx, key: &str) -> (f64, String) {
    match ctx.kernel_f64(key) {
        Some(k) => (super::kernel_tolerance(0.05, Some(k)), format!(" (the kernel in this boot: {k:.3})")),
        None => (0.05, String::new()),
    }
}

/// Per level of the deep chain (l01 first): periods that ended throttled and time
/// throttled in µs, from the scheduler's statistics `m` or, on the kernel, cpu.stat.
fn chain_throttles(m: Option<&serde_json::Value>) -> Result<Vec<(u64, u64)>, String> {
    (1..=SCALE_DEPTH)
        .map(|l| {
            let cg = scale_chain(l);
            match m {
                Some(m) => {
                    let g = crate::stats::group(m, cg)?;
                    Ok((crate::stats::num(g, "nr_throttled")? as u64, crate::stats::num(g, "throttled_usec")? as u64))
                }
                None => Ok((crate::cgroup::read_stat(cg, "nr_throttled")?, crate::cgroup::read_stat(cg, "throttled_usec")?)),
            }
        })
        .collect()
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![scale_scenario()]
}
