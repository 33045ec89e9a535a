//! What the agent itself costs, and where the time goes.
//!
//! The agent is a root daemon on every node: its CPU time is taken from the
//! workloads. These counters split it by what the run loop did, so the share
//! of refills, of the cgroup poll and of statistics can be read from the
//! stats socket (and the table's `agent:` line) rather than guessed. They are
//! cheap: the refill path is timed with the vDSO clock (no system call), and
//! thread CPU time, a system call, is read only around the rare sections (the
//! cgroup poll, statistics, a reload) and when a snapshot is taken.

use std::time::{Duration, Instant};

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

/// A step of the run loop longer than this is logged: while any step runs, no
/// period timer can fire (they share the agent's thread), so a refill that late
/// is a group throttled that much longer. Twice the default slice: the agent at
/// normal priority (housekeeping) may wait that long for a CPU.
const STALL_WARN: Duration = Duration::from_millis(10);
/// At most one such message per this long; the next one counts those left out.
const STALL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Steps of the run loop that held the agent's thread past [`STALL_WARN`], for the
/// log: a late refill (`timer_late_p99_us`) then names what held it up, and when no
/// step did, the wakeup itself was late.
#[derive(Clone, Debug, Default)]
pub(super) struct Stalls {
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl Stalls {
    /// The loop's `step` took `took` of wall time, ending at `now`: the message to
    /// log, if it is one and none was logged in the last [`STALL_LOG_EVERY`].
    pub(super) fn note(&mut self, step: &str, took: Duration, now: Instant) -> Option<String> {
        if took < STALL_WARN {
            return None;
        }
        if self.last_logged.is_some_and(|t| now.saturating_duration_since(t) < STALL_LOG_EVERY) {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        let more = match std::mem::take(&mut self.unlogged) {
            0 => String::new(),
            n => format!("; {n} more step(s) over {} ms since the last such message", STALL_WARN.as_millis()),
        };
        Some(format!(
            "agent loop: {step} held the agent's thread {:.1} ms, period timers waiting{more}",
            took.as_secs_f64() * 1e3
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_log_the_long_steps_at_most_every_ten_seconds() {
        let mut st = Stalls::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(st.note("timers", ms(9), t0), None);
        let first = st.note("statistics request", ms(61), t0).expect("a 61 ms step is logged");
        assert!(first.contains("statistics request held the agent's thread 61.0 ms"), "{first}");
        // Within 10 s: counted, not logged; short steps are not counted.
        assert_eq!(st.note("cgroup poll", ms(15), t0 + ms(500)), None);
        assert_eq!(st.note("timers", ms(1), t0 + ms(600)), None);
        assert_eq!(st.note("events", ms(12), t0 + ms(9_000)), None);
        let next = st.note("timers", ms(30), t0 + ms(10_000)).expect("logged again after 10 s");
        assert!(next.contains("timers held the agent's thread 30.0 ms, period timers waiting; 2 more step(s) over 10 ms"), "{next}");
        let again = st.note("timers", ms(30), t0 + ms(20_000)).expect("logged");
        assert!(!again.contains("more step"), "{again}");
    }
}
