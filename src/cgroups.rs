//! Finding cgroups: the cgroup2 mount, and the id of a configured cgroup.
//!
//! A cgroup2 cgroup's id (what BPF reads as `cgrp->kn->id`) is the inode
//! number of its directory. Configured cgroups may not exist yet, or may be
//! removed and re-created while the scheduler runs: the agent polls their
//! paths and notices a new id, a removal or an appearance (see
//! [`CgroupWatch`]).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The cgroup2 mount point from /proc/self/mountinfo.
pub fn cgroup2_mount() -> Result<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    find_cgroup2(&info).context("no cgroup2 filesystem is mounted (mount -t cgroup2 none /sys/fs/cgroup)")
}

/// Parse mountinfo text; prefers /sys/fs/cgroup when several are mounted.
pub fn find_cgroup2(mountinfo: &str) -> Option<PathBuf> {
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        if post.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        if let Some(mnt) = pre.split_whitespace().nth(4) {
            found.push(PathBuf::from(unescape_mount(mnt)));
        }
    }
    found.iter().find(|p| p.as_path() == Path::new("/sys/fs/cgroup")).or(found.first()).cloned()
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// The id of the cgroup at `root/rel`, or None when it does not exist.
/// Refuses paths that resolve outside the mount (symlinks) or that are not
/// cgroups.
pub fn cgroup_id(root: &Path, rel: &str) -> Result<Option<u64>> {
    let path = root.join(rel);
    let meta = match fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cgroup {}", path.display())),
    };
    if meta.file_type().is_symlink() {
        bail!("cgroup {}: is a symlink, not a cgroup directory", path.display());
    }
    if !meta.is_dir() || !path.join("cgroup.procs").exists() {
        bail!("cgroup {}: not a cgroup directory", path.display());
    }
    Ok(Some(meta.ino()))
}

/// The paths (relative to `root`) of the cgroups with the given ids, found in one
/// walk of the hierarchy; ids not there (any more) are left out.
pub fn paths_of_ids(root: &Path, ids: &HashSet<u64>) -> HashMap<u64, String> {
    let mut found = HashMap::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if let Ok(ino) = e.metadata().map(|m| m.ino()) {
                if ids.contains(&ino) {
                    if let Ok(rel) = p.strip_prefix(root) {
                        found.insert(ino, rel.to_string_lossy().into_owned());
                    }
                    if found.len() == ids.len() {
                        return found;
                    }
                }
            }
            if depth < 64 {
                stack.push((p, depth + 1));
            }
        }
    }
    found
}

/// Tracks one configured path's id across polls.
#[derive(Clone, Debug, Default)]
pub struct CgroupWatch {
    pub cgid: Option<u64>,
}

/// What a poll found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupChange {
    Unchanged,
    /// Appeared, or re-created (new id); carries the old id if any.
    Appeared { cgid: u64, old: Option<u64> },
    Removed { old: u64 },
}

impl CgroupWatch {
    pub fn update(&mut self, now: Option<u64>) -> CgroupChange {
        let change = match (self.cgid, now) {
            (a, b) if a == b => CgroupChange::Unchanged,
            (old, Some(cgid)) => CgroupChange::Appeared { cgid, old },
            (Some(old), None) => CgroupChange::Removed { old },
            (None, None) => CgroupChange::Unchanged,
        };
        self.cgid = now;
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_of_id_walks_the_tree() {
        let root = std::env::temp_dir().join(format!("scxbw-walk-{}", std::process::id()));
        fs::create_dir_all(root.join("a/b/c")).unwrap();
        let c = fs::metadata(root.join("a/b/c")).unwrap().ino();
        let a = fs::metadata(root.join("a")).unwrap().ino();
        let found = paths_of_ids(&root, &HashSet::from([c, a, u64::MAX]));
        assert_eq!(found.get(&c).map(String::as_str), Some("a/b/c"));
        assert_eq!(found.get(&a).map(String::as_str), Some("a"));
        assert_eq!(found.len(), 2);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn finds_cgroup2_mount() {
        let info = "22 1 0:21 / /proc rw - proc proc rw\n\
                    30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n\
                    31 22 0:27 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(find_cgroup2(info), Some(PathBuf::from("/sys/fs/cgroup")));
        let info = "31 22 0:27 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(find_cgroup2(info), Some(PathBuf::from("/mnt/my cg")));
        assert_eq!(find_cgroup2("22 1 0:21 / /proc rw - proc proc rw\n"), None);
    }

    #[test]
    fn watch_reports_lifecycle() {
        let mut w = CgroupWatch::default();
        assert_eq!(w.update(None), CgroupChange::Unchanged);
        assert_eq!(w.update(Some(7)), CgroupChange::Appeared { cgid: 7, old: None });
        assert_eq!(w.update(Some(7)), CgroupChange::Unchanged);
        assert_eq!(w.update(Some(9)), CgroupChange::Appeared { cgid: 9, old: Some(7) });
        assert_eq!(w.update(None), CgroupChange::Removed { old: 9 });
    }

    #[test]
    fn cgroup_id_rejects_non_cgroups() {
        let dir = std::env::temp_dir().join(format!("scxbw-cg-{}", std::process::id()));
        fs::create_dir_all(dir.join("plain")).unwrap();
        fs::create_dir_all(dir.join("cg")).unwrap();
        fs::write(dir.join("cg/cgroup.procs"), "").unwrap();
        std::os::unix::fs::symlink(dir.join("cg"), dir.join("link")).unwrap();
        assert_eq!(cgroup_id(&dir, "missing").unwrap(), None);
        assert!(cgroup_id(&dir, "plain").unwrap_err().to_string().contains("not a cgroup directory"));
        assert!(cgroup_id(&dir, "link").unwrap_err().to_string().contains("is a symlink"));
        let ino = fs::metadata(dir.join("cg")).unwrap().ino();
        assert_eq!(cgroup_id(&dir, "cg").unwrap(), Some(ino));
        fs::remove_dir_all(&dir).unwrap();
    }
}
