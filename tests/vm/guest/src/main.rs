//! scxbw-guest: workloads and the scenario runner for scx_bandwidth's VM tests. One static
//! binary so the test initramfs needs nothing else: the runner re-executes itself (`hog`,
//! `duty`) to put workloads into cgroups.

mod args;
mod bpfstat;
mod cgroup;
mod host;
mod output;
mod phases;
mod runner;
mod scenarios;
mod sched;
mod stats;
mod systemd_e2e;
mod trace;
mod wakeups;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: scxbw-guest hog --threads N --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest duty --threads N --burn-ms X --sleep-ms Y --seconds S [--fifo|--plain|--spawn] [--cgroup REL] [--pin CPU]
       scxbw-guest forks --threads N --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest pingpong --threads PAIRS --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest messaging --threads GROUPS --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest wakelat --threads N --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest gaps --threads 1 --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest ticker --threads 1 --hz N --seconds S [--cgroup REL] [--pin CPU]
       scxbw-guest stats-fetch    (one request to the stats socket; prints the group count)
       scxbw-guest systemd-e2e    (in tests/vm/systemd's Debian guest: package, service, restart)
       scxbw-guest scenarios [--sched PATH] [--only NAME,NAME] [--list] [--cfs] [--kernel-ref]
                 [--bench [--quick] | --wide]
       scxbw-guest hostwatch --pidfile FILE   (on the host: qemu's console on stdin; adds
                 the host's steal and load during each scenario to its verdict line)
       scxbw-guest hostload --pct P --seconds S   (on the host, as root: a SCHED_FIFO
                 thread per CPU burns P ms of every 100 ms, a reproducible noisy host;
                 --stall-ms S --every-ms E --pidfile F: qemu stopped S ms of every E ms;
                 --vcpu-stall-ms S --every-ms E --pidfile F: each vCPU thread in turn)

  --cgroup REL   path relative to /sys/fs/cgroup, joined before any thread starts
  --sched PATH   scheduler binary (default /bin/scx_bandwidth), run as
                 PATH --config FILE --stats 1
  --cfs          no scheduler: apply the limits through cpu.max (kernel CFS bandwidth
                 control), for comparison; scenarios that need the scheduler are skipped
  --kernel-ref   scenarios with a kernel reference (scenarios/mod.rs, KERNEL_REF) first run
                 under the kernel's CFS in the same boot, and check against its figures
                 too (tests/vm/run passes it to retries on a busy host)
  --bench        the benchmark set (tests/bench/run) instead of the acceptance scenarios
  --wide         the set for a machine of several LLCs and NUMA nodes (tests/vm/README.md);
                 with --bench, that machine's benchmark (wide_bench)
  --quick        with --bench: shorter measurements (1 round of 1 s per workload in the
                 scheduler comparison, 3 s per burst-sweep cell, 2 s agent windows), the
                 same figures; what CI runs to check that each is produced (tests/bench/run)";

/// Why a command failed: bad arguments (exit 2, with usage) or a runtime error (exit 1).
enum Fail {
    Usage(String),
    Run(String),
}

fn scenarios(argv: &[String]) -> Result<bool, Fail> {
    let p = args::parse(argv, &["sched", "only"], &["list", "cfs", "kernel-ref", "bench", "wide", "quick"]).map_err(Fail::Usage)?;
    if p.switch("quick") && !p.switch("bench") {
        return Err(Fail::Usage("--quick shortens the benchmark set: it needs --bench".into()));
    }
    let all = if p.switch("bench") && p.switch("wide") {
        scenarios::wide_bench()
    } else if p.switch("bench") {
        scenarios::bench()
    } else if p.switch("wide") {
        scenarios::wide()
    } else {
        scenarios::all()
    };
    if p.switch("list") {
        for s in &all {
            let note = if s.needs_sched {
                " [needs scheduler]"
            } else {
                ""
            };
            println!("{:<18} {}{note}", s.name, s.about);
        }
        return Ok(true);
    }
    let selected: Vec<&scenarios::Scenario> = match p.str("only") {
        None => all.iter().collect(),
        Some(list) => {
            let mut v = Vec::new();
            for name in list.split(',').filter(|n| !n.is_empty()) {
                let s = all.iter().find(|s| s.name == name).ok_or_else(|| {
                    Fail::Usage(format!("unknown scenario '{name}' (see --list)"))
                })?;
                v.push(s);
            }
            v
        }
    };
    let opts = runner::Opts {
        sched: PathBuf::from(p.str("sched").unwrap_or("/bin/scx_bandwidth")),
        cfs: p.switch("cfs"),
        kernel_ref: p.switch("kernel-ref"),
        quick: p.switch("quick"),
    };
    if !opts.cfs && !opts.sched.is_file() {
        return Err(Fail::Usage(format!(
            "scheduler binary {} not found (pass --sched PATH, or --cfs)",
            opts.sched.display()
        )));
    }
    Ok(runner::run_all(&selected, &opts))
}

/// A workload command: arguments that do not parse are a usage error, a failed run is not.
fn workload_cmd<A>(
    rest: &[String],
    parse: fn(&[String]) -> Result<A, String>,
    run: impl FnOnce(A) -> Result<(), String>,
) -> Result<bool, Fail> {
    let a = parse(rest).map_err(Fail::Usage)?;
    run(a).map_err(Fail::Run).map(|_| true)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match argv.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("", &[][..]),
    };
    let r = match cmd {
        "hog" => workload_cmd(rest, workload::hog_args, workload::hog),
        "duty" => workload_cmd(rest, workload::duty_args, workload::duty),
        "forks" => workload_cmd(rest, workload::forks_args, workload::forks),
        "pingpong" => workload_cmd(rest, workload::pingpong_args, workload::pingpong),
        "messaging" => workload_cmd(rest, workload::hog_args, wakeups::messaging),
        "wakelat" => workload_cmd(rest, workload::hog_args, wakeups::wakelat),
        "gaps" => workload_cmd(rest, workload::gaps_args, workload::gaps),
        "ticker" => workload_cmd(rest, workload::ticker_args, |(c, hz)| workload::ticker(c, hz)),
        "stats-fetch" => stats::fetch()
            .map(|m| println!("STATS groups={}", m["groups"].as_array().map_or(0, Vec::len)))
            .map_err(Fail::Run)
            .map(|_| true),
        "scenarios" => scenarios(rest),
        "systemd-e2e" => Ok(systemd_e2e::run()),
        "hostwatch" => host::run(rest).map_err(Fail::Usage).map(|_| true),
        "hostload" => host::load(rest).map_err(Fail::Run).map(|_| true),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(Fail::Usage(format!("unknown command '{cmd}'"))),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Fail::Usage(e)) => {
            eprintln!("scxbw-guest {cmd}: {e}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Fail::Run(e)) => {
            eprintln!("scxbw-guest {cmd}: {e}");
            ExitCode::from(1)
        }
    }
}
