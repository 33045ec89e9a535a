//! Burst and slack: runtime a group did not use, in an earlier period or on another CPU.
//! cpu.max.burst lets a group that idled use more than its quota in a period (burst_hog,
//! burst_latency, and burst_latency_strict without a burst), and under_quota checks the
//! burst statistics of a group that never needs one. Slack return gives the local runtime
//! of a CPU whose task went to sleep back to the group's pool (slack, small_quota). A cap
//! per period alone would throttle bursty services that stay within their average, and
//! lose quota stranded on the wrong CPU; these hold the scheduler to the kernel's semantics.

use super::{custom, end_fork_storm, hog, lim, one_phase, Body, Check, Limit, Scenario, Work, Workload};
use crate::runner::Ctx;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::Duration;

/// The limit of `small_quota`'s group: its quota is one slice.
const SMALL_QUOTA_US: u64 = 5_000;
const SMALL_PERIOD_US: u64 = 100_000;

/// A group whose quota is one slice (5 ms per 100 ms), running a fork storm beside 4
/// unlimited hogs: parent and child take turns, often on different CPUs, so the CPU that
/// pulled the quota stops running the group while another throttles it, and gives its
/// runtime above 1 ms back. Its pool never holds more than a slice, so under fair.c's rule
/// (slack distributed above a slice) that runtime waits for the refill, which caps the
/// pool at the quota and throws it away (`throttled_discard_usec`): 8.7-15.5 ms in the
/// 12 s window in 4 runs here. Distributing slack above 1 ms (pools::worth_distributing):
/// 0.0-3.5 ms in 8 runs. Checked: usage ±5 % of the limit, and under the scheduler at most
/// 1 % of the window's quota (6 ms) discarded.
fn small_quota(ctx: &mut Ctx) -> Result<(), String> {
    const WINDOW: Duration = Duration::from_secs(12);
    let limit = SMALL_QUOTA_US as f64 / SMALL_PERIOD_US as f64;
    let storm = ctx.spawn(
        &Workload {
            cgroup: "t/q",
            work: Work::Forks { threads: 1 },
            pin: None,
        },
        20,
    )?;
    ctx.spawn(&hog("t/bg", 4), 20)?;
    ctx.check_on_scx(storm);
    sleep(Duration::from_secs(2));
    let before = if ctx.has_sched() { Some(crate::stats::fetch()?) } else { None };
    let used = ctx.measure(&["t/q"], WINDOW)?[0];
    ctx.figure("usage_cpus", format!("{used:.4}"));
    ctx.figure("ratio", format!("{:.3}", used / limit));
    if let Some(before) = before {
        let after = crate::stats::fetch()?;
        for f in ["nr_periods", "nr_throttled", "nr_slack_returns", "slack_returned_usec"] {
            ctx.figure(f, crate::stats::group_delta(&before, &after, "t/q", f)?);
        }
        let discard_ms = crate::stats::group_delta(&before, &after, "t/q", "throttled_discard_usec")? / 1e3;
        ctx.figure("discard_ms", format!("{discard_ms:.1}"));
        let quota_ms = limit * WINDOW.as_secs_f64() * 1e3;
        if discard_ms > 0.01 * quota_ms {
            ctx.fail(format!("t/q: refills discarded {discard_ms:.1} ms of its {quota_ms:.0} ms quota while it was throttled (max 1 %)"));
        }
    }
    crate::phases::check(ctx, &Check::Ratio { cgroup: "t/q", tol: 0.05 }, used, Some(limit), &|k| k.to_string(), "t/q")?;
    end_fork_storm(ctx, storm, 1, Duration::from_secs(15))
}

/// The p99 bound of `burst_latency`, the 66 ms. With nothing throttled or parked,
/// the p99 of a 60 ms burn (the second slowest of about 196) measured 62.7-70.3 ms in 15
/// runs under TCG before 2026-12-01 (the kernel's CFS 62.0-64.7 ms in 8), the slow burns
/// waiting 4-20 ms on a run queue. A trace then showed the other CPU idle during 8 of 17
/// such waits, and the first burns meeting the agent's first statistics table: with a tick
/// that kicks a CPU idling beside a waiting task, cpu_release, and the workload started 2 s
/// after attach, 62.0-65.0 ms in 18 runs and 62.0-64.4 ms in 10 the next session
/// (62.1-71.7 ms in 8 runs without the tick's kick).
const BURST_P99_MS: f64 = 66.0;
/// On a busy host, ours may be this multiple of the kernel's p99 measured in the same boot
/// (`scenarios::KERNEL_REF`): a sustained host load put the kernel's at 79.6-80.8 ms, ours
/// at 77.2-81.0, the slow burns being 60 ms plus one 20 ms stall for both.
const KERNEL_P99_FACTOR: f64 = 1.05;
/// How long the group idles before the bursty workload starts (see bursty()).
const BURSTY_SETTLE: Duration = Duration::from_secs(2);
/// Long enough for 100+ burns per thread: the nearest-rank p99 of fewer than 100 burns is
/// the slowest one.
const BURSTY_S: u64 = 20;
/// The limit of both bursty scenarios (burst_latency adds a burst): 1 CPU.
const BURSTY_QUOTA_US: u64 = 100_000;
const BURSTY_PERIOD_US: u64 = 100_000;
/// The interval of the group's usage series (`usage_ms_per_100ms`), the figure keys' 100 ms.
const USAGE_INTERVAL: Duration = Duration::from_millis(100);

/// Two threads burning 60 ms of CPU then sleeping 140 ms for 20 s: 0.6 CPU on average,
/// 1.2 CPUs while both burn. Under a strict 1-CPU quota the peaks are throttled: the
/// first burns, which start together, exceed 66 ms and the group shows throttled periods
/// (see below for the later ones). With a 100 ms
/// burst the unused quota of the quiet periods covers the peaks: no throttled period, no
/// task ever parked, and p99 <= BURST_P99_MS. With the scheduler, its statistics are
/// checked too: usage against cgroupfs (±5 %), and the used-based burst figures. For
/// tests/bench's pictures it prints every burn (`burns_ms`) and, strict, the group's usage in each
/// 100 ms (`usage_ms_per_100ms`) beside the limit's share of 100 ms (`limit_ms_per_100ms`).
fn bursty(ctx: &mut Ctx, burst: bool) -> Result<(), String> {
    // The group exists and is idle for a few periods first, so its pool holds what an
    // idle group has accumulated (quota + burst), as for a service between requests.
    // 2 s: past the scheduler's start-up, whose first statistics table (cold code: 3-5 ms
    // of CPU in one piece under TCG, about 1 ms later on) otherwise meets the first
    // burns; what is measured is the steady state.
    sleep(BURSTY_SETTLE);
    let w = Workload {
        cgroup: "t/a",
        work: Work::Duty { threads: 2, burn_ms: 60, sleep_ms: 140 },
        pin: None,
    };
    let span = StatsSpan::start(ctx, "t/a")?;
    let threads0 = crate::sched::all_threads();
    // ~196 burns: the nearest-rank p99 is the second slowest, one outlier alone (TCG)
    // does not decide it.
    let idx = ctx.spawn(&w, BURSTY_S)?;
    // Only where throttling is to be seen (the strict case): a sampler is one more task
    // waking every 100 ms beside the burns whose latency burst_latency checks.
    let usage = (!burst).then(|| UsageSeries::start("t/a"));
    ctx.check_on_scx(idx);
    let st = ctx.wait_workload(idx, Duration::from_secs(BURSTY_S + 20))?;
    if st.code() != Some(0) {
        return Err(format!("duty workload {}", crate::sched::describe(st)));
    }
    let usage = usage.map(UsageSeries::finish).transpose()?;
    ctx.figure("busiest_others", busiest_threads(&threads0, 4));
    let d = crate::output::parse_duty(&ctx.output(idx)).ok_or("no DUTY line from the workload")?;
    ctx.figure("burns", d.burns);
    ctx.figure("p50_ms", format!("{:.1}", d.p50_ms));
    ctx.figure("p99_ms", format!("{:.1}", d.p99_ms));
    ctx.figure("max_ms", format!("{:.1}", d.max_ms));
    ctx.figure("first_ms", format!("{:.1}", d.first_ms));
    ctx.figure("slowest", &d.slowest);
    let burns = crate::output::parse_duty_burns(&ctx.output(idx)).ok_or("no DUTY_BURNS line from the workload")?;
    ctx.figure("burns_ms", tenths(burns.iter().copied()));
    if let Some(usage) = usage {
        ctx.figure("usage_ms_per_100ms", tenths(usage.iter().map(|&us| us as f64 / 1e3)));
        let limit_ms = BURSTY_QUOTA_US as f64 / BURSTY_PERIOD_US as f64 * USAGE_INTERVAL.as_secs_f64() * 1e3;
        ctx.figure("limit_ms_per_100ms", format!("{limit_ms:.1}"));
    }
    if d.burns < 180 {
        ctx.fail(format!("only {} burns in {BURSTY_S} s", d.burns));
    }
    // With --kernel-ref (a retry on a busy host) the kernel's p99 in this boot moves the
    // bound: at most KERNEL_P99_FACTOR of it, the goal of the burst sweep (tests/bench).
    let kernel_p99 = ctx.kernel_f64("p99_ms");
    let bound = kernel_p99.map_or(BURST_P99_MS, |k| BURST_P99_MS.max(k * KERNEL_P99_FACTOR));
    if burst && d.p99_ms > bound {
        let kernel = kernel_p99.map_or(String::new(), |k| format!(" (the kernel's in this boot {k:.1} ms)"));
        ctx.fail(format!("p99 burn {:.1} ms with a burst, above {bound:.1} ms{kernel}", d.p99_ms));
    }
    // Strict: the first burns of the two threads start together on an idle group, whose
    // period the agent restarts at that first pull: 120 ms wanted of a 100 ms quota, the
    // pool is dry after about 50 ms and both wait for the refill, about 50 ms more. That is
    // checked (with the scheduler; the kernel's period grid keeps its old phase). Later burns
    // are delayed only when they overlap early in a period: the phase of the 200 ms cycle
    // drifts by what each cycle takes beyond it, and a run may never bring it there (the
    // slowest of the 196 measured 64.9 ms in one CI run, 101-116 ms in 17 others), so the
    // p99 and the slowest are printed, not checked.
    if !burst && ctx.has_sched() && d.first_ms <= 66.0 {
        ctx.fail(format!("first burns {:.1} ms: no visible throttling", d.first_ms));
    }
    let Some(span) = span else { return Ok(()) };
    let s = span.finish(ctx)?;
    if burst {
        if s.nr_throttled != 0.0 || s.nr_parked != 0.0 {
            ctx.fail(format!("with a burst: {} throttled periods, {} tasks parked", s.nr_throttled, s.nr_parked));
        }
        // Both burns of a cycle fall in one period: 120 ms used of a 100 ms quota.
        if s.used_nr_bursts == 0.0 {
            ctx.fail("no period used more than quota although the burst was used");
        }
    } else if s.nr_throttled == 0.0 {
        ctx.fail("no throttled period under a strict quota");
    }
    Ok(())
}

/// Values to 0.1 as one figure, `a,b,..` (a figure's value has no spaces).
fn tenths(values: impl Iterator<Item = f64>) -> String {
    values.map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(",")
}

/// A group's CPU time (cgroupfs `usage_usec`) in each USAGE_INTERVAL of wall time
/// (CLOCK_MONOTONIC, absolute deadlines), from a thread, until finish(): what the group got
/// period by period, the same measure under either enforcer. The interval is as long as the
/// limit's period but not in phase with either enforcer's periods (nor is the kernel's in
/// phase with ours), so an interval straddling two periods can hold more than one quota.
struct UsageSeries {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Vec<u64>, String>>>,
}

impl UsageSeries {
    fn start(cgroup: &'static str) -> UsageSeries {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // SCHED_FIFO like the agent, so the samples are on time while both of the
            // group's threads burn (a normal thread would wait for a CPU, differently under
            // either enforcer); each takes a CPU from them only for one read of cpu.stat.
            crate::workload::fifo_self()?;
            let step = USAGE_INTERVAL.as_nanos() as u64;
            let mut next = crate::workload::mono_ns();
            let mut last = crate::cgroup::read_usage_usec(cgroup)?;
            let mut per = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                next += step;
                crate::workload::sleep_until_mono(next);
                let now = crate::cgroup::read_usage_usec(cgroup)?;
                per.push(now.saturating_sub(last));
                last = now;
            }
            Ok(per)
        });
        UsageSeries { stop, thread: Some(thread) }
    }

    /// The usage of every interval until now (µs), the last one ending after this call.
    fn finish(mut self) -> Result<Vec<u64>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("finish is called once");
        thread.join().map_err(|_| "usage sampler panicked".to_string())?
    }
}

impl Drop for UsageSeries {
    /// A scenario that returns early must not leave the thread reading a cgroup the runner
    /// is about to remove; it ends at its next sample.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The `n` threads (other than the workload's, which have exited) that used the most CPU
/// since `before` was taken, as name[tid]:ms/times run: what the workload competed with.
fn busiest_threads(before: &std::collections::BTreeMap<(u32, u32), (String, u64, u64)>, n: usize) -> String {
    let mut used: Vec<(u64, String)> = crate::sched::all_threads()
        .into_iter()
        .map(|(key, (name, run, runs))| {
            let (run0, runs0) = before.get(&key).map(|b| (b.1, b.2)).unwrap_or_default();
            let ns = run.saturating_sub(run0);
            (ns, format!("{name}[{}]:{:.1}ms/{}", key.1, ns as f64 / 1e6, runs.saturating_sub(runs0)))
        })
        .collect();
    used.sort_by(|a, b| b.0.cmp(&a.0));
    used.into_iter().take(n).map(|u| u.1).collect::<Vec<_>>().join(",")
}

fn bursty_strict(ctx: &mut Ctx) -> Result<(), String> {
    bursty(ctx, false)
}

fn bursty_burst(ctx: &mut Ctx) -> Result<(), String> {
    bursty(ctx, true)
}

/// The scheduler's statistics of one group over a span of a scenario, next to the usage
/// cgroupfs measured over the same span.
struct StatsSpan {
    cgroup: &'static str,
    before: serde_json::Value,
    usage0: u64,
    /// CPU ns and times run of the scheduler's (agent's) threads at the start, by name.
    agent0: std::collections::BTreeMap<String, (u64, u64)>,
}

/// Deltas of a [`StatsSpan`].
struct SpanFigures {
    nr_throttled: f64,
    nr_parked: f64,
    used_nr_bursts: f64,
}

impl StatsSpan {
    /// None in --cfs mode (no scheduler, no statistics).
    fn start(ctx: &Ctx, cgroup: &'static str) -> Result<Option<StatsSpan>, String> {
        if !ctx.has_sched() {
            return Ok(None);
        }
        Ok(Some(StatsSpan {
            cgroup,
            before: crate::stats::fetch()?,
            usage0: crate::cgroup::read_usage_usec(cgroup)?,
            agent0: ctx.sched_pid().map(crate::sched::threads_by_name).unwrap_or_default(),
        }))
    }

    /// Prints the group's figures over the span (prefix "st.") and checks the
    /// scheduler's usage against cgroupfs (±5 %).
    fn finish(self, ctx: &mut Ctx) -> Result<SpanFigures, String> {
        let span = self;
        let after = crate::stats::fetch()?;
        let cg_usage = (crate::cgroup::read_usage_usec(span.cgroup)? - span.usage0) as f64;
        let d = |f: &str| crate::stats::group_delta(&span.before, &after, span.cgroup, f);
        let usage = d("usage_usec")?;
        for f in ["nr_periods", "nr_throttled", "nr_parked", "nr_bursts", "used_nr_bursts"] {
            ctx.figure(format!("st.{f}"), d(f)?);
        }
        for f in ["throttled_usec", "burst_usec", "used_burst_usec"] {
            ctx.figure(format!("st.{}", f.replace("_usec", "_ms")), format!("{:.1}", d(f)? / 1e3));
        }
        // The agent's CPU time and wakeups over the span (its statistics request at
        // either end included), and by thread: which of them competes with the workload.
        if let Some(now) = ctx.sched_pid().map(crate::sched::threads_by_name) {
            let per: Vec<(String, u64, u64)> = now
                .iter()
                .map(|(name, &(run, runs))| {
                    let (run0, runs0) = span.agent0.get(name).copied().unwrap_or_default();
                    (name.clone(), run.saturating_sub(run0), runs.saturating_sub(runs0))
                })
                .collect();
            ctx.figure("agent_cpu_ms", format!("{:.1}", per.iter().map(|p| p.1).sum::<u64>() as f64 / 1e6));
            let threads: Vec<String> =
                per.iter().map(|(n, run, runs)| format!("{n}:{:.1}ms/{runs}", *run as f64 / 1e6)).collect();
            ctx.figure("agent_threads", threads.join(","));
        }
        // Work conservation: idle CPUs a tick found beside a waiting task, and CPUs
        // taken by a higher class (the agent) whose queued tasks were sent back
        // through enqueue.
        for k in ["idle_nudges", "reenqueued"] {
            ctx.figure(k, crate::stats::delta(&span.before, &after, k)?);
        }
        let ratio = usage / cg_usage.max(1.0);
        ctx.figure("st.usage_vs_cgroupfs", format!("{ratio:.3}"));
        // The busiest of the last periods (scheduler's per-period usage), for diagnosis.
        let peak = crate::stats::group(&after, span.cgroup)?["history_usec"]
            .as_array()
            .and_then(|h| h.iter().filter_map(|v| v.as_u64()).max())
            .unwrap_or(0);
        ctx.figure("st.peak_period_ms", format!("{:.1}", peak as f64 / 1e3));
        if (ratio - 1.0).abs() > 0.05 {
            ctx.fail(format!(
                "scheduler usage {:.1} ms vs cgroupfs {:.1} ms: off by more than 5 %",
                usage / 1e3,
                cg_usage / 1e3
            ));
        }
        Ok(SpanFigures {
            nr_throttled: d("nr_throttled")?,
            nr_parked: d("nr_parked")?,
            used_nr_bursts: d("used_nr_bursts")?,
        })
    }
}

/// A group that never uses more than its quota in any period (2 threads burning 20 ms
/// every 100 ms: at most 40 ms, plus charging lag, of a 60 ms quota; the busiest period
/// measured up to 54 ms with 22 ms burns) must show no used-based burst and no throttling.
/// The kernel-defined nr_bursts counts runtime handed to CPUs in slices and is printed
/// beside it.
///
/// On a busy host that premise fails on its own: under TCG a vCPU the host does not run
/// charges the task on it for the stall, and what a burn cycle costs besides the burn
/// (waking up, two schedstat reads) is not bounded by the burn. With a host thread taking
/// each host CPU 20 ms of every 100, periods of 62-64 ms came from this workload in most
/// runs while the agent's refills were on time (within 1.3 ms), and the kernel's CFS
/// counted such periods too. So the cgroup's own usage (cpu.stat, the kernel's accounting)
/// is sampled every 5 ms over the span, and each used-based burst must have a period-long
/// window (100-110 ms between samples, which covers any period) in which the cgroup used
/// more than the quota: on a quiet host there is none, and a burst fails at once.
fn under_quota(ctx: &mut Ctx) -> Result<(), String> {
    const QUOTA_US: u64 = 60_000;
    let w = Workload {
        cgroup: "t/a",
        work: Work::Duty { threads: 2, burn_ms: 20, sleep_ms: 80 },
        pin: None,
    };
    let idx = ctx.spawn(&w, 8)?;
    ctx.check_on_scx(idx);
    // The workload's start and exit (process set-up, thread creation) are not part of
    // its steady use: the span covers 5 s in between.
    sleep(crate::runner::WARMUP);
    // Under the kernel's CFS (--cfs, or the kernel reference): its own count of periods
    // that drew runtime beyond the quota, over the same span.
    let kernel0 = (!ctx.has_sched()).then(|| crate::cgroup::read_stat("t/a", "nr_bursts")).transpose()?;
    let span = StatsSpan::start(ctx, "t/a")?;
    let samples = sample_usage("t/a", Duration::from_secs(5), Duration::from_millis(5))?;
    let running = ctx.exited_works(idx).is_empty();
    let figures = span.map(|s| s.finish(ctx)).transpose()?;
    if let Some(b0) = kernel0 {
        ctx.figure("cg.nr_bursts", crate::cgroup::read_stat("t/a", "nr_bursts")?.saturating_sub(b0));
    }
    let (real, peak_us) = windows_over(&samples, Duration::from_millis(100), Duration::from_millis(110), QUOTA_US);
    ctx.figure("cg.windows_over_quota", real);
    ctx.figure("cg.peak_window_ms", format!("{:.1}", peak_us as f64 / 1e3));
    if !running {
        return Err("duty workload ended before the measurement did".into());
    }
    let st = ctx.wait_workload(idx, Duration::from_secs(30))?;
    if st.code() != Some(0) {
        return Err(format!("duty workload {}", crate::sched::describe(st)));
    }
    let Some(s) = figures else { return Ok(()) };
    if s.used_nr_bursts > real as f64 {
        ctx.fail(format!(
            "{} used-based bursts for a group under its quota; its cgroup used more than the quota in {real} period-long windows (busiest {:.1} ms)",
            s.used_nr_bursts,
            peak_us as f64 / 1e3
        ));
    }
    if s.nr_throttled != 0.0 {
        ctx.fail(format!("{} throttled periods for a group under its quota", s.nr_throttled));
    }
    Ok(())
}

/// The cgroup's usage (µs) every `every` for `span`, with the CLOCK_MONOTONIC ns of each read.
fn sample_usage(cgroup: &str, span: Duration, every: Duration) -> Result<Vec<(u64, u64)>, String> {
    let start = crate::workload::mono_ns();
    let end = start + span.as_nanos() as u64;
    let mut v = Vec::with_capacity((span.as_nanos() / every.as_nanos().max(1)) as usize + 1);
    loop {
        let t = crate::workload::mono_ns();
        v.push((t, crate::cgroup::read_usage_usec(cgroup)?));
        if t >= end {
            return Ok(v);
        }
        crate::workload::sleep_until_mono(t + every.as_nanos() as u64);
    }
}

/// In `samples` (time ns, usage µs): how many disjoint windows between two samples `min` to
/// `max` apart used more than `limit_us`, taken earliest first, and the most any window of
/// that length used.
fn windows_over(samples: &[(u64, u64)], min: Duration, max: Duration, limit_us: u64) -> (u64, u64) {
    let (min, max) = (min.as_nanos() as u64, max.as_nanos() as u64);
    // Each sample's windows: (index of the end sample, usage in between).
    let windows = |i: usize| {
        let (t0, u0) = samples[i];
        samples[i + 1..]
            .iter()
            .enumerate()
            .take_while(move |(_, &(t, _))| t - t0 < max)
            .filter(move |(_, &(t, _))| t - t0 >= min)
            .map(move |(j, &(_, u))| (i + 1 + j, u.saturating_sub(u0)))
    };
    let peak = (0..samples.len()).flat_map(windows).map(|(_, used)| used).max().unwrap_or(0);
    let (mut count, mut i) = (0, 0);
    while i < samples.len() {
        match windows(i).find(|&(_, used)| used > limit_us) {
            Some((j, _)) => {
                count += 1;
                i = j;
            }
            None => i += 1,
        }
    }
    (count, peak)
}

/// Slack return: one 1-CPU group (400 ms per 400 ms), a hog A pinned to CPU 0 and B pinned
/// to CPU 1 burning 400 ms then sleeping 400 ms, measured over 12 s, first with slack
/// return, then with --no-slack-return. The group stays at its cap within ±1 % both ways
/// over the 30 whole periods (the scheduler's per-period usage, which must agree with
/// cgroupfs over the window within 1 %); the cgroupfs window itself cuts two periods in
/// the middle, where this workload's use is uneven (2 CPUs, then none, or 1 CPU
/// throughout), so it gets ±3 %. With slack return on, CPUs gave runtime back (never
/// below the 1 ms floor: at most slice - 1 ms per return), with it off none; A does not
/// get less with it on, beyond the noise of two separate 12 s runs (A's share varied
/// 0.638-0.665 between runs in either mode; the difference was -0.021..+0.015 over 12 runs),
/// so the bound is 4 %.
///
/// A does not get measurably more either: local runtime does not expire (in the kernel
/// since 5.4 either), so what B's CPU keeps while B sleeps is spent by B when it wakes,
/// leaving that much more of the pool to A then. Slack return moves A's share earlier;
/// over whole periods it is the same. `a_gain` prints the difference.
fn slack(ctx: &mut Ctx) -> Result<(), String> {
    const WINDOW: Duration = Duration::from_secs(12);
    let mut a_cpus = [0.0; 2];
    for (i, mode) in ["on", "off"].into_iter().enumerate() {
        if mode == "off" {
            ctx.stop_sched()?;
            ctx.start_sched(&["--no-slack-return"])?;
        }
        let first = ctx.nr_workloads();
        let hog = Workload { cgroup: "t/a/x", work: Work::Hog { threads: 1 }, pin: Some(0) };
        let duty = Workload {
            cgroup: "t/a/y",
            work: Work::Duty { threads: 1, burn_ms: 400, sleep_ms: 400 },
            pin: Some(1),
        };
        ctx.spawn(&hog, 60)?;
        ctx.spawn(&duty, 60)?;
        ctx.check_on_scx(first);
        sleep(crate::runner::WARMUP);
        let before = crate::stats::fetch()?;
        let usage0 = crate::cgroup::read_usage_usec("t/a")?;
        let u = ctx.measure(&["t/a", "t/a/x", "t/a/y"], WINDOW)?;
        let after = crate::stats::fetch()?;
        let cg_usage = (crate::cgroup::read_usage_usec("t/a")? - usage0) as f64;
        for e in ctx.exited_works(first) {
            ctx.fail(e);
        }
        ctx.kill_works(first);
        let key = |f: &str| format!("{mode}.{f}");
        ctx.figure(key("group_cpus"), format!("{:.3}", u[0]));
        ctx.figure(key("a_cpus"), format!("{:.3}", u[1]));
        ctx.figure(key("b_cpus"), format!("{:.3}", u[2]));
        a_cpus[i] = u[1];
        let returned = crate::stats::group_delta(&before, &after, "t/a", "slack_returned_usec")?;
        let returns = crate::stats::group_delta(&before, &after, "t/a", "nr_slack_returns")?;
        ctx.figure(key("slack_ms"), format!("{:.1}", returned / 1e3));
        ctx.figure(key("slack_returns"), returns);
        let periods = (WINDOW.as_millis() / 400) as usize;
        let history: Vec<f64> = crate::stats::group(&after, "t/a")?["history_usec"]
            .as_array()
            .map(|h| h.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default();
        if history.len() < periods {
            return Err(format!("only {} periods of history", history.len()));
        }
        let per_period = history[history.len() - periods..].iter().sum::<f64>() / (periods as f64 * 400_000.0);
        let sched_usage = crate::stats::group_delta(&before, &after, "t/a", "usage_usec")?;
        ctx.figure(key("periods_ratio"), format!("{per_period:.3}"));
        ctx.figure(key("usage_vs_cgroupfs"), format!("{:.3}", sched_usage / cg_usage));
        if (per_period - 1.0).abs() > 0.01 {
            ctx.fail(format!("slack {mode}: group used {per_period:.3} of its cap over {periods} periods, ±1 %"));
        }
        if (sched_usage / cg_usage - 1.0).abs() > 0.01 {
            ctx.fail(format!("slack {mode}: scheduler usage {sched_usage} µs vs cgroupfs {cg_usage} µs"));
        }
        if (u[0] - 1.0).abs() > 0.03 {
            ctx.fail(format!("slack {mode}: group used {:.3} CPUs over the window, cap 1 ±3 %", u[0]));
        }
        match mode {
            "on" if returns == 0.0 => ctx.fail("slack on: no runtime returned"),
            // Each return keeps 1 ms of at most one 5 ms slice on the CPU.
            "on" if returned / returns > 4_000.0 => {
                ctx.fail(format!("slack on: {:.0} µs per return, above slice - 1 ms", returned / returns))
            }
            "off" if returns != 0.0 => ctx.fail(format!("--no-slack-return: {returns} returns")),
            _ => {}
        }
    }
    ctx.figure("a_gain", format!("{:.3}", a_cpus[0] - a_cpus[1]));
    if a_cpus[0] < a_cpus[1] * 0.96 {
        ctx.fail(format!("A got {:.3} CPUs with slack return, {:.3} without", a_cpus[0], a_cpus[1]));
    }
    Ok(())
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "small_quota",
            about: "fork storm in a 5ms/100ms group (quota = one slice) beside 4 unlimited hogs: usage within ±5 % of the limit, at most 1 % of its quota discarded by refills while throttled",
            needs_sched: false,
            limits: vec![lim("t/q", SMALL_QUOTA_US, SMALL_PERIOD_US)],
            cgroups: vec!["t/q", "t/bg"],
            body: Body::Custom(small_quota),
        },
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
            "100ms/100ms, no burst, 2 threads burning 60ms every 200ms: throttled, first burns > 66ms",
            false,
            lim("t/a", BURSTY_QUOTA_US, BURSTY_PERIOD_US),
            bursty_strict,
        ),
        custom(
            "burst_latency",
            "100ms/100ms + 100ms burst, 2 threads burning 60ms every 200ms: never throttled, p99 burn <= 66ms",
            false,
            Limit { burst_us: 100_000, ..lim("t/a", BURSTY_QUOTA_US, BURSTY_PERIOD_US) },
            bursty_burst,
        ),
        custom(
            "under_quota",
            "60ms/100ms + 60ms burst, 2 threads burning 20ms every 100ms: used_nr_bursts == 0",
            false,
            Limit { burst_us: 60_000, ..lim("t/a", 60_000, 100_000) },
            under_quota,
        ),
        Scenario {
            name: "slack",
            about: "400ms/400ms, hog on CPU 0 + 400ms-on/400ms-off on CPU 1: group at cap ±1% with and without slack return",
            needs_sched: true,
            limits: vec![lim("t/a", 400_000, 400_000)],
            cgroups: vec!["t/a/x", "t/a/y"],
            body: Body::Custom(slack),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 10 ms of a cgroup using 40 % of a CPU, and 70 % from 300 to 400 ms.
    fn samples(burst: bool) -> Vec<(u64, u64)> {
        let mut u = 0;
        (0..=100u64)
            .map(|k| {
                let t = k * 10;
                let s = (t * 1_000_000, u);
                u += if burst && (300..400).contains(&t) { 7_000 } else { 4_000 };
                s
            })
            .collect()
    }

    #[test]
    fn windows_over_quota() {
        let (min, max) = (Duration::from_millis(100), Duration::from_millis(110));
        assert_eq!(windows_over(&samples(false), min, max, 60_000), (0, 40_000));
        // The first window over 60 ms starts at 270 ms (12 + 49 ms); the next ones overlap it.
        assert_eq!(windows_over(&samples(true), min, max, 60_000), (1, 70_000));
        assert_eq!(windows_over(&samples(true), min, max, 70_000), (0, 70_000));
        assert_eq!(windows_over(&[], min, max, 1), (0, 0));
    }
}
