//! The agent's half of bandwidth control: the period timer and the refill.
//!
//! Each limited group has a global pool of runtime that lives in BPF memory
//! (`bw_groups[slot].runtime`, see src/bpf/intf.h). CPUs only take from it;
//! the agent is the only one that adds to it, once per period of that group:
//!
//!   runtime = min(runtime + quota, quota + burst)            (fair.c: __refill_cfs_bandwidth_runtime)
//!
//! The period timer runs on absolute deadlines (start + k·period), so it does
//! not drift. When the agent is late by several periods, the missed periods
//! are counted (nr_periods, like the kernel's hrtimer overrun) but the pool is
//! refilled once: the cap makes a double refill impossible anyway.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// The refill rule, in ns. `runtime` is what is left in the pool; the result
/// never exceeds `quota + burst` and never overflows.
pub fn refill(runtime: i64, quota: u64, burst: u64) -> i64 {
    let cap = clamp_i64(quota.saturating_add(burst));
    let quota = clamp_i64(quota);
    runtime.max(0).saturating_add(quota).min(cap)
}

fn clamp_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Apply [`refill`] to a pool that BPF concurrently takes from. Returns what was
/// left in the pool and what is in it now.
pub fn refill_shared(pool: &AtomicI64, quota: u64, burst: u64) -> (i64, i64) {
    let mut cur = pool.load(Ordering::Acquire);
    loop {
        let new = refill(cur, quota, burst);
        match pool.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return (cur, new),
            Err(seen) => cur = seen,
        }
    }
}

/// Runtime a refill threw away: the pool held `left` before it, `refilled` after
/// adding `quota` and capping at quota + burst.
pub fn discarded(left: i64, refilled: i64, quota: u64) -> u64 {
    (left.max(0) as u64).saturating_add(quota).saturating_sub(refilled.max(0) as u64)
}

/// The kernel's burst statistic for the period a refill closes (fair.c,
/// __refill_cfs_bandwidth_runtime): runtime moved out of the pool since the last
/// refill (`snap` = pool right after it, `left` = pool now), beyond one quota.
/// It counts runtime handed to CPUs, used or not.
pub fn pool_burst(snap: i64, left: i64, quota: u64) -> Option<u64> {
    let moved = snap.saturating_sub(left.max(0)).max(0) as u64;
    moved.checked_sub(quota).filter(|&x| x > 0)
}

/// The same figure from CPU time actually used in the period (BPF accounting):
/// what a group really consumed beyond its quota.
pub fn used_burst(used: u64, quota: u64) -> Option<u64> {
    used.checked_sub(quota).filter(|&x| x > 0)
}

/// The quota that belongs to `elapsed` of wall time: usage is read when the agent
/// refills, which may be a little late or early relative to the period grid, so a
/// "period" as measured is not exactly one period long. Comparing what was used
/// with the quota of the time actually measured keeps agent jitter out of the
/// used-based burst figures. Never less than one quota: the period after a late
/// refill is measured short, but that refill put a whole quota in the pool, and
/// using it is no burst (a refill 61 ms late left 39 ms in which a group under its
/// quota used 40, counted a burst of 16 ms).
pub fn quota_for(quota: u64, period: Duration, elapsed: Duration) -> u64 {
    let p = period.as_nanos().max(1);
    (quota as u128 * elapsed.as_nanos() / p).clamp(quota as u128, u64::MAX as u128) as u64
}

/// Delay between slack coming back to a throttled pool and its distribution
/// (fair.c: cfs_bandwidth_slack_period), so that several returns are batched.
pub const SLACK_DELAY: Duration = Duration::from_millis(5);
/// No slack distribution when the period's refill is this close: the refill
/// distributes anyway (fair.c: min_bandwidth_expiration = 2 ms + slack period).
pub const SLACK_REFILL_MARGIN: Duration = Duration::from_millis(7);

/// When to distribute slack that came back at `now` to a throttled group whose
/// next refill is at `refill_at`; None when the refill is due within
/// [`SLACK_REFILL_MARGIN`].
pub fn slack_due(now: Instant, refill_at: Instant) -> Option<Instant> {
    (refill_at.saturating_duration_since(now) >= SLACK_REFILL_MARGIN).then(|| now + SLACK_DELAY)
}

/// Whether slack in a throttled pool of `pool` ns is worth distributing: more
/// than `floor`, the local runtime a CPU keeps when it gives the rest back
/// (BW_MIN_LOCAL_NS, fair.c's min_cfs_rq_runtime). fair.c waits for more than a
/// slice; what is less waits for the refill, whose cap at quota + burst throws
/// it away, and the group loses quota it was due (one whose quota is a slice
/// never has more than a slice in its pool). The slack delay still batches the
/// returns, so a distribution happens at most once per delay.
pub fn worth_distributing(pool: i64, floor: u64) -> bool {
    pool > 0 && pool as u64 > floor
}

/// Absolute-deadline period timer of one group.
#[derive(Clone, Debug)]
pub struct PeriodTimer {
    period: Duration,
    /// The last period boundary expired (or the start).
    last: Instant,
    /// Periods between expiries: 1, or more for a short period that BPF refills
    /// on its grid (the agent then only books them).
    every: u32,
    /// The deadline that expired last, for [`Self::lateness`].
    expired: Instant,
}

impl PeriodTimer {
    /// First expiry one period after `start`. Each group keeps its own phase, as
    /// the kernel's period timers do: refills of many groups on one grid would
    /// release all their parked tasks at the same instant.
    pub fn new(period: Duration, start: Instant) -> Self {
        Self { period, last: start, every: 1, expired: start }
    }

    pub fn deadline(&self) -> Instant {
        self.last + self.period * self.every
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// Expire every `n` periods from the next deadline on (at least 1).
    pub fn set_every(&mut self, n: u32) {
        self.every = n.max(1);
    }

    /// If the timer expired at `now`, advance it to the last period boundary
    /// before `now` and return how many periods elapsed since the previous expiry
    /// (1 when on time with `every` 1, more when the agent was late).
    pub fn expire(&mut self, now: Instant) -> Option<u64> {
        let due = self.deadline();
        if now < due {
            return None;
        }
        let n = (now.duration_since(self.last).as_nanos() / self.period.as_nanos().max(1)) as u64;
        self.last += self.period * n as u32;
        self.expired = due;
        Some(n)
    }

    /// How late `now` is relative to the deadline that expired last (for the
    /// agent's own timer-lateness statistic).
    pub fn lateness(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.expired)
    }
}

/// Periods the agent lets pass between its expiries of a short period that
/// BPF refills (BW_SHORT_PERIOD_NS / period, rounded up); 1 for the others.
pub fn short_period_stride(period: Duration, short: Duration) -> u32 {
    if period.is_zero() || period >= short {
        return 1;
    }
    short.as_nanos().div_ceil(period.as_nanos()) as u32
}

/// Periods of usage the statistics report per group (`history_usec`).
pub const HISTORY: usize = 32;

/// How far back a group's [`History`] reaches by default (--history-secs): at
/// 100 ms periods 6,000 records, 47 KiB per busy group (48 MiB for 1,026).
pub const DEFAULT_HISTORY_SECS: u64 = 600;

/// Most records a group's [`History`] keeps, whatever its window: an hour at
/// 100 ms periods, 8 bytes each (281 KiB per group).
pub const MAX_RECORDS: usize = 36_000;

/// Whether a group whose refill just left `refilled` in its pool, and which used
/// nothing in the period, stops its timer (the agent, period.rs; the advisor's
/// replay): only with nothing left to accumulate, its pool at its cap (quota +
/// burst), where another refill would change nothing. The kernel stops an idle
/// group's timer after one unused period whatever its pool holds; waiting for the
/// cap keeps every bit of burst a group saved, and still stops the timer of every
/// idle group, burst or not, within (burst / quota) + 1 periods.
pub fn goes_idle(unused: bool, refilled: i64, quota: u64, burst: u64) -> bool {
    unused && refill(refilled, quota, burst) == refilled
}

/// One record of a group's history: the period (or the periods, when the refill
/// was late) one refill closed, or a stretch with the timer stopped (idle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// CPU time the group used (µs).
    pub used_us: u64,
    /// Time its parked tasks waited before they ran again (µs): what throttling
    /// denied them. Booked when they ran, in the next period.
    pub denied_us: u64,
    /// Periods the record covers: 1, more when the refill was late, or the
    /// periods an idle stretch lasted.
    pub periods: u64,
    /// The period ended throttled.
    pub throttled: bool,
    /// An idle stretch: no timer, no refill, no period counted.
    pub idle: bool,
}

const USED_BITS: u32 = 27;
const DENIED_BITS: u32 = 27;
const PERIODS_BITS: u32 = 8;

impl Record {
    /// Packed in 8 bytes: used and denied saturate at 2^27 µs (134 s), periods at 255.
    fn pack(&self) -> u64 {
        let sat = |v: u64, bits: u32| v.min((1 << bits) - 1);
        sat(self.used_us, USED_BITS)
            | sat(self.denied_us, DENIED_BITS) << USED_BITS
            | sat(self.periods, PERIODS_BITS) << (USED_BITS + DENIED_BITS)
            | (self.throttled as u64) << 62
            | (self.idle as u64) << 63
    }

    fn unpack(v: u64) -> Self {
        let field = |shift: u32, bits: u32| (v >> shift) & ((1 << bits) - 1);
        Self {
            used_us: field(0, USED_BITS),
            denied_us: field(USED_BITS, DENIED_BITS),
            periods: field(USED_BITS + DENIED_BITS, PERIODS_BITS),
            throttled: v >> 62 & 1 == 1,
            idle: v >> 63 == 1,
        }
    }
}

/// Records a [`History`] holds inline before it moves them to its ring.
const STAGED: usize = 16;

/// A group's records, oldest first, at most `cap` (the agent's --history-secs
/// over the group's period, at most [`MAX_RECORDS`]); memory is taken as records
/// come, so an idle or short-lived group costs little. The newest records wait in
/// a small array inside the group's book, which a refill touches anyway, and move
/// to the ring 16 at a time: with thousands of groups, the ring's tail is a cache
/// and TLB miss per group, paid once per 16 refills instead of at each.
#[derive(Clone, Debug, Default)]
pub struct History {
    ring: VecDeque<u64>,
    staged: [u64; STAGED],
    nr_staged: usize,
    cap: usize,
}

impl History {
    pub fn new(cap: usize) -> Self {
        Self { cap: cap.min(MAX_RECORDS), ..Default::default() }
    }

    pub fn push(&mut self, r: Record) {
        if self.cap == 0 {
            return;
        }
        if self.len() == self.cap {
            // Full: the oldest goes, from the ring, or (a cap under 16) from the array.
            if self.ring.pop_front().is_none() {
                self.staged.copy_within(1..self.nr_staged, 0);
                self.nr_staged -= 1;
            }
        }
        if self.nr_staged == STAGED {
            self.flush();
        }
        self.staged[self.nr_staged] = r.pack();
        self.nr_staged += 1;
    }

    /// Move the staged records to the ring (which has room: len() <= cap).
    fn flush(&mut self) {
        let want = self.ring.len() + self.nr_staged;
        if want > self.ring.capacity() {
            // Grow by doubling up to the cap, never past it.
            let to = (self.ring.capacity() * 2).max(want).max(STAGED).min(self.cap);
            self.ring.reserve_exact(to - self.ring.len());
        }
        self.ring.extend(&self.staged[..self.nr_staged]);
        self.nr_staged = 0;
    }

    /// Add `us` of denied time to the newest record.
    fn deny(&mut self, us: u64) {
        if us == 0 {
            return;
        }
        let last = match self.nr_staged {
            0 => self.ring.back_mut(),
            n => Some(&mut self.staged[n - 1]),
        };
        if let Some(last) = last {
            let mut r = Record::unpack(*last);
            r.denied_us += us;
            *last = r.pack();
        }
    }

    pub fn len(&self) -> usize {
        self.ring.len() + self.nr_staged
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.ring.clear();
        self.nr_staged = 0;
    }

    pub fn records(&self) -> impl DoubleEndedIterator<Item = Record> + '_ {
        self.ring.iter().chain(&self.staged[..self.nr_staged]).map(|&v| Record::unpack(v))
    }

    /// CPU time (µs) of the last `n` periods a refill closed, oldest first.
    pub fn recent_used_us(&self, n: usize) -> Vec<u64> {
        let mut v: Vec<u64> = self.records().rev().filter(|r| !r.idle).take(n).map(|r| r.used_us).collect();
        v.reverse();
        v
    }
}

/// What the agent books for one group at each refill: the kernel's burst figures
/// (runtime moved out of the pool), the same from CPU time really used, and the
/// group's [`History`].
#[derive(Clone, Debug, Default)]
pub struct PeriodBook {
    /// Pool right after the last refill, and the group's usage (ns) then.
    pub snap: i64,
    pub usage_at_refill: u64,
    /// When the last refill read usage.
    pub refilled_at: Option<Instant>,
    pub nr_bursts: u64,
    pub burst_ns: u64,
    pub used_nr_bursts: u64,
    pub used_burst_ns: u64,
    /// bw_group.wait_sum_ns at the last refill.
    pub wait_at_refill: u64,
    pub history: History,
    /// The period the history was recorded at (0: none yet).
    pub history_period_us: u64,
}

impl PeriodBook {
    /// A period starts `now` with the group's usage at `usage` (activation, wake).
    pub fn start(&mut self, usage: u64, now: Instant) {
        self.usage_at_refill = usage;
        self.refilled_at = Some(now);
    }

    /// The group's timer was stopped from its last refill until `now` (a wake):
    /// book the whole periods of that stretch as an idle record.
    pub fn idle_until(&mut self, period: Duration, now: Instant) {
        let Some(since) = self.refilled_at else { return };
        let periods = (now.saturating_duration_since(since).as_nanos() / period.as_nanos().max(1)) as u64;
        if periods > 0 {
            self.history.push(Record { periods, idle: true, ..Default::default() });
        }
    }

    /// Book the period(s) a refill closes: the pool had `left` and now holds
    /// `refilled`, the group's usage is `usage` and the sum of its parked tasks'
    /// waits `wait_sum` (ns), `overrun` periods elapsed, it was `throttled`.
    #[allow(clippy::too_many_arguments)]
    pub fn close(
        &mut self,
        quota: u64,
        period: Duration,
        (left, refilled): (i64, i64),
        (usage, wait_sum): (u64, u64),
        overrun: u64,
        throttled: bool,
        now: Instant,
    ) {
        if let Some(b) = pool_burst(self.snap, left, quota) {
            self.nr_bursts += 1;
            self.burst_ns += b;
        }
        let used = usage.saturating_sub(self.usage_at_refill);
        let elapsed = self.refilled_at.map_or(period * overrun as u32, |t| now.duration_since(t));
        if let Some(b) = used_burst(used, quota_for(quota, period, elapsed)) {
            self.used_nr_bursts += 1;
            self.used_burst_ns += b;
        }
        // Tasks parked in the last period ran again after its refill: their waits
        // belong to it.
        self.history.deny(wait_sum.saturating_sub(self.wait_at_refill) / 1_000);
        self.wait_at_refill = wait_sum;
        self.history.push(Record { used_us: used / 1_000, periods: overrun, throttled, ..Default::default() });
        self.snap = refilled;
        self.start(usage, now);
    }
}

/// One deadline in a [`TimerQueue`]: the period timer or the slack timer of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    pub at: Instant,
    pub slot: usize,
    pub slack: bool,
}

/// The agent's deadlines, earliest first. Entries are not removed when a timer is
/// stopped or moved: the caller checks a popped entry against the group's state,
/// and a stale one costs one early wakeup.
#[derive(Debug, Default)]
pub struct TimerQueue(BinaryHeap<Reverse<Due>>);

impl TimerQueue {
    pub fn push(&mut self, d: Due) {
        self.0.push(Reverse(d));
    }

    /// The earliest entry if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Due> {
        let &Reverse(d) = self.0.peek()?;
        (d.at <= now).then(|| self.0.pop()).map(|_| d)
    }

    /// When the earliest entry is due, if any.
    pub fn next(&self) -> Option<Instant> {
        self.0.peek().map(|Reverse(d)| d.at)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn used(h: &History) -> Vec<u64> {
        h.records().map(|r| r.used_us).collect()
    }

    /// The newest `cap` records in order, whether they sit in the ring, in the
    /// staging array or both, for caps below, at and above the array's size.
    #[test]
    fn history_keeps_the_newest_cap_records_in_order() {
        for cap in [1, 5, 15, 16, 17, 40, 100] {
            let mut h = History::new(cap);
            for i in 0..250u64 {
                h.push(Record { used_us: i, periods: 1, ..Default::default() });
                let n = (i + 1).min(cap as u64);
                assert_eq!(used(&h), ((i + 1 - n)..=i).collect::<Vec<_>>(), "cap {cap} after {i}");
                assert_eq!(h.len(), n as usize);
            }
            // Memory stays within the cap (rounded up to one staging array).
            assert!(h.ring.capacity() <= cap.max(STAGED), "cap {cap}: {}", h.ring.capacity());
            assert_eq!(h.recent_used_us(3), vec![247, 248, 249][3 - cap.min(3)..].to_vec());
        }
        let mut none = History::new(0);
        none.push(Record::default());
        assert!(none.is_empty());
    }

    /// Waits are added to the newest record wherever it is; records survive
    /// packing, and saturate instead of spilling into the next field.
    #[test]
    fn history_books_waits_on_the_newest_record() {
        let mut h = History::new(100);
        for i in 0..16 {
            h.push(Record { used_us: i, periods: 1, ..Default::default() });
        }
        h.deny(7);
        // The array is full: the next push moves all 16 to the ring first.
        h.push(Record { used_us: 99, periods: 1, throttled: true, ..Default::default() });
        h.deny(5);
        let r: Vec<Record> = h.records().collect();
        assert_eq!((r[15].used_us, r[15].denied_us), (15, 7));
        assert_eq!((r[16].used_us, r[16].denied_us, r[16].throttled), (99, 5, true));
        let big = Record { used_us: u64::MAX, denied_us: 1 << 40, periods: 300, throttled: true, idle: true };
        assert_eq!(Record::unpack(big.pack()), Record { used_us: (1 << 27) - 1, denied_us: (1 << 27) - 1, periods: 255, throttled: true, idle: true });
    }

    /// An unused group stops its timer once its pool is at its cap, with or without
    /// a burst; one that used anything, or is still saving burst, does not.
    #[test]
    fn idle_at_the_cap() {
        let (q, b) = (30 * MS, 20 * MS);
        assert!(goes_idle(true, q as i64, q, 0));
        assert!(goes_idle(true, (q + b) as i64, q, b));
        assert!(!goes_idle(true, q as i64, q, b), "still saving burst");
        assert!(!goes_idle(false, (q + b) as i64, q, b));
        // From an empty pool, unused periods reach the cap and stop: 2 refills here.
        let mut pool = 0i64;
        let mut refills = 0;
        while !goes_idle(true, pool, q, b) {
            pool = refill(pool, q, b);
            refills += 1;
        }
        assert_eq!((refills, pool), (2, (q + b) as i64));
    }

    #[test]
    fn refill_without_burst_is_quota() {
        assert_eq!(refill(0, 30 * MS, 0), 30 * MS as i64);
        assert_eq!(refill(7 * MS as i64, 30 * MS, 0), 30 * MS as i64);
        assert_eq!(refill(30 * MS as i64, 30 * MS, 0), 30 * MS as i64);
    }

    #[test]
    fn refill_accumulates_up_to_burst() {
        let (q, b) = (60 * MS, 60 * MS);
        assert_eq!(refill(0, q, b), 60 * MS as i64);
        assert_eq!(refill(20 * MS as i64, q, b), 80 * MS as i64);
        assert_eq!(refill(60 * MS as i64, q, b), 120 * MS as i64);
        assert_eq!(refill(120 * MS as i64, q, b), 120 * MS as i64);
    }

    #[test]
    fn refill_never_overflows() {
        assert_eq!(refill(i64::MAX, u64::MAX, u64::MAX), i64::MAX);
        assert_eq!(refill(i64::MAX - 1, 10, 0), 10);
        assert_eq!(refill(5, u64::MAX, 0), i64::MAX);
        // A negative pool (never produced by BPF) is treated as empty.
        assert_eq!(refill(-50, 10, 0), 10);
    }

    #[test]
    fn refill_shared_is_the_same_rule() {
        let pool = AtomicI64::new(10 * MS as i64);
        assert_eq!(refill_shared(&pool, 30 * MS, 15 * MS), (10 * MS as i64, 40 * MS as i64));
        assert_eq!(refill_shared(&pool, 30 * MS, 15 * MS), (40 * MS as i64, 45 * MS as i64));
        assert_eq!(pool.load(Ordering::Relaxed), 45 * MS as i64);
    }

    #[test]
    fn burst_statistics() {
        let q = 60 * MS;
        // Pool refilled to 120 ms (quota + burst); 90 ms moved out: a 30 ms burst.
        assert_eq!(pool_burst(120 * MS as i64, 30 * MS as i64, q), Some(30 * MS));
        // Exactly one quota moved out, or less: no burst.
        assert_eq!(pool_burst(120 * MS as i64, 60 * MS as i64, q), None);
        assert_eq!(pool_burst(60 * MS as i64, 60 * MS as i64, q), None);
        // A pool that grew (slack returned) is no burst either.
        assert_eq!(pool_burst(10 * MS as i64, 50 * MS as i64, q), None);
        assert_eq!(used_burst(61 * MS, q), Some(MS));
        assert_eq!(used_burst(59_999_999, q), None);
        assert_eq!(used_burst(q, q), None);
    }

    #[test]
    fn used_bursts_follow_the_time_measured() {
        let p = Duration::from_millis(100);
        assert_eq!(quota_for(60 * MS, p, p), 60 * MS);
        // Measured over 106 ms (refill 6 ms late): 63 ms used is no burst.
        let q = quota_for(60 * MS, p, Duration::from_millis(106));
        assert_eq!(q, 63_600_000);
        assert_eq!(used_burst(63 * MS, q), None);
        // The period after a refill 61 ms late, measured 39 ms long: still one quota.
        assert_eq!(quota_for(60 * MS, p, Duration::from_millis(39)), 60 * MS);
        assert_eq!(used_burst(40 * MS, quota_for(60 * MS, p, Duration::from_millis(39))), None);
        // Three periods missed and refilled once: three quotas.
        assert_eq!(quota_for(60 * MS, p, 3 * p), 180 * MS);
        assert_eq!(quota_for(u64::MAX, p, 3 * p), u64::MAX);
    }

    #[test]
    fn pool_burst_counts_runtime_moved_not_used() {
        // A group that pulled 70 ms into CPU-local slices but ran only 59 ms: the
        // kernel's figure reports a 10 ms burst, the used-based one none.
        let q = 60 * MS;
        assert_eq!(pool_burst(120 * MS as i64, 50 * MS as i64, q), Some(10 * MS));
        assert_eq!(used_burst(59 * MS, q), None);
    }

    #[test]
    fn slack_waits_five_ms_unless_refill_is_near() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(slack_due(t0, t0 + ms(100)), Some(t0 + ms(5)));
        assert_eq!(slack_due(t0, t0 + ms(7)), Some(t0 + ms(5)));
        assert_eq!(slack_due(t0, t0 + ms(7) - Duration::from_nanos(1)), None);
        assert_eq!(slack_due(t0, t0 + ms(1)), None);
        // A refill already overdue (agent late): the refill distributes.
        assert_eq!(slack_due(t0 + ms(3), t0), None);
    }

    #[test]
    fn slack_above_the_floor_is_distributed() {
        let floor = MS;
        assert!(!worth_distributing(0, floor));
        assert!(!worth_distributing(-1, floor));
        assert!(!worth_distributing(MS as i64, floor));
        assert!(worth_distributing(MS as i64 + 1, floor));
        // Less than a slice (fair.c's threshold) is distributed too.
        assert!(worth_distributing(3 * MS as i64, floor));
    }

    #[test]
    fn refill_discards_what_the_cap_cuts() {
        let q = 5 * MS;
        // 3 ms left, strict quota: refilled to 5 ms, 3 ms thrown away.
        assert_eq!(discarded(3 * MS as i64, refill(3 * MS as i64, q, 0), q), 3 * MS);
        // With 3 ms of burst room nothing is lost.
        assert_eq!(discarded(3 * MS as i64, refill(3 * MS as i64, q, 3 * MS), q), 0);
        // An empty pool (or one in debt) loses nothing.
        assert_eq!(discarded(0, refill(0, q, 0), q), 0);
        assert_eq!(discarded(-(MS as i64), refill(-(MS as i64), q, 0), q), 0);
    }

    #[test]
    fn timer_is_absolute() {
        let t0 = Instant::now();
        let p = Duration::from_millis(100);
        let mut t = PeriodTimer::new(p, t0);
        assert_eq!(t.expire(t0 + Duration::from_millis(99)), None);
        // Late by 30 ms: still one period, next deadline stays on the grid.
        assert_eq!(t.expire(t0 + Duration::from_millis(130)), Some(1));
        assert_eq!(t.deadline(), t0 + Duration::from_millis(200));
        assert_eq!(t.expire(t0 + Duration::from_millis(200)), Some(1));
        assert_eq!(t.deadline(), t0 + Duration::from_millis(300));
    }

    #[test]
    fn late_timer_counts_missed_periods_and_refills_once() {
        let t0 = Instant::now();
        let p = Duration::from_millis(100);
        let mut t = PeriodTimer::new(p, t0);
        // Agent stalled from 100 ms to 450 ms: periods ending at 100, 200,
        // 300, 400 all passed.
        let overrun = t.expire(t0 + Duration::from_millis(450)).unwrap();
        assert_eq!(overrun, 4);
        assert_eq!(t.deadline(), t0 + Duration::from_millis(500));
        assert_eq!(t.lateness(t0 + Duration::from_millis(450)), Duration::from_millis(350));
        // One refill for the whole overrun: capped at quota + burst.
        assert_eq!(refill(0, 30 * MS, 10 * MS), 30 * MS as i64);
        assert_eq!(t.expire(t0 + Duration::from_millis(460)), None);
    }

    #[test]
    fn short_period_expires_every_n_periods_and_counts_them() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut t = PeriodTimer::new(ms, t0);
        assert_eq!(t.expire(t0 + ms), Some(1));
        t.set_every(10);
        assert_eq!(t.deadline(), t0 + ms * 11);
        assert_eq!(t.expire(t0 + ms * 10), None);
        // 0.4 ms late: the ten periods ending at 2..11 ms.
        assert_eq!(t.expire(t0 + ms * 11 + ms * 2 / 5), Some(10));
        assert_eq!(t.lateness(t0 + ms * 11 + ms * 2 / 5), ms * 2 / 5);
        assert_eq!(t.deadline(), t0 + ms * 21);
        // Back to every period (BPF stopped refilling): one period per expiry.
        t.set_every(1);
        assert_eq!(t.expire(t0 + ms * 12), Some(1));
        assert_eq!(t.deadline(), t0 + ms * 13);
    }

    #[test]
    fn stride_covers_the_short_period_threshold() {
        let short = Duration::from_millis(10);
        assert_eq!(short_period_stride(Duration::from_millis(1), short), 10);
        assert_eq!(short_period_stride(Duration::from_micros(3_000), short), 4);
        assert_eq!(short_period_stride(Duration::from_micros(9_999), short), 2);
        assert_eq!(short_period_stride(short, short), 1);
        assert_eq!(short_period_stride(Duration::from_millis(100), short), 1);
        assert_eq!(short_period_stride(Duration::ZERO, short), 1);
    }
}
