//! Loading and attaching the BPF scheduler, and the agent's handle on it.
//!
//! The agent and BPF share state through the skeleton: bw_groups in the mmapped
//! .bss (limits the agent writes, pools both sides change), bw_cfg_gen in .data,
//! the per-CPU maps the agent reads for statistics, and two `SEC("syscall")`
//! programs it runs because only BPF can move tasks between DSQs (bw_unthrottle
//! after a refill, bw_reset_slot when a slot is (re)assigned). The accessors here
//! give the fields BPF changes concurrently their atomic types, each with why that
//! is sound; intf.h says who writes what.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, OpenObject, ProgramInput};
use log::{error, info, warn};
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited};

use super::events::EventRing;
use super::metrics::launch_stats_server;
use super::period::set_realtime;
use super::topology;
use super::{cgroup_watch, Group, LoopWaker, Origin, Scheduler, LATENESS_SAMPLES, NSEC_PER_USEC};
use crate::bpf_intf;
use crate::bpf_skel::*;
use crate::config::Config;
use crate::opts::Opts;
use crate::pools::{PeriodTimer, TimerQueue};
use crate::stats;

impl<'a> Scheduler<'a> {
    pub fn init(
        opts: &Opts,
        config: &Config,
        root: PathBuf,
        waker: &LoopWaker,
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
        // ops.cpu_release is deprecated where the sched_switch tracepoint can re-enqueue
        // (main.bpf.c, bw_sched_switch).
        let switch_tp = ["scx_bpf_dsq_reenq", "scx_bpf_reenqueue_local___v2"]
            .iter()
            .any(|k| scx_utils::compat::ksym_exists(k).unwrap_or(false));
        if switch_tp {
            skel.struct_ops.bandwidth_ops_mut().cpu_release = std::ptr::null_mut();
            skel.progs.bw_sched_switch.set_autoload(true);
        }
        // Loading verifies the BPF programs on this thread, seconds of CPU under emulation;
        // after a crash the limits are off meanwhile, and the tasks they held compete for
        // the CPU with it (under systemd, a restart on a busy 2-vCPU guest took 21.4 s against
        // 6.7 s for a start on an idle one; at SCHED_FIFO 5.0 s). So it runs SCHED_FIFO, and back to normal for the threads started next.
        let fifo_load = !opts.no_realtime && set_realtime(true);
        let loaded = scx_ops_load!(skel, bandwidth_ops, uei);
        if fifo_load {
            set_realtime(false);
        }
        let skel = loaded?;

        let groups = config.groups.iter().map(|cfg| Group::new(cfg.clone(), Origin::Config)).collect();
        let mut sched = Self {
            skel,
            struct_ops: None,
            switch_tp: None,
            root,
            groups,
            stats_every: opts.stats.map(Duration::from_secs_f64),
            no_burst: opts.no_burst,
            history_secs: opts.history_secs,
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
            rules: config.rules.clone(),
            cgroupfs_limits,
            unresolved: Vec::new(),
            handle_lookup_failed: false,
            cost: Default::default(),
            stalls: Default::default(),
            nr_llcs: 1,
            known_llc: Vec::new(),
            nr_nodes: 1,
            hotplug_seen: 0,
            topology_again: false,
            topology_reader: None,
            walker: None,
        };
        // Before attaching: the first tasks enqueued go to their LLC's queue.
        sched.apply_topology(topology::Raw::read(), "start");
        sched.topology_reader = match topology::TopologyReader::spawn() {
            Ok(r) => Some(r),
            Err(e) => {
                error!("topology reader thread: {e:#}; the topology is not read again after hotplug");
                None
            }
        };
        // The stats server's thread starts before the agent turns SCHED_FIFO: it
        // inherits the policy, and it is not time-critical.
        sched.events = match EventRing::new(&sched.skel.maps.events) {
            Ok(r) => Some(r),
            Err(e) => {
                error!("events ring: {e:#}; slack is distributed at refills only, cpu.max is not followed");
                None
            }
        };
        sched.stats = launch_stats_server(opts.stats_group, waker.clone());
        sched.walker = match cgroup_watch::PathWalker::spawn(sched.root.clone(), waker.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                error!("cgroup walker thread: {e:#}; configured paths are checked on the refill thread");
                None
            }
        };
        for slot in 0..sched.groups.len() {
            sched.write_limits(slot);
        }
        // Apply limits of cgroups that exist before tasks are scheduled by us.
        sched.poll_cgroups(Instant::now())?;

        sched.realtime = !opts.no_realtime && set_realtime(true);
        sched.struct_ops = Some(scx_ops_attach!(sched.skel, bandwidth_ops)?);
        // After attaching, before detaching (run): it re-enqueues into this scheduler.
        if switch_tp {
            sched.switch_tp = Some(
                sched
                    .skel
                    .progs
                    .bw_sched_switch
                    .attach()
                    .context("attaching bw_sched_switch")?,
            );
        }
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
        // Rules: every existing cgroup once; new ones as the kernel tells of them.
        if !sched.rules.is_empty() {
            sched.evaluate_all_cgroups(now)?;
        }
        info!(
            "scx_bandwidth attached: {} configured group(s), {} rule(s), slice {} us, cgroups' cpu.max {}",
            config.groups.len(),
            sched.rules.len(),
            opts.slice_us,
            if cgroupfs_limits { "honoured" } else { "not available" }
        );
        Ok(sched)
    }

    pub(super) fn bss(&mut self) -> &mut types::bss {
        self.skel.maps.bss_data.as_mut().unwrap()
    }

    pub(super) fn bump_cfg_gen(&mut self) {
        let data = self.skel.maps.data_data.as_mut().unwrap();
        let gen = &raw mut data.bw_cfg_gen;
        // SAFETY: bw_cfg_gen is a naturally aligned u64 in the mmapped .data.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(gen) }.fetch_add(1, Ordering::AcqRel);
    }

    /// Raise bw_nr_slots (the end of BPF's loops over the groups) to cover
    /// `slot`, before the slot is mapped.
    pub(super) fn cover_slot(&mut self, slot: usize) {
        let bss = self.bss();
        let n = &raw mut bss.bw_nr_slots;
        // SAFETY: aligned u32 in the mmapped .bss; only the agent writes it.
        unsafe { AtomicU32::from_ptr(n) }.fetch_max(slot as u32 + 1, Ordering::Release);
    }

    pub(super) fn clear_slack_pending(&mut self, slot: usize) {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u32 in the mmapped .bss; BPF sets it with a CAS.
        unsafe { AtomicU32::from_ptr(&raw mut g.slack_pending) }.store(0, Ordering::Release);
    }

    /// Record a refill of `slot` now in bw_group.refilled_at (the safety net's clock).
    pub(super) fn stamp_refill(&mut self, slot: usize) {
        let now = stats::monotonic_ns();
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u64 in the mmapped .bss; BPF updates it with a CAS.
        unsafe { AtomicU64::from_ptr(&raw mut g.refilled_at) }.store(now, Ordering::Release);
        self.groups[slot].agent_refilled_ns = now;
    }

    /// Tell BPF when the run loop wakes at the latest (bw_agent_wake_at), before it sleeps.
    pub(super) fn publish_wake_at(&mut self, ns: u64) {
        let bss = self.bss();
        // SAFETY: aligned u64 in the mmapped .bss; only the agent writes it.
        unsafe { AtomicU64::from_ptr(&raw mut bss.bw_agent_wake_at) }.store(ns, Ordering::Release);
    }

    /// bw_group.refilled_at as BPF sees it.
    pub(super) fn refill_stamp(&mut self, slot: usize) -> u64 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: as in stamp_refill.
        unsafe { AtomicU64::from_ptr(&raw mut g.refilled_at) }.load(Ordering::Acquire)
    }

    /// The pool of `slot`, shared with BPF, as an atomic.
    pub(super) fn pool(&mut self, slot: usize) -> &AtomicI64 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: bw_group.runtime is an aligned i64 in the mmapped .bss that
        // lives as long as the skeleton; all concurrent access is atomic.
        unsafe { AtomicI64::from_ptr(&raw mut g.runtime) }
    }

    pub(super) fn write_limits(&mut self, slot: usize) {
        let cfg = self.groups[slot].cfg.clone();
        let g = &mut self.bss().bw_groups[slot];
        g.quota = cfg.quota_us * NSEC_PER_USEC;
        g.period = cfg.period_us * NSEC_PER_USEC;
        g.burst = cfg.burst_us * NSEC_PER_USEC;
    }

    /// bw_group.idle of `slot`, shared with BPF, as an atomic.
    pub(super) fn idle_flag(&mut self, slot: usize) -> &AtomicU32 {
        let g = &mut self.bss().bw_groups[slot];
        // SAFETY: aligned u32 in the mmapped .bss; BPF clears it with a CAS.
        unsafe { AtomicU32::from_ptr(&raw mut g.idle) }
    }

    pub(super) fn unmap(&mut self, cgid: u64) {
        let _ = self.skel.maps.cgid_slot.delete(&cgid.to_ne_bytes());
    }

    pub(super) fn reset_slot(&mut self, slot: usize) -> Result<()> {
        let mut args = bpf_intf::bw_reset_args { slot: slot as u32, pad: 0 };
        run_syscall(&self.skel.progs.bw_reset_slot, &mut args).context("bw_reset_slot")?;
        Ok(())
    }

    pub(super) fn unthrottle(&mut self, slot: usize) -> Result<()> {
        let mut args = bpf_intf::bw_unthrottle_args { slot: slot as u32, pad: 0, nr_released: 0 };
        let t = Instant::now();
        let res = run_syscall(&self.skel.progs.bw_unthrottle, &mut args).context("bw_unthrottle");
        self.cost.unthrottle += t.elapsed();
        self.cost.unthrottle_runs += 1;
        res
    }

    /// Have BPF refill a short-period group by its grid rule (bw_short_refill): the grid
    /// points refilled (0: none was due), or None when the group has no grid to go by.
    pub(super) fn short_refill(&mut self, slot: usize) -> Result<Option<u64>> {
        let mut args = bpf_intf::bw_short_refill_args { slot: slot as u32, pad: 0, periods: 0 };
        match run_syscall_ret(&self.skel.progs.bw_short_refill, &mut args).context("bw_short_refill")? {
            0 => Ok(Some(args.periods)),
            ret if ret == -libc::ENOENT => Ok(None),
            ret => anyhow::bail!("bw_short_refill returned {ret}"),
        }
    }

    pub(super) fn exited(&mut self) -> bool {
        uei_exited!(&self.skel, uei)
    }
}

/// Run one of the BPF `SEC("syscall")` programs with `args` as its context
/// (the kernel copies the context back, so outputs land in `args`).
fn run_syscall<T>(prog: &libbpf_rs::ProgramMut, args: &mut T) -> Result<()> {
    let ret = run_syscall_ret(prog, args)?;
    if ret != 0 {
        anyhow::bail!("returned {ret}");
    }
    Ok(())
}

/// [`run_syscall`] that hands back the program's return value.
fn run_syscall_ret<T>(prog: &libbpf_rs::ProgramMut, args: &mut T) -> Result<i32> {
    // SAFETY: T is a repr(C) bindgen struct; the slice covers exactly it.
    let ctx = unsafe { std::slice::from_raw_parts_mut(args as *mut T as *mut u8, std::mem::size_of::<T>()) };
    let out = prog.test_run(ProgramInput { context_in: Some(ctx), ..Default::default() })?;
    Ok(out.return_value as i32)
}

/// Sum the per-CPU global counters.
pub(super) fn read_counters(map: &libbpf_rs::Map) -> Vec<u64> {
    (0..bpf_intf::bw_stat_idx_BW_NR_STATS).map(|idx| read_counter(map, idx)).collect()
}

/// One global counter (enum bw_stat_idx), summed over CPUs.
pub(super) fn read_counter(map: &libbpf_rs::Map, idx: u32) -> u64 {
    read_percpu_field(map, idx, 0).iter().map(|&v| v as u64).sum()
}

/// The local runtime (ns) of group `slot` on each possible CPU (bw_cpus).
pub(super) fn read_local_runtimes(map: &libbpf_rs::Map, slot: usize) -> Vec<i64> {
    read_percpu_field(map, slot as u32, std::mem::offset_of!(bpf_intf::bw_cpu, runtime))
}

/// The local runtime (ns) of every slot below `n` on each possible CPU (bw_cpus), in one
/// system call (BPF_MAP_LOOKUP_BATCH) rather than one per slot: `out[slot][cpu]`.
/// Falls back to a lookup per slot where the kernel refuses batches.
pub(super) fn read_all_local_runtimes(map: &libbpf_rs::Map, n: usize) -> Vec<Vec<i64>> {
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1);
    let stride = std::mem::size_of::<bpf_intf::bw_cpu>().next_multiple_of(8);
    let at = std::mem::offset_of!(bpf_intf::bw_cpu, runtime);
    let mut keys = vec![0u32; n];
    let mut values = vec![0u8; n * cpus * stride];
    let mut count = n as u32;
    let mut out_batch = 0u32;
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: keys holds n u32 keys and values n entries of `cpus` values of `stride`
    // bytes (the kernel's layout of a per-CPU value); count tells the kernel so.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
            map.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            &mut out_batch as *mut u32 as *mut _,
            keys.as_mut_ptr() as *mut _,
            values.as_mut_ptr() as *mut _,
            &mut count,
            &opts,
        )
    };
    // An array's batch ends with ENOENT once the last entry is in; count says how many came.
    let got = if ret == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) { count as usize } else { 0 };
    if got < n {
        return (0..n).map(|slot| read_local_runtimes(map, slot)).collect();
    }
    (0..n)
        .map(|e| {
            (0..cpus)
                .map(|c| field_at(&values[(e * cpus + c) * stride..], at))
                .collect()
        })
        .collect()
}

/// The 8-byte field at byte offset `at` of entry `key` of a per-CPU array, one value per
/// possible CPU; empty when the lookup fails, 0 for a value too short to hold it.
fn read_percpu_field(map: &libbpf_rs::Map, key: u32, at: usize) -> Vec<i64> {
    map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()
        .map(|cpus| {
            cpus.iter().map(|v| field_at(v, at)).collect()
        })
        .unwrap_or_default()
}

/// The 8-byte value at byte offset `at` of one CPU's value; 0 for a value too short to hold it.
fn field_at(value: &[u8], at: usize) -> i64 {
    value.get(at..at + 8).map_or(0, |b| i64::from_ne_bytes(b.try_into().unwrap_or_default()))
}
