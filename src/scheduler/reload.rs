//! SIGHUP: the configuration file read again while running.
//!
//! A file that does not validate, or that needs more slots than are free, changes
//! nothing: the configuration in force stays. Otherwise changed limits apply at
//! once, as a cpu.max write does in the kernel, and what is then in force is what
//! a restart brings back (config_in_force), not the file as it was at start.

use std::time::Instant;

use anyhow::Result;
use log::{error, info};

use super::{Group, Origin, Scheduler};
use crate::cgroups::CgroupWatch;
use crate::config::{self, Config};

impl<'a> Scheduler<'a> {
    /// The configuration file's groups in force now (the last good reload's, or the
    /// start's): what a restart must bring back.
    pub fn config_in_force(&self) -> Config {
        Config {
            groups: self.groups.iter().filter(|g| g.origin == Origin::Config && !g.free).map(|g| g.cfg.clone()).collect(),
            rules: self.rules.clone(),
        }
    }

    /// SIGHUP: read the configuration again. A file that does not validate changes
    /// nothing (the error names file, group and field, as at start); otherwise
    /// changed limits apply at once (pool refilled, as for a cpu.max write),
    /// new paths are watched and removed ones released.
    pub(super) fn reload(&mut self, now: Instant) -> Result<()> {
        let Some(path) = self.config_path.clone() else {
            info!("SIGHUP: no --config to reload");
            return Ok(());
        };
        let new = match config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                error!("reload: {e}; the current configuration stays in force");
                return Ok(());
            }
        };
        let configured: Vec<usize> =
            (0..self.groups.len()).filter(|&s| self.groups[s].origin == Origin::Config && !self.groups[s].free).collect();
        let added = new.groups.iter().filter(|n| !configured.iter().any(|&s| self.groups[s].cfg.cgroup == n.cgroup)).count();
        let free = self.groups.iter().filter(|g| g.free).count() + (config::MAX_GROUPS - self.groups.len());
        if added > free {
            error!("reload: {}: {added} new groups but only {free} free slots; the current configuration stays in force", path.display());
            return Ok(());
        }
        let (mut changed, mut removed) = (0, 0);
        for s in configured {
            let cg = self.groups[s].cfg.cgroup.clone();
            match new.groups.iter().find(|n| n.cgroup == cg) {
                Some(n) if *n == self.groups[s].cfg => {}
                Some(n) => {
                    self.groups[s].cfg = n.clone();
                    if let Some(cgid) = self.groups[s].watch.cgid.filter(|_| self.groups[s].timer.is_some()) {
                        self.activate(s, cgid, now)?;
                    } else {
                        self.write_limits(s);
                    }
                    changed += 1;
                }
                None => {
                    self.release(s)?;
                    self.groups[s].watch = CgroupWatch::default();
                    removed += 1;
                }
            }
        }
        for n in &new.groups {
            let exists = self.groups.iter().any(|g| g.origin == Origin::Config && !g.free && g.cfg.cgroup == n.cgroup);
            if exists {
                continue;
            }
            let s = self.free_slot().expect("free slots were counted above");
            self.put_group(s, Group::new(n.clone(), Origin::Config));
            self.write_limits(s);
        }
        self.bump_cfg_gen();
        let rules_changed = new.rules != self.rules;
        self.rules = new.rules;
        info!(
            "reloaded {}: {changed} changed, {added} added, {removed} removed; {} rule(s){}",
            path.display(),
            self.rules.len(),
            if rules_changed { ", changed" } else { "" }
        );
        // New paths are picked up (and cpu.max precedence settled) by the poll; then
        // every other cgroup gets what the rules and its cpu.max say now (a cgroup a
        // removed [[group]] held goes back to those, too).
        self.poll_cgroups(now)?;
        self.evaluate_all_cgroups(now)
    }
}
