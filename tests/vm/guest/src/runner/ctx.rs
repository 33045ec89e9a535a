//! The context a scenario body runs in: the scheduler's lifecycle, workloads, measurements,
//! figures and failures, and the cleanup that undoes them.

use super::{short, tops, Opts};
use crate::cgroup;
use crate::scenarios::{Scenario, Work, Workload};
use crate::sched::{self, Kmsg, Sched};
use crate::workload::{mono_ns, sleep_until_mono};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a spawned workload may take to join its cgroup: the rescue delay
/// (BW_RESCUE_MS, 5 s) plus a 1 s period and margin (see `Ctx::spawn`).
const JOIN_TIMEOUT: Duration = Duration::from_secs(8);

struct Running {
    label: String,
    log: PathBuf,
    child: Option<Child>,
}

/// What a scenario body can do; also owns everything that cleanup must undo.
pub struct Ctx<'a> {
    name: &'static str,
    pub(super) opts: &'a Opts,
    sched: Option<Sched>,
    /// The scheduler's log, kept after it stopped for failure reports.
    sched_log: Option<PathBuf>,
    /// The scheduler's config (None: started without --config).
    pub(super) sched_cfg: Option<PathBuf>,
    sched_starts: u32,
    works: Vec<Running>,
    pub(super) figures: Vec<(String, String)>,
    pub(super) failures: Vec<String>,
    /// The figures of the same scenario under the kernel's CFS in this boot (--kernel-ref).
    pub(super) kernel: Option<Vec<(String, String)>>,
}

/// Command line of the `duty` workload (without --seconds, --cgroup, --pin), with `switch`
/// (`--fifo`, `--plain`, `--spawn`) if given.
fn duty_argv(threads: u32, burn_ms: u32, sleep_ms: u32, switch: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = ["duty", "--threads", &threads.to_string(), "--burn-ms", &burn_ms.to_string(), "--sleep-ms", &sleep_ms.to_string()]
        .map(String::from)
        .to_vec();
    v.extend(switch.map(String::from));
    v
}

impl<'a> Ctx<'a> {
    /// Records `key=value` for the verdict line (first value wins for a repeated key).
    pub fn figure(&mut self, key: impl Into<String>, value: impl ToString) {
        let key = key.into();
        if !self.figures.iter().any(|(k, _)| *k == key) {
            self.figures.push((key, value.to_string()));
        }
    }

    /// The figure `key` of the same scenario run under the kernel's CFS just before, in the
    /// same boot and under the same host load; None without --kernel-ref (or if that run
    /// did not record it). A check may then hold ours against the kernel's figure as well
    /// as against its own bound: a busy host moves both sides.
    pub fn kernel_f64(&self, key: &str) -> Option<f64> {
        self.kernel.as_ref()?.iter().find(|(k, _)| k == key)?.1.parse().ok()
    }

    /// A failed check: the scenario goes on (to report all figures) but will FAIL.
    pub fn fail(&mut self, reason: impl Into<String>) {
        self.failures.push(reason.into());
    }

    /// Starts `w` as a child process that runs for `seconds`, and waits until it has moved
    /// itself into its cgroup so measurements never include its time outside. Returns a
    /// handle for `wait_workload`.
    pub fn spawn(&mut self, w: &Workload, seconds: u64) -> Result<usize, String> {
        let idx = self.works.len();
        // A workload whose one parameter is its --threads count.
        let threads = |label: &'static str, n: u32| (label, vec![label.to_string(), "--threads".into(), n.to_string()]);
        let (label, mut args) = match &w.work {
            Work::Hog { threads: n } => threads("hog", *n),
            Work::Forks { threads: n } => threads("forks", *n),
            Work::PingPong { pairs } => threads("pingpong", *pairs),
            Work::Messaging { groups } => threads("messaging", *groups),
            Work::WakeLat { workers } => threads("wakelat", *workers),
            Work::Gaps => ("gaps", vec!["gaps".to_string(), "--threads".into(), "1".into()]),
            Work::Ticker { hz } => (
                "ticker",
                ["ticker", "--threads", "1", "--hz", &hz.to_string()].map(String::from).to_vec(),
            ),
            Work::Duty {
                threads,
                burn_ms,
                sleep_ms,
            } => ("duty", duty_argv(*threads, *burn_ms, *sleep_ms, None)),
            Work::RtDuty { burn_ms, sleep_ms } => ("duty", duty_argv(1, *burn_ms, *sleep_ms, Some("--fifo"))),
            Work::SpawnDuty { burn_ms, sleep_ms } => ("duty", duty_argv(1, *burn_ms, *sleep_ms, Some("--spawn"))),
            Work::Pulse { threads, burn_ms, sleep_ms } => ("duty", duty_argv(*threads, *burn_ms, *sleep_ms, Some("--plain"))),
        };
        args.extend([
            "--seconds".into(),
            seconds.to_string(),
            "--cgroup".into(),
            w.cgroup.into(),
        ]);
        if let Some(cpu) = w.pin {
            args.extend(["--pin".into(), cpu.to_string()]);
        }
        let label = format!("w{idx}-{label}-{}", short(w.cgroup));
        let log = PathBuf::from(format!("/tmp/{}.{label}.log", self.name));
        let out = File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let child = Command::new(exe)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {label}: {e}"))?;
        let pid = child.id();
        self.works.push(Running {
            label: label.clone(),
            log,
            child: Some(child),
        });
        // Joining a cgroup can wait for a task a throttled group parked inside the kernel
        // (docs/design.md, "Tasks holding the kernel up run on credit": fewer since, not none):
        // until that group's refill, or the rescue after BW_RESCUE_MS (5 s). Seen once in
        // stress, past the old 5 s limit; the wait is printed (`join_ms`) when over a second.
        let want = w.cgroup.trim_matches('/');
        let t = Instant::now();
        if !sched::wait_for(JOIN_TIMEOUT, || cgroup::cgroup_of(pid).as_deref() == Some(want)) {
            return Err(format!(
                "{label} did not join {want} in {}s (now in {:?})",
                JOIN_TIMEOUT.as_secs(),
                cgroup::cgroup_of(pid)
            ));
        }
        let waited = t.elapsed();
        if waited > Duration::from_secs(1) {
            self.figure(format!("{label}.join_ms"), waited.as_millis());
        }
        Ok(idx)
    }

    /// Workloads started so far; the handle the next `spawn` will return.
    pub fn nr_workloads(&self) -> usize {
        self.works.len()
    }

    /// Output (stdout + stderr) of a workload so far, e.g. for `output::parse_duty`.
    pub fn output(&self, idx: usize) -> String {
        std::fs::read_to_string(&self.works[idx].log).unwrap_or_default()
    }

    /// The scheduler's pid while it runs (to SIGSTOP it, read its CPU time, etc.).
    pub fn sched_pid(&self) -> Option<u32> {
        self.sched.as_ref().and_then(Sched::pid)
    }

    /// A workload's pid while it has not been reaped.
    pub fn workload_pid(&self, idx: usize) -> Option<u32> {
        self.works[idx].child.as_ref().map(|c| c.id())
    }

    /// Waits up to `timeout` for a workload to exit on its own.
    pub fn wait_workload(&mut self, idx: usize, timeout: Duration) -> Result<ExitStatus, String> {
        let r = &mut self.works[idx];
        let child = r
            .child
            .as_mut()
            .ok_or_else(|| format!("{} already reaped", r.label))?;
        let mut st = None;
        sched::wait_for(timeout, || {
            st = child.try_wait().ok().flatten();
            st.is_some()
        });
        match st {
            Some(s) => {
                r.child = None;
                Ok(s)
            }
            None => {
                println!(
                    "# --- {} still running: its threads and the machine's R/D threads",
                    r.label
                );
                for l in sched::stuck_report(child.id()) {
                    println!("#   {l}");
                }
                Err(format!(
                    "{} still running after {:.1}s",
                    r.label,
                    timeout.as_secs_f64()
                ))
            }
        }
    }

    /// CPUs used by each cgroup over `window` (Δusage_usec / Δ CLOCK_MONOTONIC). Each
    /// cgroup's timestamp is taken around its own cpu.stat read, so a delayed runner only
    /// shifts the window, it does not distort the ratio.
    pub fn measure(&mut self, cgroups: &[&str], window: Duration) -> Result<Vec<f64>, String> {
        let sample = || -> Result<Vec<(u64, u64)>, String> {
            cgroups
                .iter()
                .map(|c| {
                    let a = mono_ns();
                    let u = cgroup::read_usage_usec(c)?;
                    Ok(((a + mono_ns()) / 2, u))
                })
                .collect()
        };
        let s0 = sample()?;
        sleep_until_mono(s0[0].0 + window.as_nanos() as u64);
        let s1 = sample()?;
        Ok(s0
            .iter()
            .zip(&s1)
            .map(|((t0, u0), (t1, u1))| (u1 - u0) as f64 * 1e3 / (t1 - t0) as f64)
            .collect())
    }

    /// With the scheduler attached, every thread of the workloads started at or after `from`
    /// must be in the ext class; otherwise the figures would measure the fair class.
    pub fn check_on_scx(&mut self, from: usize) {
        if self.sched.is_none() {
            return;
        }
        let mut off = Vec::new();
        for r in &self.works[from..] {
            if let Some(c) = &r.child {
                if sched::on_scx(c.id()) == Some(false) {
                    off.push(r.label.clone());
                }
            }
        }
        if !off.is_empty() {
            self.fail(format!("not scheduled by sched_ext: {}", off.join(",")));
        }
    }

    /// The scheduler's configuration file, if it was started with one.
    pub fn sched_config(&self) -> Option<&Path> {
        self.sched_cfg.as_deref()
    }

    /// The scheduler's output so far (its log file).
    pub fn sched_output(&self) -> String {
        self.sched_log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default()
    }

    /// The scheduler binary under test (for a second instance, e.g. --monitor).
    pub fn sched_bin(&self) -> &Path {
        &self.opts.sched
    }

    /// The scheduler was killed by the scenario: reap it, and do not stop it afterwards.
    pub fn forget_sched(&mut self) {
        if let Some(mut s) = self.sched.take() {
            s.kill();
        }
    }

    /// The benchmark set's short form (--quick): measure for less time, same figures.
    pub fn quick(&self) -> bool {
        self.opts.quick
    }

    /// A scheduler runs (false in --cfs mode).
    pub fn has_sched(&self) -> bool {
        self.sched.is_some()
    }

    /// Scheduler alive and enabled (always true in --cfs mode).
    pub fn healthy(&mut self) -> Result<(), String> {
        match &mut self.sched {
            Some(s) => s.healthy(),
            None => Ok(()),
        }
    }

    /// Start the scheduler with the scenario's config, `--stats 1` and `extra` arguments and
    /// wait until it is attached. Its log is /tmp/NAME.sched.log, or NAME.sched.N.log for
    /// later starts.
    pub fn start_sched(&mut self, extra: &[&str]) -> Result<(), String> {
        self.start_sched_with(extra, true)
    }

    /// Replace the configuration file later starts use (None: no configured limits).
    pub fn set_sched_config(&mut self, cfg: Option<PathBuf>) {
        self.sched_cfg = cfg;
    }

    /// [`Ctx::start_sched`], with or without `--stats 1`.
    pub fn start_sched_with(&mut self, extra: &[&str], stats: bool) -> Result<(), String> {
        let log = match self.sched_starts {
            0 => PathBuf::from(format!("/tmp/{}.sched.log", self.name)),
            n => PathBuf::from(format!("/tmp/{}.sched.{n}.log", self.name)),
        };
        self.sched_starts += 1;
        self.sched_log = Some(log.clone());
        let mut s = Sched::start(Path::new(&self.opts.sched), self.sched_cfg.as_deref(), stats, extra, &log)?;
        let attached = s.wait_attached();
        self.sched = Some(s);
        attached
    }

    /// Start the floor scheduler (`scxbw-floor`, beside the scheduler's binary; see
    /// tests/bench/floor) in its place and wait until it is attached. `stop_sched` stops it.
    pub fn start_floor(&mut self) -> Result<(), String> {
        let log = PathBuf::from(format!("/tmp/{}.floor.{}.log", self.name, self.sched_starts));
        self.sched_starts += 1;
        self.sched_log = Some(log.clone());
        let bin = Path::new(&self.opts.sched).with_file_name("scxbw-floor");
        let mut s = Sched::start_floor(&bin, &log)?;
        let attached = s.wait_attached();
        self.sched = Some(s);
        attached
    }

    /// SIGINT the scheduler and require a clean detach; records `detach_ms`. A no-op in
    /// --cfs mode. The runner calls this after the body unless the body already did.
    pub fn stop_sched(&mut self) -> Result<(), String> {
        let Some(mut s) = self.sched.take() else {
            return Ok(());
        };
        let t = Instant::now();
        let r = s.stop();
        self.figure("detach_ms", t.elapsed().as_millis());
        r
    }
}

impl<'a> Ctx<'a> {
    pub(super) fn new(name: &'static str, opts: &'a Opts) -> Self {
        Ctx {
            name,
            opts,
            sched: None,
            sched_log: None,
            sched_cfg: None,
            sched_starts: 0,
            works: vec![],
            figures: vec![],
            failures: vec![],
            kernel: None,
        }
    }

    /// Errors for workloads started at or after `from` that are no longer running: a
    /// workload that died early would make any usage figure meaningless.
    pub fn exited_works(&mut self, from: usize) -> Vec<String> {
        let mut errs = Vec::new();
        for r in &mut self.works[from..] {
            if let Some(c) = &mut r.child {
                if let Ok(Some(st)) = c.try_wait() {
                    errs.push(format!(
                        "{} exited early ({})",
                        r.label,
                        sched::describe(st)
                    ));
                    r.child = None;
                }
            }
        }
        errs
    }

    pub fn kill_works(&mut self, from: usize) {
        for r in &mut self.works[from..] {
            if let Some(mut c) = r.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Undo everything, whatever state the body left behind. Anything that cannot be undone
    /// fails the scenario, since it would also spoil the ones after it.
    pub(super) fn cleanup(&mut self, sc: &Scenario) {
        if let Some(mut s) = self.sched.take() {
            s.kill(); // only reached when the body failed before its clean stop
        }
        if let Some(st) = sched::state() {
            if !sched::wait_for(sched::ATTACH_TIMEOUT, || {
                sched::state().as_deref() == Some("disabled")
            }) {
                self.fail(format!(
                    "sched_ext still '{st}' after killing the scheduler"
                ));
            }
        }
        self.kill_works(0);
        for top in tops(&sc.all_cgroups()) {
            if let Err(e) = cgroup::remove_tree(top) {
                self.fail(e);
            }
        }
    }

    /// Log excerpts for a failed scenario, as '#' lines before its verdict.
    pub(super) fn report(&self, kmsg: &mut Kmsg) {
        if let Some(log) = &self.sched_log {
            println!(
                "# --- {}: scheduler log {} (tail)",
                self.name,
                log.display()
            );
            for l in sched::excerpt_file(log, 10, 30) {
                println!("#   {l}");
            }
        }
        let k = kmsg.tail(40);
        if !k.is_empty() {
            println!(
                "# --- {}: kernel messages during the scenario (tail)",
                self.name
            );
            for l in k {
                println!("#   {l}");
            }
        }
        for r in &self.works {
            let t = sched::excerpt_file(&r.log, 0, 10);
            if !t.is_empty() {
                println!("# --- {}: {} output (tail)", self.name, r.label);
                for l in t {
                    println!("#   {l}");
                }
            }
        }
    }
}
