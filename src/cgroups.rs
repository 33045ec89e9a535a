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

/// Visit every cgroup below `root` (the root itself left out), depth-first, with its
/// path relative to `root` and its id, until `f` returns true.
fn visit(root: &Path, mut f: impl FnMut(&Path, u64) -> bool) {
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if let (Ok(m), Ok(rel)) = (e.metadata(), p.strip_prefix(root)) {
                if f(rel, m.ino()) {
                    return;
                }
            }
            if depth < 64 {
                stack.push((p, depth + 1));
            }
        }
    }
}

/// The paths (relative to `root`) of the cgroups with the given ids, found in one
/// walk of the hierarchy; ids not there (any more) are left out.
pub fn paths_of_ids(root: &Path, ids: &HashSet<u64>) -> HashMap<u64, String> {
    let mut found = HashMap::new();
    visit(root, |rel, ino| {
        if ids.contains(&ino) {
            found.insert(ino, rel.to_string_lossy().into_owned());
        }
        found.len() == ids.len()
    });
    found
}

/// The path (relative to `root`, the cgroup2 mount) of the cgroup with id `id`, from
/// its file handle (a cgroup id is its kernfs id: FILEID_KERNFS, as systemd opens
/// cgroups by id): one lookup, not a walk. Ok(None) when no such cgroup is visible
/// (removed, or not yet linked in: a cgroup's ops run before mkdir returns).
pub fn path_of_id(root: &Path, id: u64) -> io::Result<Option<String>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const FILEID_KERNFS: libc::c_int = 0xfe;
    #[repr(C)]
    struct Handle {
        bytes: libc::c_uint,
        kind: libc::c_int,
        id: u64,
    }
    let mnt = fs::File::open(root)?;
    let mut h = Handle { bytes: 8, kind: FILEID_KERNFS, id };
    // SAFETY: open_by_handle_at reads a struct file_handle (header + 8 bytes) from a
    // valid pointer; it returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mnt.as_raw_fd(),
            &mut h as *mut Handle,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESTALE) | Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fd is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let target = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok(target.strip_prefix(root).ok().map(|rel| rel.to_string_lossy().into_owned()).filter(|rel| !rel.is_empty()))
}

/// Every cgroup below `root` (the root itself left out): (path relative to root, id).
pub fn walk(root: &Path) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    visit(root, |rel, ino| {
        found.push((rel.to_string_lossy().into_owned(), ino));
        false
    });
    found
}

/// A cgroup's own limit from its cpu.max and cpu.max.burst; None for "max", or
/// where the cpu controller is not enabled (no cpu.max file).
pub fn own_limit(dir: &Path) -> Option<crate::rules::OwnLimit> {
    parse_cpu_max(&fs::read_to_string(dir.join("cpu.max")).ok()?, fs::read_to_string(dir.join("cpu.max.burst")).ok().as_deref())
}

/// cpu.max text ("50000 100000", "max 100000") and cpu.max.burst text ("0").
pub fn parse_cpu_max(max: &str, burst: Option<&str>) -> Option<crate::rules::OwnLimit> {
    let mut it = max.split_whitespace();
    let quota_us = it.next()?.parse().ok()?;
    let period_us = it.next()?.parse().ok()?;
    let burst_us = burst.and_then(|b| b.trim().parse().ok()).unwrap_or(0);
    Some(crate::rules::OwnLimit { quota_us, period_us, burst_us })
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
    fn walk_lists_every_cgroup_and_cpu_max_parses() {
        let root = std::env::temp_dir().join(format!("scxbw-walkall-{}", std::process::id()));
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::create_dir_all(root.join("c")).unwrap();
        let mut all: Vec<String> = walk(&root).into_iter().map(|(p, _)| p).collect();
        all.sort();
        assert_eq!(all, ["a", "a/b", "c"]);
        fs::write(root.join("a/cpu.max"), "30000 100000\n").unwrap();
        fs::write(root.join("a/cpu.max.burst"), "5000\n").unwrap();
        fs::write(root.join("c/cpu.max"), "max 100000\n").unwrap();
        use crate::rules::OwnLimit;
        assert_eq!(own_limit(&root.join("a")), Some(OwnLimit { quota_us: 30_000, period_us: 100_000, burst_us: 5_000 }));
        assert_eq!(own_limit(&root.join("c")), None, "max");
        assert_eq!(own_limit(&root.join("a/b")), None, "no cpu controller");
        assert_eq!(parse_cpu_max("7000 10000", None), Some(OwnLimit { quota_us: 7_000, period_us: 10_000, burst_us: 0 }));
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
