//! Reliability: enforcement that holds when things go wrong or get hard. The agent stopped
//! (the BPF safety net refills), tasks starving under a tiny quota (rescued before the
//! sched_ext watchdog ejects the scheduler), a minute of mixed stress (periods 1 ms-1 s,
//! nesting, a fork storm, moves), an RT thread taking a CPU, and cgroup moves that a
//! throttled fork storm must not hold up, and a thread waking beside its throttled
//! siblings. A scheduler of every task that stalls, is
//! ejected, or parks a task holding a lock the kernel needs harms the whole machine.

use super::{custom, end_fork_storm, hog, lim, measure_ratio, Body, Scenario, Work, Workload};
use super::stress::{stress, stress_limits};
use crate::runner::Ctx;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Least share of a CPU the busy thread of `rt_neighbour` must get.
const RT_HOG_MIN: f64 = 0.95;
/// A stretch this long without running is the busy thread of `rt_neighbour` waiting out
/// a whole RT burn (50 ms) on the CPU the RT thread took; the agent, also SCHED_FIFO,
/// runs up to about 12 ms at a time, and with both CPUs taken no task can run.
const RT_STUCK_MS: f64 = 40.0;
/// Such waits tolerated in one run (see `rt_neighbour`).
const RT_STUCK_ALLOWED: usize = 1;
/// A wait counts as stuck when the other CPUs were free (idle, or running a task of no
/// RT or deadline class) for at least this long in it: the busy thread could have run.
const RT_FREE_MS: f64 = 10.0;
/// The CPU `rt_neighbour`'s RT thread is pinned to.
const RT_CPU: u32 = 1;

/// What the CPUs other than the RT thread's ran during one wait of the busy thread.
#[derive(Default)]
struct HeldBy {
    /// Idle, or running a task of the fair class (not the busy thread's process).
    free_ns: u64,
    /// The busy thread's own process, recorded as running: its vCPU stalled, not a wait.
    own_ns: u64,
    /// RT and deadline tasks: (comm, pid, prio) → ns.
    rt: std::collections::BTreeMap<(String, u32, i32), u64>,
}

impl HeldBy {
    fn add(&mut self, pid: u32, prio: i32, comm: &str, ns: u64, own: &[u32]) {
        if own.contains(&pid) {
            self.own_ns += ns;
        } else if pid != 0 && prio < 100 {
            *self.rt.entry((comm.to_string(), pid, prio)).or_default() += ns;
        } else {
            self.free_ns += ns;
        }
    }

    fn free_ms(&self) -> f64 {
        self.free_ns as f64 / 1e6
    }

    /// "free=F[/own=O][/rt=comm(pid,prio):ms+…]", the RT tasks by time, at most three.
    fn describe(&self) -> String {
        let mut s = format!("free={:.1}", self.free_ms());
        if self.own_ns > 0 {
            s += &format!("/own={:.1}", self.own_ns as f64 / 1e6);
        }
        let mut rt: Vec<_> = self.rt.iter().collect();
        rt.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = rt.iter().take(3).map(|((c, p, q), ns)| format!("{c}({p},{q}):{:.1}", **ns as f64 / 1e6)).collect();
        if !top.is_empty() {
            s += &format!("/rt={}", top.join("+"));
        }
        s
    }
}

/// An RT task that takes a CPU must not hold up the sched_ext task it preempted while the
/// other CPU idles: the kernel leaves that task at the head of the taken CPU's local
/// queue, where no other CPU looks (ops.cpu_release sends it back through enqueue). The
/// scheduler's own agent is such an RT task. A SCHED_FIFO thread pinned to CPU 1 burns
/// 50 ms and sleeps 50 ms; one busy thread of an unlimited group beside it (`gaps`, which
/// reports every stretch it did not run) has CPU 0 free all the time. Checked: it gets at
/// least RT_HOG_MIN of a CPU and waits out a whole burn at most RT_STUCK_ALLOWED times
/// while CPU 0 was free (sched_switch, traced over the run: idle or running a fair-class
/// task for RT_FREE_MS or more of the wait). A wait while an RT task or a stalled vCPU
/// held CPU 0 is printed (`stuck_cpus_held`, and what held it in `long_gaps`), not
/// counted: no CPU was free.
/// Measured 2026-12-01: 0.986-0.993 CPU and one such wait in 3 of 7 runs (`long_gaps`
/// prints each wait over 20 ms with the CPU before and after); with cpu_release doing
/// nothing 0.925-0.936 CPU and 16-18 such waits a run; the kernel's CFS (`--no-sched`,
/// where it passes too) 0.999 CPU, longest wait 7.5 and 9.0 ms. Since a task preempted by
/// a foreign RT task waits at the front of its LLC's queue (not its CPU's): 0.990-0.995 CPU
/// and no such wait in 4 runs (2026-12-05); with the trace, one such wait in 3 of 25
/// runs, CPU 0 idle through each (51.1-51.5 ms free of 51.2-51.5), and in the one traced
/// with bpf_printk the task was not sent back through enqueue until the burn ended. The
/// trade-offs: docs/design.md, "Work conservation".
fn rt_neighbour(ctx: &mut Ctx) -> Result<(), String> {
    const WINDOW: Duration = Duration::from_secs(8);
    let secs = (crate::runner::WARMUP + WINDOW).as_secs() + 3;
    let trace = crate::trace::Trace::start(&[crate::trace::SWITCH])?;
    let busy = ctx.spawn(&Workload { cgroup: "t/a", work: Work::Gaps, pin: None }, secs)?;
    ctx.check_on_scx(busy);
    ctx.spawn(&Workload { cgroup: "t/rt", work: Work::RtDuty { burn_ms: 50, sleep_ms: 50 }, pin: Some(RT_CPU) }, secs)?;
    let before = if ctx.has_sched() { Some(crate::stats::fetch()?) } else { None };
    sleep(crate::runner::WARMUP);
    let u = ctx.measure(&["t/a", "t/rt"], WINDOW)?;
    ctx.figure("busy_cpus", format!("{:.3}", u[0]));
    ctx.figure("rt_cpus", format!("{:.3}", u[1]));
    if let Some(before) = before {
        let after = crate::stats::fetch()?;
        ctx.figure("reenqueued", crate::stats::delta(&before, &after, "reenqueued")?);
    }
    let own: Vec<u32> = ctx.workload_pid(busy).map(crate::sched::threads).unwrap_or_default();
    let st = ctx.wait_workload(busy, Duration::from_secs(30))?;
    let switches = crate::trace::switches(&trace.stop()?);
    if !st.success() {
        return Err(format!("gaps workload: {}", crate::sched::describe(st)));
    }
    let out = ctx.output(busy);
    let gaps = crate::output::parse_gaps(&out);
    let ms = |g: &crate::output::Gap| g.len_ns as f64 / 1e6;
    // What the CPUs the RT thread leaves alone did during each long wait (sched_switch).
    let others: std::collections::BTreeSet<usize> = switches.iter().map(|s| s.cpu).filter(|c| *c != RT_CPU as usize).collect();
    let during = |g: &crate::output::Gap| {
        let mut held = HeldBy::default();
        for &cpu in &others {
            for (pid, (prio, comm, ns)) in crate::trace::cpu_time(&switches, cpu, g.end_ns - g.len_ns, g.end_ns) {
                held.add(pid, prio, &comm, ns, &own);
            }
        }
        held
    };
    let long: Vec<(&crate::output::Gap, HeldBy)> = gaps.iter().filter(|g| ms(g) >= RT_STUCK_MS / 2.0).map(|g| (g, during(g))).collect();
    let stuck = long.iter().filter(|(g, h)| ms(g) >= RT_STUCK_MS && h.free_ms() >= RT_FREE_MS).count();
    let held = long.iter().filter(|(g, h)| ms(g) >= RT_STUCK_MS && h.free_ms() < RT_FREE_MS).count();
    // Where the long waits were (on the RT thread's CPU throughout is 1>1) and what the
    // other CPUs did meanwhile.
    let text: Vec<String> = long.iter().map(|(g, h)| format!("{:.1}@cpu={}:{}", ms(g), g.cpus, h.describe())).collect();
    ctx.figure("long_gaps", format!("[{}]", text.join(",")));
    ctx.figure("gaps_over_2ms", gaps.len());
    ctx.figure("stuck", stuck);
    ctx.figure("stuck_cpus_held", held);
    ctx.figure("gap_max_ms", format!("{:.1}", gaps.iter().map(ms).fold(0.0, f64::max)));
    if u[1] < 0.25 {
        ctx.fail(format!("the RT thread got {:.3} CPUs, not the ~0.5 it asks for: nothing was tested", u[1]));
    }
    if u[0] < RT_HOG_MIN {
        ctx.fail(format!("the busy thread got {:.3} CPUs beside an RT thread on the other CPU, min {RT_HOG_MIN}", u[0]));
    }
    if stuck > RT_STUCK_ALLOWED {
        ctx.fail(format!("the busy thread went {stuck} times {RT_STUCK_MS} ms or more without running while a CPU was free (allowed {RT_STUCK_ALLOWED})"));
    }
    Ok(())
}

/// Longest a cgroup move may wait in `move_latency`: 0.4 of the group's 250 ms period, five
/// times the longest seen under the kernel's CFS.
const MOVE_MAX_MS: f64 = 100.0;
/// Moves that may wait longer in one run (see `move_latency`).
const MOVE_STALLS_ALLOWED: usize = 1;

/// The limit of `move_latency`'s forking group.
const MOVE_QUOTA_US: u64 = 5_000;
const MOVE_PERIOD_US: u64 = 250_000;

/// Cgroup moves are not held up by throttling. A move (a write to cgroup.procs) takes
/// cgroup_threadgroup_rwsem for writing, which every fork holds for reading, and waits for
/// an RCU grace period; a task of a throttled group parked inside fork, inside an RCU
/// read-side section, or inside a page fault that a sibling's fork waits for, holds it up
/// until its group's refill (docs/design.md, "Tasks holding the kernel up run on credit").
/// Set-up: a 5 ms / 250 ms group runs 16 threads forking children that exit at once, so it
/// is throttled each period with tasks in the kernel, while a hog in an unlimited cgroup is
/// moved between t/m1 and t/m2 every 20 ms for 10 s. At most MOVE_STALLS_ALLOWED moves may
/// wait over MOVE_MAX_MS, none over 1.5 periods, and the fork storm must end within 30 s.
/// A move waiting past MOVE_MAX_MS prints what it and the group wait on (StallWatch), and
/// the group's per-CPU local runtime must hold one entry per CPU, none above a slice.
/// Measured 2026-12-01 (TCG): the longest move 16.3-23.9 ms in 13 of 15 runs (three in CI
/// runs), one stalled move in the other 2 (246.4, 250.1 ms: something else still parks
/// holding what a move needs); with `--park-in-kernel` (parking anywhere, as before) 3-5 stalled moves in 3 of
/// 4 runs (up to 731 ms), the fork storm stuck past its end in 2 of 4; the kernel's CFS
/// 19.7 ms. And the group's usage over the 40 periods within one quota plus the most credit
/// may be owed (10 ms) of its limit: 0.983-1.022. Later that day a stalled move in 7 of 47
/// runs, 4 failing (up to 2.0 s: a CPU deep in debt swallowed each refill); since refills
/// pay the debts first and release the tasks parked holding the kernel up ahead of the
/// rest, 1 of 30 (259 ms), none failing, usage 0.962-1.047. On 2026-12-02 CI failed it with
/// 4 stalled moves (236-256 ms), and locally 1-2 stalled moves in 3 of 3 runs: RCU readers
/// parked at the debt bound, forks parked holding the rwsem. Since forks are credited only
/// inside the rwsem section (from cgroup_can_fork), every park checks for credit, RCU
/// readers and tasks a refill released may use the larger bound: no stalled move in 5 of 5
/// runs, the longest 19.5-21.8 ms, usage 1.002-1.043.
fn move_latency(ctx: &mut Ctx) -> Result<(), String> {
    const RUN: Duration = Duration::from_secs(10);
    const QUOTA_US: u64 = MOVE_QUOTA_US;
    const PERIOD_US: u64 = MOVE_PERIOD_US;
    let storm = ctx.spawn(
        &Workload {
            cgroup: "t/q",
            work: Work::Forks { threads: 16 },
            pin: None,
        },
        RUN.as_secs() + 5,
    )?;
    let moved = ctx.spawn(&hog("t/m1", 1), RUN.as_secs() + 8)?;
    ctx.check_on_scx(storm);
    let pid = ctx.workload_pid(moved).ok_or("moved hog gone")?;
    sleep(Duration::from_secs(2));
    let before = if ctx.has_sched() { Some(crate::stats::fetch()?) } else { None };
    let usage0 = crate::cgroup::read_usage_usec("t/q")?;
    let mut lat = Vec::new();
    let watch = StallWatch::start(MOVE_MAX_MS, "t/q");
    let start = Instant::now();
    let end = start + RUN;
    while Instant::now() < end {
        let to = if lat.len() % 2 == 0 { "t/m2" } else { "t/m1" };
        let t = Instant::now();
        watch.begin();
        let res = std::fs::write(crate::cgroup::path(to).join("cgroup.procs"), pid.to_string());
        watch.end();
        res.map_err(|e| format!("move to {to}: {e}"))?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        sleep(Duration::from_millis(20));
    }
    for l in watch.finish() {
        println!("# move_latency: {l}");
    }
    let secs = start.elapsed().as_secs_f64();
    let used = (crate::cgroup::read_usage_usec("t/q")? - usage0) as f64 / 1e6 / secs;
    let ratio = used / (QUOTA_US as f64 / PERIOD_US as f64);
    // One quota of phase, and what the group's CPUs may owe for runs on credit, not yet
    // paid (BW_DEBT_HELD_MAX_NS, 20 ms, the larger of the two bounds).
    let tol = (QUOTA_US as f64 + 20_000.0) / (QUOTA_US as f64 * secs * 1e6 / PERIOD_US as f64);
    ctx.figure("q.ratio", format!("{ratio:.3}"));
    ctx.figure("q.tol", format!("{tol:.3}"));
    if (ratio - 1.0).abs() > tol {
        // What the group's threads wait on, for a run that finds them stuck.
        println!("# move_latency: {}", stall_snapshot(std::process::id() as i32, "t/q", crate::workload::mono_ns()));
        ctx.fail(format!("t/q used {used:.4} CPUs, {ratio:.3} of its limit (tolerance {tol:.3})"));
    }
    lat.sort_by(f64::total_cmp);
    let pct = |q| crate::workload::percentile(&lat, q).unwrap_or(f64::NAN);
    let max = lat.last().copied().unwrap_or(f64::NAN);
    ctx.figure("moves", lat.len());
    ctx.figure("p50_ms", format!("{:.2}", pct(50.0)));
    ctx.figure("p99_ms", format!("{:.2}", pct(99.0)));
    ctx.figure("max_ms", format!("{max:.1}"));
    ctx.figure("over_10ms", lat.iter().filter(|&&l| l > 10.0).count());
    let stalled = lat.iter().filter(|&&l| l > MOVE_MAX_MS).count();
    ctx.figure("stalled", stalled);
    if let Some(before) = before {
        let after = crate::stats::fetch()?;
        for f in ["nr_throttled", "nr_parked"] {
            ctx.figure(f, crate::stats::group_delta(&before, &after, "t/q", f)?);
        }
        for k in ["kernel_credit", "kernel_debt", "kernel_held_first"] {
            ctx.figure(k, crate::stats::delta(&before, &after, k)?);
        }
        // The local runtime each CPU holds: one entry per CPU, never above a slice (a pull
        // tops it up to 5 ms), below 0 by what ran on credit.
        let local: Vec<i64> = crate::stats::group(&after, "t/q")?["local_usec"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
            .unwrap_or_default();
        ctx.figure("local_usec", format!("{local:?}").replace(' ', ""));
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        if local.len() != cpus || local.iter().any(|&us| us > 5_000) {
            ctx.fail(format!("t/q's local_usec {local:?}: want {cpus} entries, none above a slice (5000)"));
        }
    }
    if stalled > MOVE_STALLS_ALLOWED || !(max <= MOVE_PERIOD_US as f64 / 1e3 * 1.5) {
        ctx.fail(format!(
            "{stalled} cgroup moves waited over {MOVE_MAX_MS} ms (at most {MOVE_STALLS_ALLOWED} may), the longest {max:.1} ms (at most 1.5 periods)"
        ));
    }
    // 16 threads share 5 ms every 250 ms: past its end each must get a turn to see it.
    // One CI run found the storm still running 15 s after (no move stalled); parking
    // anywhere left it running in 2 of 4 runs.
    end_fork_storm(ctx, storm, 20, Duration::from_secs(30))
}

/// Watches a thread's blocking operation (a cgroup move) from another thread. The first
/// two times one takes longer than `after_ms` it records what the waiting thread's kernel
/// stack shows, the scheduler's pool and per-CPU local runtimes of `cgroup`, and the state
/// and kernel stack of every thread of `cgroup` that is not sleeping and of every runnable
/// or blocked thread elsewhere, so a failed run shows what the move waited for.
struct StallWatch {
    started_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
}

impl StallWatch {
    fn start(after_ms: f64, cgroup: &'static str) -> Self {
        let started_ns = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        // SAFETY: gettid has no preconditions.
        let waiter = unsafe { libc::gettid() };
        let (s, st) = (started_ns.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut seen = 0;
            while !st.load(Relaxed) && out.len() < 2 {
                sleep(Duration::from_millis(10));
                let at = s.load(Relaxed);
                if at == 0 || at == seen || crate::workload::mono_ns().saturating_sub(at) < (after_ms * 1e6) as u64 {
                    continue;
                }
                seen = at;
                out.push(stall_snapshot(waiter, cgroup, at));
            }
            out
        });
        StallWatch { started_ns, stop, thread }
    }

    fn begin(&self) {
        self.started_ns.store(crate::workload::mono_ns(), Relaxed);
    }

    fn end(&self) {
        self.started_ns.store(0, Relaxed);
    }

    /// Stops watching; the snapshots taken, one line each.
    fn finish(self) -> Vec<String> {
        self.stop.store(true, Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The innermost frames of a thread's kernel stack, innermost first ("a<b<c").
fn kernel_stack(tid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/stack"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|f| f.split('+').next().unwrap_or(f).to_string())
        .take(6)
        .collect::<Vec<_>>()
        .join("<")
}

/// A thread's state letter (R, S, D, ...) from /proc/TID/stat.
fn thread_state(tid: &str) -> String {
    crate::sched::stat_fields(tid).and_then(|f| f.into_iter().next()).unwrap_or_else(|| "?".into())
}

/// One line for StallWatch: `waiter`, `cgroup` and the rest, `since` (mono ns) a wait began.
fn stall_snapshot(waiter: i32, cgroup: &str, since: u64) -> String {
    let waiter = waiter.to_string();
    let mut line = format!(
        "stall at {:.0} ms: mover {} [{}]",
        crate::workload::mono_ns().saturating_sub(since) as f64 / 1e6,
        thread_state(&waiter),
        kernel_stack(&waiter)
    );
    if let Ok(m) = crate::stats::fetch() {
        if let Ok(g) = crate::stats::group(&m, cgroup) {
            line += &format!(" {cgroup}: pool_usec={} local_usec={}", g["pool_usec"], g["local_usec"]);
        }
    }
    let tids = std::fs::read_to_string(crate::cgroup::path(cgroup).join("cgroup.threads")).unwrap_or_default();
    let ours: Vec<&str> = tids.split_whitespace().collect();
    let mut sleeping = 0;
    for &tid in &ours {
        let st = thread_state(tid);
        if st == "S" {
            sleeping += 1;
        } else {
            line += &format!(" | {tid} {st} [{}]", kernel_stack(tid));
        }
    }
    line += &format!(" | {sleeping} more sleeping");
    for (_, tid) in crate::sched::all_tids() {
        let tid = tid.to_string();
        if ours.contains(&tid.as_str()) || tid == waiter {
            continue;
        }
        let st = thread_state(&tid);
        if st == "R" || st == "D" {
            let comm = std::fs::read_to_string(format!("/proc/{tid}/comm")).unwrap_or_default();
            line += &format!(" | elsewhere {tid} {} {st} [{}]", comm.trim(), kernel_stack(&tid));
        }
    }
    line
}

/// 40 busy threads in a group allowed 1 ms per second: one thread runs per period, so a
/// fair rotation alone would leave each waiting about 40 s, past the sched_ext watchdog's
/// 30 s (the scheduler would be ejected) and the kernel's 21 s RCU stall warning. Checked over
/// 40 s: the scheduler stays attached, tasks were rescued, the longest throttle wait is
/// under 6.5 s (a parked task is looked at when its group's refill releases it: rescue
/// after 5 s, at the next refill, 1 s here, then a CPU), and the group's usage stays
/// small: each rescue runs until the next tick at most (≤ 40 × 4 ms per 5 s = 0.032 CPU,
/// plus the quota).
fn rescue(ctx: &mut Ctx) -> Result<(), String> {
    let w = ctx.spawn(&hog("t/a", 40), 60)?;
    ctx.check_on_scx(w);
    let used = ctx.measure(&["t/a"], Duration::from_secs(40))?[0];
    ctx.figure("usage_cpus", format!("{used:.4}"));
    ctx.healthy()?;
    for e in ctx.exited_works(w) {
        ctx.fail(e);
    }
    let m = crate::stats::fetch()?;
    let rescued = crate::stats::num(&m, "rescued")?;
    let g = crate::stats::group(&m, "t/a")?;
    let wait_max_ms = g["wait_max_us"].as_f64().unwrap_or(f64::NAN) / 1e3;
    ctx.figure("rescued", rescued);
    ctx.figure("wait_max_ms", format!("{wait_max_ms:.0}"));
    if rescued < 1.0 {
        ctx.fail("no task was rescued");
    }
    if !(wait_max_ms < 6500.0) {
        ctx.fail(format!("a task waited {wait_max_ms:.0} ms parked"));
    }
    if used > 0.04 {
        ctx.fail(format!("rescues let the group use {used:.4} CPUs (limit 0.001)"));
    }
    ctx.kill_works(w);
    Ok(())
}

/// The agent stops (SIGSTOP) for 3 s while its group is throttled. Without it nobody
/// refills the pool, so the group's tasks would stay parked until it comes back (or the
/// watchdog fires, for a longer stop). The BPF safety net refills a group whose last refill
/// is 3 periods old: the group keeps running at about a third of its limit, never above
/// it, the scheduler stays attached, and after SIGCONT the agent enforces ±2 % again.
fn agent_stall(ctx: &mut Ctx) -> Result<(), String> {
    let w = ctx.spawn(&hog("t/a", 2), 60)?;
    ctx.check_on_scx(w);
    measure_ratio(ctx, "before", "t/a", 0.2, 0.02)?;
    let pid = ctx.sched_pid().ok_or("no scheduler")?;
    crate::sched::signal(pid, libc::SIGSTOP);
    let t = Instant::now();
    sleep(Duration::from_millis(300));
    let stalled = ctx.measure(&["t/a"], Duration::from_secs(2));
    let rest = Duration::from_secs(3).saturating_sub(t.elapsed());
    sleep(rest);
    crate::sched::signal(pid, libc::SIGCONT);
    let stalled = stalled?[0];
    ctx.figure("stalled.usage_cpus", format!("{stalled:.3}"));
    if stalled < 0.2 / 3.0 * 0.5 {
        ctx.fail(format!("agent stopped: the group got {stalled:.3} CPUs, parked without a safety net"));
    }
    if stalled > 0.2 * 1.05 {
        ctx.fail(format!("agent stopped: the group got {stalled:.3} CPUs, above its 0.2 limit"));
    }
    ctx.healthy()?;
    measure_ratio(ctx, "after", "t/a", 0.2, 0.02)?;
    let m = crate::stats::fetch()?;
    let n = crate::stats::num(crate::stats::group(&m, "t/a")?, "nr_safety_refills")?;
    ctx.figure("safety_refills", n);
    if n < 1.0 {
        ctx.fail("no safety-net refill recorded");
    }
    Ok(())
}

/// How long each run of `wake_throttled` and `spawn_throttled` measures.
const WAKE_RUN: Duration = Duration::from_secs(10);
/// Least part of the kernel's count of burns the waking (or new) thread must finish under
/// ours.
const WAKE_BURNS_MIN: f64 = 0.8;
/// How much longer than the kernel's slowest burn ours may take (ms): two periods of t/a.
const WAKE_SLOWEST_SLACK_MS: f64 = 200.0;

/// One run of `wake_throttled` or `spawn_throttled` under whichever scheduler is in charge:
/// the DUTY figures of `work`, run in t/a beside 2 hogs.
fn wake_once(ctx: &mut Ctx, work: &Work) -> Result<crate::output::DutyStats, String> {
    let secs = (crate::runner::WARMUP + WAKE_RUN).as_secs();
    let first = ctx.spawn(&hog("t/a", 2), secs + 2)?;
    ctx.spawn(&hog("t/b", 1), secs + 2)?;
    let duty = ctx.spawn(&Workload { cgroup: "t/a", work: work.clone(), pin: None }, secs)?;
    if ctx.has_sched() {
        ctx.check_on_scx(first);
    }
    let st = ctx.wait_workload(duty, Duration::from_secs(secs + 20))?;
    if st.code() != Some(0) {
        return Err(format!("duty workload {}", crate::sched::describe(st)));
    }
    ctx.kill_works(first);
    crate::output::parse_duty(&ctx.output(duty)).ok_or_else(|| "no DUTY line from the duty workload".to_string())
}

/// A thread getting its turn in a throttled group beside its busy siblings. t/a (cpu.max
/// 20 ms every 100 ms) runs 2 hogs and `work`, 2 ms of CPU every 50 ms; t/b runs an
/// unlimited hog, so the queue's vtime runs far ahead of t/a's throttled tasks. Under the
/// kernel's scheduler first, then ours, in the same boot. Checked for ours: at least
/// WAKE_BURNS_MIN of the kernel's count of burns, the slowest at most WAKE_SLOWEST_SLACK_MS
/// longer than the kernel's, and no task rescued. `who` names the thread in the verdict.
fn turn_in_throttled(ctx: &mut Ctx, work: Work, who: &str) -> Result<(), String> {
    crate::cgroup::write_cpu_max("t/a", 20_000, 100_000)?;
    let attached = ctx.has_sched();
    if attached {
        ctx.stop_sched()?;
    }
    let k = wake_once(ctx, &work)?;
    ctx.figure("kernel.burns", k.burns);
    ctx.figure("kernel.p99_ms", format!("{:.1}", k.p99_ms));
    ctx.figure("kernel.max_ms", format!("{:.1}", k.max_ms));
    if !attached {
        return Ok(());
    }
    ctx.start_sched(&[])?;
    let before = crate::stats::fetch()?;
    let o = wake_once(ctx, &work)?;
    ctx.healthy()?;
    let after = crate::stats::fetch()?;
    let rescued = crate::stats::delta(&before, &after, "rescued")?;
    ctx.figure("burns", o.burns);
    ctx.figure("p99_ms", format!("{:.1}", o.p99_ms));
    ctx.figure("max_ms", format!("{:.1}", o.max_ms));
    ctx.figure("rescued", rescued);
    if (o.burns as f64) < WAKE_BURNS_MIN * k.burns as f64 {
        ctx.fail(format!("the {who} finished {} burns, under the kernel's scheduler {} (min {WAKE_BURNS_MIN} of it)", o.burns, k.burns));
    }
    if o.max_ms > k.max_ms + WAKE_SLOWEST_SLACK_MS {
        ctx.fail(format!("the {who}'s slowest 2 ms burn took {:.1} ms, under the kernel's scheduler {:.1} ms (allowed {WAKE_SLOWEST_SLACK_MS} ms more)", o.max_ms, k.max_ms));
    }
    if rescued > 0.0 {
        ctx.fail(format!("{rescued} tasks waited parked 5 s and were rescued"));
    }
    Ok(())
}

/// A thread waking in a throttled group: CFS places it against its group's own
/// min_vruntime; ours placed it against the queue's vtime, where it waited until the hogs
/// caught up, at their quota's pace, and was rescued after 5 s (23 burns against the
/// kernel's 105).
fn wake_throttled(ctx: &mut Ctx) -> Result<(), String> {
    turn_in_throttled(ctx, Work::Duty { threads: 1, burn_ms: 2, sleep_ms: 48 }, "waking thread")
}

/// A thread created in a throttled group for each burn: CFS places a new task against its
/// group's own vruntime too.
fn spawn_throttled(ctx: &mut Ctx) -> Result<(), String> {
    turn_in_throttled(ctx, Work::SpawnDuty { burn_ms: 2, sleep_ms: 48 }, "new thread")
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "rt_neighbour",
            about: "a SCHED_FIFO thread on CPU 1 burning 50 ms of every 100: the sched_ext task it preempts moves to the free CPU, so a busy thread gets >= 0.95 CPU and waits out a 50 ms burst at most once",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/a", "t/rt"],
            body: Body::Custom(rt_neighbour),
        },
        Scenario {
            name: "stress",
            about: "60 s: 40 threads in 20 limited groups (periods 1 ms-1 s, nested 3 deep), a fork storm, a hog moved every 100 ms: every group ±5 %",
            needs_sched: false,
            limits: stress_limits(),
            cgroups: vec!["t/s/n1/u", "t/s/n1/n2/u"],
            body: Body::Custom(stress),
        },
        Scenario {
            name: "move_latency",
            about: "a process moved between two cgroups every 20 ms while a throttled 5ms/250ms group forks: at most one move waits over 100 ms, the group within a quota + a slice per CPU of its limit",
            needs_sched: false,
            limits: vec![lim("t/q", MOVE_QUOTA_US, MOVE_PERIOD_US)],
            cgroups: vec!["t/q", "t/m1", "t/m2"],
            body: Body::Custom(move_latency),
        },
        Scenario {
            name: "wake_throttled",
            about: "a thread burning 2 ms every 50 ms beside 2 hogs in a 20ms/100ms group, an unlimited hog beside: under ours it finishes >= 0.8 of the kernel's burns in the same boot, the slowest at most 200 ms longer, no task rescued",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/a", "t/b"],
            body: Body::Custom(wake_throttled),
        },
        Scenario {
            name: "spawn_throttled",
            about: "a thread created for each 2 ms burn every 50 ms beside 2 hogs in a 20ms/100ms group, an unlimited hog beside: under ours >= 0.8 of the kernel's burns in the same boot, the slowest at most 200 ms longer, no task rescued",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/a", "t/b"],
            body: Body::Custom(spawn_throttled),
        },
        custom(
            "rescue",
            "40 threads under 1ms/1s: no task waits parked much over 5 s (rescue), the scheduler stays attached",
            true,
            lim("t/a", 1_000, 1_000_000),
            rescue,
        ),
        custom(
            "agent_stall",
            "agent SIGSTOPped 3 s while its group is throttled: the BPF safety net keeps the group running at <= its limit, enforcement back to ±2% after SIGCONT",
            true,
            lim("t/a", 20_000, 100_000),
            agent_stall,
        ),
    ]
}
