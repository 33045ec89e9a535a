//! The period run loop: the agent is the period timer of every group.
//!
//! fair.c refills a group's pool from a timer each period; here the agent's
//! SCHED_FIFO thread does, from one loop that sleeps until the earliest deadline
//! (a heap of period and slack timers, the cgroup poll, the stats report) or until
//! a message wakes it. An expired period refills the pool with the rule in
//! pools.rs and runs bw_unthrottle when the group was throttled or tasks parked
//! since the last refill. A group that used nothing in a period and whose pool is
//! full goes idle, its timer stopped until a CPU pulls from it again (BW_EV_WAKE),
//! as the kernel deactivates an idle group's timer. When BPF refilled instead (the
//! safety net, short periods) it stamped refilled_at, and the agent books that
//! period rather than refill it again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use log::{error, warn};
use scx_utils::{uei_report, UserExitInfo};

use super::{cost, metrics, LoopWaker, Scheduler, CGROUP_WALK_MAX, LATENESS_SAMPLES};
use crate::bpf_intf;
use crate::pools::{self, Due, PeriodTimer};
use crate::stats;

/// How often configured cgroup paths are checked for appearing/vanishing.
const CGROUP_POLL: Duration = Duration::from_millis(200);

/// How much later than due a cgroup poll may run to share a wakeup with a timer.
const POLL_SLACK: Duration = Duration::from_millis(50);

impl<'a> Scheduler<'a> {
    /// A period of `slot` starts `now` (activation, or a wake from idle), with
    /// bw_group.usage at `usage`: start and queue its timer, stamp the refill clock.
    pub(super) fn start_period(&mut self, slot: usize, usage: u64, now: Instant) {
        let g = &mut self.groups[slot];
        g.book.start(usage, now);
        g.timer = Some(PeriodTimer::new(Duration::from_micros(g.cfg.period_us), now));
        g.idle = false;
        self.arm(slot);
        self.stamp_refill(slot);
    }

    /// Stop the period timer of `slot`, which used nothing in the period that just
    /// ended and whose pool is full (`cap`), as the kernel deactivates an idle
    /// group's timer: an idle group costs the agent nothing until it runs again.
    fn go_idle(&mut self, slot: usize, cap: i64) {
        self.idle_flag(slot).store(1, Ordering::SeqCst);
        // A CPU that pulled before the flag was visible did not wake us: stay active.
        if self.pool(slot).load(Ordering::SeqCst) != cap
            && self.idle_flag(slot).compare_exchange(1, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
        {
            return;
        }
        // Otherwise idle, or a CPU already cleared the flag and a wake event follows.
        self.groups[slot].idle = true;
    }

    /// A CPU pulled from the pool of idle `slot` (BW_EV_WAKE, or seen by the poll):
    /// restart its period timer. The period started when BPF stamped the pull in
    /// refilled_at (the event may reach us later: bw_wake does not wake us when we
    /// wake anyway within half a period); a stamp older than a period is not that
    /// pull's (a missed wake found by the poll), and the period starts now.
    pub(super) fn wake(&mut self, slot: usize, now: Instant) {
        let Some(g) = self.groups.get_mut(slot) else { return };
        if g.free || g.timer.is_none() || !g.idle {
            return;
        }
        let period = Duration::from_micros(g.cfg.period_us);
        let ago = Duration::from_nanos(stats::monotonic_ns().saturating_sub(self.refill_stamp(slot)));
        let start = if ago < period { now.checked_sub(ago).unwrap_or(now) } else { now };
        // The group used nothing from its last refill until the pull that woke it, but
        // may have run for up to half a period since: what it used then belongs to
        // the new period, so the usage snapshot stays the one of the last refill.
        let usage = self.groups[slot].book.usage_at_refill;
        self.groups[slot].book.idle_until(period, start);
        self.start_period(slot, usage, start);
    }

    /// Wakes the ring could not carry (it was full): idle groups whose flag a CPU cleared.
    fn wake_missed(&mut self, now: Instant) {
        for slot in 0..self.groups.len() {
            if self.groups[slot].idle && self.idle_flag(slot).load(Ordering::Acquire) == 0 {
                self.wake(slot, now);
            }
        }
    }

    /// Period timer expiry for `slot`: count the periods, refill the pool
    /// once and release the group's parked tasks.
    fn refill(&mut self, slot: usize, overrun: u64) -> Result<()> {
        let (throttled, parked, usage, short_throttled, wait_sum) = {
            let g = &self.bss().bw_groups[slot];
            // SAFETY: plain reads of fields BPF updates concurrently.
            unsafe {
                (
                    std::ptr::read_volatile(&g.throttled),
                    std::ptr::read_volatile(&g.nr_parked),
                    std::ptr::read_volatile(&g.usage),
                    std::ptr::read_volatile(&g.nr_short_throttled),
                    std::ptr::read_volatile(&g.wait_sum_ns),
                )
            }
        };
        let (q, b) = self.groups[slot].limits_ns(self.no_burst);
        let period = Duration::from_micros(self.groups[slot].cfg.period_us);
        let short = Duration::from_nanos(bpf_intf::bw_consts_BW_SHORT_PERIOD_NS as u64);
        let stride = pools::short_period_stride(period, short);
        let window = period.as_nanos() as u64 * u64::from(stride);
        // The safety net, or a short period's BPF timer, refilled since our last
        // refill: that was this period's refill.
        let mut stamp = self.refill_stamp(slot);
        let mut bpf_refilled = stamp > self.groups[slot].agent_refilled_ns;
        // A short period whose BPF timer has not refilled since our last visit, or not
        // for `stride` periods (late, or not started yet): BPF refills it now by its
        // grid rule (bw_short_refill), every grid point passed. A refill and stamp of
        // ours would count one period and make the timer skip the others.
        let mut grid_ruled = false;
        if stride > 1 && (!bpf_refilled || stats::monotonic_ns().saturating_sub(stamp) >= window) {
            grid_ruled = self.short_refill(slot)?.is_some();
            if grid_ruled {
                stamp = self.refill_stamp(slot);
                bpf_refilled = true;
            }
        }
        let (left, refilled) = if bpf_refilled {
            let cur = self.pool(slot).load(Ordering::Acquire);
            (cur, cur)
        } else {
            pools::refill_shared(self.pool(slot), q, b)
        };
        // A short period whose BPF timer refills it on its grid (it did within the
        // last `stride` periods, the span the agent now sleeps): the agent only
        // books, every `stride` periods, and leaves refilled_at to BPF (a stamp of
        // ours could fall between a grid point and the timer's run and make it
        // skip that refill). If BPF stopped refilling, the agent visits every
        // period (and has BPF refill it, above).
        let bpf_timed = stride > 1 && bpf_refilled && stats::monotonic_ns().saturating_sub(stamp) < window;
        if !bpf_timed && !grid_ruled {
            self.stamp_refill(slot);
        }

        let g = &mut self.groups[slot];
        g.nr_periods += overrun;
        if throttled != 0 && !bpf_refilled {
            g.discarded_ns += pools::discarded(left, refilled, q);
        }
        // BPF counted the grid points at which such a group was throttled.
        let short_throttled_periods = short_throttled.saturating_sub(g.seen_short_throttled);
        g.seen_short_throttled = short_throttled;
        if bpf_timed {
            g.nr_throttled += short_throttled_periods.min(overrun);
        } else if throttled != 0 {
            g.nr_throttled += overrun;
        }
        if let Some(t) = g.timer.as_mut() {
            t.set_every(if bpf_timed { stride } else { 1 });
        }
        let unused = usage == g.book.usage_at_refill;
        // The pool-based burst figure needs the pool right after our last refill; BPF
        // refilled it since, every period: not counted for such a group.
        let left = if bpf_timed { g.book.snap } else { left };
        let ended_throttled = if bpf_timed { short_throttled_periods > 0 } else { throttled != 0 };
        g.close_period((left, refilled), (usage, wait_sum), overrun, ended_throttled, Instant::now());
        // The refill distributes whatever slack was waiting.
        g.slack_at = None;
        let release = throttled != 0 || parked != g.seen_parked;
        g.seen_parked = parked;
        self.refills += 1;
        self.clear_slack_pending(slot);
        if release {
            self.unthrottle(slot)?;
        } else if pools::goes_idle(unused, refilled, q, b) {
            self.go_idle(slot, refilled);
        }
        Ok(())
    }

    /// Record how late a period timer fired.
    fn note_lateness(&mut self, late: Duration) {
        if self.lateness.len() == LATENESS_SAMPLES {
            self.lateness.pop_front();
        }
        self.lateness.push_back(late.as_micros() as u64);
    }

    /// The agent's event loop until shutdown or a scheduler exit.
    pub fn run(&mut self, shutdown: Arc<AtomicBool>, waker: &LoopWaker, reload: &AtomicBool) -> Result<UserExitInfo> {
        let start = Instant::now();
        let mut next_poll = start + CGROUP_POLL;
        let mut next_stats = self.stats_every.map(|d| start + d);
        let mut table = None;
        if next_stats.is_some() {
            self.name_groups();
            match metrics::TablePrinter::spawn(self.metrics()) {
                Ok(t) => table = Some(t),
                Err(e) => {
                    error!("--stats: cannot start the table's thread: {e:#}; no statistics table");
                    next_stats = None;
                }
            }
        }

        while !shutdown.load(Ordering::Relaxed) && !self.exited() {
            let now = Instant::now();
            self.cost.wakeups += 1;
            self.run_timers(now)?;
            self.cost.timers += now.elapsed();
            self.note_step("timers (refills and unthrottles)", now);
            // The cgroup poll is done at once; the walk of configured paths it may
            // ask for runs on the walker's thread, and what it found is applied when
            // it wakes us. The stats table is printed by its own thread (metrics.rs).
            self.take_walk(now)?;
            if reload.swap(false, Ordering::Relaxed) {
                let (t, at) = (cost::thread_cpu(), Instant::now());
                self.reload(now)?;
                self.cost.reload_cpu += cost::thread_cpu().saturating_sub(t);
                self.note_step("the reload", at);
            }
            if now >= next_poll {
                let (t, at) = (cost::thread_cpu(), Instant::now());
                self.wake_missed(now);
                self.report_deep_chains();
                self.poll_topology();
                self.poll_cgroups_off_loop(now)?;
                self.retry_unresolved(now)?;
                next_poll = now + CGROUP_POLL;
                self.cost.poll_cpu += cost::thread_cpu().saturating_sub(t);
                self.note_step("the cgroup poll", at);
            }
            if let (Some(due), Some(every), Some(t)) = (next_stats, self.stats_every, table.as_mut()) {
                if now >= due {
                    let at = Instant::now();
                    self.name_groups();
                    let cpu = cost::thread_cpu();
                    t.print(self.metrics());
                    self.cost.stats_cpu += cost::thread_cpu().saturating_sub(cpu);
                    next_stats = Some(next_report(due, every, Instant::now()));
                    self.note_step("the statistics table", at);
                }
            }

            // Every deadline is in the heap. The cgroup poll is not exact: it rides
            // along with a timer due up to POLL_SLACK after it, so the agent wakes
            // less often; it still bounds the sleep, so a scheduler exit is noticed
            // within CGROUP_POLL + POLL_SLACK.
            let mut wake = next_stats.unwrap_or(next_poll + CGROUP_POLL).min(self.next_due(now));
            if wake > next_poll + POLL_SLACK {
                wake = next_poll;
            }
            let timeout = wake.saturating_duration_since(Instant::now());
            self.publish_wake_at(stats::monotonic_ns() + timeout.as_nanos() as u64);
            waker.wait(self.events.as_ref().map(|r| r.fd()), timeout);
            // Awake: an event queued from here on wakes us (bw_wake), so one that
            // comes after the ring is read below is seen at the next ppoll, at once.
            self.publish_wake_at(0);
            if let Some(ring) = &self.events {
                let at = Instant::now();
                for ev in ring.take() {
                    let t = Instant::now();
                    self.on_event(ev)?;
                    self.cost.events += 1;
                    self.cost.events_time += t.elapsed();
                }
                self.note_step("BPF events", at);
            }
            while let Some(ask) = self.stats.as_ref().and_then(|l| l.req.try_recv().ok()) {
                let at = Instant::now();
                self.name_groups();
                // A snapshot is a copy, taken at our priority; a group's history is
                // serialized here, so at normal priority.
                let answer = match ask {
                    metrics::Ask::Top => {
                        let cpu = cost::thread_cpu();
                        let a = self.answer(ask);
                        self.cost.stats_cpu += cost::thread_cpu().saturating_sub(cpu);
                        a
                    }
                    metrics::Ask::History(_) => self.housekeeping(|s| s.answer(ask)),
                };
                if let Some(link) = &self.stats {
                    let _ = link.res.send(answer);
                }
                self.note_step("a statistics request", at);
            }
        }

        self.switch_tp.take();
        self.struct_ops.take();
        uei_report!(&self.skel, uei)
    }

    /// Queue the period timer of `slot` (after it was started or it expired).
    pub(super) fn arm(&mut self, slot: usize) {
        let g = &self.groups[slot];
        if let Some(t) = g.timer.as_ref().filter(|_| !g.idle && !g.free) {
            self.due.push(Due { at: t.deadline(), slot, slack: false });
        }
    }

    /// Expire the period and slack timers due at `now`.
    fn run_timers(&mut self, now: Instant) -> Result<()> {
        while let Some(d) = self.due.pop_due(now) {
            let Some(g) = self.groups.get_mut(d.slot) else { continue };
            if d.slack {
                if g.slack_at == Some(d.at) {
                    self.distribute_slack(d.slot)?;
                }
                continue;
            }
            let live = !g.idle && !g.free && g.timer.as_ref().is_some_and(|t| t.deadline() == d.at);
            let expired = g.timer.as_mut().filter(|_| live).and_then(|t| t.expire(now).map(|n| (n, t.lateness(now))));
            if let Some((overrun, late)) = expired {
                self.note_lateness(late);
                self.refill(d.slot, overrun)?;
                self.arm(d.slot);
            }
        }
        Ok(())
    }

    /// When the next timer is due (a stale entry only makes the agent wake early once).
    fn next_due(&self, now: Instant) -> Instant {
        self.due.next().unwrap_or(now + CGROUP_WALK_MAX)
    }

    /// A step of the run loop that began at `since` is over: log it if it held the
    /// thread long (cost::Stalls).
    fn note_step(&mut self, step: &str, since: Instant) {
        let now = Instant::now();
        if let Some(msg) = self.stalls.note(step, now.saturating_duration_since(since), now) {
            warn!("{msg}");
        }
    }

    /// Look up the paths of groups limited by their own cpu.max, for statistics (a
    /// walk of the hierarchy, so at normal priority); nothing to do when all are known.
    fn name_groups(&mut self) {
        if !self.unresolved_ids().is_empty() {
            self.housekeeping(|s| s.resolve_paths());
        }
    }

    /// Run `f` at normal priority: looking up paths and serializing a history is
    /// not time-critical, so it never preempts the tasks we limit (the agent is
    /// SCHED_FIFO for its timers).
    fn housekeeping<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let t = cost::thread_cpu();
        if self.realtime {
            set_realtime(false);
        }
        let res = f(self);
        if self.realtime {
            set_realtime(true);
        }
        self.cost.stats_cpu += cost::thread_cpu().saturating_sub(t);
        res
    }
}

/// When the `--stats` table after the one due `at` is due: one interval later, on the same
/// grid, unless that is past already (the agent was held up); then one interval from `now`,
/// so that a stall is followed by one table, not one per interval it missed.
fn next_report(at: Instant, every: Duration, now: Instant) -> Instant {
    if at + every > now {
        at + every
    } else {
        now + every
    }
}

/// Put the agent thread in SCHED_FIFO (`on`) so its period timer never waits behind
/// workload tasks, or back to SCHED_OTHER. Returns whether the change took effect.
pub(super) fn set_realtime(on: bool) -> bool {
    let (policy, prio) = if on { (libc::SCHED_FIFO, 1) } else { (libc::SCHED_OTHER, 0) };
    let param = libc::sched_param { sched_priority: prio };
    // SAFETY: plain syscall on this thread with a valid parameter.
    let ret = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if ret != 0 && on {
        warn!(
            "cannot make the agent SCHED_FIFO ({}); its period timer may run late under load",
            std::io::Error::last_os_error()
        );
    }
    ret == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_stay_on_their_grid_and_skip_what_a_stall_missed() {
        let (t, s) = (Instant::now(), Duration::from_secs(1));
        // On time (or a little late): the next one is one interval after the last.
        assert_eq!(next_report(t, s, t + Duration::from_millis(20)), t + s);
        // Held up 5 s: one table now, the next one interval from now, not five at once.
        let now = t + Duration::from_secs(5);
        assert_eq!(next_report(t, s, now), now + s);
    }
}
