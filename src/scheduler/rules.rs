//! Rules in the agent: which cgroups a `[[rule]]` limits (src/rules.rs has the
//! patterns and the arithmetic).
//!
//! A rule needs the cgroup's path, and BPF knows a cgroup by id. Each cgroup the
//! kernel tells of (cgroup_init at creation, cgroup_set_bandwidth on a cpu.max
//! write) is looked up by id, one open_by_handle_at; a cgroup not yet linked in
//! (its ops run inside mkdir) is tried again at the next poll. Unlimited cgroups
//! are only reported by BPF while some rule sets a full limit
//! (bw_report_unlimited). At start and at each reload every cgroup is evaluated
//! again in one walk, reading its cpu.max: that is how a changed rule reaches the
//! cgroups it matched, or no longer matches.

use std::time::{Duration, Instant};

use anyhow::Result;
use log::warn;

use super::Scheduler;
use crate::cgroups;
use crate::rules::OwnLimit;

/// How long a cgroup's path is looked for after the kernel told of it.
const UNRESOLVED_FOR: Duration = Duration::from_secs(2);

/// Path lookups waiting for their cgroup to be linked in: (id, own limit, since).
pub(super) type Unresolved = Vec<(u64, Option<OwnLimit>, Instant)>;

impl<'a> Scheduler<'a> {
    /// The path of cgroup `cgid` for matching rules; None (and a retry queued)
    /// when it cannot be found yet.
    pub(super) fn rule_path(&mut self, cgid: u64, own: Option<OwnLimit>, now: Instant) -> Option<String> {
        if let Some(s) = self.slot_of(cgid) {
            let known = &self.groups[s].cfg.cgroup;
            if !known.starts_with(super::cgroup_watch::UNRESOLVED) {
                return Some(known.clone());
            }
        }
        if let Some(p) = self.lookup_path(cgid) {
            return Some(p);
        }
        self.unresolved.retain(|u| u.0 != cgid);
        self.unresolved.push((cgid, own, now));
        None
    }

    /// The path of cgroup `cgid` now: by its handle, or, where open_by_handle_at is refused
    /// (no CAP_DAC_READ_SEARCH, a container without it), by a walk.
    fn lookup_path(&mut self, cgid: u64) -> Option<String> {
        match cgroups::path_of_id(&self.root, cgid) {
            Ok(p) => p,
            Err(e) => {
                if !self.handle_lookup_failed {
                    warn!("looking up cgroups by id: {e}; walking the hierarchy for each instead");
                    self.handle_lookup_failed = true;
                }
                cgroups::paths_of_ids(&self.root, &[cgid].into()).remove(&cgid)
            }
        }
    }

    /// Look again for the cgroups whose path was not found when the kernel told of them.
    pub(super) fn retry_unresolved(&mut self, now: Instant) -> Result<()> {
        for (cgid, own, since) in std::mem::take(&mut self.unresolved) {
            match self.lookup_path(cgid) {
                Some(p) => self.apply_own(cgid, own, Some(p), now)?,
                _ if now.duration_since(since) < UNRESOLVED_FOR => self.unresolved.push((cgid, own, since)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Evaluate every cgroup against the configuration, the rules and its cpu.max
    /// (start and reload). Unchanged limits are left alone.
    pub(super) fn evaluate_all_cgroups(&mut self, now: Instant) -> Result<()> {
        self.set_report_unlimited();
        for (path, cgid) in cgroups::walk(&self.root) {
            // Where the kernel does not pass cpu.max on, it is not honoured (loader.rs).
            let own = if self.cgroupfs_limits { cgroups::own_limit(&self.root.join(&path)) } else { None };
            self.apply_own(cgid, own, Some(path), now)?;
        }
        Ok(())
    }

    /// BPF reports cgroups without a cpu.max only while a rule may limit them.
    pub(super) fn set_report_unlimited(&mut self) {
        let full = self.rules.iter().any(|r| r.quota_us.is_some());
        self.bss().bw_report_unlimited = full as u8;
    }
}
