//! Loading, attaching and running the BPF scheduler.
//!
//! The run loop is the agent's period timer: it sleeps until the earliest
//! deadline among the groups' period timers, the slack timers, the cgroup poll
//! and the stats report, then refills every group whose period ended
//! (pools.rs) and asks BPF to unthrottle it (bw_unthrottle). It also wakes for
//! messages: events from BPF (the events ring, read by a helper thread) —
//! slack that CPUs returned into a throttled pool, distributed after the slack
//! delay, and cgroups' cpu.max / cpu.max.burst values, which it enforces like
//! configured limits (the configuration takes precedence) — and requests from
//! the scx_stats server (`--monitor`, any client of the stats socket). The agent thread runs SCHED_FIFO, a class
//! above sched_ext, so it is never queued behind the tasks it limits; BPF also
//! exempts the agent's thread group from charging and parking.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossbeam::channel::Receiver;
use libbpf_rs::{MapCore, MapFlags, OpenObject, ProgramInput};
use log::{info, warn};
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo};

use crate::bpf_intf;
use crate::bpf_skel::*;
use crate::config::Config;
use crate::opts::Opts;
use crate::pools::{self, Due, PeriodTimer, TimerQueue};
use crate::stats;

mod cgroup_watch;
mod events;
mod groups;
mod metrics;
mod reload;

use events::{spawn_event_reader, EventReader};
pub use groups::{Group, Origin};
use metrics::{launch_stats_server, StatsLink};

/// How often configured cgroup paths are checked for appearing/vanishing.
const CGROUP_POLL: Duration = Duration::from_millis(200);
/// A poll walks the configured paths only when cgroups were created or removed
/// since the last walk (bw_cgroup_seq), and at least this often (renames).
const CGROUP_WALK_MAX: Duration = Duration::from_secs(5);
/// How much later than due a cgroup poll may run to share a wakeup with a timer.
const POLL_SLACK: Duration = Duration::from_millis(50);

const NSEC_PER_USEC: u64 = 1_000;

/// Refills whose timer lateness is kept for the p99 statistic.
const LATENESS_SAMPLES: usize = 1024;

pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    root: PathBuf,
    groups: Vec<Group>,
    stats_every: Option<Duration>,
    no_burst: bool,
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
    events: Option<EventReader>,
    /// The configuration file, re-read on SIGHUP.
    config_path: Option<PathBuf>,
}

impl<'a> Scheduler<'a> {
    pub fn init(
        opts: &Opts,
        config: &Config,
        root: PathBuf,
        open_object: &'a mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(opts.verbose > 1);
        let open_opts: Option<libbpf_rs::libbpf_sys::bpf_object_open_opts> = None;
        let mut skel = scx_ops_open!(builder, open_object, bandwidth_ops, open_opts)?;

        skel.struct_ops.bandwidth_ops_mut().exit_dump_len = opts.exit_dump_len;
        let rodata = skel.maps.rodata_data.as_mut().unwrap();
        rodata.bw_slice_ns = opts.slice_us * NSEC_PER_USEC;
        rodata.task_slice_ns = opts.task_slice_us * NSEC_PER_USEC;
        rodata.nr_cpu_ids = *scx_utils::NR_CPU_IDS as u32;
        rodata.agent_tgid = std::process::id() as i32;
        rodata.bw_slack_return = !opts.no_slack_return;
        rodata.bw_kernel_credit_on = !opts.park_in_kernel;
        rodata.bw_init_task_ctx = !opts.test_defer_task_ctx;

        // scx_ops_open! cleared the op if the kernel lacks it (and warned).
        let cgroupfs_limits = !skel.struct_ops.bandwidth_ops().cgroup_set_bandwidth.is_null();
        if !cgroupfs_limits {
            warn!("this kernel has no ops.cgroup_set_bandwidth: cpu.max and cpu.max.burst are not honoured, only the configuration's limits");
        }
        let skel = scx_ops_load!(skel, bandwidth_ops, uei)?;

        let groups = config.groups.iter().map(|cfg| Group::new(cfg.clone(), Origin::Config)).collect();
        let mut sched = Self {
            skel,
            struct_ops: None,
            root,
            groups,
            stats_every: opts.stats.map(Duration::from_secs_f64),
            no_burst: opts.no_burst,
            realtime: false,
            refills: 0,
            slack_distributions: 0,
            lateness: VecDeque::with_capacity(LATENESS_SAMPLES),
            due: TimerQueue::default(),
            walked: None,
            deep_seen: 0,
            stats: None,
            events: None,
            config_path: opts.config.clone(),
        };
        // Helper threads start before the agent turns SCHED_FIFO: they inherit
        // the policy, and neither is time-critical.
        sched.events = Some(spawn_event_reader(&sched.skel.maps.events)?);
        sched.stats = launch_stats_server(opts.stats_group);
        for slot in 0..sched.groups.len() {
            sched.write_limits(slot);
        }
        // Apply limits of cgroups that exist before tasks are scheduled by us.
        sched.poll_cgroups(Instant::now())?;

        sched.realtime = !opts.no_realtime && set_realtime(true);
        sched.struct_ops = Some(scx_ops_attach!(sched.skel, bandwidth_ops)?);
        // Attaching takes a while (every task is switched over); periods start now,
        // so the first refills are not counted as late.
        let now = Instant::now();
        for g in &mut sched.groups {
            if let Some(t) = &mut g.timer {
                *t = PeriodTimer::new(t.period(), now);
                g.book.refilled_at = Some(now);
            }
        }
        sched.due.clear();
        for slot in 0..sched.groups.len() {
            sched.arm(slot);
        }
        info!(
            "scx_bandwidth attached: {} configured group(s), slice {} us, cgroups' cpu.max {}",
            sched.groups.len(),
            opts.slice_us,
            if cgroupfs_limits { "honoured" } else { "not available" }
        );
        Ok(sched)
    }

    pub(in crate::scheduler) fn bss(&mut self) -> &mut types::bss {
        self.skel.maps.bss_data.as_mut().unwrap()
    }

    pub(in crate::scheduler) fn bump_cfg_gen(&mut self) {
        let data = self.skel.maps.data_data.as_mut().unwrap();
        let gen = &raw mut data.bw_cfg_gen;
        // SAFETY: bw_cfg_gen is a naturally aligned u64 in the mmapped .data.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(gen) }.fetch_add(1, Ordering::AcqRel);
    }

    /// Raise bw_nr_slots (the end of BPF's loops over the groups) to cover
    /// `slot`, before the slot is mapped.
    pub(in crate::scheduler) fn cover_slot(&mut self, slot: usize) {
        let bss = self.bss();
        let n = &raw mut bss.bw_nr_slots;
        // SAFETY: aligned u32 in the mmapped .bss; only the agent writes it.
        unsafe { AtomicU32::from_ptr(n) }.fetch_max(slot as u32 + 1, Ordering::Release);
    }

    pub(in crate::scheduler) fn clear_slack_pending(&mut self, slot: usize) {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u32 in the mmapped .bss; BPF sets it with a CAS.
        unsafe { AtomicU32::from_ptr(&raw mut g.slack_pending) }.store(0, Ordering::Release);
    }

    /// Record a refill of `slot` now in bw_group.refilled_at (the safety net's clock).
    pub(in crate::scheduler) fn stamp_refill(&mut self, slot: usize) {
        let now = stats::monotonic_ns();
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u64 in the mmapped .bss; BPF updates it with a CAS.
        unsafe { AtomicU64::from_ptr(&raw mut g.refilled_at) }.store(now, Ordering::Release);
        self.groups[slot].agent_refilled_ns = now;
    }

    /// bw_group.refilled_at as BPF sees it.
    pub(in crate::scheduler) fn refill_stamp(&mut self, slot: usize) -> u64 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: as in stamp_refill.
        unsafe { AtomicU64::from_ptr(&raw mut g.refilled_at) }.load(Ordering::Acquire)
    }

    /// The pool of `slot`, shared with BPF, as an atomic.
    pub(in crate::scheduler) fn pool(&mut self, slot: usize) -> &AtomicI64 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: bw_group.runtime is an aligned i64 in the mmapped .bss that
        // lives as long as the skeleton; all concurrent access is atomic.
        unsafe { AtomicI64::from_ptr(&raw mut g.runtime) }
    }

    pub(in crate::scheduler) fn write_limits(&mut self, slot: usize) {
        let cfg = self.groups[slot].cfg.clone();
        let g = &mut self.bss().bw_groups[slot];
        g.quota = cfg.quota_us * NSEC_PER_USEC;
        g.period = cfg.period_us * NSEC_PER_USEC;
        g.burst = cfg.burst_us * NSEC_PER_USEC;
    }

    /// A period of `slot` starts `now` (activation, or a wake from idle), with
    /// bw_group.usage at `usage`: start and queue its timer, stamp the refill clock.
    pub(in crate::scheduler) fn start_period(&mut self, slot: usize, usage: u64, now: Instant) {
        let g = &mut self.groups[slot];
        g.book.start(usage, now);
        g.timer = Some(PeriodTimer::new(Duration::from_micros(g.cfg.period_us), now));
        g.idle = false;
        self.arm(slot);
        self.stamp_refill(slot);
    }

    /// bw_group.idle of `slot`, shared with BPF, as an atomic.
    pub(in crate::scheduler) fn idle_flag(&mut self, slot: usize) -> &AtomicU32 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u32 in the mmapped .bss; BPF clears it with a CAS.
        unsafe { AtomicU32::from_ptr(&raw mut g.idle) }
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
    /// restart its period timer. BPF restarted the safety net's clock; take it over.
    pub(in crate::scheduler) fn wake(&mut self, slot: usize, now: Instant) {
        let Some(g) = self.groups.get_mut(slot) else { return };
        if g.free || g.timer.is_none() || !g.idle {
            return;
        }
        let usage = self.bss().bw_groups[slot].usage;
        self.start_period(slot, usage, now);
    }

    /// Wakes the ring could not carry (it was full): idle groups whose flag a CPU cleared.
    fn wake_missed(&mut self, now: Instant) {
        for slot in 0..self.groups.len() {
            if self.groups[slot].idle && self.idle_flag(slot).load(Ordering::Acquire) == 0 {
                self.wake(slot, now);
            }
        }
    }

    pub(in crate::scheduler) fn unmap(&mut self, cgid: u64) {
        let _ = self.skel.maps.cgid_slot.delete(&cgid.to_ne_bytes());
    }

    pub(in crate::scheduler) fn reset_slot(&mut self, slot: usize) -> Result<()> {
        let mut args = bpf_intf::bw_reset_args { slot: slot as u32, pad: 0 };
        run_syscall(&self.skel.progs.bw_reset_slot, &mut args).context("bw_reset_slot")?;
        Ok(())
    }

    /// Period timer expiry for `slot`: count the periods, refill the pool
    /// once and release the group's parked tasks.
    fn refill(&mut self, slot: usize, overrun: u64) -> Result<()> {
        let (throttled, parked, usage, short_throttled) = {
            let g = &self.bss().bw_groups[slot];
            // SAFETY: plain reads of fields BPF updates concurrently.
            unsafe {
                (
                    std::ptr::read_volatile(&g.throttled),
                    std::ptr::read_volatile(&g.nr_parked),
                    std::ptr::read_volatile(&g.usage),
                    std::ptr::read_volatile(&g.nr_short_throttled),
                )
            }
        };
        let (q, b) = self.groups[slot].limits_ns(self.no_burst);
        // The safety net, or a short period's BPF timer, refilled since our last
        // refill: that was this period's refill.
        let stamp = self.refill_stamp(slot);
        let bpf_refilled = stamp > self.groups[slot].agent_refilled_ns;
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
        // skip that refill). If BPF stopped refilling, the agent refills every
        // period again.
        let period = Duration::from_micros(self.groups[slot].cfg.period_us);
        let short = Duration::from_nanos(bpf_intf::bw_consts_BW_SHORT_PERIOD_NS as u64);
        let stride = pools::short_period_stride(period, short);
        let window = period.as_nanos() as u64 * u64::from(stride);
        let bpf_timed = stride > 1 && bpf_refilled && stats::monotonic_ns().saturating_sub(stamp) < window;
        if !bpf_timed {
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
        g.close_period(left, refilled, usage, overrun, Instant::now());
        // The refill distributes whatever slack was waiting.
        g.slack_at = None;
        let release = throttled != 0 || parked != g.seen_parked;
        g.seen_parked = parked;
        self.refills += 1;
        self.clear_slack_pending(slot);
        if release {
            self.unthrottle(slot)?;
        } else if unused && refilled == pools::refill(0, q, b) {
            self.go_idle(slot, refilled);
        }
        Ok(())
    }

    pub(in crate::scheduler) fn unthrottle(&mut self, slot: usize) -> Result<()> {
        let mut args = bpf_intf::bw_unthrottle_args { slot: slot as u32, pad: 0, nr_released: 0 };
        run_syscall(&self.skel.progs.bw_unthrottle, &mut args).context("bw_unthrottle")
    }

    /// Record how late a period timer fired.
    fn note_lateness(&mut self, late: Duration) {
        if self.lateness.len() == LATENESS_SAMPLES {
            self.lateness.pop_front();
        }
        self.lateness.push_back(late.as_micros() as u64);
    }

    pub(in crate::scheduler) fn exited(&mut self) -> bool {
        uei_exited!(&self.skel, uei)
    }

    /// The agent's event loop until shutdown or a scheduler exit.
    pub fn run(&mut self, shutdown: Arc<AtomicBool>, wakeup: &Receiver<()>, reload: &AtomicBool) -> Result<UserExitInfo> {
        let start = Instant::now();
        let mut next_poll = start + CGROUP_POLL;
        let mut next_stats = self.stats_every.map(|d| start + d);
        let mut prev_report = self.metrics();

        while !shutdown.load(Ordering::Relaxed) && !self.exited() {
            let now = Instant::now();
            self.run_timers(now)?;
            // The cgroup poll (a stat() per configured group when cgroups changed) is
            // done at once. The stats report is housekeeping (see below).
            if reload.swap(false, Ordering::Relaxed) {
                self.reload(now)?;
            }
            if now >= next_poll {
                self.wake_missed(now);
                self.report_deep_chains();
                self.poll_cgroups(now)?;
                next_poll = now + CGROUP_POLL;
            }
            if matches!(next_stats, Some(at) if now >= at) {
                self.housekeeping(|s| {
                    if let (Some(at), Some(every)) = (next_stats, s.stats_every) {
                        let m = s.metrics();
                        m.format(&prev_report, &mut std::io::stdout())?;
                        prev_report = m;
                        next_stats = Some(at + every);
                    }
                    Ok(())
                })?;
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
            let events_rx = self.events.as_ref().map(|r| r.events.clone()).unwrap_or_else(crossbeam::channel::never);
            let req_rx = self.stats.as_ref().map(|l| l.req.clone()).unwrap_or_else(crossbeam::channel::never);
            crossbeam::select! {
                recv(events_rx) -> ev => {
                    if let Ok(ev) = ev {
                        self.on_event(ev)?;
                    }
                }
                recv(req_rx) -> req => {
                    if req.is_ok() {
                        self.housekeeping(|s| {
                            let m = s.metrics();
                            if let Some(link) = &s.stats {
                                let _ = link.res.send(m);
                            }
                            Ok(())
                        })?;
                    }
                }
                recv(wakeup) -> _ => {}
                default(timeout) => {}
            }
        }

        self.struct_ops.take();
        uei_report!(&self.skel, uei)
    }

    /// Queue the period timer of `slot` (after it was started or it expired).
    pub(in crate::scheduler) fn arm(&mut self, slot: usize) {
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

    /// Run `f` at normal priority: formatting and serving statistics is not
    /// time-critical, so it never preempts the tasks we limit (the agent is
    /// SCHED_FIFO for its timers and the cgroup poll).
    fn housekeeping(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        if self.realtime {
            set_realtime(false);
        }
        let res = f(self);
        if self.realtime {
            set_realtime(true);
        }
        res
    }
}

/// Run one of the BPF `SEC("syscall")` programs with `args` as its context
/// (the kernel copies the context back, so outputs land in `args`).
fn run_syscall<T>(prog: &libbpf_rs::ProgramMut, args: &mut T) -> Result<()> {
    // SAFETY: T is a repr(C) bindgen struct; the slice covers exactly it.
    let ctx = unsafe { std::slice::from_raw_parts_mut(args as *mut T as *mut u8, std::mem::size_of::<T>()) };
    let out = prog.test_run(ProgramInput { context_in: Some(ctx), ..Default::default() })?;
    let ret = out.return_value as i32;
    if ret != 0 {
        anyhow::bail!("returned {ret}");
    }
    Ok(())
}

/// Sum the per-CPU global counters.
pub(in crate::scheduler) fn read_counters(map: &libbpf_rs::Map) -> Vec<u64> {
    (0..bpf_intf::bw_stat_idx_BW_NR_STATS).map(|idx| read_counter(map, idx)).collect()
}

/// One global counter (enum bw_stat_idx), summed over CPUs.
pub(in crate::scheduler) fn read_counter(map: &libbpf_rs::Map, idx: u32) -> u64 {
    read_percpu_field(map, idx, 0).iter().map(|&v| v as u64).sum()
}

/// The local runtime (ns) of group `slot` on each possible CPU (bw_cpus).
pub(in crate::scheduler) fn read_local_runtimes(map: &libbpf_rs::Map, slot: usize) -> Vec<i64> {
    read_percpu_field(map, slot as u32, std::mem::offset_of!(bpf_intf::bw_cpu, runtime))
}

/// The 8-byte field at byte offset `at` of entry `key` of a per-CPU array, one value per
/// possible CPU; empty when the lookup fails, 0 for a value too short to hold it.
fn read_percpu_field(map: &libbpf_rs::Map, key: u32, at: usize) -> Vec<i64> {
    map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()
        .map(|cpus| {
            cpus.iter()
                .map(|v| v.get(at..at + 8).map_or(0, |b| i64::from_ne_bytes(b.try_into().unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default()
}

/// Put the agent thread in SCHED_FIFO (`on`) so its period timer never waits behind
/// workload tasks, or back to SCHED_OTHER. Returns whether the change took effect.
pub(in crate::scheduler) fn set_realtime(on: bool) -> bool {
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
