//! Command line.

use std::path::PathBuf;

use clap::Parser;

/// Validate a microsecond option against an inclusive range.
fn us_in(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone {
    move |s: &str| {
        let v: u64 = s.trim().parse().map_err(|_| format!("\"{s}\" is not a whole number of microseconds"))?;
        if v < min || v > max {
            return Err(format!("{v} is out of range (allowed {min}..={max} µs)"));
        }
        Ok(v)
    }
}

/// Validate a decimal option against an inclusive range; `what` names the unit
/// in the error ("a number of seconds") and `unit` follows the bounds ("s").
fn decimal_in(min: f64, max: f64, what: &'static str, unit: &'static str) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s: &str| {
        let v: f64 = s.trim().parse().map_err(|_| format!("\"{s}\" is not {what}"))?;
        if !(min..=max).contains(&v) {
            return Err(format!("{v} is out of range (allowed {min}..={max} {unit})"));
        }
        Ok(v)
    }
}

/// A group name from the group database, or a numeric gid.
fn group_id(s: &str) -> Result<u32, String> {
    let s = s.trim();
    if let Ok(gid) = s.parse::<u32>() {
        return Ok(gid);
    }
    let name = std::ffi::CString::new(s).map_err(|_| format!("\"{s}\" is not a group name"))?;
    // SAFETY: getgrnam reads the group database; the returned entry is only read here,
    // before any other thread of this process exists.
    let gr = unsafe { libc::getgrnam(name.as_ptr()) };
    if gr.is_null() {
        return Err(format!("no group named \"{s}\" in the group database (give a name or a numeric gid)"));
    }
    Ok(unsafe { (*gr).gr_gid })
}

/// scx_bandwidth: a sched_ext scheduler that enforces cgroup CPU bandwidth
/// limits (quota per period, like cpu.max) exactly and observably.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
pub struct Opts {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Limits to enforce besides cgroupfs: a TOML file with one [[group]] table
    /// per limited cgroup and [[rule]] tables for cgroups matched by glob (see
    /// configs/example.toml); a cgroup named by a group follows the file, not its
    /// cpu.max. Without it the cgroups' own cpu.max and cpu.max.burst are
    /// enforced (on kernels with ops.cgroup_set_bandwidth). SIGHUP re-reads it.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Runtime a CPU pulls from a group's pool at a time
    /// (the kernel's sched_cfs_bandwidth_slice_us).
    #[arg(long, default_value_t = 5000, value_name = "US", value_parser = us_in(100, 1_000_000))]
    pub slice_us: u64,

    /// Longest time slice a task runs before the CPU picks again (a limited
    /// group's task also stops when its groups' runtime on the CPU runs out).
    #[arg(long, default_value_t = 5000, value_name = "US", value_parser = us_in(100, 100_000))]
    pub task_slice_us: u64,

    /// Refill every pool to its quota only, ignoring burst_us (for comparisons and
    /// emergencies).
    #[arg(long)]
    pub no_burst: bool,

    /// Do not return unused local runtime (above 1 ms) to a group's pool when a
    /// CPU stops running it (for comparisons).
    #[arg(long)]
    pub no_slack_return: bool,

    /// Park a task of a throttled group wherever it is, even inside fork, exec or an
    /// RCU read-side section, instead of letting it run on credit until it is out (for
    /// comparisons: parked there it holds up every cgroup move on the machine).
    #[arg(long)]
    pub park_in_kernel: bool,

    /// Test only: ops.init_task creates no task contexts, as when its allocation
    /// fails, so that enqueue and running create them (the `deferred_ctx` VM test).
    #[arg(long, hide = true)]
    pub test_defer_task_ctx: bool,

    /// Print per-group statistics every SECS seconds while running.
    #[arg(long, value_name = "SECS", value_parser = decimal_in(0.01, 86_400.0, "a number of seconds", "s"))]
    pub stats: Option<f64>,

    /// Do not run a scheduler: print the statistics of the running instance
    /// every SECS seconds (read from its stats socket; read-only).
    #[arg(long, value_name = "SECS", value_parser = decimal_in(0.01, 86_400.0, "a number of seconds", "s"), conflicts_with_all = ["config", "stats"])]
    pub monitor: Option<f64>,

    /// With --monitor: draw each limited group instead of the table: CPU time
    /// used in its last 32 periods against quota and burst, and how long its
    /// throttled tasks waited in the interval (a histogram with p50/p99).
    #[arg(long, requires = "monitor")]
    pub graph: bool,

    /// Let members of GROUP (a name or a numeric gid) read the statistics
    /// socket: it becomes mode 0660 and its directory 0750, both of that group.
    /// Without it only root can (mode 0600).
    #[arg(long, value_name = "GROUP", value_parser = group_id, conflicts_with = "monitor")]
    pub stats_group: Option<u32>,

    /// Serve the statistics as Prometheus text at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9567; off by default). Anyone who can reach ADDR can read them.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "monitor")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Write the same Prometheus text to FILE every 5 s, replaced atomically, for
    /// node_exporter's textfile collector (a name ending in .prom in its directory).
    #[arg(long, value_name = "FILE", conflicts_with = "monitor")]
    pub metrics_textfile: Option<PathBuf>,

    /// How far back each limited group's per-period history reaches, which
    /// `advise` replays: 8 bytes per period (47 KiB per busy group at the default
    /// and 100 ms periods), at most 36000 periods (281 KiB) per group. 0 keeps none.
    #[arg(long, default_value_t = crate::pools::DEFAULT_HISTORY_SECS, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub history_secs: u64,

    /// Describe every statistic (the fields of the stats socket's JSON) and exit.
    #[arg(long)]
    pub help_stats: bool,

    /// Bytes of the kernel's debug dump to keep when the scheduler exits
    /// with an error (0 = kernel default).
    #[arg(long, default_value_t = 0)]
    pub exit_dump_len: u32,

    /// Keep the agent as an ordinary task instead of SCHED_FIFO (its timer
    /// may then be delayed behind other work).
    #[arg(long)]
    pub no_realtime: bool,

    /// More log output (repeat for libbpf debug output).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Do not run a scheduler: from the running instance's per-period history,
    /// tell for each limited group what its limit costs in throttled periods and
    /// the smallest burst (or, if none is enough, quota) that meets a target
    /// (read-only, from the stats socket, like --monitor).
    Advise(AdviseOpts),
}

#[derive(Debug, clap::Args)]
pub struct AdviseOpts {
    /// Only this group (its cgroup path as the statistics name it).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,

    /// The target: at most this share of periods throttled.
    #[arg(long, default_value_t = 5.0, value_name = "PCT", value_parser = decimal_in(0.0, 100.0, "a percentage", "%"))]
    pub max_throttled_pct: f64,

    /// The target also bounds waits: no throttled period's tasks wait longer than
    /// this for the refill (estimated, the period's work spread evenly over it).
    #[arg(long, value_name = "MS", value_parser = decimal_in(0.0, 1e6, "a number of milliseconds", "ms"))]
    pub max_wait_ms: Option<f64>,

    /// Predict for this burst instead of searching one (with --quota-us or the
    /// group's quota).
    #[arg(long, value_name = "US")]
    pub burst_us: Option<u64>,

    /// Predict for this quota instead of searching one (with --burst-us or the
    /// group's burst).
    #[arg(long, value_name = "US", value_parser = us_in(1_000, (1 << 44) - 1))]
    pub quota_us: Option<u64>,

    /// Print JSON (one object per group) instead of the table.
    #[arg(long)]
    pub json: bool,
}
