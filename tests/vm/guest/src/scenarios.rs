//! The scenario table: the product's acceptance criteria. A scenario is a name, the
//! bandwidth limits (the scheduler's config, or cpu.max in --cfs mode), and a body: either
//! measured phases (workloads + checks on each cgroup's CPU usage) or a custom function for
//! flows the phase model does not cover. Tolerances here are the specification; do not
//! loosen them to make a run pass.

use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// One `[[group]]` of the scheduler's config; in --cfs mode written to cpu.max instead.
#[derive(Clone, Debug)]
pub struct Limit {
    pub cgroup: &'static str,
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: u64,
}

impl Limit {
    pub fn cpus(&self) -> f64 {
        self.quota_us as f64 / self.period_us as f64
    }
}

#[derive(Clone, Debug)]
pub enum Work {
    /// `hog --threads N`: N busy threads.
    Hog { threads: u32 },
    /// `duty --threads N --burn-ms B --sleep-ms S` (prints a DUTY line into its log).
    Duty {
        threads: u32,
        burn_ms: u32,
        sleep_ms: u32,
    },
}

/// A process of this binary running `work` inside `cgroup`.
#[derive(Clone, Debug)]
pub struct Workload {
    pub cgroup: &'static str,
    pub work: Work,
}

/// A condition on one cgroup's measured usage (in CPUs). "limit" is the cgroup's own
/// quota/period from the scenario's limits.
#[derive(Clone, Debug)]
pub enum Check {
    /// |usage / limit − 1| ≤ tol.
    Ratio { cgroup: &'static str, tol: f64 },
    /// usage ≤ limit · (1 + tol).
    AtMostLimit { cgroup: &'static str, tol: f64 },
    /// usage ≥ limit · (1 − tol).
    AtLeastLimit { cgroup: &'static str, tol: f64 },
    /// usage ≥ cpus.
    AtLeast { cgroup: &'static str, cpus: f64 },
}

impl Check {
    pub fn cgroup(&self) -> &'static str {
        match self {
            Check::Ratio { cgroup, .. }
            | Check::AtMostLimit { cgroup, .. }
            | Check::AtLeastLimit { cgroup, .. }
            | Check::AtLeast { cgroup, .. } => cgroup,
        }
    }
}

/// Start workloads, warm up, measure every involved cgroup over one window, check.
/// Workloads of a phase are killed before the next phase starts; those of the last phase
/// keep running while the scheduler is stopped (detaching with throttled tasks around).
#[derive(Clone, Debug)]
pub struct Phase {
    pub label: &'static str,
    pub workloads: Vec<Workload>,
    pub checks: Vec<Check>,
}

/// A condition relating two phases' results.
#[derive(Clone, Debug)]
pub enum Cross {
    /// |ratio(cgroup in a) − ratio(cgroup in b)| ≤ tol.
    SameRatio {
        cgroup: &'static str,
        a: &'static str,
        b: &'static str,
        tol: f64,
    },
}

pub enum Body {
    Phases(Vec<Phase>, Vec<Cross>),
    /// Runs with the scheduler attached (or cpu.max applied) and the cgroups created; the
    /// runner still stops the scheduler afterwards unless the function did.
    Custom(fn(&mut Ctx) -> Result<(), String>),
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// Only meaningful with the scheduler (skipped in --cfs mode).
    pub needs_sched: bool,
    pub limits: Vec<Limit>,
    /// Cgroups to create besides those named by limits and phase workloads.
    pub cgroups: Vec<&'static str>,
    pub body: Body,
}

impl Scenario {
    pub fn limit_of(&self, cgroup: &str) -> Option<&Limit> {
        self.limits.iter().find(|l| l.cgroup == cgroup)
    }

    /// Every cgroup the scenario needs (ancestors are added when creating them).
    pub fn all_cgroups(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.limits.iter().map(|l| l.cgroup).collect();
        v.extend(&self.cgroups);
        if let Body::Phases(phases, _) = &self.body {
            for p in phases {
                v.extend(p.workloads.iter().map(|w| w.cgroup));
                v.extend(p.checks.iter().map(Check::cgroup));
            }
        }
        let mut out = Vec::new();
        for c in v {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }
}

/// The scheduler's TOML config for `limits` (no [[group]] at all for an empty list).
pub fn render_config(name: &str, limits: &[Limit]) -> String {
    let mut s = format!("# scx_bandwidth config for test scenario '{name}'\n");
    for l in limits {
        s += &format!(
            "\n[[group]]\ncgroup = \"{}\"\nquota_us = {}\nperiod_us = {}\nburst_us = {}\n",
            l.cgroup, l.quota_us, l.period_us, l.burst_us
        );
    }
    s
}

fn lim(cgroup: &'static str, quota_us: u64, period_us: u64) -> Limit {
    Limit {
        cgroup,
        quota_us,
        period_us,
        burst_us: 0,
    }
}

fn hog(cgroup: &'static str, threads: u32) -> Workload {
    Workload {
        cgroup,
        work: Work::Hog { threads },
    }
}

fn one_phase(workloads: Vec<Workload>, checks: Vec<Check>) -> Body {
    Body::Phases(
        vec![Phase {
            label: "main",
            workloads,
            checks,
        }],
        vec![],
    )
}

/// One limited group "t/a" saturated by `threads` hogs; usage must match the limit.
fn single_limit(
    name: &'static str,
    about: &'static str,
    l: Limit,
    threads: u32,
    tol: f64,
) -> Scenario {
    let cg = l.cgroup;
    Scenario {
        name,
        about,
        needs_sched: false,
        limits: vec![l],
        cgroups: vec![],
        body: one_phase(
            vec![hog(cg, threads)],
            vec![Check::Ratio { cgroup: cg, tol }],
        ),
    }
}

/// A scenario with one limited group `l` (created before `body` runs) and a custom body.
fn custom(
    name: &'static str,
    about: &'static str,
    needs_sched: bool,
    l: Limit,
    body: fn(&mut Ctx) -> Result<(), String>,
) -> Scenario {
    Scenario {
        name,
        about,
        needs_sched,
        cgroups: vec![l.cgroup],
        limits: vec![l],
        body: Body::Custom(body),
    }
}

pub fn all() -> Vec<Scenario> {
    use Check::*;
    vec![
        Scenario {
            name: "attach",
            about: "empty config: attaches as scx_bandwidth, detaches cleanly on SIGINT",
            needs_sched: true,
            limits: vec![],
            cgroups: vec![],
            body: Body::Phases(vec![], vec![]),
        },
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
            "exit_parked",
            "SIGTERM to 4 threads parked by a 10ms/100ms limit: all exit within 1 s",
            false,
            lim("t/a", 10_000, 100_000),
            exit_parked,
        ),
        Scenario {
            name: "burst_hog",
            about: "60ms/100ms + 60ms burst, 2 hogs: usage <= limit (1 + burst/(quota periods)) + 2%",
            needs_sched: false,
            limits: vec![Limit { burst_us: 60_000, ..lim("t/a", 60_000, 100_000) }],
            cgroups: vec![],
            body: one_phase(
                vec![hog("t/a", 2)],
                // 40 periods in the 4 s window: 1 + 60/(60·40) = 1.025, + 2 %.
                vec![Check::AtMostLimit { cgroup: "t/a", tol: 0.045 }, Check::AtLeastLimit { cgroup: "t/a", tol: 0.02 }],
            ),
        },
        custom(
            "burst_latency_strict",
            "100ms/100ms, no burst, 2 threads burning 60ms every 200ms: throttled, p99 burn > 66ms",
            false,
            lim("t/a", 100_000, 100_000),
            bursty_throttled,
        ),
        custom(
            "sigint_throttled",
            "SIGINT while a group is throttled: clean detach, the hog finishes normally",
            true,
            lim("t/a", 20_000, 100_000),
            sigint_throttled,
        ),
    ]
}

/// Detaching must release throttled tasks: after SIGINT they run under the fair class again,
/// so the hog has to finish on its own schedule and exit 0.
fn sigint_throttled(ctx: &mut Ctx) -> Result<(), String> {
    const HOG_S: u64 = 8;
    let t0 = Instant::now();
    let w = ctx.spawn(&hog("t/a", 2), HOG_S)?;
    // The second before the signal shows whether the group really is being throttled;
    // without that the scenario would not test what it claims to.
    sleep(Duration::from_secs(1));
    let pre = ctx.measure(&["t/a"], Duration::from_secs(1))?[0];
    ctx.figure("pre_usage_cpus", format!("{pre:.3}"));
    ctx.figure("limit_cpus", "0.200");
    if pre > 0.2 * 1.5 {
        ctx.fail(format!(
            "group not throttled before SIGINT: {pre:.3} CPUs for a 0.2-CPU limit"
        ));
    }
    ctx.check_on_scx(w);
    ctx.healthy()?;
    if let Err(e) = ctx.stop_sched() {
        ctx.fail(e);
    }
    // The hog sleeps HOG_S from its own start, slightly after t0; allow 10 s beyond that.
    let budget = Duration::from_secs(HOG_S + 10).saturating_sub(t0.elapsed());
    let st = ctx.wait_workload(w, budget)?;
    let ran = t0.elapsed().as_secs_f64();
    ctx.figure("hog_exit_s", format!("{ran:.1}"));
    ctx.figure(
        "hog_status",
        st.code()
            .map(|c| c.to_string())
            .unwrap_or_else(|| "signal".into()),
    );
    if st.code() != Some(0) {
        ctx.fail(format!("hog {}", crate::sched::describe(st)));
    } else if ran < HOG_S as f64 - 0.5 {
        ctx.fail(format!(
            "hog exited after {ran:.1}s, before its {HOG_S}s were up"
        ));
    }
    Ok(())
}

/// Two threads burning 60 ms of CPU then sleeping 140 ms for 6 s: 0.6 CPU on average,
/// 1.2 CPUs while both burn. Under a strict 1-CPU quota the peaks are throttled, so the
/// p99 wall time of a burn must exceed 66 ms. The burst case (100 ms burst, p99 <= 66 ms)
/// is not in the table yet: it measured 67.9-70.8 ms here against the kernel's 65.0 ms
/// (issue 3).
fn bursty_throttled(ctx: &mut Ctx) -> Result<(), String> {
    // The group exists and is idle for a few periods first, so its pool holds what an
    // idle group has accumulated (quota + burst), as for a service between requests.
    sleep(Duration::from_millis(500));
    let w = Workload {
        cgroup: "t/a",
        work: Work::Duty { threads: 2, burn_ms: 60, sleep_ms: 140 },
    };
    let idx = ctx.spawn(&w, 6)?;
    ctx.check_on_scx(idx);
    let st = ctx.wait_workload(idx, Duration::from_secs(30))?;
    if st.code() != Some(0) {
        return Err(format!("duty workload {}", crate::sched::describe(st)));
    }
    let d = crate::workload::parse_duty(&ctx.output(idx)).ok_or("no DUTY line from the workload")?;
    ctx.figure("burns", d.burns);
    ctx.figure("p50_ms", format!("{:.1}", d.p50_ms));
    ctx.figure("p99_ms", format!("{:.1}", d.p99_ms));
    ctx.figure("max_ms", format!("{:.1}", d.max_ms));
    if d.burns < 40 {
        ctx.fail(format!("only {} burns in 6 s", d.burns));
    }
    if d.p99_ms <= 66.0 {
        ctx.fail(format!("p99 burn {:.1} ms: no visible throttling", d.p99_ms));
    }
    Ok(())
}

/// Usage of `cg` over the runner's window after its warm-up, checked like a phase's
/// `Check::Ratio` against `limit_cpus` ±`tol`; figures are prefixed with `label`.
fn measure_ratio(ctx: &mut Ctx, label: &str, cg: &'static str, limit_cpus: f64, tol: f64) -> Result<(), String> {
    sleep(crate::runner::WARMUP);
    let used = ctx.measure(&[cg], crate::runner::WINDOW)?[0];
    let key = |name: &str| format!("{label}.{name}");
    ctx.figure(key("usage_cpus"), format!("{used:.3}"));
    ctx.figure(key("ratio"), format!("{:.3}", used / limit_cpus));
    crate::phases::check(ctx, &Check::Ratio { cgroup: cg, tol }, used, Some(limit_cpus), &key, label)
}

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

/// Tasks parked by a throttled group must still be able to die: a fatal signal has to
/// reach every thread, which needs each to run once more. They may wait for the next
/// refill (100 ms here) but never for the watchdog.
fn exit_parked(ctx: &mut Ctx) -> Result<(), String> {
    let w = ctx.spawn(&hog("t/a", 4), 60)?;
    ctx.check_on_scx(w);
    sleep(Duration::from_millis(1500));
    let used = ctx.measure(&["t/a"], Duration::from_secs(1))?[0];
    ctx.figure("pre_usage_cpus", format!("{used:.3}"));
    if used > 0.1 * 1.5 {
        ctx.fail(format!("group not throttled: {used:.3} CPUs for a 0.1-CPU limit"));
    }
    let pid = ctx.workload_pid(w).ok_or("hog already gone")?;
    let t = Instant::now();
    crate::sched::signal(pid, libc::SIGTERM);
    let st = ctx.wait_workload(w, Duration::from_secs(5))?;
    let secs = t.elapsed().as_secs_f64();
    ctx.figure("exit_s", format!("{secs:.3}"));
    ctx.figure("status", crate::sched::describe(st).replace(' ', "_"));
    if secs > 1.0 {
        ctx.fail(format!("parked threads took {secs:.2}s to exit"));
    }
    let left = std::fs::read_to_string(crate::cgroup::path("t/a").join("cgroup.procs")).unwrap_or_default();
    if !left.trim().is_empty() {
        ctx.fail(format!("tasks left in t/a: {}", left.trim().replace('\n', ",")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_text() {
        let empty = render_config("attach", &[]);
        assert!(!empty.contains("[[group]]"));
        let c = render_config("x", &[lim("t/a", 30_000, 100_000)]);
        assert!(c.contains(
            "[[group]]\ncgroup = \"t/a\"\nquota_us = 30000\nperiod_us = 100000\nburst_us = 0\n"
        ));
    }

    #[test]
    fn table_is_consistent() {
        let all = all();
        for (i, s) in all.iter().enumerate() {
            assert!(
                all[..i].iter().all(|o| o.name != s.name),
                "duplicate {}",
                s.name
            );
            if let Body::Phases(phases, cross) = &s.body {
                for p in phases {
                    for c in &p.checks {
                        let needs_limit = !matches!(c, Check::AtLeast { .. });
                        assert!(
                            !needs_limit || s.limit_of(c.cgroup()).is_some(),
                            "{}: {c:?}",
                            s.name
                        );
                    }
                }
                for Cross::SameRatio { a, b, .. } in cross {
                    assert!(
                        phases.iter().any(|p| p.label == *a)
                            && phases.iter().any(|p| p.label == *b)
                    );
                }
            }
        }
        let nested = all.iter().find(|s| s.name == "nested").unwrap();
        assert_eq!(nested.all_cgroups(), vec!["t/p", "t/p/x", "t/p/y"]);
    }
}
