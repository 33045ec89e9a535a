//! Statistics: what the agent reads from BPF, served through scx_stats.
//!
//! A [`Metrics`] value is a snapshot of cumulative counters (like cpu.stat)
//! with the time it was taken. The stats socket serves it as JSON (`--monitor`
//! and any scx_stats client read it); the human table (`--stats`, `--monitor`)
//! is the difference between two snapshots, computed in one place
//! ([`Metrics::format`]).
//!
//! Per group the figures follow cpu.stat: nr_periods (periods elapsed while
//! the cgroup existed), nr_throttled (periods that ended with the group
//! throttled), throttled_usec (sum over CPUs of the time each was throttled),
//! nr_bursts/burst_usec (runtime moved out of the pool beyond quota), plus
//! what no kernel file has: CPU time used, used-based bursts, slack returned
//! and how long runnable tasks waited while throttled.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use scx_stats::prelude::*;
use scx_stats_derive::Stats;
use serde::{Deserialize, Serialize};

use crate::bpf_intf;

#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(_om_prefix = "g_", _om_label = "cgroup")]
pub struct GroupMetrics {
    #[stat(desc = "cgroup path, relative to the cgroup2 mount")]
    pub cgroup: String,
    #[stat(desc = "\"enforced\" while the cgroup exists, else \"absent\"")]
    pub state: String,
    #[stat(desc = "Where the limit comes from: \"config\" (a [[group]] of the configuration file), \"cpu.max\" (cgroupfs) or \"rule <name>\" (a [[rule]], on its own or changing cpu.max)")]
    pub source: String,
    #[stat(desc = "Quota per period (µs)")]
    pub quota_us: u64,
    #[stat(desc = "Period (µs)")]
    pub period_us: u64,
    #[stat(desc = "Burst: unused quota that may accumulate (µs)")]
    pub burst_us: u64,
    #[stat(desc = "CPU time used by the group and its descendants (µs, cumulative)")]
    pub usage_usec: u64,
    #[stat(desc = "Periods elapsed while the group was active: its timer stops after a period without use that leaves its pool full (quota + burst), as the kernel's stops after a period without use (cpu.stat)")]
    pub nr_periods: u64,
    #[stat(desc = "Periods that ended with the group throttled (cpu.stat)")]
    pub nr_throttled: u64,
    #[stat(desc = "Sum over CPUs of the time each was throttled (µs, cpu.stat)")]
    pub throttled_usec: u64,
    #[stat(desc = "Periods whose pool consumption exceeded quota (cpu.stat nr_bursts)")]
    pub nr_bursts: u64,
    #[stat(desc = "Pool consumption above quota, summed (µs, cpu.stat burst_usec)")]
    pub burst_usec: u64,
    #[stat(desc = "Periods whose CPU time actually used exceeded quota")]
    pub used_nr_bursts: u64,
    #[stat(desc = "CPU time actually used above quota, summed (µs)")]
    pub used_burst_usec: u64,
    #[stat(desc = "Local runtime CPUs returned to the pool (slack, µs)")]
    pub slack_returned_usec: u64,
    #[stat(desc = "Slack returns")]
    pub nr_slack_returns: u64,
    #[stat(desc = "Runtime left in the pool now (µs, a level; below 0 a short-period group's overdraft)")]
    pub pool_usec: i64,
    #[stat(desc = "Local runtime each CPU holds for the group now, by CPU number (µs, a level; negative: a debt run on credit, paid by the group's next refill or that CPU's next pull)")]
    pub local_usec: Vec<i64>,
    #[stat(desc = "Tasks parked because the group was throttled")]
    pub nr_parked: u64,
    #[stat(desc = "Refills the BPF safety net did because the agent was late by more than 2 periods")]
    pub nr_safety_refills: u64,
    #[stat(desc = "Runtime a refill discarded, capping the pool at quota + burst, while the group was throttled: quota it was due but could not use (µs)")]
    pub throttled_discard_usec: u64,
    #[stat(desc = "Throttle wait, 50th percentile since start: park to running again (µs, bucket upper bound)")]
    pub wait_p50_us: u64,
    #[stat(desc = "Throttle wait, 99th percentile since start (µs, bucket upper bound)")]
    pub wait_p99_us: u64,
    #[stat(desc = "Longest throttle wait since start (µs)")]
    pub wait_max_us: u64,
    #[stat(desc = "Sum of all throttle waits since start (µs)")]
    pub wait_sum_us: u64,
    #[stat(desc = "Throttle-wait histogram: bucket i counts waits below bucket_upper_us(i), four buckets per power of two; empty buckets after the last one counted are left out")]
    pub wait_hist: Vec<u64>,
    #[stat(desc = "CPU time used in each of the last periods, oldest first (µs)")]
    pub history_usec: Vec<u64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top, _om_prefix = "scx_bandwidth_")]
pub struct Metrics {
    #[stat(desc = "CLOCK_MONOTONIC time of this snapshot (µs)", _om_skip)]
    pub at_us: u64,
    #[stat(desc = "Tasks enqueued")]
    pub enqueue: u64,
    #[stat(desc = "Wakeups dispatched straight to an idle CPU (a synchronous one: to the waker's CPU)")]
    pub direct: u64,
    #[stat(desc = "Tasks moved from an LLC's queue to a CPU (including the two below)")]
    pub dispatch: u64,
    #[stat(
        desc = "Of those, taken by a CPU from another LLC's queue on the same NUMA node (idle, or that queue far behind)"
    )]
    pub dispatch_steal: u64,
    #[stat(desc = "Of those, taken by a CPU from an LLC queue of another NUMA node")]
    pub dispatch_steal_node: u64,
    #[stat(desc = "LLC queues the scheduling core uses (one per last-level cache, up to 64)")]
    pub llc_queues: u64,
    #[stat(desc = "NUMA nodes those LLCs are on")]
    pub numa_nodes: u64,
    #[stat(desc = "Idle CPUs kicked")]
    pub kick: u64,
    #[stat(desc = "Tasks parked (their group was throttled)")]
    pub park: u64,
    #[stat(desc = "Parked tasks released")]
    pub release: u64,
    #[stat(desc = "Slices pulled from pools")]
    pub pull: u64,
    #[stat(desc = "CPU-level throttle events")]
    pub throttle: u64,
    #[stat(desc = "Running tasks cut short by throttling")]
    pub preempt: u64,
    #[stat(desc = "Local runtime returned to pools (slack, µs)")]
    pub slack_returned_usec: u64,
    #[stat(desc = "Events (slack, cgroup limits, exits) lost because the ring to the agent was full")]
    pub event_lost: u64,
    #[stat(desc = "Refills the BPF safety net did while the agent was stalled")]
    pub safety_refills: u64,
    #[stat(desc = "Periods of groups with a period under 10 ms refilled by BPF on the period grid (a late refill counts every period boundary it covers)")]
    pub short_period_refills: u64,
    #[stat(desc = "Refills of those done before the timer ran (late under load): by a CPU that found the pool dry after a period boundary, or by the agent when the timer had not refilled for 10 ms")]
    pub short_period_caught_up: u64,
    #[stat(desc = "Tasks of a short-period group stopped by the slice timer when their runtime ran out, before the next tick")]
    pub slice_timer_kicks: u64,
    #[stat(desc = "Period boundaries of short-period groups their BPF timer passed unfired, being late by more than a period (its refill covers them, up to the cap)")]
    pub short_period_missed: u64,
    #[stat(desc = "CPUs that went offline or came online while attached")]
    pub hotplug: u64,
    #[stat(desc = "Local runtime CPUs gave back to pools when going offline or coming online (µs)")]
    pub hotplug_returned_usec: u64,
    #[stat(desc = "Task chains cut because more than 16 limited groups were on the path: limits below the 16th outermost were not enforced for those tasks")]
    pub deep_chains: u64,
    #[stat(desc = "Parked tasks that had waited 5 s and ran once on credit (their group pays it back from its next runtime): a group with more runnable threads than its quota can rotate through, or a task moved between throttled groups")]
    pub rescued: u64,
    #[stat(desc = "cgroups created when 65,536 were already tracked for cpu.weight: their tasks share by nice level alone")]
    pub unweighted_cgroups: u64,
    #[stat(desc = "Times a task of a throttled group inside fork, exec or an RCU read-side section was let run a short slice on credit instead of parking there (parked there it would hold up every cgroup move on the machine); its group pays it back")]
    pub kernel_credit: u64,
    #[stat(desc = "Times such a task was parked there anyway: its group's CPUs already owed 9 ms or more for such runs (the bound is 10 ms in all)")]
    pub kernel_debt: u64,
    #[stat(desc = "Tasks parked that way released by their group's next refill ahead of every queued task, after it paid the debts (also when that left the pool dry: the payment made room for their credit)")]
    pub kernel_held_first: u64,
    #[stat(desc = "Idle CPUs a tick found idling beside a task waiting in its LLC's queue, and kicked (a wakeup the kick of enqueue or the idle re-check missed)")]
    pub idle_nudges: u64,
    #[stat(desc = "Times a CPU was taken by a higher scheduling class (an RT task such as this agent, a stop task) and the tasks queued on it were sent back through enqueue: to an idle CPU if there was one, else to the head of that CPU's queue with the slice they had left")]
    pub reenqueued: u64,
    #[stat(desc = "Task contexts ops.init_task could not allocate (the scheduler would otherwise fail to attach), created when the task was first queued or run")]
    pub task_ctx_late: u64,
    #[stat(desc = "Times a task had no context even then (allocation failed again): it was scheduled without its groups' limits that once")]
    pub task_ctx_missing: u64,
    #[stat(desc = "Period refills done by the agent")]
    pub refills: u64,
    #[stat(desc = "Slack distributions done by the agent")]
    pub slack_distributions: u64,
    #[stat(desc = "Agent period-timer lateness, 99th percentile of the last 1024 refills (µs)")]
    pub timer_late_p99_us: u64,
    #[stat(desc = "CPU time of the agent's run-loop thread (µs, cumulative): timers, events, the cgroup poll, statistics, and the wakeups themselves")]
    pub agent_cpu_usec: u64,
    #[stat(desc = "CPU time of the whole agent process, every thread (µs): the run loop and the stats server, which serialises the JSON it serves")]
    pub agent_process_cpu_usec: u64,
    #[stat(desc = "Times the agent's run loop woke (for a timer, an event from BPF, a stats request or a signal)")]
    pub agent_wakeups: u64,
    #[stat(desc = "Time the run loop spent expiring timers: refills, slack distribution and the unthrottle runs among them (µs)")]
    pub agent_timers_usec: u64,
    #[stat(desc = "Runs of the bw_unthrottle program (one per refill of a group that was throttled or had tasks parked)")]
    pub agent_unthrottle_runs: u64,
    #[stat(desc = "Time of those runs, the system call included (µs)")]
    pub agent_unthrottle_usec: u64,
    #[stat(desc = "Events from BPF the run loop handled (slack, cgroup limits, exits, idle groups' wakes)")]
    pub agent_events: u64,
    #[stat(desc = "Time the run loop spent handling them (µs)")]
    pub agent_events_usec: u64,
    #[stat(desc = "CPU time of the cgroup poll (configured paths, missed wakes) on the run loop's thread (µs)")]
    pub agent_poll_cpu_usec: u64,
    #[stat(desc = "CPU time of statistics on the run loop's thread: building snapshots, printing --stats, answering the stats socket (µs)")]
    pub agent_stats_cpu_usec: u64,
    #[stat(desc = "CPU time of configuration reloads (SIGHUP) on the run loop's thread (µs)")]
    pub agent_reload_cpu_usec: u64,
    #[stat(desc = "Limited cgroups enforced now (slots mapped to a cgroup)")]
    pub active_groups: u64,
    #[stat(desc = "Of those, groups whose period timer is stopped: idle for a period that left a full pool, quota + burst (cpu.stat's nr_periods does not advance)")]
    pub idle_groups: u64,
    #[stat(desc = "Per limited group")]
    pub groups: Vec<GroupMetrics>,
}

/// Global counters as read from BPF, indexed by enum bw_stat_idx.
pub fn counters_into(m: &mut Metrics, counters: &[u64]) {
    let c = |i: u32| counters.get(i as usize).copied().unwrap_or(0);
    m.enqueue = c(bpf_intf::bw_stat_idx_BW_STAT_ENQUEUE);
    m.direct = c(bpf_intf::bw_stat_idx_BW_STAT_DIRECT);
    m.dispatch = c(bpf_intf::bw_stat_idx_BW_STAT_DISPATCH);
    m.dispatch_steal = c(bpf_intf::bw_stat_idx_BW_STAT_STEAL);
    m.dispatch_steal_node = c(bpf_intf::bw_stat_idx_BW_STAT_STEAL_NODE);
    m.kick = c(bpf_intf::bw_stat_idx_BW_STAT_KICK);
    m.park = c(bpf_intf::bw_stat_idx_BW_STAT_PARK);
    m.release = c(bpf_intf::bw_stat_idx_BW_STAT_RELEASE);
    m.pull = c(bpf_intf::bw_stat_idx_BW_STAT_PULL);
    m.throttle = c(bpf_intf::bw_stat_idx_BW_STAT_THROTTLE);
    m.preempt = c(bpf_intf::bw_stat_idx_BW_STAT_PREEMPT);
    m.slack_returned_usec = c(bpf_intf::bw_stat_idx_BW_STAT_SLACK) / 1000;
    m.event_lost = c(bpf_intf::bw_stat_idx_BW_STAT_EVENT_LOST);
    m.safety_refills = c(bpf_intf::bw_stat_idx_BW_STAT_SAFETY);
    m.short_period_refills = c(bpf_intf::bw_stat_idx_BW_STAT_SHORT_REFILL);
    m.short_period_caught_up = c(bpf_intf::bw_stat_idx_BW_STAT_SHORT_CATCH_UP);
    m.slice_timer_kicks = c(bpf_intf::bw_stat_idx_BW_STAT_SLICE_KICK);
    m.short_period_missed = c(bpf_intf::bw_stat_idx_BW_STAT_SHORT_MISSED);
    m.hotplug = c(bpf_intf::bw_stat_idx_BW_STAT_HOTPLUG);
    m.hotplug_returned_usec = c(bpf_intf::bw_stat_idx_BW_STAT_HOTPLUG_NS) / 1000;
    m.deep_chains = c(bpf_intf::bw_stat_idx_BW_STAT_DEEP);
    m.rescued = c(bpf_intf::bw_stat_idx_BW_STAT_RESCUE);
    m.unweighted_cgroups = c(bpf_intf::bw_stat_idx_BW_STAT_UNWEIGHTED);
    m.kernel_credit = c(bpf_intf::bw_stat_idx_BW_STAT_KERNEL_CREDIT);
    m.kernel_debt = c(bpf_intf::bw_stat_idx_BW_STAT_KERNEL_DEBT);
    m.kernel_held_first = c(bpf_intf::bw_stat_idx_BW_STAT_HELD_FIRST);
    m.idle_nudges = c(bpf_intf::bw_stat_idx_BW_STAT_IDLE_NUDGE);
    m.reenqueued = c(bpf_intf::bw_stat_idx_BW_STAT_REENQ);
    m.task_ctx_late = c(bpf_intf::bw_stat_idx_BW_STAT_CTX_LATE);
    m.task_ctx_missing = c(bpf_intf::bw_stat_idx_BW_STAT_CTX_MISSING);
}

/// Upper bound (µs, exclusive) of throttle-wait bucket `b`: buckets 0..4 are 0..4 µs,
/// then four buckets per power of two (the BPF side's wait_bucket()).
pub fn bucket_upper_us(b: usize) -> u64 {
    if b < 4 {
        return b as u64 + 1;
    }
    if b < 8 {
        // Unused: 4 µs and more starts at bucket 8 (log 2).
        return 4;
    }
    let (log, quarter) = ((b / 4) as u32, (b % 4) as u64);
    (5 + quarter).checked_shl(log - 2).unwrap_or(u64::MAX)
}

/// Percentile `q` (0..=1) of a bucketed histogram, as the bucket's upper bound; 0 if empty.
pub fn hist_percentile(hist: &[u64], q: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_upper_us(b);
        }
    }
    bucket_upper_us(hist.len() - 1)
}

/// Counter difference that survives a counter reset (slot reused).
pub(crate) fn delta(now: u64, before: u64) -> u64 {
    now.checked_sub(before).unwrap_or(now)
}

/// Rows of the table: the most throttled groups; the rest are counted on one line.
const TABLE_ROWS: usize = 30;

/// Width of the table's cgroup column; longer paths keep their tail.
const CGROUP_COL: usize = 28;

impl GroupMetrics {
    /// The throttle-wait histogram of the interval since `prev`.
    pub fn wait_hist_since(&self, prev: &GroupMetrics) -> Vec<u64> {
        self.wait_hist.iter().enumerate().map(|(i, n)| delta(*n, *prev.wait_hist.get(i).unwrap_or(&0))).collect()
    }
}

impl Metrics {
    /// Seconds from `prev` to `self` (never 0: rates divide by it).
    pub fn interval_secs(&self, prev: &Metrics) -> f64 {
        (self.at_us.saturating_sub(prev.at_us) as f64 / 1e6).max(1e-9)
    }

    /// Each group with its snapshot in `prev` (matched by cgroup, so a group that
    /// appeared meanwhile is compared with zeros) and the time it was throttled in
    /// between, most throttled first: the order of the table and of `--graph`.
    pub fn by_throttling<'a>(&'a self, prev: &'a Metrics) -> Vec<(u64, &'a GroupMetrics, &'a GroupMetrics)> {
        static EMPTY: std::sync::LazyLock<GroupMetrics> = std::sync::LazyLock::new(GroupMetrics::default);
        let before: BTreeMap<&str, &GroupMetrics> = prev.groups.iter().map(|g| (g.cgroup.as_str(), g)).collect();
        let mut order: Vec<(u64, &GroupMetrics, &GroupMetrics)> = self
            .groups
            .iter()
            .map(|g| (g, before.get(g.cgroup.as_str()).copied().unwrap_or(&EMPTY)))
            .map(|(g, p)| (delta(g.throttled_usec, p.throttled_usec), g, p))
            .collect();
        order.sort_by_key(|o| std::cmp::Reverse(o.0));
        order
    }

    /// The report for the interval from `prev` to `self`: one row per group,
    /// most throttled first, then the global counters.
    pub fn format<W: Write>(&self, prev: &Metrics, w: &mut W) -> Result<()> {
        let secs = self.interval_secs(prev);
        let order = self.by_throttling(prev);
        // Only the rows shown are formatted (there may be thousands).
        let hidden = order.len().saturating_sub(TABLE_ROWS);
        let mut rows: Vec<String> = Vec::new();
        for &(throttled_us, g, p) in order.iter().take(TABLE_ROWS) {
            let cpus = delta(g.usage_usec, p.usage_usec) as f64 / 1e6 / secs;
            let limit = g.quota_us as f64 / g.period_us.max(1) as f64;
            let hist = g.wait_hist_since(p);
            let wait = |q| match hist_percentile(&hist, q) {
                0 => "-".to_string(),
                us => format!("{:.1}", us as f64 / 1e3),
            };
            let row = format!(
                "{:<CGROUP_COL$} {:>8}/{:<8} {:>6.3} {:>6.3} {:>6.1}% {:>7} {:>7} {:>10.1} {:>6} {:>8.1} {:>6} {:>8.1} {:>7} {:>7}{}",
                clip(&g.cgroup, CGROUP_COL),
                g.quota_us,
                g.period_us,
                limit,
                cpus,
                100.0 * cpus / limit,
                delta(g.nr_periods, p.nr_periods),
                delta(g.nr_throttled, p.nr_throttled),
                throttled_us as f64 / 1e3,
                delta(g.nr_bursts, p.nr_bursts),
                delta(g.burst_usec, p.burst_usec) as f64 / 1e3,
                delta(g.used_nr_bursts, p.used_nr_bursts),
                delta(g.used_burst_usec, p.used_burst_usec) as f64 / 1e3,
                wait(0.99),
                if g.wait_max_us == 0 { "-".to_string() } else { format!("{:.1}", g.wait_max_us as f64 / 1e3) },
                if g.state == "enforced" { "" } else { "  (absent)" },
            );
            rows.push(row);
        }

        writeln!(w, "--- scx_bandwidth {secs:.1}s ---")?;
        writeln!(
            w,
            "{:<CGROUP_COL$} {:>17} {:>6} {:>6} {:>7} {:>7} {:>7} {:>10} {:>6} {:>8} {:>6} {:>8} {:>7} {:>7}",
            "cgroup",
            "quota/period us",
            "limit",
            "cpus",
            "of lim",
            "periods",
            "thrtld",
            "thrtld_ms",
            "bursts",
            "burst_ms",
            "used_b",
            "usedb_ms",
            "wait99",
            "waitmax",
        )?;
        for r in rows {
            writeln!(w, "{r}")?;
        }
        if hidden > 0 {
            writeln!(w, "… {hidden} more group(s), less throttled; every group is in the JSON of the stats socket")?;
        }
        let d = |a: u64, b: u64| delta(a, b);
        writeln!(
            w,
            "enqueue={} direct={} dispatch={} steal={}/{} kick={} park={} release={} pull={} throttle={} preempt={} \
             kcredit={} slack_ms={:.1} refills={} slack_dist={} hotplug={} late_p99_us={}",
            d(self.enqueue, prev.enqueue),
            d(self.direct, prev.direct),
            d(self.dispatch, prev.dispatch),
            d(self.dispatch_steal, prev.dispatch_steal),
            d(self.dispatch_steal_node, prev.dispatch_steal_node),
            d(self.kick, prev.kick),
            d(self.park, prev.park),
            d(self.release, prev.release),
            d(self.pull, prev.pull),
            d(self.throttle, prev.throttle),
            d(self.preempt, prev.preempt),
            d(self.kernel_credit, prev.kernel_credit),
            d(self.slack_returned_usec, prev.slack_returned_usec) as f64 / 1e3,
            d(self.refills, prev.refills),
            d(self.slack_distributions, prev.slack_distributions),
            d(self.hotplug, prev.hotplug),
            self.timer_late_p99_us,
        )?;
        let ms_s = |a: u64, b: u64| delta(a, b) as f64 / 1e3 / secs;
        writeln!(
            w,
            "agent: cpu={:.1}ms/s (process {:.1}) wakeups={:.0}/s timers={:.1}ms/s (unthrottle {:.0}/s, {:.1}ms/s) \
             events={:.0}/s {:.1}ms/s poll={:.1}ms/s stats={:.1}ms/s",
            ms_s(self.agent_cpu_usec, prev.agent_cpu_usec),
            ms_s(self.agent_process_cpu_usec, prev.agent_process_cpu_usec),
            delta(self.agent_wakeups, prev.agent_wakeups) as f64 / secs,
            ms_s(self.agent_timers_usec, prev.agent_timers_usec),
            delta(self.agent_unthrottle_runs, prev.agent_unthrottle_runs) as f64 / secs,
            ms_s(self.agent_unthrottle_usec, prev.agent_unthrottle_usec),
            delta(self.agent_events, prev.agent_events) as f64 / secs,
            ms_s(self.agent_events_usec, prev.agent_events_usec),
            ms_s(self.agent_poll_cpu_usec, prev.agent_poll_cpu_usec),
            ms_s(self.agent_stats_cpu_usec, prev.agent_stats_cpu_usec),
        )?;
        Ok(())
    }
}

pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s.chars().rev().take(n - 1).collect::<Vec<_>>().into_iter().rev().collect();
        format!("…{tail}")
    }
}

/// CLOCK_MONOTONIC in µs: the time base of [`Metrics::at_us`].
pub fn monotonic_us() -> u64 {
    monotonic_ns() / 1_000
}

/// CLOCK_MONOTONIC in ns: BPF's bpf_ktime_get_ns() clock (bw_group.refilled_at).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The scx_stats server's description of every figure (`--help-stats`).
pub fn server_data<Req: Send + 'static, Res: Send + 'static>() -> StatsServerData<Req, Res> {
    StatsServerData::new().add_meta(Metrics::meta()).add_meta(GroupMetrics::meta())
}

/// Where scx_stats serves a scheduler's statistics (its default path).
pub const SOCKET: &str = "/var/run/scx/root/stats";

/// `--stats-group`: make `socket` (created 0600 root) usable by members of `gid`:
/// the socket 0660 and its directory 0750, both owned root:gid, and every directory
/// above it searchable (x) by group and others. On error the socket is made 0600
/// again, so it is never left half-open.
pub fn open_socket_to(socket: &Path, gid: u32) -> Result<()> {
    use std::os::unix::fs::{chown, PermissionsExt};
    let set = |p: &Path, mode: u32| -> Result<()> {
        chown(p, Some(0), Some(gid)).with_context(|| format!("chown root:{gid} {}", p.display()))?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {mode:o} {}", p.display()))
    };
    let open = || -> Result<()> {
        let dir = socket.parent().context("socket path has no directory")?;
        for above in dir.ancestors().skip(1) {
            let mode = std::fs::metadata(above).with_context(|| format!("stat {}", above.display()))?.permissions().mode();
            if mode & 0o011 != 0o011 {
                std::fs::set_permissions(above, std::fs::Permissions::from_mode((mode | 0o011) & 0o7777))
                    .with_context(|| format!("chmod g+x,o+x {}", above.display()))?;
            }
        }
        set(dir, 0o750)?;
        set(socket, 0o660)
    };
    open().inspect_err(|_| {
        let _ = std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600));
    })
}

/// `--monitor`, read-only: read a running instance's stats socket (root's, or --stats-group's)
/// every `every` and print the table of each interval, or with `graph` draw it ([`crate::graph`]).
pub fn monitor(every: Duration, graph: bool, shutdown: impl Fn() -> bool) -> Result<()> {
    let mut prev: Option<Metrics> = None;
    scx_utils::monitor_stats::<Metrics>(&[], every, shutdown, |m| {
        match &prev {
            Some(p) if graph => crate::graph::print(p, &m)?,
            Some(p) => m.format(p, &mut std::io::stdout())?,
            None => {}
        }
        prev = Some(m);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, usage_usec: u64, throttled_usec: u64, periods: u64) -> GroupMetrics {
        GroupMetrics {
            cgroup: name.into(),
            state: "enforced".into(),
            quota_us: 30_000,
            period_us: 100_000,
            usage_usec,
            nr_periods: periods,
            nr_throttled: periods,
            throttled_usec,
            ..Default::default()
        }
    }

    fn render(after: &Metrics, before: &Metrics) -> String {
        let mut out = Vec::new();
        after.format(before, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn report_uses_deltas_and_sorts_by_throttling() {
        let before = Metrics {
            at_us: 1_000_000,
            groups: vec![group("a", 1_000_000, 0, 10), group("b", 0, 0, 10)],
            ..Default::default()
        };
        let after = Metrics {
            at_us: 2_000_000,
            enqueue: 5,
            groups: vec![group("a", 1_300_000, 100_000, 20), group("b", 300_000, 700_000, 20)],
            ..Default::default()
        };
        let text = render(&after, &before);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("b "), "{text}");
        assert!(lines[2].contains(" 0.300 ") && lines[2].contains("100.0%") && lines[2].contains("700.0"), "{text}");
        assert!(lines[3].starts_with("a ") && lines[3].contains("100.0"), "{text}");
        assert!(text.contains("enqueue=5"), "{text}");
    }

    #[test]
    fn table_keeps_the_most_throttled_rows() {
        let n = TABLE_ROWS + 5;
        let before = Metrics { at_us: 0, groups: (0..n).map(|i| group(&format!("g{i}"), 0, 0, 0)).collect(), ..Default::default() };
        // g{i} was throttled i ms: the 5 least throttled (g0..g4) are left out.
        let after = Metrics {
            at_us: 1_000_000,
            groups: (0..n).map(|i| group(&format!("g{i}"), 0, i as u64 * 1000, 1)).collect(),
            ..Default::default()
        };
        let text = render(&after, &before);
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('g')).collect();
        assert_eq!(rows.len(), TABLE_ROWS, "{text}");
        assert!(rows[0].starts_with(&format!("g{} ", n - 1)), "{text}");
        assert!(!rows.iter().any(|r| r.starts_with("g4 ")), "{text}");
        assert!(text.contains("… 5 more group(s)"), "{text}");
    }

    #[test]
    fn rows_follow_cgroups_not_positions() {
        // A group that appears between two snapshots is compared with zero.
        let before = Metrics { at_us: 0, groups: vec![group("a", 500_000, 0, 0)], ..Default::default() };
        let after = Metrics {
            at_us: 1_000_000,
            groups: vec![group("new", 150_000, 0, 0), group("a", 800_000, 0, 0)],
            ..Default::default()
        };
        let text = render(&after, &before);
        assert!(text.lines().any(|l| l.starts_with("new ") && l.contains(" 0.150 ")), "{text}");
        assert!(text.lines().any(|l| l.starts_with("a ") && l.contains(" 0.300 ")), "{text}");
    }

    #[test]
    fn buckets_match_the_bpf_layout() {
        // 0..4 µs one bucket each, then [4,5) [5,6) [6,7) [7,8) for log 2, [8,10) ... for log 3.
        assert_eq!((0..4).map(bucket_upper_us).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!((8..12).map(bucket_upper_us).collect::<Vec<_>>(), vec![5, 6, 7, 8]);
        assert_eq!((12..16).map(bucket_upper_us).collect::<Vec<_>>(), vec![10, 12, 14, 16]);
        // 100 ms = 100000 µs: log 16 (65536), quarter (100000 >> 14) & 3 = 2 -> upper 7 << 14.
        assert_eq!(bucket_upper_us(4 * 16 + 2), 7 << 14);
        assert!(bucket_upper_us(bpf_intf::bw_consts_BW_WAIT_BUCKETS as usize - 1) >= 16_000_000);
    }

    #[test]
    fn percentiles_from_buckets() {
        let mut h = vec![0u64; 96];
        assert_eq!(hist_percentile(&h, 0.99), 0);
        h[10] = 99; // < 7 µs
        h[40] = 1; // 10th power: [1024·(4+0)/4 ...) upper 5 << 8 = 1280
        assert_eq!(hist_percentile(&h, 0.5), 7);
        assert_eq!(hist_percentile(&h, 0.99), 7);
        assert_eq!(hist_percentile(&h, 1.0), 1280);
    }

    #[test]
    fn clip_keeps_the_tail() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("workload/very/long/name", 8), "…ng/name");
    }

    #[test]
    fn delta_survives_reset() {
        assert_eq!(delta(10, 4), 6);
        assert_eq!(delta(3, 9), 3);
    }

    #[test]
    fn every_field_is_described() {
        let mut out = Vec::new();
        server_data::<(), ()>().describe_meta(&mut out, None).unwrap();
        let text = String::from_utf8(out).unwrap();
        for f in ["usage_usec", "nr_throttled", "throttled_usec", "wait_p99_us", "timer_late_p99_us", "slack_returned_usec"] {
            assert!(text.contains(f), "{f} missing from:\n{text}");
        }
    }
}
