//! cgroup v2 plumbing: creating and removing test hierarchies, moving processes, reading
//! `cpu.stat` and writing `cpu.max`. Paths are relative to the cgroup2 mount ("t/a").

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Where the VM's /init mounts cgroup2 (and where a cgroup2-only host has it).
pub const ROOT: &str = "/sys/fs/cgroup";

pub fn path(rel: &str) -> PathBuf {
    let rel = rel.trim_matches('/');
    if rel.is_empty() {
        PathBuf::from(ROOT)
    } else {
        PathBuf::from(ROOT).join(rel)
    }
}

fn write(rel: &str, file: &str, value: &str) -> Result<(), String> {
    let p = path(rel).join(file);
    fs::write(&p, value).map_err(|e| format!("write '{value}' to {}: {e}", p.display()))
}

/// Moves the calling process (all its threads) into `rel`.
pub fn move_self(rel: &str) -> Result<(), String> {
    write(rel, "cgroup.procs", &std::process::id().to_string())
}

/// The field `key` of the text of a `cpu.stat` file (`usage_usec` is there with or without
/// the cpu controller enabled, counted for every scheduling class including sched_ext).
pub fn parse_stat(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        match (f.next(), f.next(), f.next()) {
            (Some(k), Some(v), None) if k == key => v.parse().ok(),
            _ => None,
        }
    })
}

pub fn read_usage_usec(rel: &str) -> Result<u64, String> {
    read_stat(rel, "usage_usec")
}

/// The field `key` of `rel`'s cpu.stat (`nr_bursts` and the like exist only with the cpu
/// controller enabled for it).
pub fn read_stat(rel: &str, key: &str) -> Result<u64, String> {
    let p = path(rel).join("cpu.stat");
    let s = fs::read_to_string(&p).map_err(|e| format!("read {}: {e}", p.display()))?;
    parse_stat(&s, key).ok_or_else(|| format!("no {key} in {}", p.display()))
}

/// "t/p/x" -> ["t", "t/p", "t/p/x"]: every cgroup that must exist for `rel` to exist.
pub fn ancestors(rel: &str) -> Vec<String> {
    let parts: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
    (1..=parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// The parent of a relative cgroup path ("" for a top-level one).
pub fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

/// Creates `rels` and their ancestors, then enables the cpu controller top-down in every
/// cgroup that has children: without "+cpu" in the parent's subtree_control a child has no
/// cpu.max / cpu.weight and the scheduler's cgroup callbacks see no bandwidth settings.
/// Returns every cgroup in the tree, parents first.
pub fn create_tree(rels: &[&str]) -> Result<Vec<String>, String> {
    let mut all: Vec<String> = Vec::new();
    for r in rels {
        for a in ancestors(r) {
            if !all.contains(&a) {
                all.push(a);
            }
        }
    }
    all.sort_by_key(|a| a.matches('/').count());
    for a in &all {
        match fs::create_dir(path(a)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("mkdir {}: {e}", path(a).display())),
        }
    }
    let mut parents: Vec<&str> = vec![""];
    for a in &all {
        if all.iter().any(|c| parent(c) == a.as_str()) {
            parents.push(a);
        }
    }
    for p in parents {
        write(p, "cgroup.subtree_control", "+cpu")?;
    }
    Ok(all)
}

/// cpu.max as the kernel takes it: "QUOTA PERIOD" in µs.
pub fn write_cpu_max(rel: &str, quota_us: u64, period_us: u64) -> Result<(), String> {
    write(rel, "cpu.max", &format!("{quota_us} {period_us}"))
}

/// cpu.max "max PERIOD": no limit.
pub fn write_cpu_max_unlimited(rel: &str) -> Result<(), String> {
    write(rel, "cpu.max", "max")
}

/// cpu.weight, 1..10000 (100 is the default).
pub fn write_cpu_weight(rel: &str, weight: u32) -> Result<(), String> {
    write(rel, "cpu.weight", &weight.to_string())
}

pub fn write_cpu_max_burst(rel: &str, burst_us: u64) -> Result<(), String> {
    write(rel, "cpu.max.burst", &burst_us.to_string())
}

/// The cgroup2 path of `pid` relative to the mount, from /proc/PID/cgroup ("0::/t/a").
pub fn cgroup_of(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_matches('/').to_string())
}

/// Removes `rel` and everything below it. Processes still inside are killed through
/// cgroup.kill first, so a crashed scenario cannot leave a tree that breaks the next one.
pub fn remove_tree(rel: &str) -> Result<(), String> {
    let top = path(rel);
    if !top.exists() {
        return Ok(());
    }
    if let Ok(rd) = fs::read_dir(&top) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let child = format!(
                    "{}/{}",
                    rel.trim_matches('/'),
                    e.file_name().to_string_lossy()
                );
                remove_tree(&child)?;
            }
        }
    }
    // Removal can briefly fail with EBUSY while killed tasks are still exiting.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(&top) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(format!("rmdir {}: {e}", top.display()));
                }
                let _ = fs::write(top.join("cgroup.kill"), "1");
                sleep(Duration::from_millis(50));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_from_cpu_stat() {
        let stat = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n\
                    core_sched.force_idle_usec 0\nnr_periods 40\nnr_throttled 38\n\
                    throttled_usec 2800000\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(parse_stat(stat, "usage_usec"), Some(1234567));
        assert_eq!(parse_stat("user_usec 5\n", "usage_usec"), None);
        assert_eq!(parse_stat("usage_usec x\n", "usage_usec"), None);
        assert_eq!(parse_stat("", "usage_usec"), None);
        assert_eq!(parse_stat(stat, "nr_bursts"), Some(0));
        assert_eq!(parse_stat(stat, "nr_throttled"), Some(38));
    }

    #[test]
    fn paths() {
        assert_eq!(ancestors("t/p/x"), vec!["t", "t/p", "t/p/x"]);
        assert_eq!(ancestors("/t/"), vec!["t"]);
        assert_eq!(parent("t/p/x"), "t/p");
        assert_eq!(parent("t"), "");
        assert_eq!(path(""), PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(path("t/a"), PathBuf::from("/sys/fs/cgroup/t/a"));
    }
}
