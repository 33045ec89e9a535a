//! What the agent itself costs, and where the time goes.
//!
//! The agent is a root daemon on every node: its CPU time is taken from the
//! workloads. These counters split it by what the run loop did, so the share
//! of refills, of the cgroup poll and of statistics can be read from the
//! stats socket (and the table's `agent:` line) rather than guessed. They are
//! cheap: the refill path is timed with the vDSO clock (no system call), and
//! thread CPU time, a system call, is read only around the rare sections (the
//! cgroup poll, statistics, a reload) and when a snapshot is taken.

use std::time::Duration;

/// Cumulative cost counters of the run loop.
#[derive(Clone, Debug, Default)]
pub(super) struct AgentCost {
    /// Run loop iterations: one per wakeup (timer, event, request or signal).
    pub(super) wakeups: u64,
    /// Time spent expiring timers (refills, slack, and the unthrottle runs among them).
    pub(super) timers: Duration,
    /// bw_unthrottle runs and their time (the system call included).
    pub(super) unthrottle_runs: u64,
    pub(super) unthrottle: Duration,
    /// Events from BPF handled, and their time.
    pub(super) events: u64,
    pub(super) events_time: Duration,
    /// CPU time of the cgroup poll, of statistics (building, printing and
    /// serving snapshots) and of reloads, on the agent's thread.
    pub(super) poll_cpu: Duration,
    pub(super) stats_cpu: Duration,
    pub(super) reload_cpu: Duration,
}

/// CPU time of the calling thread.
pub(super) fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (every thread, user and system).
pub(super) fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
