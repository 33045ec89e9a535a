//! The scheduler under test as a child process, the sched_ext sysfs state, and the log
//! excerpts (scheduler log, kernel log) printed when a scenario fails.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const STATE: &str = "/sys/kernel/sched_ext/state";
const ROOT_OPS: &str = "/sys/kernel/sched_ext/root/ops";
/// `scx_ops_open!` appends "_VERSION_TARGET" to the ops name, so match the prefix only.
pub const OPS_PREFIX: &str = "scx_bandwidth";
/// The same for the floor scheduler (tests/bench/floor), the benchmarks' yardstick.
pub const FLOOR_OPS_PREFIX: &str = "scxbw_floor";
/// Bound on attach and on detach after SIGINT (the acceptance criteria's 10 s).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

fn read_trim(p: &str) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// "enabled", "disabled", "enabling", "disabling"; None without sched_ext in the kernel.
pub fn state() -> Option<String> {
    read_trim(STATE)
}

/// Name of the attached BPF scheduler (the file exists only while one is attached).
pub fn root_ops() -> Option<String> {
    read_trim(ROOT_OPS)
}

/// Whether every thread of `pid` runs in the ext class, from /proc/PID/task/*/sched's
/// "ext.enabled" line; None if the kernel does not show it. Guards against a scheduler
/// that attaches but leaves the workload on the fair class (e.g. partial mode).
pub fn on_scx(pid: u32) -> Option<bool> {
    let mut seen = None;
    for t in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let s = fs::read_to_string(t.path().join("sched")).unwrap_or_default();
        if let Some(v) = parse_ext_enabled(&s) {
            seen = Some(seen.unwrap_or(true) && v);
        }
    }
    seen
}

fn parse_ext_enabled(sched: &str) -> Option<bool> {
    sched.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "ext.enabled").then(|| v.trim() == "1")
    })
}

/// utime + stime of process `pid` (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = stat_fields(&pid.to_string())?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The fields of /proc/ID/stat (a process or any thread) after the command name, which may
/// contain spaces: the first is the state (field 3 in proc(5)).
pub fn stat_fields(id: &str) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{id}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// A thread's /proc/PID/task/TID/schedstat: (ns on CPU, ns waiting to run, times run).
pub fn thread_schedstat(pid: u32, tid: u32) -> Option<(u64, u64, u64)> {
    let s = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

/// CPU ns and times run of each thread of `pid`, summed by thread name (comm).
pub fn threads_by_name(pid: u32) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut by = std::collections::BTreeMap::new();
    for tid in threads(pid) {
        let (Some((run, _, runs)), Ok(comm)) =
            (thread_schedstat(pid, tid), fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")))
        else {
            continue;
        };
        let e: &mut (u64, u64) = by.entry(comm.trim().to_string()).or_default();
        e.0 += run;
        e.1 += runs;
    }
    by
}

/// CPU ns and times run of every thread of the machine, by (pid, tid), with its name.
pub fn all_threads() -> std::collections::BTreeMap<(u32, u32), (String, u64, u64)> {
    let mut all = std::collections::BTreeMap::new();
    for (pid, tid) in all_tids() {
        if let (Some((run, _, runs)), Ok(comm)) =
            (thread_schedstat(pid, tid), fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")))
        {
            all.insert((pid, tid), (comm.trim().to_string(), run, runs));
        }
    }
    all
}

/// (pid, tid) of every thread of the machine.
pub fn all_tids() -> Vec<(u32, u32)> {
    let Ok(procs) = fs::read_dir("/proc") else { return Vec::new() };
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .flat_map(|pid| threads(pid).into_iter().map(move |tid| (pid, tid)))
        .collect()
}

/// Allows thread `tid` (0: the calling thread) on `cpus` only.
pub fn set_affinity(tid: u32, cpus: &[usize]) -> Result<(), String> {
    // SAFETY: cpu_set_t is plain data; only CPUs below CPU_SETSIZE are set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of_val(&set), &set) != 0 {
            return Err(format!(
                "sched_setaffinity({tid}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Thread ids of process `pid` (empty when it is gone).
pub fn threads(pid: u32) -> Vec<u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// What each thread of `pid`, and every thread of the machine that is runnable (R) or in
/// uninterruptible sleep (D), is doing: state, CPU, wait channel and kernel stack. Printed
/// when a workload does not end when it should, to tell a task the scheduler lost (R for
/// long) from one blocked in the kernel (D, with where).
pub fn stuck_report(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (p, tid) in all_tids() {
        let Some(f) = stat_fields(&tid.to_string()) else {
            continue;
        };
        let state = f.first().map(String::as_str).unwrap_or("?");
        if p != pid && state != "R" && state != "D" {
            continue;
        }
        let read = |what: &str| {
            fs::read_to_string(format!("/proc/{p}/task/{tid}/{what}")).unwrap_or_default()
        };
        let cpu = f.get(36).map(String::as_str).unwrap_or("?");
        let sched = thread_schedstat(p, tid)
            .map(|(r, w, n)| format!("ran {}ms waited {}ms x{n}", r / 1_000_000, w / 1_000_000));
        out.push(format!(
            "{p}/{tid} {} state={state} cpu={cpu} wchan={} {}",
            read("comm").trim(),
            read("wchan").trim(),
            sched.unwrap_or_default()
        ));
        for l in read("stack").lines().take(12) {
            out.push(format!("    {l}"));
        }
    }
    out
}

/// Clock ticks per second (for [`cpu_ticks`]).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory effects.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(20));
    }
}

pub fn describe(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{st}"),
    }
}

pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a child we spawned and have not reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// The scheduler binary, started as `PATH [--config FILE] --stats 1 [EXTRA..]` with both output
/// streams in `log`. Dropping a still-running Sched kills it (SIGKILL), which detaches the
/// BPF scheduler, so a failed or panicking scenario cannot leave it attached.
pub struct Sched {
    child: Option<Child>,
    /// Prefix of its ops name in root/ops once attached.
    ops: &'static str,
}

impl Sched {
    /// `config` None runs it with no configured limits (it refuses an empty file); `stats`
    /// adds `--stats 1` (the table every second, in its log).
    pub fn start(bin: &Path, config: Option<&Path>, stats: bool, extra: &[&str], log: &Path) -> Result<Sched, String> {
        let mut cmd = Command::new(bin);
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        if stats {
            cmd.args(["--stats", "1"]);
        }
        cmd.args(extra);
        Self::spawn(cmd, log, OPS_PREFIX)
    }

    /// The floor scheduler (`scxbw-floor`, no arguments) in place of scx_bandwidth: started,
    /// waited for, checked and stopped the same way.
    pub fn start_floor(bin: &Path, log: &Path) -> Result<Sched, String> {
        Self::spawn(Command::new(bin), log, FLOOR_OPS_PREFIX)
    }

    fn spawn(mut cmd: Command, log: &Path, ops: &'static str) -> Result<Sched, String> {
        let out = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("start {}: {e}", cmd.get_program().to_string_lossy()))?;
        Ok(Sched { child: Some(child), ops })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// None while running; the exit status once it has exited (reaping it).
    fn exited(&mut self) -> Option<ExitStatus> {
        let st = self.child.as_mut()?.try_wait().ok().flatten();
        if st.is_some() {
            self.child = None;
        }
        st
    }

    /// Waits until sched_ext reports our scheduler enabled.
    pub fn wait_attached(&mut self) -> Result<(), String> {
        let mut early_exit = None;
        let ok = wait_for(ATTACH_TIMEOUT, || {
            if let Some(st) = self.exited() {
                early_exit = Some(st);
                return true;
            }
            state().as_deref() == Some("enabled")
                && root_ops().is_some_and(|o| o.starts_with(self.ops))
        });
        if let Some(st) = early_exit {
            return Err(format!(
                "scheduler exited before attaching ({})",
                describe(st)
            ));
        }
        if !ok {
            return Err(format!(
                "not attached after {}s: state={} root/ops={}",
                ATTACH_TIMEOUT.as_secs(),
                state().unwrap_or_else(|| "?".into()),
                root_ops().unwrap_or_else(|| "-".into())
            ));
        }
        Ok(())
    }

    /// The scheduler process is alive and sched_ext still has it enabled. A sched_ext error
    /// exit (the kernel kicking the BPF scheduler out) shows up as either failing.
    pub fn healthy(&mut self) -> Result<(), String> {
        if let Some(st) = self.exited() {
            return Err(format!("scheduler exited early ({})", describe(st)));
        }
        match state() {
            Some(s) if s == "enabled" => Ok(()),
            s => Err(format!(
                "sched_ext state '{}' while the scheduler runs",
                s.unwrap_or_default()
            )),
        }
    }

    /// SIGINT, then require a clean exit (status 0) and sched_ext "disabled" within the
    /// attach timeout. Stopping twice is an error (the first stop reaped the child).
    pub fn stop(&mut self) -> Result<(), String> {
        let t0 = Instant::now();
        let Some(pid) = self.pid() else {
            return Err("scheduler already stopped".into());
        };
        if let Some(st) = self.exited() {
            return Err(format!("scheduler had already exited ({})", describe(st)));
        }
        signal(pid, libc::SIGINT);
        let mut status = None;
        wait_for(ATTACH_TIMEOUT, || {
            status = self.exited();
            status.is_some()
        });
        let Some(st) = status else {
            self.kill();
            return Err(format!(
                "scheduler still running {}s after SIGINT",
                ATTACH_TIMEOUT.as_secs()
            ));
        };
        let left = ATTACH_TIMEOUT.saturating_sub(t0.elapsed());
        let disabled = wait_for(left, || state().as_deref() == Some("disabled"));
        if st.code() != Some(0) {
            return Err(format!("scheduler {} after SIGINT", describe(st)));
        }
        if !disabled {
            return Err(format!(
                "sched_ext state '{}' after stop",
                state().unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// SIGKILL and reap (cleanup path).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first `head` and last `tail` lines of a text file (for failure reports: the start of
/// a scheduler log says how it set up, the end how it failed).
pub fn excerpt_file(p: &Path, head: usize, tail: usize) -> Vec<String> {
    match fs::read(p) {
        Ok(b) => excerpt(&String::from_utf8_lossy(&b), head, tail),
        Err(e) => vec![format!("(cannot read {}: {e})", p.display())],
    }
}

fn excerpt(text: &str, head: usize, tail: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= head + tail {
        return lines.iter().map(|l| l.to_string()).collect();
    }
    let mut v: Vec<String> = lines[..head].iter().map(|l| l.to_string()).collect();
    v.push(format!("[... {} lines ...]", lines.len() - head - tail));
    v.extend(lines[lines.len() - tail..].iter().map(|l| l.to_string()));
    v
}

/// A reader of /dev/kmsg positioned at "now", so a failed scenario can print just the kernel
/// messages it caused (sched_ext's error exit reason and its state dump land there).
pub struct Kmsg(Option<File>);

impl Kmsg {
    pub fn from_now() -> Kmsg {
        use std::os::unix::fs::OpenOptionsExt;
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .ok();
        if let Some(f) = &f {
            // SAFETY: lseek on an fd we own; SEEK_END on /dev/kmsg means "after the newest".
            unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) };
        }
        Kmsg(f)
    }

    /// The last `n` messages since `from_now`, as "[seconds] text".
    pub fn tail(&mut self, n: usize) -> Vec<String> {
        let Some(f) = &mut self.0 else {
            return vec!["(no /dev/kmsg)".into()];
        };
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            // One record per read; EAGAIN = caught up; EPIPE = records overwritten, go on.
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(len) => out.push(format_kmsg(&String::from_utf8_lossy(&buf[..len]))),
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
        out.split_off(out.len().saturating_sub(n))
    }
}

/// "6,1234,5678901,-;text\n more" -> "[5.678901] text".
fn format_kmsg(rec: &str) -> String {
    let (hdr, msg) = rec.split_once(';').unwrap_or(("", rec));
    let msg = msg.lines().next().unwrap_or("");
    let ts_us: u64 = hdr
        .split(',')
        .nth(2)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    format!("[{}.{:06}] {}", ts_us / 1_000_000, ts_us % 1_000_000, msg)
}

#[cfg(test)]
mod tests {
    /// This thread, a second one it starts, and the state letter of each.
    #[test]
    fn all_tids_and_stat_fields_see_this_process() {
        let pid = std::process::id();
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = stop_rx.recv();
        });
        let other_tid = rx.recv().unwrap();
        let all = super::all_tids();
        assert!(all.contains(&(pid, me)) && all.contains(&(pid, other_tid)), "{all:?}");
        assert_eq!(super::stat_fields(&me.to_string()).and_then(|f| f.into_iter().next()).as_deref(), Some("R"));
        stop_tx.send(()).unwrap();
        other.join().unwrap();
    }

    #[test]
    fn ext_enabled_line() {
        let s = "hog (123, #threads: 3)\n----\nse.exec_start : 1.0\next.enabled : 1\n";
        assert_eq!(super::parse_ext_enabled(s), Some(true));
        assert_eq!(
            super::parse_ext_enabled(
                "ext.enabled                                  :                    0\n"
            ),
            Some(false)
        );
        assert_eq!(super::parse_ext_enabled("se.exec_start : 1.0\n"), None);
    }

    #[test]
    fn excerpts() {
        let t: String = (1..=10).map(|i| format!("{i}\n")).collect();
        assert_eq!(
            super::excerpt(&t, 2, 3),
            vec!["1", "2", "[... 5 lines ...]", "8", "9", "10"]
        );
        assert_eq!(super::excerpt("a\nb\n", 2, 3), vec!["a", "b"]);
    }

    #[test]
    fn kmsg_record() {
        assert_eq!(
            super::format_kmsg(
                "3,812,12345678,-;sched_ext: BPF scheduler \"x\" disabled\n SUBSYSTEM=x\n"
            ),
            "[12.345678] sched_ext: BPF scheduler \"x\" disabled"
        );
    }
}
