//! Limits: the core promise, a group's usage held to quota / period. One group, several,
//! nested, beside unlimited neighbours, crowded or alone, a configured cgroup removed and
//! created again, and periods as short as 2 ms, which BPF timers refill whether the agent
//! keeps up or not. Most are phase scenarios (Body::Phases: start hogs, warm up, measure,
//! check); those that do not need the scheduler also run under the kernel's CFS (--cfs),
//! as the baseline.

use super::{custom, hog, lim, measure_ratio, one_phase, single_limit, Body, Check, Cross, Phase, Scenario};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A configured cgroup that is removed and created again is a new cgroup (new id): the
/// limit must follow the path, not the old id.
fn recreate(ctx: &mut Ctx) -> Result<(), String> {
    let first = ctx.spawn(&hog("t/a", 1), 60)?;
    measure_ratio(ctx, "first", "t/a", 0.3, 0.02)?;
    ctx.kill_works(first);
    crate::cgroup::remove_tree("t/a")?;
    sleep(Duration::from_millis(500));
    crate::cgroup::create_tree(&["t/a"])?;
    let second = ctx.spawn(&hog("t/a", 1), 60)?;
    ctx.check_on_scx(second);
    measure_ratio(ctx, "recreated", "t/a", 0.3, 0.02)?;
    Ok(())
}

/// A 2 ms period is refilled by a BPF timer on the period grid, so its limit holds
/// whether or not the agent keeps up: measured with the agent running, then with it
/// SIGSTOPped (before, the agent refilled every period from user space, and stopped it
/// left the group to the safety net's one refill per 50 ms tick: 0.034 of the limit).
///
/// Each window is checked twice, ±5 % each: usage against the limit, and against the
/// periods BPF refilled in it (timer and catch-up refills, counted from the statistics;
/// every refill used, and no more than was refilled). The emulator delivers the BPF timer
/// late, on some days by more than a period at 122-580 of about 2,000 grid points a
/// window; while a late refill covered one grid point, as the kernel's does, and the pool
/// could not be overdrawn, the group got 0.849-0.969 of its limit on such a day
/// (2026-12-01). The share of grid points refilled (`served`) must be at least
/// SHORT_SERVED_MIN, so a timer that stops firing fails by that too.
///
/// Under a host load that stalls vCPUs (`hostload --pct 20`) the agent, finding the timer
/// late by 10 ms or more, stamped the group refilled without refilling it, and the late
/// timer then skipped every grid point since its last refill: `running` got 0.937, 0.897 and
/// 0.907 of the limit in one CI run (served 0.90-0.945); the agent now has BPF refill by the
/// grid rule (bw_short_refill): 0.990-1.001 in 4 runs under that load (2026-12-07). With
/// each vCPU held 25 ms of every 100 ms in turn (`SCXBW_VCPU_STALL=25/100`, tests/vm/README),
/// the old agent failed 2 of 2 (`running` 1.128 and 1.025 of the limit, 1.461 and 1.118 of
/// the refills), the new one held `running` at 0.977-1.000 in 5 runs; there `stopped` (BPF
/// alone) got 0.944-0.960 of the limit, under 0.95 in 3 of 5 (not yet looked into), and 1
/// boot of 6 did not attach within 10 s.
fn short_period(ctx: &mut Ctx) -> Result<(), String> {
    let w = ctx.spawn(&hog("t/a", 2), 60)?;
    ctx.check_on_scx(w);
    sleep(crate::runner::WARMUP);
    short_window(ctx, "running", |_| {
        sleep(crate::runner::WINDOW);
        Ok(())
    })?;
    let pid = ctx.sched_pid().ok_or("no scheduler")?;
    // The stats socket is the agent's: read before the stop and after the resumption.
    short_window(ctx, "stopped", |_| {
        crate::sched::signal(pid, libc::SIGSTOP);
        sleep(Duration::from_secs(3));
        crate::sched::signal(pid, libc::SIGCONT);
        Ok(())
    })?;
    ctx.healthy()?;
    let m = crate::stats::fetch()?;
    for k in ["short_period_refills", "short_period_caught_up", "short_period_missed", "slice_timer_kicks", "safety_refills"] {
        ctx.figure(k, crate::stats::num(&m, k)?);
    }
    Ok(())
}

/// Least share of a short period's grid points that must get their refill in a window.
const SHORT_SERVED_MIN: f64 = 0.75;

/// One window of `short_period` (what `during` takes): t/a (1 ms per 2 ms) against the
/// refills BPF did in it.
fn short_window(ctx: &mut Ctx, label: &str, during: impl FnOnce(&mut Ctx) -> Result<(), String>) -> Result<(), String> {
    const QUOTA_S: f64 = 0.001;
    const PERIOD_S: f64 = 0.002;
    let refills = |m: &serde_json::Value| -> Result<f64, String> {
        Ok(crate::stats::num(m, "short_period_refills")? + crate::stats::num(m, "safety_refills")?)
    };
    let before = refills(&crate::stats::fetch()?)?;
    let (t0, u0) = (Instant::now(), crate::cgroup::read_usage_usec("t/a")?);
    during(ctx)?;
    let (secs, u1) = (t0.elapsed().as_secs_f64(), crate::cgroup::read_usage_usec("t/a")?);
    let done = refills(&crate::stats::fetch()?)? - before;
    let used = u1.saturating_sub(u0) as f64 / 1e6 / secs;
    let served = done / (secs / PERIOD_S);
    let allowed = QUOTA_S * done / secs;
    let key = |name: &str| format!("{label}.{name}");
    ctx.figure(key("usage_cpus"), format!("{used:.3}"));
    ctx.figure(key("ratio"), format!("{:.3}", used / (QUOTA_S / PERIOD_S)));
    ctx.figure(key("served"), format!("{served:.3}"));
    ctx.figure(key("of_refilled"), format!("{:.3}", used / allowed));
    if (used / (QUOTA_S / PERIOD_S) - 1.0).abs() > 0.05 {
        ctx.fail(format!("{label}: the 2 ms group used {used:.3} CPUs, limit {:.3}: more than 5 % off", QUOTA_S / PERIOD_S));
    }
    if (used / allowed - 1.0).abs() > 0.05 {
        ctx.fail(format!("{label}: the 2 ms group used {used:.3} CPUs, its refills allowed {allowed:.3}: more than 5 % off"));
    }
    if served < SHORT_SERVED_MIN {
        ctx.fail(format!("{label}: only {served:.3} of the grid points were refilled (min {SHORT_SERVED_MIN})"));
    }
    Ok(())
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    use Check::*;
    vec![
        single_limit(
            "hog1_30",
            "30ms/100ms, 1 hog thread: usage = limit ±2%",
            lim("t/a", 30_000, 100_000),
            1,
            0.02,
        ),
        single_limit(
            "hog2_120",
            "120ms/100ms, 2 hog threads: usage = limit ±2%",
            lim("t/a", 120_000, 100_000),
            2,
            0.02,
        ),
        single_limit(
            "hog4_25_50",
            "25ms/50ms, 4 hog threads: usage = limit ±3%",
            lim("t/a", 25_000, 50_000),
            4,
            0.03,
        ),
        Scenario {
            name: "capped_uncapped",
            about: "capped group held to 40ms/100ms while an unlimited neighbour gets the rest",
            needs_sched: false,
            limits: vec![lim("t/capped", 40_000, 100_000)],
            cgroups: vec![],
            body: one_phase(
                vec![hog("t/capped", 2), hog("t/free", 2)],
                vec![
                    Ratio {
                        cgroup: "t/capped",
                        tol: 0.03,
                    },
                    AtLeast {
                        cgroup: "t/free",
                        cpus: 1.5,
                    },
                ],
            ),
        },
        Scenario {
            name: "nested",
            about: "parent limit 1.2 CPUs over a 0.5-CPU child and an unlimited child",
            needs_sched: false,
            limits: vec![lim("t/p", 120_000, 100_000), lim("t/p/x", 50_000, 100_000)],
            cgroups: vec![],
            body: one_phase(
                vec![hog("t/p/x", 2), hog("t/p/y", 2)],
                vec![
                    AtMostLimit {
                        cgroup: "t/p",
                        tol: 0.03,
                    },
                    AtLeastLimit {
                        cgroup: "t/p",
                        tol: 0.05,
                    },
                    AtMostLimit {
                        cgroup: "t/p/x",
                        tol: 0.03,
                    },
                ],
            ),
        },
        Scenario {
            name: "nolimit",
            about: "empty config: a 2-thread hog gets (nearly) both CPUs",
            needs_sched: false,
            limits: vec![],
            cgroups: vec![],
            body: one_phase(
                vec![hog("t/a", 2)],
                vec![AtLeast {
                    cgroup: "t/a",
                    cpus: 1.9,
                }],
            ),
        },
        Scenario {
            name: "neighbours",
            about: "30ms/100ms group measured alone and among 5 unlimited hogs: same ratio",
            needs_sched: false,
            limits: vec![lim("t/lim", 30_000, 100_000)],
            cgroups: vec![],
            body: Body::Phases(
                vec![
                    Phase {
                        label: "alone",
                        workloads: vec![hog("t/lim", 1)],
                        checks: vec![Ratio {
                            cgroup: "t/lim",
                            tol: 0.02,
                        }],
                    },
                    Phase {
                        label: "crowded",
                        workloads: vec![
                            hog("t/lim", 1),
                            hog("t/n1", 1),
                            hog("t/n2", 1),
                            hog("t/n3", 1),
                            hog("t/n4", 1),
                            hog("t/n5", 1),
                        ],
                        checks: vec![Ratio {
                            cgroup: "t/lim",
                            tol: 0.02,
                        }],
                    },
                ],
                vec![Cross::SameRatio {
                    cgroup: "t/lim",
                    a: "alone",
                    b: "crowded",
                    tol: 0.02,
                }],
            ),
        },
        custom(
            "recreate",
            "30ms/100ms group removed and re-created: the limit applies to the new cgroup",
            false,
            lim("t/a", 30_000, 100_000),
            recreate,
        ),
        custom(
            "short_period",
            "1ms/2ms, 2 hog threads: usage = limit ±5% and = quota x periods refilled ±5% (>= 75% of grid points refilled), also with the agent SIGSTOPped 3 s (a BPF timer refills periods under 10 ms)",
            true,
            lim("t/a", 1_000, 2_000),
            short_period,
        ),
    ]
}
