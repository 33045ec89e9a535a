//! Following cgroups: which cgroup each group's limit applies to.
//!
//! A configured group names a path, which may not exist yet, and may vanish and
//! come back as a new cgroup (a new id). A poll walks the configured paths, but
//! only when BPF saw cgroups created or removed (bw_cgroup_seq), or every
//! CGROUP_WALK_MAX for renames, and maps what it finds to slots. A cgroup's
//! cpu.max comes the other way, by id, from the kernel's cgroup ops through the
//! events ring; its path is looked up only for statistics (resolve_paths), as a
//! walk per event would be quadratic when many cgroups appear at once. The
//! configuration takes precedence over cpu.max. activate and deactivate are where
//! a slot starts and stops being enforced, for either origin.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use log::{error, info, warn};

use super::loader::read_counter;
use super::{Group, Origin, Scheduler, CGROUP_WALK_MAX};
use crate::bpf_intf;
use crate::cgroups::{self, CgroupChange};
use crate::config::{self, GroupConfig};
use crate::pools;

/// Name of a cgroupfs-limited group until its path is looked up: "id:" + cgroup id.
const UNRESOLVED: &str = "id:";

impl<'a> Scheduler<'a> {
    /// Check every configured path (when cgroups were created or removed since the
    /// last walk, or CGROUP_WALK_MAX after it); (re)apply limits to cgroups that
    /// appeared or were re-created, release slots of removed ones.
    pub(super) fn poll_cgroups(&mut self, now: Instant) -> Result<()> {
        let bss = self.bss();
        // SAFETY: naturally aligned u64 in the mmapped .bss; BPF adds to it atomically.
        let seq = unsafe { AtomicU64::from_ptr(&raw mut bss.bw_cgroup_seq) }.load(Ordering::Acquire);
        if matches!(self.walked, Some((s, at)) if s == seq && now.duration_since(at) < CGROUP_WALK_MAX) {
            return Ok(());
        }
        self.walked = Some((seq, now));
        let mut changed = false;
        for slot in 0..self.groups.len() {
            if self.groups[slot].origin != Origin::Config || self.groups[slot].free {
                continue;
            }
            let rel = self.groups[slot].cfg.cgroup.clone();
            let id = match cgroups::cgroup_id(&self.root, &rel) {
                Ok(id) => id,
                Err(e) => {
                    warn!("{e:#}; not enforcing its limit");
                    None
                }
            };
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
        let usage = self.bss().bw_groups[slot].usage;
        self.bss().bw_groups[slot].cgid = cgid;
        self.cover_slot(slot);
        self.skel
            .maps
            .cgid_slot
            .update(&cgid.to_ne_bytes(), &(slot as u32).to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("mapping cgroup {}", self.groups[slot].cfg.cgroup))?;
        let g = &mut self.groups[slot];
        g.book.snap = full;
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
    /// attach, on creation, on each write). Unlimited ("max") gives the slot back.
    pub(super) fn on_cgroupfs_limit(&mut self, ev: &bpf_intf::bw_event, now: Instant) -> Result<()> {
        let cgid = ev.cgid;
        let slot = self.slot_of(cgid);
        if let Some(s) = slot {
            if self.groups[s].origin == Origin::Config {
                if ev.quota_us != u64::MAX {
                    info!(
                        "cgroup {}: cpu.max {} {} (burst {}) ignored, the configuration's limit applies",
                        self.groups[s].cfg.cgroup, ev.quota_us, ev.period_us, ev.burst_us
                    );
                }
                return Ok(());
            }
        }
        if ev.quota_us == u64::MAX {
            if let Some(s) = slot {
                info!("cgroup {}: cpu.max is \"max\" now, no longer limited", self.groups[s].cfg.cgroup);
                self.release(s)?;
            }
            return Ok(());
        }
        // The path is looked up later, at normal priority (resolve_paths): a walk of
        // the hierarchy per event would be quadratic when many cgroups appear at once.
        let path = format!("{UNRESOLVED}{cgid}");
        let cfg = match GroupConfig::from_cgroupfs(&path, ev.quota_us, ev.period_us, ev.burst_us) {
            Ok(c) => c,
            Err(e) => {
                warn!("{e}; not enforcing it");
                return Ok(());
            }
        };
        let s = match slot.or_else(|| self.free_slot()) {
            Some(s) => s,
            None => {
                warn!("cgroup id {cgid}: cpu.max {} {} not enforced: all {} group slots are in use", ev.quota_us, ev.period_us, config::MAX_GROUPS);
                return Ok(());
            }
        };
        info!(
            "cgroup id {cgid}: cpu.max {} {}, burst {} us{}",
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
        self.activate(s, cgid, now)?;
        self.bump_cfg_gen();
        Ok(())
    }

    /// Fill in the paths of cgroupfs-limited groups (one walk for all of them).
    pub(super) fn resolve_paths(&mut self) {
        let ids: HashSet<u64> = self
            .groups
            .iter()
            .filter(|g| !g.free && g.cfg.cgroup.starts_with(UNRESOLVED))
            .filter_map(|g| match g.origin {
                Origin::Cgroupfs { cgid } => Some(cgid),
                Origin::Config => None,
            })
            .collect();
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
