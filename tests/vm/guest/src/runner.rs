//! Runs scenarios: scheduler lifecycle (or cpu.max in --cfs mode), cgroups, workloads,
//! measurement, checks, cleanup, and the one-line verdict per scenario.

use crate::cgroup;
use crate::scenarios::{render_config, Body, Scenario};
use crate::sched::{self, Kmsg};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod ctx;
pub use ctx::Ctx;

/// Time for throttling to reach its steady state before measuring.
pub const WARMUP: Duration = Duration::from_secs(1);
/// Measurement window: a whole number of every period used (50 ms, 100 ms), so a window
/// starting at any phase of the throttling cycle contains the same number of refills.
pub const WINDOW: Duration = Duration::from_secs(4);
/// Phase workloads run "forever" and are killed by the runner; this only bounds a leak.
pub const PHASE_WORK_S: u64 = 60;

pub struct Opts {
    pub sched: PathBuf,
    /// Apply limits through cpu.max and the kernel's CFS bandwidth control, no scheduler.
    pub cfs: bool,
    /// Run the scenarios that have a kernel reference (`scenarios::KERNEL_REF`) under the
    /// kernel's CFS first, in the same boot, and give their checks its figures.
    pub kernel_ref: bool,
    /// The benchmark set in its short form (`tests/bench/run --quick`, what CI runs): the
    /// same figures from shorter measurements, for a check that each one is still produced.
    pub quick: bool,
}

/// "t/p/x" -> "p.x": figure-key prefix for a cgroup.
pub fn short(cg: &str) -> String {
    cg.trim_matches('/')
        .strip_prefix("t/")
        .unwrap_or(cg)
        .replace('/', ".")
}

/// Top-level components of `cgroups` ("t" for "t/a", "t/p/x"): the trees to remove.
fn tops<'s>(cgroups: &[&'s str]) -> Vec<&'s str> {
    let mut v: Vec<&str> = Vec::new();
    for c in cgroups {
        let top = c.trim_matches('/').split('/').next().unwrap_or("");
        if !top.is_empty() && !v.contains(&top) {
            v.push(top);
        }
    }
    v
}

/// Runs `list` in order, one verdict line each, then the summary line. True if none failed.
pub fn run_all(list: &[&Scenario], opts: &Opts) -> bool {
    let (mut passed, mut failed, mut skipped) = (0, 0, Vec::new());
    for sc in list {
        match run_one(sc, opts) {
            Some(true) => passed += 1,
            Some(false) => failed += 1,
            None => skipped.push(sc.name),
        }
    }
    if !skipped.is_empty() {
        println!("skipped: {}", skipped.join(","));
    }
    println!("scenarios: {passed} passed, {failed} failed");
    failed == 0
}

/// Some(pass) or None when skipped. Errors and panics inside the scenario are failures.
fn run_one(sc: &Scenario, opts: &Opts) -> Option<bool> {
    if opts.cfs && sc.needs_sched {
        println!(
            "SCENARIO {} SKIP reason=needs the scheduler (--cfs mode)",
            sc.name
        );
        return None;
    }
    // The host measures its own noise from here to the verdict line (host.rs).
    println!("SCENARIO_BEGIN {}", sc.name);
    let mut kmsg = Kmsg::from_now();
    let threads0 = sched::all_threads();
    let t0 = Instant::now();
    let mut ctx = Ctx::new(sc.name, opts);
    if opts.kernel_ref && !opts.cfs && crate::scenarios::KERNEL_REF.contains(&sc.name) {
        // The kernel first, then ours, one after the other under whatever load the host
        // has now. The kernel's own verdict is reported, not counted.
        let kopts = Opts { sched: opts.sched.clone(), cfs: true, kernel_ref: false, quick: opts.quick };
        let mut kctx = Ctx::new(sc.name, &kopts);
        run_body(&mut kctx, sc);
        ctx.figure("kernel.verdict", if kctx.failures.is_empty() { "PASS" } else { "FAIL" });
        for (k, v) in &kctx.figures {
            ctx.figure(format!("kernel.{k}"), v);
        }
        ctx.kernel = Some(kctx.figures);
    }
    run_body(&mut ctx, sc);
    ctx.figure("run_s", format!("{:.1}", t0.elapsed().as_secs_f64()));
    let ok = ctx.failures.is_empty();
    if !ok {
        ctx.report(&mut kmsg);
        println!("# --- {}: {}", sc.name, busiest_threads(&threads0, t0.elapsed()));
    }
    let mut line = format!("SCENARIO {} {}", sc.name, if ok { "PASS" } else { "FAIL" });
    for (k, v) in &ctx.figures {
        line += &format!(" {k}={v}");
    }
    if !ok {
        line += &format!(" reason={}", ctx.failures.join("; ").replace('\n', " "));
    }
    println!("{line}");
    Some(ok)
}

/// Runs the scenario's body and cleans up after it; errors and panics become failures.
fn run_body(ctx: &mut Ctx, sc: &Scenario) {
    match catch_unwind(AssertUnwindSafe(|| execute(ctx, sc))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => ctx.fail(e),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            ctx.fail(format!("panic: {msg}"));
        }
    }
    ctx.cleanup(sc);
}

/// For a failed scenario: the threads of the machine that used the most CPU since `before`
/// was taken (`elapsed` ago), those that already existed then marked `*` (a thread an
/// earlier scenario left running would show so), and the memory available. A run failed
/// four scenarios in a row after `stress` with the host quiet, a limited hog getting 0.82
/// of a limit that 2 CPUs leave room for: this names what else was running.
fn busiest_threads(before: &std::collections::BTreeMap<(u32, u32), (String, u64, u64)>, elapsed: Duration) -> String {
    let mut used: Vec<(u64, String)> = sched::all_threads()
        .into_iter()
        .map(|(id, (comm, run, _))| {
            let old = before.get(&id);
            let ns = run.saturating_sub(old.map_or(0, |o| o.1));
            (ns, format!("{comm}({}/{}){}", id.0, id.1, if old.is_some() { "*" } else { "" }))
        })
        .filter(|(ns, _)| *ns > 0)
        .collect();
    used.sort_by(|a, b| b.0.cmp(&a.0));
    let secs = elapsed.as_secs_f64().max(1e-3);
    let top: Vec<String> =
        used.iter().take(8).map(|(ns, name)| format!("{name} {:.3} CPUs", *ns as f64 / 1e9 / secs)).collect();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find(|l| l.starts_with("MemAvailable:")).map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string()))
        .unwrap_or_else(|| "?".into());
    format!("busiest threads over {secs:.1} s (* = there before it began): {}; MemAvailable {mem} kB", top.join(", "))
}

/// The clocksource must stay what it was at the first scenario: a kernel that marks the
/// TSC unstable switches to a clock (the HPET) that is slow to read, and in the VM every
/// scenario after that failed. The VM boots with tsc=reliable (vm.sh); this makes any
/// switch a failure that names itself.
fn check_clocksource() -> Result<(), String> {
    static FIRST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let read = || {
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()
            .map(|s| s.trim().to_string())
    };
    // tsc-early becomes tsc when the kernel's refined calibration ends, on a quiet boot
    // about a second in: the same clock, not a switch.
    let now = read().map(|s| {
        if s == "tsc-early" {
            "tsc".to_string()
        } else {
            s
        }
    });
    match FIRST.get_or_init(|| now.clone()) {
        Some(first) if now.as_deref() != Some(first) => Err(format!(
            "the clocksource changed from {first} to {} since the first scenario (the kernel's watchdog found it unstable): timings are void",
            now.as_deref().unwrap_or("?")
        )),
        _ => Ok(()),
    }
}

fn execute(ctx: &mut Ctx, sc: &Scenario) -> Result<(), String> {
    let cgs = sc.all_cgroups();
    for top in tops(&cgs) {
        cgroup::remove_tree(top)?; // leftovers of an interrupted earlier run
    }
    if let Some(st) = sched::state() {
        if st != "disabled" {
            return Err(format!("sched_ext is '{st}' before the scenario started"));
        }
    }
    check_clocksource()?;
    if !ctx.opts.cfs {
        let cfg = PathBuf::from(format!("/tmp/{}.toml", sc.name));
        std::fs::write(&cfg, render_config(sc.name, &sc.limits))
            .map_err(|e| format!("write {}: {e}", cfg.display()))?;
        let t = Instant::now();
        ctx.sched_cfg = (!sc.limits.is_empty()).then_some(cfg);
        ctx.start_sched(&[])?;
        ctx.figure("attach_ms", t.elapsed().as_millis());
    }
    // After attaching, as in production: the scheduler must pick up cgroups (and their
    // configured limits) that appear while it runs.
    cgroup::create_tree(&cgs)?;
    if ctx.opts.cfs {
        for l in &sc.limits {
            cgroup::write_cpu_max(l.cgroup, l.quota_us, l.period_us)?;
            if l.burst_us > 0 {
                cgroup::write_cpu_max_burst(l.cgroup, l.burst_us)?;
            }
        }
    }
    match &sc.body {
        Body::Phases(phases, cross) => crate::phases::run(ctx, sc, phases, cross)?,
        Body::Custom(f) => f(ctx)?,
    }
    ctx.healthy()?;
    // The workloads go before the scheduler: detaching flips the kernel's sched_ext static
    // keys, and qemu's TCG can leave a stale int3 of that patching in code another vCPU was
    // translating meanwhile ('Oops: int3', a reboot). With the CPUs idle little of the
    // patched code runs. (Detaching with tasks running and parked has its own scenarios:
    // sigint_throttled, sigkill_throttled, exit_parked.)
    ctx.kill_works(0);
    ctx.stop_sched()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::Scenario;

    #[test]
    fn names() {
        assert_eq!(short("t/p/x"), "p.x");
        assert_eq!(short("t/a"), "a");
        assert_eq!(tops(&["t/a", "t/p/x", "u"]), vec!["t", "u"]);
    }

    fn custom(
        name: &'static str,
        needs_sched: bool,
        f: fn(&mut Ctx) -> Result<(), String>,
    ) -> Scenario {
        Scenario {
            name,
            about: "",
            needs_sched,
            limits: vec![],
            cgroups: vec![],
            body: Body::Custom(f),
        }
    }

    /// Errors, failed checks and panics inside a scenario are FAILs, not aborts. (No
    /// cgroups and --cfs: runs on any host.)
    #[test]
    fn failures_are_contained() {
        if sched::state().is_some_and(|s| s != "disabled") {
            eprintln!("skipped: a sched_ext scheduler is attached on this host");
            return;
        }
        let opts = Opts {
            sched: PathBuf::from("/nonexistent"),
            cfs: true,
            kernel_ref: false,
            quick: false,
        };
        assert_eq!(run_one(&custom("ok", false, |_| Ok(())), &opts), Some(true));
        assert_eq!(
            run_one(&custom("err", false, |_| Err("broken".into())), &opts),
            Some(false)
        );
        assert_eq!(
            run_one(
                &custom("chk", false, |c| {
                    c.fail("bad");
                    Ok(())
                }),
                &opts
            ),
            Some(false)
        );
        assert_eq!(
            run_one(&custom("boom", false, |_| panic!("boom")), &opts),
            Some(false)
        );
        assert_eq!(run_one(&custom("skip", true, |_| Ok(())), &opts), None);
    }
}
