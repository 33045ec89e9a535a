//! The bodies of the benchmark set (bench() in mod.rs, run by tests/bench/run for
//! BENCHMARKS.md): what throttling costs (how late a parked task runs after its refill),
//! scheduling overhead without limits against the kernel's own scheduler, and the agent's
//! CPU time by number of groups. They report figures and gate nothing.

use super::{hog, leak, lim, process_cpu, render_config, Limit, Sleepers, Work, Workload};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Throttling cost: one busy thread in a group allowed 20 ms per 100 ms runs 20 ms, waits
/// throttled ~80 ms, and resumes when the refill has released it. The refill instants
/// are not visible from user space (the kernel's period timer, our agent's), but they
/// lie on a grid of one period: each resume's phase on that grid, minus the earliest
/// phase seen, is how much later than the fastest resume it came. Printed: p50/p99/max of
/// that delay in µs over ~110 periods (the fastest resume's own delay is not included).
///
/// Where the time goes, from the context switches (tracefs) of the same run: per resume,
/// the switch that ran the task again, and with the scheduler, the agent's last switch-in
/// before it (the wakeup that refilled). Printed: the agent's wakeups on the same grid
/// (`agent_p50_us`, `_p99_us`: its timer's jitter), agent switch-in to task switch-in
/// (`agent_to_run_p50_us`, `_p99_us`: the refill, bw_unthrottle and the dispatch), task
/// switch-in to the workload seeing it (`run_to_seen_p50_us`), and the share of resumes
/// on the agent's CPU (`same_cpu_pct`). With the agent's `bpf()` calls and the IPIs traced
/// too, the agent's part split up (`report_steps`): wakeup to bw_unthrottle, the program
/// run, its end to the agent's switch-out, and the CPU the release kicked. Measured
/// 2026-12-07, quiet host, one boot: 248, 309 and 238 µs (p50); 99 % of releases kicked
/// the other CPU, and it ran the task in 17 %, 294 µs after the kick: the kicked vCPU
/// takes about as long to leave idle and dispatch as the agent takes to go back to sleep,
/// after which its own CPU takes the task from the LLC queue.
pub(super) fn throttle_cost(ctx: &mut Ctx) -> Result<(), String> {
    const PERIOD_NS: u64 = 100_000_000;
    use crate::trace::{BPF_ENTER, BPF_EXIT, IPI, PPOLL_EXIT, SWITCH};
    let trace = crate::trace::Trace::start(&[SWITCH, BPF_ENTER, BPF_EXIT, PPOLL_EXIT, IPI])?;
    let w = ctx.spawn(&Workload { cgroup: "t/a", work: Work::Gaps, pin: None }, 12)?;
    ctx.check_on_scx(w);
    // Its busy thread starts once the process has joined its cgroup.
    sleep(Duration::from_secs(1));
    let tids: Vec<u32> = ctx.workload_pid(w).map(crate::sched::threads).unwrap_or_default();
    let st = ctx.wait_workload(w, Duration::from_secs(40))?;
    let text = trace.stop()?;
    let switches = crate::trace::switches(&text);
    if !st.success() {
        return Err(format!("gaps workload: {}", crate::sched::describe(st)));
    }
    let out = ctx.output(w);
    let ends: Vec<u64> = crate::output::parse_gaps(&out)
        .into_iter()
        .filter(|g| g.len_ns > 20_000_000)
        .map(|g| g.end_ns)
        .collect();
    // Skip the first second (the group's first periods).
    let from = ends.first().copied().unwrap_or(0) + 1_000_000_000;
    let ends: Vec<u64> = ends.into_iter().filter(|&e| e >= from).collect();
    let d = resume_delays(&ends, PERIOD_NS);
    ctx.figure("resumes", d.len());
    if d.len() < 50 {
        return Err(format!("only {} throttled periods seen in 11 s (100 ms periods)", d.len()));
    }
    let pct = |d: &[u64], q: f64| d[((d.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    ctx.figure("delay_p50_us", format!("{:.0}", pct(&d, 0.5)));
    ctx.figure("delay_p99_us", format!("{:.0}", pct(&d, 0.99)));
    ctx.figure("delay_max_us", format!("{:.0}", pct(&d, 1.0)));
    let agent = ctx.sched_pid();
    let phases = resume_phases(&switches, &ends, &tids, agent);
    if phases.len() < ends.len() / 2 {
        return Err(format!("the trace shows {} of {} resumes", phases.len(), ends.len()));
    }
    let sorted = |mut v: Vec<u64>| {
        v.sort_unstable();
        v
    };
    let seen = sorted(phases.iter().map(|p| p.seen_ns - p.run_ns).collect());
    ctx.figure("run_to_seen_p50_us", format!("{:.0}", pct(&seen, 0.5)));
    let with_agent: Vec<&ResumePhase> = phases.iter().filter(|p| p.agent.is_some()).collect();
    if agent.is_some() && !with_agent.is_empty() {
        let at: Vec<(u64, usize)> = with_agent.iter().filter_map(|p| p.agent).collect();
        let jitter = resume_delays(&at.iter().map(|a| a.0).collect::<Vec<_>>(), PERIOD_NS);
        let to_run = sorted(with_agent.iter().map(|p| p.run_ns - p.agent.map_or(p.run_ns, |a| a.0)).collect());
        ctx.figure("agent_p50_us", format!("{:.0}", pct(&jitter, 0.5)));
        ctx.figure("agent_p99_us", format!("{:.0}", pct(&jitter, 0.99)));
        ctx.figure("agent_to_run_p50_us", format!("{:.0}", pct(&to_run, 0.5)));
        ctx.figure("agent_to_run_p99_us", format!("{:.0}", pct(&to_run, 0.99)));
        let same = with_agent.iter().filter(|p| p.agent.is_some_and(|a| a.1 == p.run_cpu)).count();
        ctx.figure("same_cpu_pct", format!("{:.0}", 100.0 * same as f64 / with_agent.len() as f64));
        let marks = Marks::of(&text);
        ctx.figure("traced", format!("{}runs/{}rets/{}polls/{}ipis", marks.runs.len(), marks.exits.len(), marks.polls.len(), marks.ipis.len()));
        let steps: Vec<AgentSteps> =
            with_agent.iter().filter_map(|p| agent_steps(&switches, &marks, p, agent.unwrap_or(0))).collect();
        report_steps(ctx, &steps, with_agent.len())?;
    }
    Ok(())
}

/// The other events of a throttle_cost trace: the `bpf()` calls that run a program
/// (BPF_PROG_TEST_RUN, cmd 10) and their returns, and the IPIs.
struct Marks {
    runs: Vec<crate::trace::Mark>,
    exits: Vec<crate::trace::Mark>,
    polls: Vec<crate::trace::Mark>,
    ipis: Vec<crate::trace::Mark>,
}

impl Marks {
    fn of(text: &str) -> Self {
        Self {
            runs: crate::trace::marks(text, "sys_bpf(cmd: ").into_iter().filter(|m| crate::trace::syscall_arg(m, "cmd") == Some(10)).collect(),
            exits: crate::trace::marks(text, "sys_bpf ->"),
            polls: crate::trace::marks(text, "sys_ppoll ->"),
            ipis: crate::trace::marks(text, "ipi_send_cpu:"),
        }
    }
}

/// One resume's path through the agent (ns): its switch-in (`wake`), its return from ppoll
/// (`user`: back in user space, if traced), the start and end of its program run (`call`,
/// `ret`: bw_unthrottle), its switch-out (`off`), the kick's IPI from its CPU in between
/// (`kick`: at, target CPU), and the task's switch-in (`run` on `run_cpu`).
struct AgentSteps {
    wake: u64,
    user: Option<u64>,
    call: u64,
    ret: u64,
    off: u64,
    kick: Option<(u64, usize)>,
    run: u64,
    run_cpu: usize,
}

/// [`AgentSteps`] of a resume whose agent wakeup is known, if the trace shows the program run.
fn agent_steps(sw: &[crate::trace::Switch], m: &Marks, p: &ResumePhase, agent: u32) -> Option<AgentSteps> {
    let (wake, cpu) = p.agent?;
    let call = m.runs.iter().find(|c| c.pid == agent && c.ns >= wake && c.ns <= p.run_ns)?.ns;
    let user = m.polls.iter().find(|c| c.pid == agent && c.ns >= wake && c.ns <= call).map(|c| c.ns);
    let ret = m.exits.iter().find(|c| c.pid == agent && c.ns >= call)?.ns;
    let off = sw.iter().filter(|s| s.cpu == cpu && s.ns > wake).map(|s| s.ns).min()?;
    // The kick: an IPI from the agent's CPU to another (the program queues it as an
    // irq_work, whose own IPI goes to the agent's CPU).
    let kick = m
        .ipis
        .iter()
        .filter(|i| i.cpu == cpu && i.ns >= call && i.ns <= off)
        .find_map(|i| crate::trace::ipi_target(i).filter(|&to| to != cpu).map(|to| (i.ns, to)));
    Some(AgentSteps { wake, user, call, ret, off, kick, run: p.run_ns, run_cpu: p.run_cpu })
}

/// Where the agent's part of a resume goes (µs, p50): wakeup to the program run
/// (`wake_to_call`; of that, wakeup to the return from ppoll, `wake_to_user`), the run (`call`), the run's end to the agent's switch-out
/// (`ret_to_off`); the share of resumes whose release kicked a CPU (`kicked_pct`), the
/// share of those that ran on it (`on_kicked_pct`) and kick to the task's switch-in there
/// (`kick_to_run`). Medians are nearest-rank (`workload::percentile`).
fn report_steps(ctx: &mut Ctx, steps: &[AgentSteps], of: usize) -> Result<(), String> {
    if steps.len() < of / 2 {
        return Err(format!("the trace shows the agent's program run for {} of {of} resumes", steps.len()));
    }
    let p50 = |ns: Vec<u64>| {
        let mut us: Vec<f64> = ns.into_iter().map(|x| x as f64 / 1e3).collect();
        us.sort_unstable_by(f64::total_cmp);
        crate::workload::percentile(&us, 50.0).map_or("-".to_string(), |x| format!("{x:.0}"))
    };
    ctx.figure("wake_to_call_p50_us", p50(steps.iter().map(|s| s.call - s.wake).collect()));
    ctx.figure("wake_to_user_p50_us", p50(steps.iter().filter_map(|s| s.user.map(|u| u - s.wake)).collect()));
    ctx.figure("call_p50_us", p50(steps.iter().map(|s| s.ret - s.call).collect()));
    ctx.figure("ret_to_off_p50_us", p50(steps.iter().map(|s| s.off.saturating_sub(s.ret)).collect()));
    let kicked: Vec<(&AgentSteps, (u64, usize))> = steps.iter().filter_map(|s| s.kick.map(|k| (s, k))).collect();
    let pct = |n: usize, of: usize| format!("{:.0}", 100.0 * n as f64 / of.max(1) as f64);
    ctx.figure("kicked_pct", pct(kicked.len(), steps.len()));
    ctx.figure("on_kicked_pct", pct(kicked.iter().filter(|(s, k)| s.run_cpu == k.1).count(), kicked.len()));
    ctx.figure("kick_to_run_p50_us", p50(kicked.iter().map(|(s, k)| s.run.saturating_sub(k.0)).collect()));
    Ok(())
}

/// One resume of a throttled task, from the trace: when the workload saw it (`seen_ns`), the
/// switch that ran the task before that (`run_ns` on `run_cpu`), and the agent's last
/// switch-in before that one (when and on which CPU), if within a period.
struct ResumePhase {
    seen_ns: u64,
    run_ns: u64,
    run_cpu: usize,
    agent: Option<(u64, usize)>,
}

/// [`ResumePhase`] of each of `ends` (ns, the workload's clock and the trace's), for the
/// task's threads `tids` and the agent's thread `agent` (its main thread runs the timers).
fn resume_phases(sw: &[crate::trace::Switch], ends: &[u64], tids: &[u32], agent: Option<u32>) -> Vec<ResumePhase> {
    let mut out = Vec::new();
    for &seen in ends {
        let Some(run) = sw.iter().filter(|s| s.ns <= seen && tids.contains(&s.pid)).max_by_key(|s| s.ns) else {
            continue;
        };
        // The task must have been off its CPU for most of the gap, or this switch is not the resume.
        if seen - run.ns > 20_000_000 {
            continue;
        }
        let a = agent.and_then(|pid| {
            sw.iter()
                .filter(|s| s.pid == pid && s.ns <= run.ns && run.ns - s.ns < 100_000_000)
                .max_by_key(|s| s.ns)
                .map(|s| (s.ns, s.cpu))
        });
        out.push(ResumePhase { seen_ns: seen, run_ns: run.ns, run_cpu: run.cpu, agent: a });
    }
    out
}

/// Sorted delays of `ends` (ns) behind the earliest phase on a grid of `period` ns. The
/// earliest phase is the one after the widest empty stretch of the circle, so a grid
/// whose resumes straddle a multiple of the period is handled.
fn resume_delays(ends: &[u64], period: u64) -> Vec<u64> {
    let mut ph: Vec<u64> = ends.iter().map(|e| e % period).collect();
    ph.sort_unstable();
    let Some(&last) = ph.last() else { return ph };
    let mut start = ph[0];
    let mut widest = ph[0] + period - last;
    for w in ph.windows(2) {
        if w[1] - w[0] > widest {
            (widest, start) = (w[1] - w[0], w[1]);
        }
    }
    let mut d: Vec<u64> = ph.iter().map(|&p| (p + period - start) % period).collect();
    d.sort_unstable();
    d
}

/// Scheduling overhead without limits, at the guest's size (`wide_bench` is the same at 8
/// vCPUs with more tasks): 2 pipe ping-pong pairs, 2 threads forking children that exit at
/// once, messaging of 1 group of 4 senders and 4 receivers (hackbench-like), and the
/// wake-to-run latency of 4 workers woken every 2 ms (schbench-like), 3 s each, in an
/// unlimited cgroup; 3 rounds, each measured under scx_bandwidth, under the kernel's own
/// scheduler (scx_bandwidth detached) and under the floor scheduler (`compare`).
pub(super) fn overhead(ctx: &mut Ctx) -> Result<(), String> {
    compare(ctx, &workloads(2, 1, 4))
}

/// The workloads `overhead` and `wide_bench` compare: ping-pong pairs, forking threads,
/// messaging groups, wakeup-latency workers.
pub(super) fn workloads(pairs: u32, groups: u32, workers: u32) -> [Compared; 4] {
    [
        Compared { label: "pingpong", work: Work::PingPong { pairs }, prefix: "PINGPONG ", fields: &[("n", true)] },
        Compared { label: "forks", work: Work::Forks { threads: pairs }, prefix: "FORKS ", fields: &[("n", true)] },
        Compared { label: "messaging", work: Work::Messaging { groups }, prefix: "MESSAGING ", fields: &[("n", true)] },
        Compared { label: "wakelat", work: Work::WakeLat { workers }, prefix: "WAKELAT ", fields: &[("p50_us", false), ("p99_us", false)] },
    ]
}

/// A workload `compare` runs under both schedulers, and what it reads from the line the
/// workload prints (`PREFIX key=value …`): (key, true) is a count, printed per second.
pub(super) struct Compared {
    pub label: &'static str,
    pub work: Work,
    pub prefix: &'static str,
    pub fields: &'static [(&'static str, bool)],
}

/// Each workload for 3 s in the unlimited cgroup t/o (1 s with --quick); 3 rounds (1 with
/// --quick), each under scx_bandwidth
/// and then under the kernel's own scheduler (scx_bandwidth detached); then what
/// scx_bandwidth's ops cost during one more run of the first workload (`op_costs`); then 3
/// rounds and the op costs under the floor scheduler (tests/bench/floor: the least a
/// sched_ext scheduler does, so what sched_ext itself costs beside the kernel's), attached
/// once: every attach and detach is a chance of qemu's int3 crash, and with the floor
/// alternating in every round `wide_bench` crashed 6 boots in a row in one CI run. Printed
/// per field: the median of each, scx ÷ kernel, floor ÷ kernel and scx ÷ floor
/// (`LABEL.scx_per_s`, `.kernel_per_s`, `.floor_per_s`, `.ratio`, `.floor_ratio`,
/// `.scx_per_floor` for counts; `LABEL.KEY.scx`, `.kernel`, `.floor`, `.ratio`,
/// `.floor_ratio`, `.scx_per_floor` for the others).
pub(super) fn compare(ctx: &mut Ctx, works: &[Compared]) -> Result<(), String> {
    // --quick: 1 round of 1 s per workload and scheduler.
    let (rounds, secs) = if ctx.quick() { (1, 1) } else { (3, 3) };
    const SCX: usize = 0;
    const KERNEL: usize = 1;
    const FLOOR: usize = 2;
    // [work][field][scx, kernel, floor] -> one figure per round
    let mut got: Vec<Vec<[Vec<f64>; 3]>> =
        works.iter().map(|w| vec![[Vec::new(), Vec::new(), Vec::new()]; w.fields.len()]).collect();
    let mut run_all = |ctx: &mut Ctx, arm: usize| -> Result<(), String> {
        for (i, c) in works.iter().enumerate() {
            for (f, v) in run_compared(ctx, c, secs)?.into_iter().enumerate() {
                got[i][f][arm].push(v);
            }
        }
        Ok(())
    };
    for round in 0..rounds {
        if round > 0 {
            ctx.start_sched(&[])?; // the runner started it for the first
        }
        run_all(ctx, SCX)?;
        ctx.stop_sched()?;
        run_all(ctx, KERNEL)?;
    }
    ctx.start_sched(&[])?;
    op_costs(ctx, &works[0], secs, false)?;
    ctx.stop_sched()?;
    ctx.start_floor()?;
    for _ in 0..rounds {
        run_all(ctx, FLOOR)?;
    }
    op_costs(ctx, &works[0], secs, true)?;
    ctx.stop_sched()?;
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = |a: f64, b: f64| format!("{:.3}", a / b.max(1e-9));
    for (i, c) in works.iter().enumerate() {
        for (f, (key, count)) in c.fields.iter().enumerate() {
            let [s, k, fl] = &mut got[i][f];
            let (s, k, fl) = (med(s), med(k), med(fl));
            let name = |what: &str| match count {
                true => format!("{}.{what}", c.label),
                false => format!("{}.{key}.{what}", c.label),
            };
            let per_s = |what: &str| name(&if *count { format!("{what}_per_s") } else { what.to_string() });
            ctx.figure(per_s("scx"), format!("{s:.0}"));
            ctx.figure(per_s("kernel"), format!("{k:.0}"));
            ctx.figure(per_s("floor"), format!("{fl:.0}"));
            ctx.figure(name("ratio"), ratio(s, k));
            ctx.figure(name("floor_ratio"), ratio(fl, k));
            ctx.figure(name("scx_per_floor"), ratio(s, fl));
        }
    }
    Ok(())
}

/// The scheduler's ops whose cost per call `op_costs` reports (BPF program names).
const OPS: [&str; 10] = [
    "bw_select_cpu", "bw_enqueue", "bw_dispatch", "bw_runnable", "bw_running",
    "bw_stopping", "bw_quiescent", "bw_tick", "bw_sched_switch", "bw_update_idle",
];
/// The floor scheduler's ops (tests/bench/floor).
const FLOOR_OPS: [&str; 2] = ["fl_select_cpu", "fl_enqueue"];

/// What the attached scheduler's BPF programs cost during one more run of `c` (the first
/// workload of `compare`, ping-pong), with the kernel's per-program statistics on
/// (kernel.bpf_stats_enabled; off in the rounds of `compare`, as it adds two clock reads per
/// call): per op, ns per call and calls per unit of work (`bpf.OP.ns_per_call`,
/// `bpf.OP.calls_per_unit`), and for all programs together ns per unit and the share of the
/// guest's CPU time (`bpf.ns_per_unit`, `bpf.cpu_share`); under the floor scheduler
/// (`floor`) the same figures, prefixed `floor.`: what the kernel's part of an op costs (the
/// idle-CPU search, queue inserts) shows in the floor's.
fn op_costs(ctx: &mut Ctx, c: &Compared, secs: u64, floor: bool) -> Result<(), String> {
    let (prefix, ops, key) = match floor {
        false => ("bw_", &OPS[..], "bpf"),
        true => ("fl_", &FLOOR_OPS[..], "floor.bpf"),
    };
    crate::bpfstat::enable(true)?;
    let before = crate::bpfstat::snapshot();
    let t0 = Instant::now();
    let got = run_compared(ctx, c, secs);
    let wall = t0.elapsed().as_secs_f64();
    let after = crate::bpfstat::snapshot();
    crate::bpfstat::enable(false)?;
    let units = got?[0] * secs as f64;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let mut all = 0.0;
    for (name, &(ns, cnt)) in after.iter().filter(|(n, _)| n.starts_with(prefix)) {
        let (ns0, cnt0) = before.get(name).copied().unwrap_or((0, 0));
        let (dns, dcnt) = (ns.saturating_sub(ns0) as f64, cnt.saturating_sub(cnt0) as f64);
        all += dns;
        if ops.contains(&name.as_str()) {
            ctx.figure(format!("{key}.{name}.ns_per_call"), format!("{:.0}", dns / dcnt.max(1.0)));
            ctx.figure(format!("{key}.{name}.calls_per_unit"), format!("{:.3}", dcnt / units.max(1.0)));
        }
    }
    if all == 0.0 {
        return Err(format!("kernel.bpf_stats_enabled on, but no {prefix}* program counted any run time"));
    }
    ctx.figure(format!("{key}.ns_per_unit"), format!("{:.0}", all / units.max(1.0)));
    ctx.figure(format!("{key}.cpu_share"), format!("{:.3}", all / (wall * cpus * 1e9)));
    Ok(())
}

/// Runs `c` for `secs` in the unlimited cgroup t/o and returns its fields, in the order of
/// `c.fields` (counts per second).
pub(super) fn run_compared(ctx: &mut Ctx, c: &Compared, secs: u64) -> Result<Vec<f64>, String> {
    let w = ctx.spawn(&Workload { cgroup: "t/o", work: c.work.clone(), pin: None }, secs)?;
    ctx.check_on_scx(w);
    let st = ctx.wait_workload(w, Duration::from_secs(secs + 30))?;
    let out = ctx.output(w);
    let line = out.lines().find_map(|l| l.strip_prefix(c.prefix)).filter(|_| st.success());
    let Some(line) = line else {
        return Err(format!("{}: {} ({})", c.label, crate::sched::describe(st), out.trim()));
    };
    c.fields
        .iter()
        .map(|(key, count)| {
            let v: f64 = line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
                .ok_or_else(|| format!("{}: no {key}= in '{line}'", c.label))?;
            Ok(if *count { v / secs as f64 } else { v })
        })
        .collect()
}

/// The agent's cost by number of limited groups, each limited to 10 ms per 100 ms: 10
/// (all busy), 100 and 1,000 (10 busy, the others with a sleeping process). The
/// scheduler runs without --stats (nobody asks for statistics); its CPU time over 4 s
/// after 2 s of warm-up (2 s after 1 s with --quick) is printed as ms per s, with how often its threads ran, and
/// every group must be enforced. Beside it, as a yardstick, a SCHED_FIFO thread that does
/// nothing but wake as often as the busy groups refill (100 times a second): under TCG a
/// wakeup itself costs far more than on hardware, and the ratio of the two is what means
/// something there.
pub(super) fn agent_cost(ctx: &mut Ctx) -> Result<(), String> {
    // --quick: 1 s of warm-up, 2 s measured.
    let (warm_s, window) = if ctx.quick() { (1, Duration::from_secs(2)) } else { (2, crate::runner::WINDOW) };
    ctx.stop_sched()?;
    for n in [10usize, 100, 1000] {
        let groups: Vec<&'static str> = (0..n).map(|i| leak(format!("t/ac/g{i:04}"))).collect();
        let limits: Vec<Limit> = groups.iter().map(|g| lim(g, 10_000, 100_000)).collect();
        crate::cgroup::create_tree(&groups)?;
        let cfg = std::path::PathBuf::from(format!("/tmp/agent_cost_{n}.toml"));
        std::fs::write(&cfg, render_config("agent_cost", &limits)).map_err(|e| format!("{}: {e}", cfg.display()))?;
        ctx.set_sched_config(Some(cfg));
        ctx.start_sched_with(&[], false)?;
        let first = ctx.nr_workloads();
        let busy = n.min(10);
        for g in &groups[..busy] {
            ctx.spawn(&hog(g, 1), 10)?;
        }
        let sleepers = Sleepers::spawn(&groups[busy..])?;
        // The baseline: a thread that only wakes as often as the busy groups refill.
        let tick_secs = warm_s + window.as_secs();
        let ticker = ctx.spawn(&Workload { cgroup: "t/tick", work: Work::Ticker { hz: 10 * busy as u32 }, pin: None }, tick_secs)?;
        sleep(Duration::from_secs(warm_s));
        let pid = ctx.sched_pid().ok_or("no scheduler")?;
        let (t0, c0) = (Instant::now(), process_cpu(pid).ok_or("agent gone")?);
        sleep(window);
        let c1 = process_cpu(pid).ok_or("agent gone")?;
        let secs = t0.elapsed().as_secs_f64();
        ctx.figure(format!("n{n}.agent_ms_per_s"), format!("{:.1}", c1.0.saturating_sub(c0.0) as f64 / 1e6 / secs));
        ctx.figure(format!("n{n}.agent_runs_per_s"), format!("{:.0}", c1.1.saturating_sub(c0.1) as f64 / secs));
        ctx.wait_workload(ticker, Duration::from_secs(30))?;
        let out = ctx.output(ticker);
        let field = |k: &str| -> Option<f64> { out.split_whitespace().find_map(|f| f.strip_prefix(k)?.parse().ok()) };
        match (field("cpu_ns="), field("wakeups=")) {
            (Some(cpu), Some(w)) => {
                ctx.figure(format!("n{n}.ticker_ms_per_s"), format!("{:.1}", cpu / 1e6 / tick_secs as f64));
                ctx.figure(format!("n{n}.ticker_wakeups_per_s"), format!("{:.0}", w / tick_secs as f64));
            }
            _ => return Err(format!("ticker: {}", out.trim())),
        }
        let enforced = crate::stats::num(&crate::stats::fetch()?, "active_groups")?;
        if enforced != n as f64 {
            ctx.fail(format!("{n} groups configured, {enforced} enforced"));
        }
        ctx.kill_works(first);
        drop(sleepers);
        ctx.stop_sched()?;
        crate::cgroup::remove_tree("t/ac")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweep's premises, cell by cell: the average use fits the quota with 20
    /// points of room per thread, a pool of quota + burst holds a period in which every
    /// thread runs throughout, the sleep gives the duty asked, and a cell runs long
    /// enough for 100 burns unless that would take over 20 s.
    #[test]
    fn sweep_cells_stay_within_their_limits() {
        let cells = sweep_cells();
        assert_eq!(cells.len(), 12);
        for c in &cells {
            let q_ms = c.quota_us() as f64 / 1e3;
            let avg_ms = c.threads as f64 * 100.0 * c.burn_ms as f64 / (c.burn_ms + c.sleep_ms()) as f64;
            assert!(avg_ms <= q_ms - 19.0 * c.threads as f64, "{}: {avg_ms} of {q_ms}", c.key());
            assert!(c.threads as f64 * 100.0 <= 2.0 * q_ms, "{}", c.key());
            let duty = 100.0 * c.burn_ms as f64 / (c.burn_ms + c.sleep_ms()) as f64;
            // Whole-ms sleeps: within 1.5 points.
            assert!((duty - c.duty_pct as f64).abs() < 1.5, "{}: {duty}", c.key());
            let burns = c.seconds() as f64 * 1e3 / (c.burn_ms + c.sleep_ms()) as f64 * c.threads as f64;
            assert!(burns >= 99.0 || c.seconds() == 20, "{}: {burns}", c.key());
        }
        let mut keys: Vec<String> = cells.iter().map(SweepCell::key).collect();
        keys.dedup();
        assert_eq!(keys.len(), 12);
    }

    #[test]
    fn resume_delays_on_a_grid() {
        const P: u64 = 100;
        // Resumes 2, 0, 7 and 5 units after grid points k*P + 30.
        let d = resume_delays(&[130 + 2, 230, 330 + 7, 430 + 5], P);
        assert_eq!(d, vec![0, 2, 5, 7]);
        // The same when the earliest phase is just before a multiple of the period.
        let d = resume_delays(&[198, 298 + 3, 398 + 1, 498 + 4], P);
        assert_eq!(d, vec![0, 1, 3, 4]);
        assert!(resume_delays(&[], P).is_empty());
    }
}

/// One cell of the burst sweep: `threads` threads burning `burn_ms` of CPU at a duty
/// cycle of `duty_pct` (sleeping burn × (100 − duty) / duty between burns).
pub(super) struct SweepCell {
    pub burn_ms: u32,
    pub duty_pct: u32,
    pub threads: u32,
}

/// The cells: burns of 20, 50 and 90 ms, duty cycles of 30 and 70 %, 1 and 2 threads
/// (2 threads at 70 % are 1.4 CPUs of the guest's 2: the CPUs are not what limits).
pub(super) fn sweep_cells() -> Vec<SweepCell> {
    let mut v = Vec::new();
    for burn_ms in [20, 50, 90] {
        for duty_pct in [30, 70] {
            for threads in [1, 2] {
                v.push(SweepCell { burn_ms, duty_pct, threads });
            }
        }
    }
    v
}

impl SweepCell {
    pub fn key(&self) -> String {
        format!("b{}d{}t{}", self.burn_ms, self.duty_pct, self.threads)
    }

    fn sleep_ms(&self) -> u32 {
        (self.burn_ms * (100 - self.duty_pct)).div_ceil(self.duty_pct)
    }

    /// Quota per 100 ms period, burst = quota: 20 points of duty above the average use
    /// (at most a CPU per thread), so the long-run average fits with room, and a pool
    /// of twice that holds any one period's peak: the kernel does not throttle these.
    fn quota_us(&self) -> u64 {
        self.threads as u64 * 1_000 * (self.duty_pct + 20).min(100) as u64
    }

    /// Long enough for about 100 burns (then the nearest-rank p99 is not the slowest
    /// one), 6 to 20 s.
    fn seconds(&self) -> u64 {
        let cycle_ms = (self.burn_ms + self.sleep_ms()) as u64;
        (100 * cycle_ms / self.threads as u64).div_ceil(1000).clamp(6, 20)
    }
}

/// A burst-sweep cell's length with --quick: the slowest cycle (90 ms burn, 210 ms sleep)
/// still burns 10 times.
const QUICK_CELL_S: u64 = 3;

/// The burst sweep (issue: burst latency across workloads): each cell in a cgroup of its
/// own whose cpu.max and cpu.max.burst are written to cgroupfs (enforced by the kernel's
/// CFS with --no-sched, by scx_bandwidth otherwise), idle for 1 s first so the pool holds
/// quota + burst, then the duty workload. Printed per cell: burns, p50/p99/max of a burn's
/// wall time (ms), and the group's throttled periods where the scheduler counts them.
pub(super) fn burst_sweep(ctx: &mut Ctx) -> Result<(), String> {
    for (i, c) in sweep_cells().into_iter().enumerate() {
        let cg = leak(format!("t/sw/c{i}"));
        crate::cgroup::create_tree(&[cg])?;
        crate::cgroup::write_cpu_max(cg, c.quota_us(), 100_000)?;
        crate::cgroup::write_cpu_max_burst(cg, c.quota_us())?;
        sleep(Duration::from_secs(1));
        let before = if ctx.has_sched() { Some(crate::stats::fetch()?) } else { None };
        // --quick: 3 s per cell (a figure, not a percentile to read).
        let secs = if ctx.quick() { QUICK_CELL_S } else { c.seconds() };
        let w = ctx.spawn(
            &Workload {
                cgroup: cg,
                work: Work::Duty { threads: c.threads, burn_ms: c.burn_ms, sleep_ms: c.sleep_ms() },
                pin: None,
            },
            secs,
        )?;
        ctx.check_on_scx(w);
        let st = ctx.wait_workload(w, Duration::from_secs(secs + 20))?;
        if st.code() != Some(0) {
            return Err(format!("{}: duty workload {}", c.key(), crate::sched::describe(st)));
        }
        let d = crate::output::parse_duty(&ctx.output(w)).ok_or_else(|| format!("{}: no DUTY line", c.key()))?;
        let k = c.key();
        ctx.figure(format!("{k}.quota_ms"), c.quota_us() / 1_000);
        ctx.figure(format!("{k}.burns"), d.burns);
        ctx.figure(format!("{k}.p50_ms"), format!("{:.1}", d.p50_ms));
        ctx.figure(format!("{k}.p99_ms"), format!("{:.1}", d.p99_ms));
        ctx.figure(format!("{k}.max_ms"), format!("{:.1}", d.max_ms));
        if let Some(before) = before {
            let after = crate::stats::fetch()?;
            ctx.figure(format!("{k}.throttled"), crate::stats::group_delta(&before, &after, cg, "nr_throttled")?);
        }
        crate::cgroup::remove_tree(cg)?;
    }
    Ok(())
}
