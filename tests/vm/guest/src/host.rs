//! `hostwatch`: runs on the host, between qemu's serial console and the log. It passes every
//! line through and measures, for each scenario, what the host did while the guest ran it.
//!
//! Under TCG the guest's clock follows the host's, so a vCPU thread that the host does not
//! run still advances guest time: the task that was on that vCPU is charged the stall, and a
//! limited group runs into debt for CPU it never had. Two things take CPU from qemu's
//! vCPU threads: the hypervisor under this machine (host **steal**, the 8th value of
//! /proc/stat's `cpu` line) and other processes on this machine, which make qemu's threads
//! **wait** on a run queue. The guest prints `SCENARIO_BEGIN name` before each scenario and
//! its verdict line after; at each we read /proc/stat, qemu's own CPU time (/proc/PID/stat)
//! and its threads' run-queue waits (/proc/PID/task/*/schedstat), and append the window's
//! figures to the verdict line:
//!
//!   host_steal_pct  steal as a share of the host's CPU capacity (all CPUs, as vmstat's `st`)
//!   host_wait_pct   time qemu's vCPU threads were runnable but not running, same unit: what other
//!                   processes took from qemu (a niced build on a CPU the guest leaves idle
//!                   costs it nothing and does not count)
//!   host_other_pct  busy time of everything but qemu, same unit (the noise figure when the
//!                   guest has more vCPUs than the host has CPUs: tests/vm/run)
//!   host_qemu_pct   qemu's CPU time, same unit
//!   host_niced_pct  the part of host_other_pct run at a positive nice (/proc/stat's `nice`):
//!                   a niced build yields to qemu, a load at nice 0 or realtime does not
//!   host_stall_pct  (only while `hostload --stall-ms` runs) the share of wall time qemu was
//!                   stopped: every vCPU lost it, so it is also a share of the capacity
//!
//! `tests/vm/run` reads them to tell host noise from a regression.
//!
//! `hostload` makes such noise on purpose, and the same every time, in two forms:
//! - `--pct P`: on each host CPU a SCHED_FIFO thread pinned there burns P ms of every
//!   100 ms (absolute deadlines, so the duty cycle does not drift), taking that share of each
//!   CPU from qemu's threads and from everything else (a build included);
//! - `--stall-ms S --every-ms E --pidfile F`: SIGSTOP and SIGCONT the process in F (qemu) so
//!   it is stopped S ms of every E ms: every vCPU stalls at once while guest time goes on,
//!   which is what hypervisor steal does to this machine's qemu.
//!
//! With them a noisy host can be reproduced, and scx_bandwidth compared with the kernel's
//! CFS under the same stalls.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Cumulative host CPU figures at one instant, in clock ticks (USER_HZ).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Every tick of every CPU (idle and iowait included).
    pub total: u64,
    /// Ticks some process or the kernel ran: user, nice, system, irq, softirq.
    pub busy: u64,
    /// Ticks the hypervisor gave to other guests.
    pub steal: u64,
    /// Of `busy`, ticks of processes at a positive nice.
    pub nice: u64,
    /// qemu's user + system ticks (all its threads).
    pub qemu: u64,
    /// Time qemu's threads waited on a run queue, ns (threads alive at the sample).
    pub qemu_wait_ns: u64,
    /// CLOCK_MONOTONIC, ns.
    pub mono_ns: u64,
    /// Time qemu was stopped by `hostload --stall-ms` so far, ns (None: no staller).
    pub stalled_ns: Option<u64>,
}

/// The host's figures over one scenario, in percent of the host's CPU capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Noise {
    pub steal_pct: f64,
    pub other_pct: f64,
    pub qemu_pct: f64,
    pub niced_pct: f64,
    pub wait_pct: f64,
    pub stall_pct: Option<f64>,
}

impl Noise {
    pub fn between(a: &Sample, b: &Sample) -> Option<Noise> {
        let total = b.total.checked_sub(a.total).filter(|&t| t > 0)? as f64;
        let busy = b.busy.saturating_sub(a.busy);
        let qemu = b.qemu.saturating_sub(a.qemu);
        let pct = |x: u64| x as f64 * 100.0 / total;
        Some(Noise {
            steal_pct: pct(b.steal.saturating_sub(a.steal)),
            // qemu's ticks are sampled per process and the host's per CPU: they can disagree
            // by a tick or two, never make "other" negative.
            other_pct: pct(busy.saturating_sub(qemu)),
            qemu_pct: pct(qemu),
            niced_pct: pct(b.nice.saturating_sub(a.nice)),
            // Ticks to ns: the capacity in ns is total ticks × (1e9 / USER_HZ).
            wait_pct: b.qemu_wait_ns.saturating_sub(a.qemu_wait_ns) as f64 * 100.0
                / (total * 1e9 / crate::sched::clock_ticks() as f64),
            stall_pct: match (a.stalled_ns, b.stalled_ns) {
                (Some(x), Some(y)) if b.mono_ns > a.mono_ns => {
                    Some(y.saturating_sub(x) as f64 * 100.0 / (b.mono_ns - a.mono_ns) as f64)
                }
                _ => None,
            },
        })
    }

    /// The figures as they go on the verdict line.
    pub fn fields(&self) -> String {
        let mut f = format!(
            "host_steal_pct={:.1} host_wait_pct={:.1} host_other_pct={:.1} host_qemu_pct={:.1} host_niced_pct={:.1}",
            self.steal_pct, self.wait_pct, self.other_pct, self.qemu_pct, self.niced_pct
        );
        if let Some(s) = self.stall_pct {
            f += &format!(" host_stall_pct={s:.1}");
        }
        f
    }
}

/// The `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal ...
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if v.len() < 8 {
        return None;
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6];
    Some((v.iter().sum(), busy, v[7]))
}

/// The `nice` value of /proc/stat's `cpu` line: ticks of processes at a positive nice.
pub fn parse_proc_stat_nice(text: &str) -> Option<u64> {
    text.lines().find(|l| l.starts_with("cpu "))?.split_whitespace().nth(2)?.parse().ok()
}

/// qemu's (CPU ticks, run-queue wait ns of its vCPU threads); zeros before it started.
fn qemu_figures(pidfile: &Path) -> (u64, u64) {
    use crate::sched::{cpu_ticks, thread_schedstat, threads};
    let Some(pid) = std::fs::read_to_string(pidfile).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
        return (0, 0);
    };
    // The vCPU threads ("CPU 0/TCG", ...) only: qemu's other threads queue behind them on
    // a busy guest, a wait no other process causes (3-4 % on a quiet host counted over all).
    let vcpu = |tid: u32| std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).is_ok_and(|c| c.contains("/TCG"));
    let wait = threads(pid).into_iter().filter(|&t| vcpu(t)).filter_map(|t| thread_schedstat(pid, t)).map(|(_, w, _)| w).sum();
    (cpu_ticks(pid).unwrap_or(0), wait)
}

/// Where `hostload --stall-ms` keeps its running total (ns) for the watcher: beside the pidfile.
fn stall_file(pidfile: &Path) -> PathBuf {
    pidfile.with_extension("stalled")
}

fn sample(pidfile: &Path) -> Option<Sample> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let (total, busy, steal) = parse_proc_stat(&text)?;
    let nice = parse_proc_stat_nice(&text)?;
    let stalled_ns = std::fs::read_to_string(stall_file(pidfile)).ok().and_then(|s| s.trim().parse().ok());
    let (qemu, qemu_wait_ns) = qemu_figures(pidfile);
    Some(Sample { total, busy, steal, nice, qemu, qemu_wait_ns, mono_ns: crate::workload::mono_ns(), stalled_ns })
}

/// What a console line means to the watcher.
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    Begin(&'a str),
    Verdict(&'a str),
    Other,
}

pub fn classify(line: &str) -> Line<'_> {
    if let Some(name) = line.strip_prefix("SCENARIO_BEGIN ") {
        return Line::Begin(name.trim());
    }
    if let Some(rest) = line.strip_prefix("SCENARIO ") {
        let mut w = rest.split_whitespace();
        if let (Some(name), Some("PASS" | "FAIL" | "SKIP")) = (w.next(), w.next()) {
            return Line::Verdict(name);
        }
    }
    Line::Other
}

/// Copies `input` to `out` line by line, appending the host's figures to each verdict line
/// whose scenario began in `input`. `now` takes a sample (a parameter for the tests).
pub fn annotate(input: impl BufRead, mut out: impl Write, mut now: impl FnMut() -> Option<Sample>) -> std::io::Result<()> {
    let mut begun: Option<(String, Sample)> = None;
    for line in input.split(b'\n') {
        let mut line = String::from_utf8_lossy(&line?).trim_end_matches('\r').to_string();
        match classify(&line) {
            Line::Begin(name) => begun = now().map(|s| (name.to_string(), s)),
            Line::Verdict(name) => {
                let window = begun.take().filter(|(n, _)| n == name);
                if let Some(n) = window.and_then(|(_, a)| Noise::between(&a, &now()?)) {
                    // Before a FAIL's free-text reason, so the figures stay key=value.
                    let at = line.find(" reason=").unwrap_or(line.len());
                    line.insert_str(at, &format!(" {}", n.fields()));
                }
            }
            Line::Other => {}
        }
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    Ok(())
}

/// `scxbw-guest hostwatch --pidfile FILE`: qemu's console on stdin, the annotated log on stdout.
pub fn run(argv: &[String]) -> Result<(), String> {
    let p = crate::args::parse(argv, &["pidfile"], &[])?;
    let pidfile = PathBuf::from(p.str("pidfile").ok_or("--pidfile is required")?);
    let stdin = std::io::stdin();
    annotate(stdin.lock(), std::io::stdout().lock(), || sample(&pidfile)).map_err(|e| e.to_string())
}

/// Cycle of the `hostload` threads: short against the 100 ms periods the scenarios use, so
/// every period sees the same share of stalls.
const LOAD_CYCLE_NS: u64 = 100_000_000;

/// `scxbw-guest hostload --pct P --seconds S`: P % of every host CPU, for S seconds; or
/// with `--stall-ms S --every-ms E --pidfile F`, stops F's process S ms of every E ms; or
/// with `--vcpu-stall-ms S --every-ms E --pidfile F`, holds each of F's vCPU threads S ms
/// of every E ms, one after the other (`vcpu_stall`).
pub fn load(argv: &[String]) -> Result<(), String> {
    use crate::workload::mono_ns;
    let p = crate::args::parse(argv, &["pct", "seconds", "stall-ms", "vcpu-stall-ms", "every-ms", "pidfile"], &[])?;
    if p.str("stall-ms").is_some() {
        return stall(p.req_u64("stall-ms")?, p.req_u64("every-ms")?, Path::new(p.str("pidfile").ok_or("--pidfile is required with --stall-ms")?), p.req_u64("seconds")?);
    }
    if p.str("vcpu-stall-ms").is_some() {
        let pidfile = p.str("pidfile").ok_or("--pidfile is required with --vcpu-stall-ms")?;
        return vcpu_stall(p.req_u64("vcpu-stall-ms")?, p.req_u64("every-ms")?, Path::new(pidfile), p.req_u64("seconds")?);
    }
    let pct = p.req_u64("pct")?;
    if !(1..=90).contains(&pct) {
        return Err(format!("--pct {pct}: must be 1..90 (RT throttling caps a CPU at 95 %)"));
    }
    let seconds = p.req_u64("seconds")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let burn = LOAD_CYCLE_NS * pct / 100;
    let end = mono_ns() + seconds * 1_000_000_000;
    let start = mono_ns();
    let threads: Vec<_> = (0..cpus).map(|cpu| burner(cpu, start, burn, LOAD_CYCLE_NS, end)).collect();
    println!("HOSTLOAD cpus={cpus} pct={pct} seconds={seconds}");
    join_burners(threads)
}

/// A SCHED_FIFO thread pinned to host CPU `cpu` that spins `burn` ns from `start` on and
/// again every `every` ns (absolute deadlines, CLOCK_MONOTONIC), until `end`.
fn burner(cpu: u64, start: u64, burn: u64, every: u64, end: u64) -> std::thread::JoinHandle<Result<(), String>> {
    use crate::workload::{fifo_self, mono_ns, pin_self, sleep_until_mono};
    std::thread::spawn(move || {
        pin_self(cpu)?;
        fifo_self()?;
        let mut start = start;
        while start < end {
            sleep_until_mono(start);
            while mono_ns() < start + burn {
                std::hint::spin_loop();
            }
            start += every;
        }
        Ok(())
    })
}

fn join_burners(threads: Vec<std::thread::JoinHandle<Result<(), String>>>) -> Result<(), String> {
    for t in threads {
        t.join().map_err(|_| "hostload thread panicked".to_string())??;
    }
    Ok(())
}

/// The live process `pidfile` names, once it names one (before `end`, CLOCK_MONOTONIC ns).
fn wait_for_pid(pidfile: &Path, end: u64) -> Result<i32, String> {
    loop {
        let pid: i32 = std::fs::read_to_string(pidfile).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        // SAFETY: signal 0 only checks that the process exists.
        if pid > 0 && unsafe { libc::kill(pid, 0) } == 0 {
            return Ok(pid);
        }
        if crate::workload::mono_ns() > end {
            return Err(format!("{}: no process to stall", pidfile.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Stops the process named by `pidfile` for `stall_ms` of every `every_ms`, for `seconds`
/// (waiting for the file to name a live process first). Always leaves it running.
fn stall(stall_ms: u64, every_ms: u64, pidfile: &Path, seconds: u64) -> Result<(), String> {
    use crate::workload::{mono_ns, sleep_until_mono};
    if stall_ms == 0 || stall_ms >= every_ms {
        return Err(format!("--stall-ms {stall_ms} must be in 1..--every-ms ({every_ms})"));
    }
    let end = mono_ns() + seconds * 1_000_000_000;
    let pid = wait_for_pid(pidfile, end)?;
    println!("HOSTLOAD pid={pid} stall_ms={stall_ms} every_ms={every_ms}");
    let (total, tmp) = (stall_file(pidfile), pidfile.with_extension("stalled.tmp"));
    let mut start = mono_ns();
    let (mut stalls, mut stalled_ns) = (0u64, 0u64);
    while start < end {
        // SAFETY: plain signals to a process we started (through tests/vm/run).
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            break; // it exited
        }
        let t0 = mono_ns();
        sleep_until_mono(start + stall_ms * 1_000_000);
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        stalled_ns += mono_ns() - t0;
        // Renamed into place, so the watcher never reads half a number.
        if std::fs::write(&tmp, stalled_ns.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &total);
        }
        stalls += 1;
        start += every_ms * 1_000_000;
        sleep_until_mono(start);
    }
    println!("HOSTLOAD stalls={stalls}");
    Ok(())
}

/// qemu's vCPU threads of process `pid` ("CPU N/TCG", named with -name debug-threads=on):
/// (N, tid), by N.
fn vcpu_threads(pid: i32) -> Vec<(usize, i32)> {
    let mut out: Vec<(usize, i32)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((comm.trim().strip_prefix("CPU ")?.strip_suffix("/TCG")?.parse().ok()?, tid))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Holds each vCPU thread of the qemu named by `pidfile` off its CPU for `stall_ms` of every
/// `every_ms`, for `seconds`: vCPU k's thread is pinned to host CPU k, where a SCHED_FIFO
/// thread burns `stall_ms` starting k × every_ms / vCPUs into each cycle. One vCPU stalls
/// while the others run, as a host that preempts some of qemu's threads does (`--pct` hits
/// them at random; `--stall-ms` stops them all at once): what runs on the stalled vCPU,
/// its timers included, waits, while the rest of the guest goes on. Needs no more vCPUs
/// than host CPUs.
fn vcpu_stall(stall_ms: u64, every_ms: u64, pidfile: &Path, seconds: u64) -> Result<(), String> {
    use crate::workload::mono_ns;
    if stall_ms == 0 || stall_ms >= every_ms {
        return Err(format!("--vcpu-stall-ms {stall_ms} must be in 1..--every-ms ({every_ms})"));
    }
    let end = mono_ns() + seconds * 1_000_000_000;
    let pid = wait_for_pid(pidfile, end)?;
    let vcpus = loop {
        let v = vcpu_threads(pid);
        if !v.is_empty() || mono_ns() > end {
            break v;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if vcpus.is_empty() || vcpus.len() > cpus {
        return Err(format!("{} vCPU threads (\"CPU N/TCG\") in process {pid} for {cpus} host CPUs: need 1..={cpus}", vcpus.len()));
    }
    for &(n, tid) in &vcpus {
        // SAFETY: cpu_set_t is plain data; n < cpus <= CPU_SETSIZE.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(n, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set)
        };
        if rc != 0 {
            return Err(format!("pinning vCPU {n} (thread {tid}) to CPU {n}: {}", std::io::Error::last_os_error()));
        }
    }
    println!("HOSTLOAD pid={pid} vcpus={} vcpu_stall_ms={stall_ms} every_ms={every_ms}", vcpus.len());
    let (stall, every, k) = (stall_ms * 1_000_000, every_ms * 1_000_000, vcpus.len() as u64);
    let base = mono_ns();
    let threads: Vec<_> = (0..k).map(|n| burner(n, base + n * every / k, stall, every, end)).collect();
    join_burners(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat() {
        let t = "cpu  100 5 20 800 10 3 2 60 0 0\ncpu0 50 2 10 400 5 1 1 30 0 0\n";
        assert_eq!(parse_proc_stat(t), Some((1000, 130, 60)));
        assert_eq!(parse_proc_stat("cpu0 1 2 3\n"), None);
        assert_eq!(parse_proc_stat_nice(t), Some(5));
    }

    #[test]
    fn shares_of_capacity() {
        // 2000 ticks of capacity = 20 s at USER_HZ 100; qemu's threads waited 3 s of them.
        let hz = crate::sched::clock_ticks();
        let ns = |ticks: u64| ticks * 1_000_000_000 / hz;
        let a = Sample { total: 1000, busy: 300, steal: 10, nice: 0, qemu: 200, qemu_wait_ns: ns(100), mono_ns: 0, stalled_ns: None };
        let b = Sample { total: 3000, busy: 1500, steal: 410, nice: 100, qemu: 1100, qemu_wait_ns: ns(400), mono_ns: 10_000, stalled_ns: None };
        let n = Noise::between(&a, &b).unwrap();
        assert_eq!((n.steal_pct, n.other_pct, n.qemu_pct, n.niced_pct, n.stall_pct), (20.0, 15.0, 45.0, 5.0, None));
        assert!((n.wait_pct - 15.0).abs() < 1e-9, "{}", n.wait_pct);
        assert_eq!(Noise::between(&b, &b), None);
        let stalled = |s: &Sample, ns| Sample { stalled_ns: Some(ns), ..*s };
        let n = Noise::between(&stalled(&a, 500), &stalled(&b, 2500)).unwrap();
        assert_eq!(n.stall_pct, Some(20.0));
        assert!(n.fields().ends_with(" host_stall_pct=20.0"), "{}", n.fields());
    }

    #[test]
    fn verdicts_get_the_window_of_their_own_scenario() {
        let log = "boot\r\nSCENARIO_BEGIN a\nSCENARIO a PASS ratio=1.0\r\nSCENARIO b SKIP reason=x\n\
                   SCENARIO_BEGIN c\n# noise\nSCENARIO c FAIL ratio=2 reason=a b\n";
        let mut t = 0u64;
        let mut out = Vec::new();
        annotate(log.as_bytes(), &mut out, || {
            t += 1000;
            Some(Sample { total: t, busy: t / 2, steal: t / 10, nice: 0, qemu: t / 4, qemu_wait_ns: 0, mono_ns: t, stalled_ns: None })
        })
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "boot");
        assert_eq!(lines[2], "SCENARIO a PASS ratio=1.0 host_steal_pct=10.0 host_wait_pct=0.0 host_other_pct=25.0 host_qemu_pct=25.0 host_niced_pct=0.0");
        assert_eq!(lines[3], "SCENARIO b SKIP reason=x");
        assert!(lines[6].starts_with("SCENARIO c FAIL ratio=2 host_steal_pct=10.0"), "{}", lines[6]);
        assert!(lines[6].ends_with("host_niced_pct=0.0 reason=a b"), "{}", lines[6]);
        assert_eq!(classify("SCENARIO_BEGIN x"), Line::Begin("x"));
        assert_eq!(classify("SCENARIO x RUNNING"), Line::Other);
    }
}
