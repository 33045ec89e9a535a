//! Weights: how contended CPU is shared, by cpu.weight between cgroups and by nice within
//! one, as CFS shares it (and across CPUs where CFS does not). No limits are involved: the
//! scheduler replaces CFS for every task, so fair sharing is its job as much as bandwidth,
//! down to extreme weights, which must not starve a thread into the sched_ext watchdog.

use super::{hog, process_cpu, Body, Scenario, Work, Workload};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Tolerance of the nice 0 : 19 split: the nice-19 thread's dozen slices over the window
/// make one slice more or less a 7 % difference (100, the rounded weights, is 46 % off).
const NICE_19_TOL: f64 = 0.15;

/// Hierarchical weighted fairness (no limits; passes under the kernel's CFS too, --cfs).
/// Each check is a ratio of measured usage with ±5 % (the nice 0 : 19 one NICE_19_TOL).
fn weights(ctx: &mut Ctx) -> Result<(), String> {
    use crate::cgroup::write_cpu_weight;
    const TOL: f64 = 0.05;
    let expect_within = |ctx: &mut Ctx, label: &str, got: f64, want: f64, tol: f64| {
        ctx.figure(format!("{label}.ratio"), format!("{got:.3}"));
        if (got / want - 1.0).abs() > tol {
            ctx.fail(format!("{label}: ratio {got:.3}, expected {want:.3} ±{:.0} %", tol * 100.0));
        }
    };
    let expect = |ctx: &mut Ctx, label: &str, got: f64, want: f64| expect_within(ctx, label, got, want, TOL);
    let split = |ctx: &mut Ctx, label: &str, window: Duration| -> Result<f64, String> {
        sleep(crate::runner::WARMUP);
        let u = ctx.measure(&["t/wa", "t/wb"], window)?;
        ctx.figure(format!("{label}.a_cpus"), format!("{:.3}", u[0]));
        ctx.figure(format!("{label}.b_cpus"), format!("{:.3}", u[1]));
        if u[0] + u[1] < 1.9 {
            ctx.fail(format!("{label}: 4 hogs got {:.3} CPUs of 2", u[0] + u[1]));
        }
        Ok(u[1] / u[0].max(1e-6))
    };

    // Two hogs per group; weights 100 and 300, then 100 and 100 while running.
    write_cpu_weight("t/wa", 100)?;
    write_cpu_weight("t/wb", 300)?;
    let w = ctx.spawn(&hog("t/wa", 2), 60)?;
    ctx.spawn(&hog("t/wb", 2), 60)?;
    ctx.check_on_scx(w);
    // 16 s: the group at 100 gets 0.5 CPU in slices that each cost 8 times their length in
    // vtime, and measured per second it got 0.469-0.534 CPU, each high second followed by
    // a low one. Over 8 s the split still ranged 2.861-3.033 in 17 runs (mean 2.96): the
    // noise of a window shrinks with its length, the small bias does not (the group at 100
    // gets a little more than a quarter: the CPU time of tasks outside both groups comes
    // mostly out of the larger share).
    let r = split(ctx, "w100_300", crate::runner::WINDOW * 4)?;
    expect(ctx, "w100_300", r, 3.0);
    write_cpu_weight("t/wb", 100)?;
    let r = split(ctx, "w100_100", crate::runner::WINDOW)?;
    expect(ctx, "w100_100", r, 1.0);
    ctx.kill_works(w);

    // Equal weights, 1 thread against 3: each group gets one CPU, not 1/4 and 3/4.
    let w = ctx.spawn(&hog("t/wa", 1), 60)?;
    ctx.spawn(&hog("t/wb", 3), 60)?;
    ctx.check_on_scx(w);
    // The kernel's CFS does not get there: it shares per CPU, so the lone thread's group
    // competes on one CPU only (measured 0.6 : 1.4). Figures only in --cfs mode.
    let r = split(ctx, "threads_1_3", crate::runner::WINDOW)?;
    if ctx.has_sched() {
        expect(ctx, "threads_1_3", r, 1.0);
    }
    ctx.kill_works(w);

    // Nice inside a group: 2 threads at nice 0 and 2 at nice 5, split 1024 : 335 = 3.06 as
    // CFS splits it (not 100 : 33, the rounded p->scx.weight sched_ext hands over; see
    // weight.bpf.h). 8 s for the same reason as the 100 : 300 split (the nice-5 threads'
    // slices cost 8 times their length in vtime).
    let w = ctx.spawn(&hog("t/wn", 2), 60)?;
    let n5 = ctx.spawn(&hog("t/wn", 2), 60)?;
    ctx.check_on_scx(w);
    let (p0, p5) = (ctx.workload_pid(w).ok_or("hog gone")?, ctx.workload_pid(n5).ok_or("hog gone")?);
    renice_threads(p5, 3, 5)?;
    sleep(crate::runner::WARMUP);
    let ticks = || -> Result<(u64, u64), String> {
        Ok((crate::sched::cpu_ticks(p0).ok_or("hog gone")?, crate::sched::cpu_ticks(p5).ok_or("hog gone")?))
    };
    let before = ticks()?;
    sleep(crate::runner::WINDOW * 2);
    let after = ticks()?;
    let (t0, t5) = (after.0 - before.0, after.1 - before.1);
    ctx.figure("nice_0_5.ticks", format!("{t0}:{t5}"));
    let want = 1024.0 / 335.0;
    expect(ctx, "nice_0_5", t0 as f64 / t5.max(1) as f64, want);
    ctx.kill_works(w);

    // Nice 0 against nice 19 on one CPU: CFS's weights 1024 : 15 = 68.3. With the weights
    // sched_ext hands over (100 : 1) it would be 100. The nice-19 thread gets about 1/69 of
    // the CPU, a dozen slices over 10 s, so the run times come from schedstat (ns), not ticks.
    let pinned = |cgroup| Workload { cgroup, work: Work::Hog { threads: 1 }, pin: Some(1) };
    let w = ctx.spawn(&pinned("t/wn"), 60)?;
    let n19 = ctx.spawn(&pinned("t/wn"), 60)?;
    ctx.check_on_scx(w);
    let (p0, p19) = (ctx.workload_pid(w).ok_or("hog gone")?, ctx.workload_pid(n19).ok_or("hog gone")?);
    renice_threads(p19, 2, 19)?;
    sleep(crate::runner::WARMUP);
    let run = || -> Result<(u64, u64), String> {
        Ok((process_cpu(p0).ok_or("hog gone")?.0, process_cpu(p19).ok_or("hog gone")?.0))
    };
    let before = run()?;
    sleep(Duration::from_secs(10));
    let after = run()?;
    let (r0, r19) = (after.0 - before.0, after.1 - before.1);
    ctx.figure("nice_0_19.ms", format!("{}:{}", r0 / 1_000_000, r19 / 1_000_000));
    expect_within(ctx, "nice_0_19", r0 as f64 / r19.max(1) as f64, 1024.0 / 15.0, NICE_19_TOL);
    ctx.kill_works(w);

    // Extreme weights: a nice-19 thread beside a nice-0 one in a group of weight 1, two
    // hogs in a sibling of weight 10000. Its share is about 1e-6: at 5 ms per slice, exact
    // vtime would make it wait hours between slices (the watchdog ejects at 30 s). Every
    // thread must keep running: the longest gap between two of its slices is bounded.
    write_cpu_weight("t/wa", 1)?;
    write_cpu_weight("t/wb", 10000)?;
    let w = ctx.spawn(&hog("t/wa", 1), 60)?;
    let n19 = ctx.spawn(&hog("t/wa", 1), 60)?;
    ctx.spawn(&hog("t/wb", 2), 60)?;
    ctx.check_on_scx(w);
    let p19 = ctx.workload_pid(n19).ok_or("hog gone")?;
    renice_threads(p19, 2, 19)?;
    sleep(crate::runner::WARMUP);
    let pids: Vec<u32> = (w..w + 3).filter_map(|i| ctx.workload_pid(i)).collect();
    let gaps = longest_gaps(&pids, Duration::from_secs(12))?;
    let (worst_tid, worst) = gaps.iter().max_by_key(|g| g.1).copied().ok_or("no hog threads")?;
    ctx.figure("extreme.threads", gaps.len());
    ctx.figure("extreme.longest_gap_ms", worst.as_millis());
    if ctx.has_sched() && worst > EXTREME_MAX_GAP {
        ctx.fail(format!("extreme weights: thread {worst_tid} went {} ms without CPU", worst.as_millis()));
    }
    ctx.kill_works(w);
    Ok(())
}

/// Longest time a hog thread may go without CPU in the extreme-weights phase: the vtime
/// lead cap (1 s) worth of the others' slices, then its own turn.
const EXTREME_MAX_GAP: Duration = Duration::from_millis(2500);

/// For every worker thread (not the main thread) of `pids`: the longest stretch of
/// `window` in which its CPU time did not grow, sampled every 50 ms. A thread that never
/// ran in the window reports the whole window.
fn longest_gaps(pids: &[u32], window: Duration) -> Result<Vec<(u32, Duration)>, String> {
    let runtime = |pid: u32, tid: u32| crate::sched::thread_schedstat(pid, tid).map(|s| s.0);
    let mut threads: Vec<(u32, u32, u64, Instant, Duration)> = Vec::new();
    for &pid in pids {
        let tids = crate::sched::threads(pid);
        if tids.is_empty() {
            return Err(format!("/proc/{pid}/task: process gone"));
        }
        for tid in tids {
            if tid != pid {
                let r = runtime(pid, tid).ok_or(format!("thread {tid} gone"))?;
                threads.push((pid, tid, r, Instant::now(), Duration::ZERO));
            }
        }
    }
    let end = Instant::now() + window;
    while Instant::now() < end {
        sleep(Duration::from_millis(50));
        let now = Instant::now();
        for (pid, tid, last, since, worst) in &mut threads {
            let r = runtime(*pid, *tid).ok_or(format!("thread {tid} gone"))?;
            if r != *last {
                *last = r;
                *since = now;
            }
            *worst = (*worst).max(now - *since);
        }
    }
    Ok(threads.into_iter().map(|t| (t.1, t.4)).collect())
}

/// Sets nice `nice` on every thread of `pid`, once it has `threads` of them (a hog's
/// workers start after it joined its cgroup).
pub(super) fn renice_threads(pid: u32, threads: usize, nice: i32) -> Result<(), String> {
    let tids = || crate::sched::threads(pid);
    if !crate::sched::wait_for(Duration::from_secs(5), || tids().len() >= threads) {
        return Err(format!("pid {pid}: {} threads, expected {threads}", tids().len()));
    }
    for tid in tids() {
        // SAFETY: plain syscall; PRIO_PROCESS with a thread id sets that thread's nice.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
            return Err(format!("setpriority({tid}, {nice}): {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "weights",
            about: "cpu.weight 100:300 splits CPU 1:3, reweighting to 100:100 evens it, 1 vs 3 threads at equal weight get equal shares, nice 0:5 inside a group 3.06:1, nice 0:19 on one CPU 68:1, no thread starves at weights 1 and 10000 with nice 19",
            needs_sched: false,
            limits: vec![],
            cgroups: vec!["t/wa", "t/wb", "t/wn"],
            body: Body::Custom(weights),
        },
    ]
}
