//! scx_bandwidth: command line → run loop. See lib.rs for the modules.

use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use log::{error, info};
use scx_bandwidth::opts::{Command, Opts};
use scx_bandwidth::{advise, cgroups, config, openmetrics, scheduler::{LoopWaker, Scheduler}, stats};

/// Exit code for bad input (configuration, command line): nothing attached.
const EXIT_USAGE: u8 = 2;

/// Present when the running kernel has sched_ext (CONFIG_SCHED_CLASS_EXT).
const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

/// Set by SIGHUP; the agent's loop re-reads the configuration (within 250 ms).
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sighup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn install_sighup() -> std::io::Result<()> {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    let old = unsafe { libc::signal(libc::SIGHUP, on_sighup as *const () as libc::sighandler_t) };
    if old == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn init_logging(verbose: u8) {
    let level = if verbose > 0 { simplelog::LevelFilter::Debug } else { simplelog::LevelFilter::Info };
    let cfg = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Off)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off)
        .set_location_level(simplelog::LevelFilter::Off)
        .build();
    let _ = simplelog::TermLogger::init(level, cfg, simplelog::TerminalMode::Stderr, simplelog::ColorChoice::Never);
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    init_logging(opts.verbose);

    if let Some(Command::Advise(a)) = &opts.command {
        return match advise::run(a, &mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(advise::Error::Usage(e)) => {
                error!("{e}");
                ExitCode::from(EXIT_USAGE)
            }
            Err(advise::Error::Other(e)) => {
                error!("advise: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if opts.help_stats {
        if let Err(e) = stats::server_data::<(), ()>().describe_meta(&mut std::io::stdout(), None) {
            error!("{e:#}");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }

    // Everything the user gave us is checked before anything is loaded.
    let mut config = match &opts.config {
        Some(path) => match config::load(path) {
            Ok(c) => c,
            Err(e) => {
                error!("{e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
        None => config::Config::default(),
    };
    if let Some(path) = &opts.metrics_textfile {
        if let Err(e) = openmetrics::check_textfile(path) {
            error!("{e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    // The waker wakes the agent's loop at once; the flag is what it checks.
    let waker = match LoopWaker::new() {
        Ok(w) => w,
        Err(e) => {
            error!("eventfd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let wake = waker.clone();
    if let Err(e) = ctrlc::set_handler(move || {
        flag.store(true, Ordering::Relaxed);
        wake.wake();
    }) {
        error!("cannot install the signal handler: {e}");
        return ExitCode::FAILURE;
    }

    if let Some(secs) = opts.monitor {
        let stop = shutdown.clone();
        return match stats::monitor(Duration::from_secs_f64(secs), opts.graph, move || stop.load(Ordering::Relaxed)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                error!("monitor: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // Without sched_ext, loading would fail deep in libbpf ("sched_ext_ops.dump() missing,
    // kernel too old?"); say what is missing and where to go instead.
    if !std::path::Path::new(SCHED_EXT_SYSFS).is_dir() {
        error!(
            "this kernel ({}) has no sched_ext ({SCHED_EXT_SYSFS} is missing): scx_bandwidth needs \
             one built with CONFIG_SCHED_CLASS_EXT=y (e.g. Debian's linux-image 7.3 from \
             trixie-backports); to try it without one, run tests/vm/demo, which boots such a \
             kernel under qemu",
            kernel_release()
        );
        return ExitCode::FAILURE;
    }

    let root = match cgroups::cgroup2_mount() {
        Ok(r) => r,
        Err(e) => {
            error!("{e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    };

    if let Err(e) = install_sighup() {
        error!("cannot install the SIGHUP handler: {e}");
        return ExitCode::FAILURE;
    }
    scx_utils::try_set_rlimit_infinity();
    // Before anything is attached, so a taken address leaves nothing behind; the thread
    // starts before the agent turns SCHED_FIFO and so stays SCHED_OTHER.
    if let Some(addr) = opts.metrics_addr {
        if let Err(e) = openmetrics::serve(addr) {
            error!("{e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let Some(path) = opts.metrics_textfile.clone() {
        if let Err(e) = openmetrics::textfile(path) {
            error!("{e:#}");
            return ExitCode::FAILURE;
        }
    }

    let mut open_object = MaybeUninit::uninit();
    loop {
        // A restart keeps what was in force: a SIGHUP reload, not the file as it was
        // at start (cgroupfs limits come back on their own through cgroup_init).
        let result = Scheduler::init(&opts, &config, root.clone(), &waker, &mut open_object).and_then(|mut sched| {
            let r = sched.run(shutdown.clone(), &waker, &RELOAD);
            config = sched.config_in_force();
            r
        });
        match result {
            // uei_report! already printed the exit reason; an error exit
            // comes back as Err.
            Ok(uei) => {
                if uei.should_restart() && !shutdown.load(Ordering::Relaxed) {
                    info!("the kernel asked for a restart; restarting");
                    continue;
                }
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                error!("{e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
}
