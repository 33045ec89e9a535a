//! Following cgroups: which cgroup each group's limit applies to.
//!
//! A configured group names a path, which may not exist yet, and may vanish and
//! come back as a new cgroup (a new id). A poll walks the configured paths, but
//! only when BPF saw cgroups created or removed (bw_cgroup_seq), or every
//! CGROUP_WALK_MAX for renames, and maps what it finds to slots. In the run loop
//! the walk (a stat() per configured path: up to 0.7 s for 1,026 paths under
//! qemu TCG) is done by `PathWalker` at normal priority, never on the refill
//! thread; the loop only applies what it found. A cgroup's
//! cpu.max comes the other way, by id, from the kernel's cgroup ops through the
//! events ring; its path is looked up only for statistics (resolve_paths), as a
//! walk per event would be quadratic when many cgroups appear at once. The
//! configuration takes precedence over cpu.max. activate and deactivate are where
//! a slot starts and stops being enforced, for either origin.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use log::{error, info, warn};

use super::loader::read_counter;
use super::{Group, LoopWaker, Origin, Scheduler, CGROUP_WALK_MAX};
use crate::bpf_intf;
use crate::cgroups::{self, CgroupChange};
use crate::config::{self, GroupConfig};
use crate::pools;
use crate::rules::{self, OwnLimit};

/// Name of a cgroupfs-limited group until its path is looked up: "id:" + cgroup id.
pub(super) const UNRESOLVED: &str = "id:";

/// What a walk of configured paths found: per (slot, path), the cgroup's id (None:
/// no such cgroup) or why the path is not one.
type Found = Vec<(usize, String, Result<Option<u64>, String>)>;

/// Look up every `(slot, path)` below `root`.
fn walk_paths(root: &Path, paths: Vec<(usize, String)>) -> Found {
    paths
        .into_iter()
        .map(|(slot, rel)| {
            let id = cgroups::cgroup_id(root, &rel).map_err(|e| format!("{e:#}"));
            (slot, rel, id)
        })
        .collect()
}

/// A thread at normal priority that walks the configured paths when asked, then
/// wakes the run loop, which applies the result (`take_walk`). A walk is tagged
/// with the generation it was asked in; a walk done on the loop meanwhile (start,
/// reload) makes it stale.
pub struct PathWalker {
    ask: mpsc::Sender<(u64, Vec<(usize, String)>)>,
    done: mpsc::Receiver<(u64, Found)>,
    /// A walk was asked for and its result not taken yet.
    busy: bool,
    /// Generation of the walks that apply.
    generation: u64,
}

impl PathWalker {
    /// Start the thread (before the agent turns SCHED_FIFO: it inherits the policy).
    pub(super) fn spawn(root: PathBuf, waker: LoopWaker) -> Result<Self> {
        let (ask, asked) = mpsc::channel::<(u64, Vec<(usize, String)>)>();
        let (tell, done) = mpsc::channel();
        std::thread::Builder::new().name("scxbw-cgroups".into()).spawn(move || {
            while let Ok((generation, paths)) = asked.recv() {
                if tell.send((generation, walk_paths(&root, paths))).is_err() {
                    break;
                }
                waker.wake();
            }
        })?;
        Ok(PathWalker { ask, done, busy: false, generation: 0 })
    }
}

impl<'a> Scheduler<'a> {
    /// The configured paths in force, by slot.
    fn configured_paths(&self) -> Vec<(usize, String)> {
        (0..self.groups.len())
            .filter(|&s| self.groups[s].origin == Origin::Config && !self.groups[s].free)
            .map(|s| (s, self.groups[s].cfg.cgroup.clone()))
            .collect()
    }

    /// Whether configured paths need a walk (cgroups were created or removed since
    /// the last one, or CGROUP_WALK_MAX passed); if so, note this one as begun.
    fn walk_due(&mut self, now: Instant) -> bool {
        let bss = self.bss();
        // SAFETY: naturally aligned u64 in the mmapped .bss; BPF adds to it atomically.
        let seq = unsafe { AtomicU64::from_ptr(&raw mut bss.bw_cgroup_seq) }.load(Ordering::Acquire);
        if matches!(self.walked, Some((s, at)) if s == seq && now.duration_since(at) < CGROUP_WALK_MAX) {
            return false;
        }
        self.walked = Some((seq, now));
        true
    }

    /// Check every configured path now, on this thread (start, reload, no walker):
    /// (re)apply limits to cgroups that appeared or were re-created, release slots
    /// of removed ones. A walk the walker is doing meanwhile no longer applies.
    pub(super) fn poll_cgroups(&mut self, now: Instant) -> Result<()> {
        if let Some(w) = self.walker.as_mut() {
            w.generation += 1;
        }
        self.walk_due(now);
        self.apply_walk(walk_paths(&self.root, self.configured_paths()), now)
    }

    /// The run loop's cgroup poll: ask the walker for a walk when one is due; without
    /// a walker, walk here.
    pub(super) fn poll_cgroups_off_loop(&mut self, now: Instant) -> Result<()> {
        if self.walker.as_ref().is_some_and(|w| w.busy) || !self.walk_due(now) {
            return Ok(());
        }
        let paths = self.configured_paths();
        let Some(w) = self.walker.as_mut() else {
            return self.apply_walk(walk_paths(&self.root, paths), now);
        };
        if w.ask.send((w.generation, paths)).is_ok() {
            w.busy = true;
            return Ok(());
        }
        self.lose_walker();
        self.poll_cgroups(now)
    }

    /// The walker's thread is gone: walk on this thread from now on, at the next poll.
    fn lose_walker(&mut self) {
        error!("the cgroup walker thread is gone; configured paths are checked on the refill thread from now on");
        self.walker = None;
        self.walked = None;
    }

    /// Apply the walker's result, if it has one.
    pub(super) fn take_walk(&mut self, now: Instant) -> Result<()> {
        let Some(w) = self.walker.as_mut() else { return Ok(()) };
        let (generation, found) = match w.done.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return Ok(()),
            Err(mpsc::TryRecvError::Disconnected) => {
                self.lose_walker();
                return Ok(());
            }
        };
        w.busy = false;
        if generation != w.generation {
            return Ok(());
        }
        self.apply_walk(found, now)
    }

    /// Map what a walk found to the slots that are still configured for those paths.
    fn apply_walk(&mut self, found: Found, now: Instant) -> Result<()> {
        let mut changed = false;
        for (slot, rel, id) in found {
            let current = self.groups.get(slot).is_some_and(|g| g.origin == Origin::Config && !g.free && g.cfg.cgroup == rel);
            if !current {
                continue;
            }
            let id = id.unwrap_or_else(|e| {
                warn!("{e}; not enforcing its limit");
                None
            });
            match self.groups[slot].watch.update(id) {
                CgroupChange::Unchanged => continue,
                CgroupChange::Appeared { cgid, old } => {
                    if let Some(old) = old {
                        self.unmap(old);
                    }
                    // The configuration takes precedence over the cgroup's cpu.max.
                    if let Some(dyn_slot) = self.slot_of(cgid) {
                        info!("cgroup {rel}: the configured limit replaces its cpu.max");
                        self.release(dyn_slot)?;
                    }
                    self.activate(slot, cgid, now)?;
                    let g = &self.groups[slot];
                    info!(
                        "cgroup {rel} (id {cgid}) {}: limit {} us per {} us, burst {} us",
                        if old.is_some() { "re-created" } else { "found" },
                        g.cfg.quota_us,
                        g.cfg.period_us,
                        g.cfg.burst_us
                    );
                }
                CgroupChange::Removed { old } => {
                    self.unmap(old);
                    self.deactivate(slot)?;
                    info!("cgroup {rel} removed; its limit applies again when it reappears");
                }
            }
            changed = true;
        }
        if changed {
            self.bump_cfg_gen();
        }
        Ok(())
    }

    /// Start enforcing `slot` on cgroup `cgid`: forget per-CPU state and release
    /// anything parked (bw_reset_slot), fill the pool, map the cgroup, start the
    /// period timer. Used for a new cgroup and for a changed limit alike (as the
    /// kernel does on a cpu.max write). The caller bumps the config generation.
    pub(super) fn activate(&mut self, slot: usize, cgid: u64, now: Instant) -> Result<()> {
        self.write_limits(slot);
        self.reset_slot(slot)?;
        let (q, b) = self.groups[slot].limits_ns(self.no_burst);
        let full = pools::refill(0, q, b);
        self.pool(slot).store(full, Ordering::Release);
        let (usage, wait_sum) = (self.bss().bw_groups[slot].usage, self.bss().bw_groups[slot].wait_sum_ns);
        self.bss().bw_groups[slot].cgid = cgid;
        self.cover_slot(slot);
        self.skel
            .maps
            .cgid_slot
            .update(&cgid.to_ne_bytes(), &(slot as u32).to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("mapping cgroup {}", self.groups[slot].cfg.cgroup))?;
        let g = &mut self.groups[slot];
        g.book.snap = full;
        g.book.wait_at_refill = wait_sum;
        g.keep_history(self.history_secs);
        g.slack_at = None;
        self.start_period(slot, usage, now);
        Ok(())
    }

    /// Say so (as an error) when BPF had to cut task chains at BW_MAX_CHAIN limited
    /// groups: cpu.max written deeper than that is not enforced for those tasks.
    pub(super) fn report_deep_chains(&mut self) {
        let deep = read_counter(&self.skel.maps.bw_stats, bpf_intf::bw_stat_idx_BW_STAT_DEEP);
        if deep > self.deep_seen {
            error!(
                "{} task placement(s) found more than {} limited cgroups on their path; the limits \
                 below the {}th outermost are not enforced for them (stat deep_chains)",
                deep - self.deep_seen,
                config::MAX_CHAIN,
                config::MAX_CHAIN
            );
            self.deep_seen = deep;
        }
    }

    /// Stop enforcing `slot` (its cgroup is gone or no longer limited). Tasks'
    /// chains are invalidated before the parked ones are released, so none of
    /// them parks on the slot again.
    pub(super) fn deactivate(&mut self, slot: usize) -> Result<()> {
        if let Some(cgid) = self.cgid_of(&self.groups[slot]) {
            self.unmap(cgid);
        }
        self.bss().bw_groups[slot].cgid = 0;
        self.groups[slot].timer = None;
        self.groups[slot].idle = false;
        self.groups[slot].slack_at = None;
        self.bump_cfg_gen();
        self.reset_slot(slot)
    }

    /// cpu.max / cpu.max.burst of cgroup `cgid` as the kernel passed them (at
    /// attach, on creation, on each write). Unlimited ("max") gives the slot back,
    /// unless a rule limits the cgroup anyway.
    pub(super) fn on_cgroupfs_limit(&mut self, ev: &bpf_intf::bw_event, now: Instant) -> Result<()> {
        let own = (ev.quota_us != u64::MAX).then_some(OwnLimit { quota_us: ev.quota_us, period_us: ev.period_us, burst_us: ev.burst_us });
        // Without rules the path is looked up later, at normal priority (resolve_paths):
        // a walk of the hierarchy per event would be quadratic when many cgroups appear
        // at once. Rules need it now: one lookup by id, retried at the next poll if the
        // cgroup is not linked in yet (its own cpu.max applies meanwhile).
        let path = if self.rules.is_empty() { None } else { self.rule_path(ev.cgid, own, now) };
        self.apply_own(ev.cgid, own, path, now)
    }

    /// Enforce what cgroup `cgid` gets from its own limit `own` (None: "max") and,
    /// when its path is known, the rule that matches it. A configured group of the
    /// same cgroup takes precedence; an unchanged limit leaves the pool and timer be.
    pub(super) fn apply_own(&mut self, cgid: u64, own: Option<OwnLimit>, path: Option<String>, now: Instant) -> Result<()> {
        let slot = self.slot_of(cgid);
        let configured = |s: &Self| match &path {
            Some(p) => s.groups.iter().any(|g| g.origin == Origin::Config && !g.free && g.cfg.cgroup == *p),
            None => slot.is_some_and(|sl| s.groups[sl].origin == Origin::Config),
        };
        if configured(self) {
            if let Some(o) = own {
                info!(
                    "cgroup {}: cpu.max {} {} (burst {}) ignored, the configuration's limit applies",
                    path.as_deref().unwrap_or("?"),
                    o.quota_us,
                    o.period_us,
                    o.burst_us
                );
            }
            return Ok(());
        }
        let name = path.clone().unwrap_or_else(|| format!("{UNRESOLVED}{cgid}"));
        let rule = path.as_deref().and_then(|p| rules::best(&self.rules, p));
        let source = rule.map(|r| r.source());
        let want = match rule {
            Some(r) => r.apply(&name, own).map(Ok),
            None => own.map(|o| GroupConfig::from_cgroupfs(&name, o.quota_us, o.period_us, o.burst_us)),
        };
        let cfg = match want {
            None => {
                if let Some(s) = slot {
                    info!("cgroup {}: no longer limited (cpu.max is \"max\"{})", self.groups[s].cfg.cgroup, if source.is_some() { "" } else { ", no rule" });
                    self.release(s)?;
                }
                return Ok(());
            }
            Some(Err(e)) => {
                warn!("{e}; not enforcing it");
                return Ok(());
            }
            Some(Ok(c)) => c,
        };
        if let Some(s) = slot {
            let g = &mut self.groups[s];
            let same = (g.cfg.quota_us, g.cfg.period_us, g.cfg.burst_us) == (cfg.quota_us, cfg.period_us, cfg.burst_us);
            if path.is_some() {
                g.cfg.cgroup = name.clone();
            }
            if same && g.rule == source {
                return Ok(());
            }
        }
        let s = match slot.or_else(|| self.free_slot()) {
            Some(s) => s,
            None => {
                warn!("cgroup {name}: limit {} {} not enforced: all {} group slots are in use", cfg.quota_us, cfg.period_us, config::MAX_GROUPS);
                return Ok(());
            }
        };
        info!(
            "cgroup {name} (id {cgid}): {} {} us per {} us, burst {} us{}",
            source.as_deref().unwrap_or("cpu.max"),
            cfg.quota_us,
            cfg.period_us,
            cfg.burst_us,
            if slot.is_some() { " (changed)" } else { "" }
        );
        if slot.is_none() {
            self.put_group(s, Group::new(cfg, Origin::Cgroupfs { cgid }));
        } else {
            let known = std::mem::take(&mut self.groups[s].cfg.cgroup);
            self.groups[s].cfg = GroupConfig { cgroup: known, ..cfg };
        }
        self.groups[s].rule = source;
        self.activate(s, cgid, now)?;
        self.bump_cfg_gen();
        Ok(())
    }

    /// Cgroupfs-limited groups still named by id.
    pub(super) fn unresolved_ids(&self) -> HashSet<u64> {
        self.groups
            .iter()
            .filter(|g| !g.free && g.cfg.cgroup.starts_with(UNRESOLVED))
            .filter_map(|g| match g.origin {
                Origin::Cgroupfs { cgid } => Some(cgid),
                Origin::Config => None,
            })
            .collect()
    }

    /// Fill in the paths of cgroupfs-limited groups (one walk for all of them).
    pub(super) fn resolve_paths(&mut self) {
        let ids = self.unresolved_ids();
        if ids.is_empty() {
            return;
        }
        let found = cgroups::paths_of_ids(&self.root, &ids);
        for g in &mut self.groups {
            if let (Origin::Cgroupfs { cgid }, false) = (g.origin, g.free) {
                if let Some(p) = found.get(&cgid) {
                    g.cfg.cgroup = p.clone();
                }
            }
        }
    }

    /// A cgroup that has a slot is being destroyed.
    pub(super) fn on_cgroup_exit(&mut self, cgid: u64) -> Result<()> {
        if let Some(s) = self.slot_of(cgid) {
            if let Origin::Cgroupfs { .. } = self.groups[s].origin {
                info!("cgroup {} (id {cgid}) removed", self.groups[s].cfg.cgroup);
                self.release(s)?;
            }
        }
        Ok(())
    }
}
