//! The scenario table: the product's acceptance criteria. A scenario is a name, the
//! bandwidth limits (the scheduler's config, or cpu.max in --cfs mode), and a body: either
//! measured phases (workloads + checks on each cgroup's CPU usage) or a custom function for
//! flows the phase model does not cover. Tolerances here are the specification; do not
//! loosen them to make a run pass.
//!
//! The scenarios are in one file per area, each listing its own in `scenarios()` at its end:
//! lifecycle (attach, reload, hotplug, exit), limits, weights, burst_slack, cgroupfs (cpu.max
//! without a config), rules ([[rule]] globs on orchestrator-made cgroups), monitoring
//! (statistics), advise (the advisor against measured use), reliability (agent stall,
//! rescue, stress, RT neighbour, move latency) and
//! scale; bench holds the benchmark bodies; wide holds those for
//! machines with several LLCs and NUMA nodes (`--wide`, not in `all()`). This file holds the
//! types, the constructors the lists use, all() and bench(), and the helpers areas share.

use crate::runner::Ctx;
use bench::{agent_cost, burst_sweep, overhead, throttle_cost};
use std::thread::sleep;
use std::time::Duration;

mod advise;
mod bench;
mod burst_slack;
mod cgroupfs;
mod hotplug;
mod lifecycle;
mod limits;
mod monitoring;
mod reliability;
mod rules;
mod scale;
mod stress;
mod weights;
mod wide;

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
    /// `forks --threads N`: N threads forking children that exit at once (prints FORKS n=).
    Forks { threads: u32 },
    /// `pingpong --threads N`: N thread pairs passing a byte through pipes (prints PINGPONG n=).
    PingPong { pairs: u32 },
    /// `messaging --threads G`: G groups of 4 senders and 4 receivers (prints MESSAGING n=).
    Messaging { groups: u32 },
    /// `wakelat --threads N`: N workers woken every 2 ms (prints WAKELAT n= p50_us= p99_us=).
    WakeLat { workers: u32 },
    /// `gaps`: one busy thread printing each stretch > 2 ms it did not run (GAP lines).
    Gaps,
    /// `ticker --hz N`: a SCHED_FIFO thread that only wakes N times a second (TICKER line).
    Ticker { hz: u32 },
    /// `duty --threads N --burn-ms B --sleep-ms S` (prints a DUTY line into its log).
    Duty {
        threads: u32,
        burn_ms: u32,
        sleep_ms: u32,
    },
    /// `duty --threads 1 --burn-ms B --sleep-ms S --fifo`: one SCHED_FIFO thread.
    RtDuty { burn_ms: u32, sleep_ms: u32 },
    /// `duty --threads 1 --burn-ms B --sleep-ms S --spawn`: each burn in a thread of its own,
    /// created for it and joined (the DUTY line times creation to join).
    SpawnDuty { burn_ms: u32, sleep_ms: u32 },
    /// `duty --threads N --burn-ms B --sleep-ms S --plain`: burns B ms at a time and sleeps
    /// so that each thread uses B / (B + S) of a CPU, its wakeups' cost included.
    Pulse {
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
    /// Pin every thread to this CPU.
    pub pin: Option<u32>,
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
        pin: None,
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

/// The acceptance scenarios, area by area (each file lists its own); `scenarios --list`
/// prints them, and tests/vm/run runs them, in this order.
pub fn all() -> Vec<Scenario> {
    [
        lifecycle::scenarios(),
        limits::scenarios(),
        weights::scenarios(),
        burst_slack::scenarios(),
        cgroupfs::scenarios(),
        rules::scenarios(),
        monitoring::scenarios(),
        advise::scenarios(),
        reliability::scenarios(),
        scale::scenarios(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Scenarios whose checks also hold ours against the kernel's figure from the same boot
/// (`scenarios --kernel-ref`, which tests/vm/run passes when it retries a scenario that
/// failed with the host busy). Their bounds are absolute, and a sustained load on the host
/// moves the kernel past them too: with a SCHED_FIFO thread on each host CPU burning 20 ms
/// of every 100 ms, the kernel's p99 burn in burst_latency was 79.6-80.8 ms (bound 66), its
/// 1 ms-period group in stress got 0.668-0.677 of its limit (bound ±5 %). Each such check
/// names the kernel's figure beside ours. (under_quota holds its figure against the
/// cgroup's own usage, sampled in the same run.) In `rules`, the kernel enforces the limits
/// the rules give its two measured groups, written to cpu.max; in `scale`, all 1,026 limits
/// (the kernel's deep chain got 0.998-1.005 of its limit on a quiet host, ours 0.944-1.010).
pub const KERNEL_REF: &[&str] = &["burst_latency", "stress", "rules", "scale"];

/// The set for machines with several LLCs and NUMA nodes (`scenarios --wide`): the wide
/// area's own, and those of the 2-CPU set whose checks do not assume 2 CPUs. Not
/// burst_latency: its bound is absolute (burn + 10 %), and with 8 vCPUs on 2 host cores a
/// vCPU waits for the host often enough that p99 reached 68.6 ms in one of two runs.
pub fn wide() -> Vec<Scenario> {
    let mut v = wide::scenarios();
    v.extend(
        all()
            .into_iter()
            .filter(|s| ["stress", "scale", "burst_hog"].contains(&s.name)),
    );
    v
}

/// The benchmark of the wide machine (`scenarios --wide --bench`, tests/bench/run): the
/// scheduling core against the kernel's at 8 vCPUs.
pub fn wide_bench() -> Vec<Scenario> {
    wide::bench_scenarios()
}

/// The benchmark set (`scenarios --bench`, driven by tests/bench/run): the same
/// workloads under the kernel's CFS (--cfs) and under scx_bandwidth, for a side-by-side
/// table. Tolerances are wide: these report figures, they do not gate.
pub fn bench() -> Vec<Scenario> {
    let mut v = Vec::new();
    for (period_ms, p) in [(10, "10ms"), (100, "100ms"), (1000, "1s")] {
        for (threads, cpus) in [(1u32, 0.1), (2, 0.5), (4, 1.5), (8, 1.9)] {
            let period_us = period_ms * 1000;
            let quota_us = (cpus * period_us as f64).round() as u64;
            v.push(single_limit(
                leak(format!("acc_{p}_{threads}t_{cpus}")),
                leak(format!("{threads} hog thread(s) at {cpus} CPU, period {p}: usage/limit")),
                lim("t/a", quota_us, period_us),
                threads,
                1.0,
            ));
        }
    }
    v.extend(all().into_iter().filter(|s| ["nested", "burst_latency", "burst_latency_strict", "scale"].contains(&s.name)));
    v.push(Scenario {
        name: "burst_sweep",
        about: "burst latency across workloads: burns of 20/50/90 ms at 30/70 % duty, 1-2 threads, burst = quota, limits the kernel does not throttle: p50/p99/max burn time per cell",
        needs_sched: false,
        limits: vec![],
        cgroups: vec!["t/sw"],
        body: Body::Custom(burst_sweep),
    });
    v.push(custom(
        "throttle_cost",
        "refill to the first parked task running again: a hog throttled every period (20 ms/100 ms), its resume phases",
        false,
        lim("t/a", 20_000, 100_000),
        throttle_cost,
    ));
    v.push(Scenario {
        name: "overhead",
        about: "no limits: pipe ping-pong, fork, messaging throughput and wakeup latency under scx_bandwidth, the kernel's scheduler and the floor scheduler, alternately in one boot",
        needs_sched: true,
        limits: vec![],
        cgroups: vec!["t/o"],
        body: Body::Custom(overhead),
    });
    v.push(Scenario {
        name: "agent_cost",
        about: "the agent's CPU time per second with 10, 100 and 1,000 limited groups (10 busy, the rest with a sleeper), without --stats",
        needs_sched: true,
        limits: vec![],
        cgroups: vec!["t/tick"],
        body: Body::Custom(agent_cost),
    });
    v
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// CPU time (ns) and times scheduled in, summed over every thread of `pid` so far
/// (/proc/PID/task/*/schedstat).
fn process_cpu(pid: u32) -> Option<(u64, u64)> {
    let tids = crate::sched::threads(pid);
    (!tids.is_empty()).then(|| {
        tids.iter()
            .filter_map(|&tid| crate::sched::thread_schedstat(pid, tid))
            .fold((0, 0), |a, (run, _, runs)| (a.0 + run, a.1 + runs))
    })
}

/// Processes forked to sleep in a cgroup each; killed and reaped when dropped.
struct Sleepers(Vec<libc::pid_t>);

impl Sleepers {
    /// One child per cgroup, moved there by the parent. The child only sleeps, 10 s at a
    /// time (so every group wakes once or twice during the scenario: 100 wakeups/s in
    /// all), and dies with the parent.
    fn spawn(cgroups: &[&'static str]) -> Result<Sleepers, String> {
        let mut s = Sleepers(Vec::with_capacity(cgroups.len()));
        for cg in cgroups {
            // SAFETY: the child calls only async-signal-safe functions (prctl, sleep).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    loop {
                        libc::sleep(10);
                    }
                }
            }
            if pid < 0 {
                return Err(format!("fork for {cg}: {}", std::io::Error::last_os_error()));
            }
            s.0.push(pid);
            let procs = crate::cgroup::path(cg).join("cgroup.procs");
            std::fs::write(&procs, pid.to_string()).map_err(|e| format!("{}: {e}", procs.display()))?;
        }
        Ok(s)
    }

    /// How many are still alive (not reaped, not a zombie).
    fn alive(&self) -> usize {
        self.0
            .iter()
            .filter(|&&pid| {
                let mut st = 0;
                // SAFETY: waitpid on our own child, non-blocking.
                unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) == 0 }
            })
            .count()
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill and reap our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// Usage of `cg` over the runner's window after its warm-up, checked like a phase's
/// `Check::Ratio` against `limit_cpus` ±`tol`; figures are prefixed with `label`.
fn measure_ratio(ctx: &mut Ctx, label: &str, cg: &'static str, limit_cpus: f64, tol: f64) -> Result<(), String> {
    sleep(crate::runner::WARMUP);
    let used = ctx.measure(&[cg], crate::runner::WINDOW)?[0];
    let key = |name: &str| format!("{label}.{name}");
    ctx.figure(key("usage_cpus"), format!("{used:.3}"));
    ctx.figure(key("ratio"), format!("{:.3}", used / limit_cpus));
    // With --kernel-ref (a retry on a busy host, for the scenarios in KERNEL_REF): as far
    // from the limit as the kernel's share was in this boot, plus RATIO_KERNEL_SLACK.
    let tol = kernel_tolerance(tol, ctx.kernel_f64(&key("ratio")));
    crate::phases::check(ctx, &Check::Ratio { cgroup: cg, tol }, used, Some(limit_cpus), &key, label)
}

/// How much further from its limit than the kernel's a share measured by `measure_ratio`
/// may be on a busy host (--kernel-ref): the check's own tolerance in `rules`, its one user.
/// Both are single 4 s windows under the same load; ours moved by more than that between
/// loaded CI runs (the service 0.977-1.031, the 20 ms-period container 0.802-1.001), where
/// a host thread taking both host CPUs 20 ms of every 100 holds up every refill in such a
/// stretch and the periods it spans are refilled once (as the kernel's timer does).
pub(super) const RATIO_KERNEL_SLACK: f64 = 0.02;

/// The tolerance of a usage-to-limit ratio: `tol`, or with the kernel's ratio `kernel` from
/// this boot (a retry on a busy host), as far from the limit as the kernel's was plus
/// RATIO_KERNEL_SLACK, if that is more.
pub(crate) fn kernel_tolerance(tol: f64, kernel: Option<f64>) -> f64 {
    kernel.map_or(tol, |k| tol.max((k - 1.0).abs() + RATIO_KERNEL_SLACK))
}

/// After cgroups were removed: within 3 s the enforced groups (`active_groups`) are back to
/// `base`, every slot given back (removals reach the agent through the events ring).
fn slots_back(ctx: &mut Ctx, base: f64, what: &str) {
    let mut active = f64::NAN;
    crate::sched::wait_for(Duration::from_secs(3), || {
        active = crate::stats::fetch().and_then(|m| crate::stats::num(&m, "active_groups")).unwrap_or(f64::NAN);
        active == base
    });
    ctx.figure("active_groups", format!("{active}/{base}"));
    if active != base {
        ctx.fail(format!("{active} groups still enforced after {what}, {base} before"));
    }
}

/// Wait up to `wait` for a fork storm (a `Work::Forks` workload) to end: it must exit 0
/// having forked at least `min_forks` times (figure `forks`).
fn end_fork_storm(ctx: &mut Ctx, storm: usize, min_forks: u64, wait: Duration) -> Result<(), String> {
    let st = ctx.wait_workload(storm, wait)?;
    let forks = crate::output::parse_forks(&ctx.output(storm));
    ctx.figure("forks", forks.map_or("?".into(), |n| n.to_string()));
    if st.code() != Some(0) || forks.unwrap_or(0) < min_forks {
        ctx.fail(format!("fork storm {}, {forks:?} forks", crate::sched::describe(st)));
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
