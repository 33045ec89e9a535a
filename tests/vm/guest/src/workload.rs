//! CPU workloads run inside test cgroups: `hog` (pure busy loops) and `duty` (burn X ms of
//! CPU, sleep Y ms, report how long each burn took in wall time — throttling shows up as
//! burns that take far longer than X).

use crate::args;
use crate::cgroup;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Options shared by both workloads.
pub struct Common {
    pub threads: u64,
    pub seconds: u64,
    cgroup: Option<String>,
    pin: Option<u64>,
}

fn common(p: &args::Parsed) -> Result<Common, String> {
    let c = Common {
        threads: p.req_u64("threads")?,
        seconds: p.req_u64("seconds")?,
        cgroup: p.str("cgroup").map(str::to_string),
        pin: p.u64("pin")?,
    };
    if c.threads == 0 || c.threads > 1024 {
        return Err("--threads must be 1..1024".into());
    }
    Ok(c)
}

/// Joins the cgroup and sets affinity before any worker exists, so every thread starts
/// (and is accounted) in the right place; threads inherit both from the main thread.
pub fn place(c: &Common) -> Result<(), String> {
    if let Some(rel) = &c.cgroup {
        cgroup::move_self(rel)?;
    }
    if let Some(cpu) = c.pin {
        pin_self(cpu)?;
    }
    Ok(())
}

/// Restricts the calling thread (and threads it creates later) to `cpu`.
pub fn pin_self(cpu: u64) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as u64 {
        return Err(format!("--pin {cpu}: CPU number too large"));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET is bounds-checked above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            return Err(format!("--pin {cpu}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time consumed by the calling thread, in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_MONOTONIC in ns (the clock the scenario runner measures windows with).
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Sleeps until CLOCK_MONOTONIC reaches `target_ns` (absolute: no drift from the work
/// done between sleeps), retrying on EINTR.
pub fn sleep_until_mono(target_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (target_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (target_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec; null remainder is allowed with TIMER_ABSTIME.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

/// A short stretch of work the optimiser cannot remove.
#[inline(never)]
fn spin(n: u64) -> u64 {
    let mut x = black_box(0x9E37_79B9_7F4A_7C15u64);
    for i in 0..n {
        x = x.rotate_left(5) ^ i.wrapping_mul(0x100_0000_01B3);
    }
    black_box(x)
}

/// Parsed `hog` arguments (errors here are usage errors).
pub fn hog_args(argv: &[String]) -> Result<Common, String> {
    common(&args::parse(
        argv,
        &["threads", "seconds", "cgroup", "pin"],
        &[],
    )?)
}

pub fn hog(c: Common) -> Result<(), String> {
    place(&c)?;
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..c.threads)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    spin(1000);
                }
            })
        })
        .collect();
    // The main thread only sleeps, so the hog's CPU use is exactly N threads' worth.
    thread::sleep(Duration::from_secs(c.seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| "hog thread panicked".to_string())?;
    }
    Ok(())
}

/// Parsed `forks` arguments.
pub fn forks_args(argv: &[String]) -> Result<Common, String> {
    hog_args(argv)
}

/// A fork storm: each thread forks a child that exits at once and reaps it, in a loop;
/// prints `FORKS n=COUNT` at the end.
pub fn forks(c: Common) -> Result<(), String> {
    place(&c)?;
    let deadline = Instant::now() + Duration::from_secs(c.seconds);
    let workers: Vec<_> = (0..c.threads)
        .map(|_| {
            thread::spawn(move || -> Result<u64, String> {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    // SAFETY: the child only calls _exit, which is async-signal-safe.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        unsafe { libc::_exit(0) };
                    }
                    if pid < 0 {
                        return Err(format!("fork: {}", std::io::Error::last_os_error()));
                    }
                    let mut st = 0;
                    // SAFETY: valid out pointer, our own child.
                    if unsafe { libc::waitpid(pid, &mut st, 0) } != pid {
                        return Err(format!("waitpid {pid}: {}", std::io::Error::last_os_error()));
                    }
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for w in workers {
        total += w.join().map_err(|_| "fork thread panicked".to_string())??;
    }
    println!("FORKS n={total}");
    Ok(())
}

/// Parsed `pingpong` arguments (--threads is the number of pairs).
pub fn pingpong_args(argv: &[String]) -> Result<Common, String> {
    hog_args(argv)
}

/// Pipe ping-pong: each pair of threads passes one byte back and forth through two
/// pipes, so every round trip is two wakeups of a sleeping thread; prints
/// `PINGPONG n=ROUND_TRIPS` at the end. The scheduler's cost per wakeup shows in the count.
pub fn pingpong(c: Common) -> Result<(), String> {
    place(&c)?;
    let deadline = Instant::now() + Duration::from_secs(c.seconds);
    let one = |fd: i32, write: bool| -> bool {
        let mut b = [0u8; 1];
        // SAFETY: one byte from/to a valid buffer on a pipe end we own.
        let n = unsafe {
            if write {
                libc::write(fd, b.as_ptr().cast(), 1)
            } else {
                libc::read(fd, b.as_mut_ptr().cast(), 1)
            }
        };
        n == 1
    };
    let mut pairs = Vec::new();
    for _ in 0..c.threads {
        let (ping_r, ping_w) = pipe()?;
        let (pong_r, pong_w) = pipe()?;
        // The echo side ends when the other closes its end (read returns 0).
        let echo = thread::spawn(move || {
            while one(ping_r, false) && one(pong_w, true) {}
            // SAFETY: our own fds, closed once.
            unsafe {
                libc::close(ping_r);
                libc::close(pong_w);
            }
        });
        let lead = thread::spawn(move || -> Result<u64, String> {
            let mut n = 0u64;
            while Instant::now() < deadline {
                if !(one(ping_w, true) && one(pong_r, false)) {
                    return Err(format!("pipe: {}", std::io::Error::last_os_error()));
                }
                n += 1;
            }
            // SAFETY: our own fds, closed once.
            unsafe {
                libc::close(ping_w);
                libc::close(pong_r);
            }
            Ok(n)
        });
        pairs.push((lead, echo));
    }
    let mut total = 0;
    for (lead, echo) in pairs {
        total += lead.join().map_err(|_| "pingpong thread panicked".to_string())??;
        echo.join().map_err(|_| "pingpong thread panicked".to_string())?;
    }
    println!("PINGPONG n={total}");
    Ok(())
}

/// Parsed `gaps` arguments.
pub fn gaps_args(argv: &[String]) -> Result<Common, String> {
    hog_args(argv)
}

/// One busy thread that watches the clock: every stretch of more than 2 ms in which it
/// did not run (it was throttled, or waited for a CPU) is printed as
/// `GAP end_ns=T len_ns=L cpu=A>B` (CLOCK_MONOTONIC; the CPU it ran on before and after)
/// when it runs again.
pub fn gaps(c: Common) -> Result<(), String> {
    const MIN_GAP_NS: u64 = 2_000_000;
    place(&c)?;
    let t = thread::spawn(move || {
        let end = mono_ns() + c.seconds * 1_000_000_000;
        let mut seen = Vec::new();
        let mut last = mono_ns();
        // SAFETY: sched_getcpu has no preconditions.
        let mut cpu = unsafe { libc::sched_getcpu() };
        while last < end {
            let now = mono_ns();
            // SAFETY: as above.
            let here = unsafe { libc::sched_getcpu() };
            if now - last > MIN_GAP_NS {
                seen.push((now, now - last, cpu, here));
            }
            (last, cpu) = (now, here);
        }
        seen
    });
    let seen = t.join().map_err(|_| "gaps thread panicked".to_string())?;
    let mut out = String::new();
    for (end, len, from, to) in seen {
        out += &format!("GAP end_ns={end} len_ns={len} cpu={from}>{to}\n");
    }
    print!("{out}");
    Ok(())
}

/// Parsed `ticker` arguments: `--threads 1 --hz N` (wakeups per second).
pub fn ticker_args(argv: &[String]) -> Result<(Common, u64), String> {
    let p = args::parse(argv, &["threads", "seconds", "cgroup", "pin", "hz"], &[])?;
    let hz = p.req_u64("hz")?;
    if !(1..=10_000).contains(&hz) {
        return Err("--hz must be 1..10000".into());
    }
    Ok((common(&p)?, hz))
}

/// A thread that does nothing but wake up `hz` times a second on absolute deadlines,
/// SCHED_FIFO priority 1 like the scheduler's agent: the cost of waking alone, to hold the
/// agent's cost against. Prints `TICKER wakeups=N cpu_ns=T late_p99_us=L`.
pub fn ticker(c: Common, hz: u64) -> Result<(), String> {
    place(&c)?;
    fifo_self()?;
    let step = 1_000_000_000 / hz;
    let (start, cpu0) = (mono_ns(), thread_cpu_ns());
    let end = start + c.seconds * 1_000_000_000;
    let mut late = Vec::new();
    let mut next = start + step;
    while next < end {
        sleep_until_mono(next);
        late.push(mono_ns().saturating_sub(next));
        next += step;
    }
    let cpu = thread_cpu_ns() - cpu0;
    late.sort_unstable();
    let p99 = late.get((late.len().saturating_sub(1) as f64 * 0.99) as usize).copied().unwrap_or(0);
    println!("TICKER wakeups={} cpu_ns={cpu} late_p99_us={}", late.len(), p99 / 1000);
    Ok(())
}

/// Makes the calling thread SCHED_FIFO priority 1 (as the scheduler's agent is).
pub fn fifo_self() -> Result<(), String> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain syscall on this thread with a valid parameter.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(format!("SCHED_FIFO: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A new pipe: (read end, write end).
pub fn pipe() -> Result<(i32, i32), String> {
    let mut fds = [0i32; 2];
    // SAFETY: valid out array of two fds.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    Ok((fds[0], fds[1]))
}

/// Burns `burn_ns` of this thread's CPU time; returns the wall time it took in ns.
pub fn burn(burn_ns: u64) -> u64 {
    let wall0 = mono_ns();
    let cpu0 = thread_cpu_ns();
    while thread_cpu_ns().saturating_sub(cpu0) < burn_ns {
        spin(200);
    }
    mono_ns() - wall0
}

/// This thread's (run queue wait ns, times scheduled in) from /proc/thread-self/schedstat,
/// (0, 0) where the kernel has no schedstat.
fn sched_info() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let f: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (f.get(1).copied().unwrap_or(0), f.get(2).copied().unwrap_or(0))
}

/// `burn` with this thread's run-queue wait and times scheduled in over it (`sched_info`):
/// (wall ns, wait ns, runs).
fn timed_burn(burn_ns: u64) -> (u64, u64, u64) {
    let (delay0, runs0) = sched_info();
    let wall = burn(burn_ns);
    let (delay1, runs1) = sched_info();
    (wall, delay1.saturating_sub(delay0), runs1.saturating_sub(runs0))
}

pub struct DutyArgs {
    common: Common,
    burn_ns: u64,
    sleep: Duration,
    /// The threads run SCHED_FIFO (`--fifo`).
    fifo: bool,
    /// Paced (`--plain`): no run-queue figures per burn, and each sleep lasts until the
    /// thread's CPU time is burn / (burn + sleep) of the wall time since it began. Each
    /// wakeup costs CPU too (6 ms a wakeup under oversubscribed TCG: burn 10 ms, sleep 90
    /// used 0.16 CPU), so fixed sleeps would use more than that share; paced, it uses it.
    plain: bool,
    /// Each burn in a new thread (`--spawn`), created for it and joined: its wall time runs
    /// from the creation to the join, so it includes the new thread's first wait for a CPU.
    spawn: bool,
}

/// Parsed `duty` arguments (errors here are usage errors).
pub fn duty_args(argv: &[String]) -> Result<DutyArgs, String> {
    let p = args::parse(
        argv,
        &["threads", "burn-ms", "sleep-ms", "seconds", "cgroup", "pin"],
        &["fifo", "plain", "spawn"],
    )?;
    let d = DutyArgs {
        common: common(&p)?,
        burn_ns: p.req_u64("burn-ms")? * 1_000_000,
        sleep: Duration::from_millis(p.req_u64("sleep-ms")?),
        fifo: p.switch("fifo"),
        plain: p.switch("plain"),
        spawn: p.switch("spawn"),
    };
    if d.spawn && (d.plain || d.fifo) {
        return Err("--spawn goes with neither --plain nor --fifo".into());
    }
    if d.burn_ns == 0 {
        return Err("--burn-ms must be > 0".into());
    }
    Ok(d)
}

/// Threads that burn `burn_ns` of CPU and sleep, until the deadline. Prints the wall times
/// of the burns as `DUTY burns=N p50_ms=.. p99_ms=.. max_ms=.. first_ms=.. slowest=..`, then
/// every one of them as `DUTY_BURNS ms,ms,..`.
pub fn duty(d: DutyArgs) -> Result<(), String> {
    let DutyArgs {
        common: c,
        burn_ns,
        sleep,
        fifo,
        plain,
        spawn,
    } = d;
    place(&c)?;
    let deadline = Instant::now() + Duration::from_secs(c.seconds);
    let workers: Vec<_> = (0..c.threads)
        .map(|_| {
            thread::spawn(move || {
                if fifo {
                    fifo_self()?;
                }
                // The first burn runs while the process is still starting (threads
                // being created contend for its memory map): a warm-up, not among the
                // burns, reported apart (first_ms).
                let first = burn(burn_ns);
                if !sleep.is_zero() {
                    thread::sleep(sleep);
                }
                let mut walls = Vec::new();
                let (t0, cpu0) = (mono_ns(), thread_cpu_ns());
                let pace = (burn_ns + sleep.as_nanos() as u64) as f64 / burn_ns as f64;
                while plain && Instant::now() < deadline {
                    let start = mono_ns();
                    walls.push((start, burn(burn_ns), 0, 0));
                    sleep_until_mono(t0 + (thread_cpu_ns().saturating_sub(cpu0) as f64 * pace) as u64);
                }
                while Instant::now() < deadline {
                    let start = mono_ns();
                    let (wall, delay, runs) = if spawn {
                        // The new thread's own run-queue figures; the wall time from `start`.
                        thread::spawn(move || {
                            let (_, delay, runs) = timed_burn(burn_ns);
                            (mono_ns() - start, delay, runs)
                        })
                        .join()
                        .map_err(|_| "burn thread panicked".to_string())?
                    } else {
                        timed_burn(burn_ns)
                    };
                    walls.push((start, wall, delay, runs));
                    if !sleep.is_zero() {
                        thread::sleep(sleep);
                    }
                }
                Ok::<_, String>((first, walls))
            })
        })
        .collect();
    // The slowest burns are named (thread, index) with the time they waited on a run
    // queue and how often they were scheduled in, to tell a start-up effect (index 0)
    // or queueing from anything else.
    let mut burns: Vec<(f64, usize, usize, u64, u64)> = Vec::new();
    let mut by_start: Vec<(u64, f64)> = Vec::new();
    let mut first_ns = 0u64;
    for (t, w) in workers.into_iter().enumerate() {
        let (first, v) = w.join().map_err(|_| "duty thread panicked".to_string())??;
        first_ns = first_ns.max(first);
        by_start.extend(v.iter().map(|&(start, ns, ..)| (start, ns as f64 / 1e6)));
        burns.extend(v.into_iter().enumerate().map(|(i, (_, ns, delay, runs))| (ns as f64 / 1e6, t, i, delay, runs)));
    }
    burns.sort_by(|a, b| a.0.total_cmp(&b.0));
    let walls_ms: Vec<f64> = burns.iter().map(|b| b.0).collect();
    let pct = |q| percentile(&walls_ms, q).unwrap_or(f64::NAN);
    let slowest: Vec<String> = burns
        .iter()
        .rev()
        .take(3)
        .map(|(ms, t, i, delay, runs)| format!("{ms:.1}@t{t}#{i}/wait{:.1}/runs{runs}", *delay as f64 / 1e6))
        .collect();
    println!(
        "DUTY burns={} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} first_ms={:.3} slowest={}",
        walls_ms.len(),
        pct(50.0),
        pct(99.0),
        pct(100.0),
        first_ns as f64 / 1e6,
        slowest.join(",")
    );
    // All of them (the warm-ups apart, as above), so a distribution can be drawn, and in the
    // order they started, the threads' interleaved, so a stretch of slow ones shows where it
    // fell in the run. 0.1 ms is finer than any difference compared.
    by_start.sort_by_key(|b| b.0);
    let all: Vec<String> = by_start.iter().map(|b| format!("{:.1}", b.1)).collect();
    println!("DUTY_BURNS {}", all.join(","));
    Ok(())
}

/// Nearest-rank percentile of an ascending slice: the smallest value with at least `q` % of
/// the samples at or below it. No interpolation, so the result is always an observed burn.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&q) {
        return None;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        let w = [2.0, 3.0, 10.0];
        assert_eq!(percentile(&w, 50.0), Some(3.0));
        assert_eq!(percentile(&w, 99.0), Some(10.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&w, 101.0), None);
    }

    #[test]
    fn burn_consumes_cpu_time() {
        let cpu0 = thread_cpu_ns();
        let wall = burn(5_000_000);
        assert!(thread_cpu_ns() - cpu0 >= 5_000_000);
        assert!(wall >= 5_000_000);
    }
}
