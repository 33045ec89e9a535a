//! What the kernel's scheduler core records, whichever scheduler class made the decision,
//! so the kernel's scheduler and scx_bandwidth are observed the same way (tracefs): task
//! migrations (`sched/sched_migrate_task`, fired in set_task_cpu()) and context switches
//! (`sched/sched_switch`). Timestamps are CLOCK_MONOTONIC (trace_clock `mono`), the clock
//! the guest's workloads report in.

use std::fs;
use std::path::Path;

const TRACEFS: &str = "/sys/kernel/tracing";
/// The `sched_migrate_task` event's switch.
pub const MIGRATE: &str = "events/sched/sched_migrate_task/enable";
/// The `sched_switch` event's switch.
pub const SWITCH: &str = "events/sched/sched_switch/enable";
/// The `bpf()` system call's entry and exit (the agent's runs of its syscall programs).
pub const BPF_ENTER: &str = "events/syscalls/sys_enter_bpf/enable";
pub const BPF_EXIT: &str = "events/syscalls/sys_exit_bpf/enable";
/// The return of `ppoll()`, where the agent sleeps between its wakeups.
pub const PPOLL_EXIT: &str = "events/syscalls/sys_exit_ppoll/enable";
/// An IPI sent to one CPU (a kick of an idle CPU is a reschedule IPI).
pub const IPI: &str = "events/ipi/ipi_send_cpu/enable";
/// Per-CPU ring buffer: a record is 50-70 bytes, so 4 MiB per CPU holds tens of
/// thousands; `stop` fails if any were overwritten all the same.
const BUFFER_KB: &str = "4096";

/// One migration: (pid, from CPU, to CPU).
pub type Migration = (u32, usize, usize);

fn write(file: &str, value: &str) -> Result<(), String> {
    fs::write(format!("{TRACEFS}/{file}"), value)
        .map_err(|e| format!("writing '{value}' to {TRACEFS}/{file}: {e}"))
}

fn mount_tracefs() -> Result<(), String> {
    if Path::new(TRACEFS).join("trace").exists() {
        return Ok(());
    }
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let (src, dst, ty) = (c("tracefs"), c(TRACEFS), c("tracefs"));
    // SAFETY: valid NUL-terminated strings, no mount data.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(format!(
            "mounting tracefs at {TRACEFS}: {} (the kernel needs CONFIG_TRACING)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Recording of the given events (MIGRATE, SWITCH) from `start` to `stop`; recording is
/// switched off when dropped.
pub struct Trace {
    events: &'static [&'static str],
    on: bool,
}

impl Trace {
    pub fn start(events: &'static [&'static str]) -> Result<Self, String> {
        mount_tracefs()?;
        write("tracing_on", "0")?;
        write("events/enable", "0")?;
        write("buffer_size_kb", BUFFER_KB)?;
        write("trace_clock", "mono")?;
        write("trace", "")?; // opening with O_TRUNC empties the buffer
        for e in events {
            write(e, "1")?;
        }
        write("tracing_on", "1")?;
        Ok(Self { events, on: true })
    }

    /// Stops recording and returns the trace's text; an error if the buffer lost any event.
    pub fn stop(mut self) -> Result<String, String> {
        self.off();
        let lost = overruns();
        if lost > 0 {
            return Err(format!("the trace buffer overwrote {lost} events ({BUFFER_KB} KiB per CPU)"));
        }
        fs::read_to_string(format!("{TRACEFS}/trace")).map_err(|e| format!("reading {TRACEFS}/trace: {e}"))
    }

    fn off(&mut self) {
        if self.on {
            let _ = write("tracing_on", "0");
            for e in self.events {
                let _ = write(e, "0");
            }
            self.on = false;
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.off();
    }
}

/// Events overwritten in the ring buffer, summed over CPUs (per_cpu/cpuN/stats "overrun:").
fn overruns() -> u64 {
    let Ok(rd) = fs::read_dir(format!("{TRACEFS}/per_cpu")) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path().join("stats")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("overrun:").and_then(|v| v.trim().parse::<u64>().ok()))
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The migrations in a `trace` text: lines "… sched_migrate_task: comm=… pid=P prio=…
/// orig_cpu=A dest_cpu=B".
pub fn migrations(text: &str) -> Vec<Migration> {
    text.lines()
        .filter_map(|l| l.split_once("sched_migrate_task:").map(|(_, rest)| rest))
        .filter_map(|rest| {
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|t| t.strip_prefix(k))
                    .and_then(|v| v.parse::<usize>().ok())
            };
            Some((field("pid=")? as u32, field("orig_cpu=")?, field("dest_cpu=")?))
        })
        .collect()
}

/// One context switch: at `ns` (CLOCK_MONOTONIC) CPU `cpu` began to run task `pid` (0: the
/// idle task) of kernel priority `prio` (under 100: RT or deadline), named `comm`.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub ns: u64,
    pub cpu: usize,
    pub pid: u32,
    pub prio: i32,
    pub comm: String,
}

/// A trace timestamp "SECS.MICROS" (or more digits) in nanoseconds.
fn stamp_ns(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
    Some(secs.parse::<u64>().ok()? * 1_000_000_000 + digits.parse::<u64>().ok()?)
}

/// The context switches in a `trace` text, in the order recorded per CPU: lines "comm-pid
/// [CPU] flags SECS.MICROS: sched_switch: prev_comm=… ==> next_comm=C next_pid=P next_prio=Q".
pub fn switches(text: &str) -> Vec<Switch> {
    marks(text, "sched_switch: ")
        .into_iter()
        .filter_map(|m| {
            let next = m.what.split_once("==> ")?.1;
            let (comm, tail) = next.strip_prefix("next_comm=")?.rsplit_once(" next_pid=")?;
            let (pid, prio) = tail.split_once(" next_prio=")?;
            Some(Switch { ns: m.ns, cpu: m.cpu, pid: pid.parse().ok()?, prio: prio.trim().parse().ok()?, comm: comm.to_string() })
        })
        .collect()
}

/// Any other event: at `ns` on CPU `cpu`, in the context of task `pid`, the event's text
/// after the timestamp (`what`, e.g. "sys_bpf(cmd: a, …)", "ipi_send_cpu: cpu=1 …").
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub ns: u64,
    pub cpu: usize,
    pub pid: u32,
    pub what: String,
}

/// The events of a `trace` text whose text begins with `prefix`: lines "comm-pid [CPU]
/// flags SECS.MICROS: TEXT".
pub fn marks(text: &str, prefix: &str) -> Vec<Mark> {
    text.lines()
        .filter_map(|l| {
            let (task, rest) = l.split_once(" [")?;
            let pid = task.trim().rsplit_once('-')?.1.parse().ok()?;
            let (cpu, rest) = rest.split_once(']')?;
            let (head, what) = rest.split_once(": ")?;
            if !what.starts_with(prefix) {
                return None;
            }
            let ns = stamp_ns(head.split_whitespace().last()?)?;
            Some(Mark { ns, cpu: cpu.parse().ok()?, pid, what: what.to_string() })
        })
        .collect()
}

/// Argument `name` of a system call's entry mark ("sys_bpf(cmd: 0xa, uattr: …)"; the
/// kernel prints them in hex, with "0x" or without).
pub fn syscall_arg(m: &Mark, name: &str) -> Option<u64> {
    let args = m.what.split_once('(')?.1.trim_end_matches(')');
    let v = args.split(", ").find_map(|a| a.strip_prefix(name)?.strip_prefix(": "))?;
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// The target CPU of an `ipi_send_cpu` mark ("ipi_send_cpu: cpu=N callsite=…").
pub fn ipi_target(m: &Mark) -> Option<usize> {
    m.what.strip_prefix("ipi_send_cpu: cpu=")?.split_whitespace().next()?.parse().ok()
}

/// What CPU `cpu` ran from `from` to `to` (ns), by task: pid → (prio, comm, ns). Time before
/// the CPU's first recorded switch is not known and is left out.
pub fn cpu_time(sw: &[Switch], cpu: usize, from: u64, to: u64) -> std::collections::BTreeMap<u32, (i32, String, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let on: Vec<&Switch> = sw.iter().filter(|s| s.cpu == cpu).collect();
    for (i, s) in on.iter().enumerate() {
        let end = on.get(i + 1).map_or(to, |n| n.ns);
        let (a, b) = (s.ns.max(from), end.min(to));
        if b > a {
            out.entry(s.pid).or_insert((s.prio, s.comm.clone(), 0)).2 += b - a;
        }
    }
    out
}

/// CPUs left idle beside waiting tasks, from `from` to `to` (ns): the integral of
/// min(CPUs of `cpus` running their idle task, tasks of `tasks` not running on any CPU), in
/// CPU-seconds. For tasks that never sleep (hogs): a task not on a CPU is waiting for one,
/// so any such time is work the scheduler left undone. A CPU counts from its first recorded
/// switch on (unknown before: not idle), so the trace should start with a switch on every
/// CPU of `cpus` (`poke_cpus`).
pub fn idle_beside_waiting(sw: &[Switch], cpus: &[usize], tasks: &[u32], from: u64, to: u64) -> f64 {
    let mut order: Vec<&Switch> = sw.iter().collect();
    order.sort_by_key(|s| s.ns);
    let mut on: std::collections::BTreeMap<usize, u32> = std::collections::BTreeMap::new();
    let mut total = 0u128;
    let mut at = from;
    let mut account = |on: &std::collections::BTreeMap<usize, u32>, a: u64, b: u64| {
        if b <= a {
            return;
        }
        let idle = on.iter().filter(|(c, pid)| cpus.contains(c) && **pid == 0).count();
        let running = tasks.iter().filter(|t| on.values().any(|p| p == *t)).count();
        total += (idle.min(tasks.len() - running) as u128) * (b - a) as u128;
    };
    for s in order {
        if s.ns > to {
            break;
        }
        if s.ns > at {
            account(&on, at, s.ns);
            at = s.ns;
        }
        on.insert(s.cpu, s.pid);
    }
    account(&on, at, to);
    total as f64 / 1e9
}

/// For each task of `tasks`: the longest stretch from `from` to `to` (ns) in which it had no
/// run on a CPU of at least `min_run` ns. Shorter runs do not end a stretch: a task switched
/// in only to be stopped at once (its group throttled) still waits. A task not seen running
/// at `from` waits from `from` on, so the trace should start with a switch on every CPU
/// (`poke_cpus`). For tasks that never sleep (hogs), the longest wait for real CPU time.
pub fn longest_off_cpu(sw: &[Switch], tasks: &[u32], from: u64, to: u64, min_run: u64) -> Vec<u64> {
    let mut order: Vec<&Switch> = sw.iter().collect();
    order.sort_by_key(|s| s.ns);
    let mut on: std::collections::BTreeMap<usize, u32> = std::collections::BTreeMap::new();
    // Per task: since when it waits, and since when it runs (None: not on a CPU).
    let mut off_since: Vec<u64> = vec![from; tasks.len()];
    let mut run_since: Vec<Option<u64>> = vec![None; tasks.len()];
    let mut worst = vec![0u64; tasks.len()];
    for s in order {
        if s.ns > to {
            break;
        }
        on.insert(s.cpu, s.pid);
        let t = s.ns.max(from);
        for (i, tid) in tasks.iter().enumerate() {
            match (on.values().any(|p| p == tid), run_since[i]) {
                (true, None) => run_since[i] = Some(t),
                (false, Some(r)) => {
                    run_since[i] = None;
                    if t - r >= min_run {
                        worst[i] = worst[i].max(r.saturating_sub(off_since[i]));
                        off_since[i] = t;
                    }
                }
                _ => {}
            }
        }
    }
    for i in 0..tasks.len() {
        let end = match run_since[i] {
            Some(r) if to - r >= min_run => r,
            _ => to,
        };
        worst[i] = worst[i].max(end.saturating_sub(off_since[i]));
    }
    worst
}

/// Makes every CPU of `cpus` switch tasks at least twice (a thread of this process moves
/// onto each in turn and sleeps there 1 ms), so a trace started before it knows what each
/// CPU runs from then on. Leaves the calling thread allowed on every CPU of `cpus`.
pub fn poke_cpus(cpus: &[usize]) -> Result<(), String> {
    let out = cpus.iter().try_for_each(|&c| {
        crate::sched::set_affinity(0, &[c])?;
        std::thread::sleep(std::time::Duration::from_millis(1));
        Ok(())
    });
    crate::sched::set_affinity(0, cpus)?;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_migrate_events_and_skips_the_rest() {
        let text = "# tracer: nop\n\
            #           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
            \x20         <idle>-0       [004] d.s3.   12.345678: sched_migrate_task: comm=hog pid=123 prio=120 orig_cpu=0 dest_cpu=4\n\
            \x20           hog-124     [001] d..2.   12.400000: sched_migrate_task: comm=my hog pid=124 prio=120 orig_cpu=1 dest_cpu=2\n\
            \x20           hog-124     [001] d..2.   12.400001: sched_switch: prev_comm=hog prev_pid=124\n";
        assert_eq!(migrations(text), vec![(123, 0, 4), (124, 1, 2)]);
    }

    #[test]
    fn parses_switches_and_sums_a_cpus_time_by_task() {
        let text = "# tracer: nop\n\
            \x20         <idle>-0       [001] d..2.   10.000000: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=my hog next_pid=7 next_prio=120\n\
            \x20         <idle>-0       [000] d..2.   10.001000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rt next_pid=9 next_prio=98\n\
            \x20             rt-9       [000] d..2.   10.004500: sched_migrate_task: comm=x pid=3 prio=120 orig_cpu=0 dest_cpu=1\n\
            \x20             rt-9       [000] d..2.   10.005000: sched_switch: prev_comm=rt prev_pid=9 prev_prio=98 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n";
        let sw = switches(text);
        assert_eq!(sw.len(), 3);
        assert_eq!(sw[0], Switch { ns: 10_000_000_000, cpu: 1, pid: 7, prio: 120, comm: "my hog".into() });
        assert_eq!((sw[1].pid, sw[1].prio, sw[2].ns), (9, 98, 10_005_000_000));
        // CPU 0 from 10.000 to 10.010: unknown for 1 ms, the RT task 4 ms, idle 5 ms.
        let t = cpu_time(&sw, 0, 10_000_000_000, 10_010_000_000);
        assert_eq!(t.get(&9), Some(&(98, "rt".to_string(), 4_000_000)));
        assert_eq!(t.get(&0).map(|v| v.2), Some(5_000_000));
        assert_eq!(t.len(), 2);
        assert_eq!(stamp_ns("1.5"), Some(1_500_000_000));
    }

    #[test]
    fn parses_other_events_by_their_text() {
        let text = "# tracer: nop\n\
            \x20  scx_bandwidth-212     [001] ..... 20.000100: sys_bpf(cmd: a, uattr: 7ffd1c0, size: 50)\n\
            \x20  scx_bandwidth-212     [001] d.h1. 20.000150: ipi_send_cpu: cpu=0 callsite=resched_curr+0x5f/0x80 callback=0x0\n\
            \x20  scx_bandwidth-212     [001] ..... 20.000200: sys_bpf -> 0x0\n\
            \x20         <idle>-0       [000] d..2. 20.000300: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=hog next_pid=7 next_prio=120\n";
        let calls = marks(text, "sys_bpf(");
        assert_eq!(calls, vec![Mark { ns: 20_000_100_000, cpu: 1, pid: 212, what: "sys_bpf(cmd: a, uattr: 7ffd1c0, size: 50)".into() }]);
        assert_eq!(marks(text, "sys_bpf ->").iter().map(|m| m.ns).collect::<Vec<_>>(), vec![20_000_200_000]);
        assert_eq!((syscall_arg(&calls[0], "cmd"), syscall_arg(&calls[0], "size")), (Some(10), Some(0x50)));
        let hex = Mark { what: "sys_bpf(cmd: 0x0000000a, uattr: 0x7ffd1c0, size: 0x50)".into(), ..calls[0].clone() };
        assert_eq!((syscall_arg(&hex, "cmd"), syscall_arg(&hex, "uattr"), syscall_arg(&hex, "nope")), (Some(10), Some(0x7ffd1c0), None));
        let ipis = marks(text, "ipi_send_cpu:");
        assert_eq!((ipis.len(), ipis[0].pid, ipi_target(&ipis[0])), (1, 212, Some(0)));
        assert!(marks(text, "sched_wakeup:").is_empty());
    }

    #[test]
    fn integrates_idle_cpus_beside_waiting_tasks() {
        let sw = |ns: u64, cpu: usize, pid: u32| Switch { ns, cpu, pid, prio: 120, comm: String::new() };
        // Two hogs (7, 8) on CPUs 0-1; CPU 2 idle from 10. Hog 8 leaves CPU 1 at 20 (a
        // kworker runs) and gets back on CPU 1 at 50: 30 ns waiting beside idle CPU 2.
        // CPU 3 (not in `cpus`) idles throughout and counts for nothing; so does CPU 1 idle
        // from 60 to 70 once hog 8 has moved to CPU 2.
        let t = [sw(0, 0, 7), sw(0, 1, 8), sw(0, 3, 0), sw(10, 2, 0), sw(20, 1, 55), sw(50, 1, 8), sw(60, 2, 8), sw(60, 1, 0), sw(70, 1, 9)];
        let got = idle_beside_waiting(&t, &[0, 1, 2], &[7, 8], 0, 100);
        assert!((got - 30e-9).abs() < 1e-15, "{got}");
        // A window that starts mid-way: 25..40 → 15 ns.
        // Two idle CPUs beside two waiting hogs count twice, then once beside one.
        assert!((idle_beside_waiting(&t, &[0, 1, 2], &[7, 8], 25, 40) - 15e-9).abs() < 1e-15);
        let t2 = [sw(0, 0, 0), sw(0, 1, 0), sw(0, 2, 55), sw(5, 2, 7)];
        assert!((idle_beside_waiting(&t2, &[0, 1], &[7, 8], 0, 10) - (2.0 * 5.0 + 1.0 * 5.0) * 1e-9).abs() < 1e-15);
    }

    #[test]
    fn finds_each_tasks_longest_wait_for_real_cpu_time() {
        let sw = |ns: u64, cpu: usize, pid: u32| Switch { ns, cpu, pid, prio: 120, comm: String::new() };
        // Hog 7 runs on CPU 0 until 10, waits until 40 (30), moves to CPU 1 at 40 while
        // CPU 0 runs 9; hog 8 runs on CPU 1 from 5 to 40 and then waits to the end (100).
        // Task 6 never runs: the whole window. Before the window (from 2) hog 8 was off
        // for 5 - 2 = 3 only.
        let t = [sw(0, 0, 7), sw(0, 1, 55), sw(5, 1, 8), sw(10, 0, 9), sw(40, 1, 7), sw(60, 0, 0)];
        assert_eq!(longest_off_cpu(&t, &[7, 8, 6], 2, 100, 1), vec![30, 60, 98]);
        // A window inside hog 7's wait counts from the window's start.
        assert_eq!(longest_off_cpu(&t, &[7], 20, 30, 1), vec![10]);
        // Hog 7 switched in at 50 for 1 ns only, stopped at once: with runs of at least 2 ns
        // counting, it waits from 10 until 70, where it runs for good.
        let u = [sw(0, 0, 7), sw(10, 0, 9), sw(50, 0, 7), sw(51, 0, 9), sw(70, 0, 7)];
        assert_eq!(longest_off_cpu(&u, &[7], 0, 100, 2), vec![60]);
        assert_eq!(longest_off_cpu(&u, &[7], 0, 100, 1), vec![40]);
    }
}
