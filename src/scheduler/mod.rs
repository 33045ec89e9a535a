//! Loading, attaching and running the BPF scheduler.
//!
//! The run loop is the agent's period timer: it sleeps until the earliest
//! deadline among the groups' period timers, the slack timers, the cgroup poll
//! and the stats report, then refills every group whose period ended
//! (pools.rs) and asks BPF to unthrottle it (bw_unthrottle). It also wakes for
//! messages: events from BPF (the events ring, which it reads itself) —
//! slack that CPUs returned into a throttled pool, distributed after the slack
//! delay, and cgroups' cpu.max / cpu.max.burst values, which it enforces like
//! configured limits (the configuration takes precedence) — and requests from
//! the scx_stats server (`--monitor`, any client of the stats socket). The agent thread runs SCHED_FIFO, a class
//! above sched_ext, so it is never queued behind the tasks it limits; BPF also
//! exempts the agent's thread group from charging and parking.
//!
//! `Scheduler` is one struct with an `impl` block per concern, each in a module:
//!
//! - `loader`: loading and attaching the BPF side, and access to its maps;
//! - `groups`: the group table, one `Group` per slot of bw_groups;
//! - `period`: the run loop and the timers (refill, unthrottle, idle groups);
//! - `cgroup_watch`: which cgroup each limit applies to (paths, cpu.max);
//! - `events`: the events ring from BPF and what each event does;
//! - `rules`: which cgroups the configuration's `[[rule]]`s limit;
//! - `reload`: SIGHUP;
//! - `metrics`: statistics and the stats server;
//! - `cost`: what the agent's own work costs, by kind;
//! - `topology`: LLCs and NUMA nodes, for BPF's per-LLC queues.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::bpf_skel::*;
use crate::pools::TimerQueue;

mod cgroup_watch;
mod cost;
mod events;
mod groups;
mod loader;
mod metrics;
mod period;
mod reload;
mod rules;
mod topology;

use cost::AgentCost;
use events::EventRing;
pub use events::LoopWaker;
pub use groups::{Group, Origin};
use metrics::StatsLink;

/// A poll walks the configured paths only when cgroups were created or removed
/// since the last walk (bw_cgroup_seq), and at least this often (renames).
const CGROUP_WALK_MAX: Duration = Duration::from_secs(5);

const NSEC_PER_USEC: u64 = 1_000;

/// Refills whose timer lateness is kept for the p99 statistic.
const LATENESS_SAMPLES: usize = 1024;

pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    /// bw_sched_switch, where it replaces ops.cpu_release.
    switch_tp: Option<libbpf_rs::Link>,
    root: PathBuf,
    groups: Vec<Group>,
    stats_every: Option<Duration>,
    no_burst: bool,
    /// --history-secs: how long a group's per-period history reaches back.
    history_secs: u64,
    /// The agent thread runs SCHED_FIFO (except for housekeeping).
    realtime: bool,
    refills: u64,
    slack_distributions: u64,
    /// Lateness (µs) of the last refills, for timer_late_p99_us.
    lateness: VecDeque<u64>,
    /// Deadlines of period and slack timers, earliest first. An entry is stale
    /// (skipped) when its group's timer no longer has that deadline: re-arming
    /// pushes a new entry instead of searching for the old one, so a wakeup
    /// costs O(log groups) per expiry, not a scan of every group.
    due: TimerQueue,
    /// bw_cgroup_seq at the last walk of configured paths, and when that was.
    walked: Option<(u64, Instant)>,
    /// BW_STAT_DEEP as last reported.
    deep_seen: u64,
    stats: Option<StatsLink>,
    events: Option<EventRing>,
    /// The configuration file, re-read on SIGHUP.
    config_path: Option<PathBuf>,
    /// The kernel passes cpu.max on (ops.cgroup_set_bandwidth): cgroups' own limits count.
    cgroupfs_limits: bool,
    /// The configuration's rules in force.
    rules: Vec<crate::rules::Rule>,
    /// Cgroups the kernel told of whose path is not visible yet (rules.rs).
    unresolved: rules::Unresolved,
    /// open_by_handle_at refused (said once).
    handle_lookup_failed: bool,
    /// What the run loop spent its time on (statistics).
    cost: AgentCost,
    /// Steps of the run loop that held the thread long (logged).
    stalls: cost::Stalls,
    /// LLC queues and NUMA nodes BPF was last told of.
    nr_llcs: usize,
    /// (cpu, llc) of every CPU a layout placed, online or not: keeps LLC ids stable.
    known_llc: Vec<(usize, usize)>,
    nr_nodes: usize,
    /// bw_hotplug_seq when the topology was last read; read it once more at the next poll.
    hotplug_seen: u64,
    topology_again: bool,
    topology_reader: Option<topology::TopologyReader>,
    /// Walks configured paths off the refill thread (cgroup_watch.rs).
    walker: Option<cgroup_watch::PathWalker>,
}
