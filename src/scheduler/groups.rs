//! The group table: the agent's side of each slot of bw_groups.
//!
//! BPF knows a group only by its slot (the index in bw_groups that cgid_slot maps
//! a cgroup to). The agent keeps, per slot, where the limit comes from (the
//! configuration or a cgroup's cpu.max), the period timer and what it books each
//! period. Configured groups take the first slots, in config order; a slot given
//! back (its cgroup left or became unlimited, or a reload dropped it) is reused
//! before a new one is taken, since BPF's walks over the groups run up to the
//! highest slot ever mapped (bw_nr_slots).

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Scheduler, NSEC_PER_USEC};
use crate::cgroups::CgroupWatch;
use crate::config::{self, GroupConfig};
use crate::pools::{History, PeriodBook, PeriodTimer};

/// Where a group's limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A `[[group]]` of the configuration file (found by path; takes precedence).
    Config,
    /// cpu.max / cpu.max.burst of the cgroup with this id (cgroup ops).
    Cgroupfs { cgid: u64 },
}

/// Agent-side state of one slot (index in bw_groups). Configured groups take
/// the first slots, in config order; cgroupfs-limited ones the rest.
pub struct Group {
    pub cfg: GroupConfig,
    pub origin: Origin,
    /// The rule that shaped a cgroupfs group's limit ("rule <name>"), if any.
    pub rule: Option<String>,
    /// A cgroupfs slot given back (its cgroup left or became unlimited), reusable.
    pub(super) free: bool,
    pub(super) watch: CgroupWatch,
    /// Present while the cgroup exists and is enforced.
    pub(super) timer: Option<PeriodTimer>,
    /// The timer is stopped: a period passed without use and the pool is full
    /// (bw_group.idle set). The first pull from the pool wakes it (BW_EV_WAKE).
    pub(super) idle: bool,
    /// When to distribute slack that came back while the group was throttled.
    pub(super) slack_at: Option<Instant>,
    /// Periods elapsed / periods that ended throttled (cpu.stat definitions).
    pub nr_periods: u64,
    pub nr_throttled: u64,
    /// bw_group.nr_parked at the last refill.
    pub(super) seen_parked: u64,
    /// Burst figures and usage history, booked at each refill.
    pub book: PeriodBook,
    /// bw_group.refilled_at as the agent last wrote it: a newer value there means
    /// the BPF safety net or short-period timer refilled meanwhile.
    pub(super) agent_refilled_ns: u64,
    /// bw_group.nr_short_throttled at the last refill.
    pub(super) seen_short_throttled: u64,
    /// Runtime the agent's refills threw away (cap at quota + burst) from the
    /// pool of a group that was throttled at the time.
    pub discarded_ns: u64,
}

impl Group {
    pub(super) fn new(cfg: GroupConfig, origin: Origin) -> Self {
        Self {
            cfg,
            origin,
            rule: None,
            free: false,
            watch: CgroupWatch::default(),
            timer: None,
            idle: false,
            slack_at: None,
            nr_periods: 0,
            nr_throttled: 0,
            seen_parked: 0,
            agent_refilled_ns: 0,
            seen_short_throttled: 0,
            discarded_ns: 0,
            book: PeriodBook::default(),
        }
    }

    /// Quota and burst in ns; burst 0 under --no-burst.
    pub(super) fn limits_ns(&self, no_burst: bool) -> (u64, u64) {
        let burst = if no_burst { 0 } else { self.cfg.burst_us };
        (self.cfg.quota_us * NSEC_PER_USEC, burst * NSEC_PER_USEC)
    }

    /// Account the period(s) a refill closes: pool-based and used-based bursts and the
    /// history (usage, the parked tasks' waits `wait_sum`, whether it was throttled).
    pub(super) fn close_period(&mut self, pool: (i64, i64), counters: (u64, u64), overrun: u64, throttled: bool, now: Instant) {
        let (quota, period) = (self.cfg.quota_us * NSEC_PER_USEC, Duration::from_micros(self.cfg.period_us));
        self.book.close(quota, period, pool, counters, overrun, throttled, now);
    }

    /// A history of `secs` for this group's period, kept across limit changes that
    /// keep the period (the usage it records does not depend on the quota);
    /// started afresh when the period changes.
    pub(super) fn keep_history(&mut self, secs: u64) {
        let period = self.cfg.period_us.max(1);
        if self.book.history_period_us != period {
            let cap = (secs.saturating_mul(1_000_000) / period) as usize;
            self.book.history = History::new(cap);
            self.book.history_period_us = period;
        }
    }
}

impl<'a> Scheduler<'a> {
    /// The slot enforcing cgroup `cgid`, if any.
    pub(super) fn slot_of(&self, cgid: u64) -> Option<usize> {
        self.groups.iter().position(|g| !g.free && g.timer.is_some() && self.cgid_of(g) == Some(cgid))
    }

    pub(super) fn cgid_of(&self, g: &Group) -> Option<u64> {
        match g.origin {
            Origin::Config => g.watch.cgid,
            Origin::Cgroupfs { cgid } => Some(cgid),
        }
    }

    /// Give `slot` back: stop enforcing it and let a new group take it.
    pub(super) fn release(&mut self, slot: usize) -> Result<()> {
        self.deactivate(slot)?;
        self.groups[slot].free = true;
        Ok(())
    }

    /// Put `g` in slot `s` from [`Self::free_slot`]: a freed one, or a new one at the end.
    pub(super) fn put_group(&mut self, s: usize, g: Group) {
        if s == self.groups.len() {
            self.groups.push(g);
        } else {
            self.groups[s] = g;
        }
    }

    /// A slot for a new group: a freed one, or the next one.
    pub(super) fn free_slot(&self) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.free)
            .or_else(|| (self.groups.len() < config::MAX_GROUPS).then_some(self.groups.len()))
    }
}
