//! Configuration files: one `[[group]]` table per limited cgroup, and
//! `[[rule]]` tables for cgroups found by pattern (rules.rs).
//!
//! ```toml
//! [[group]]
//! cgroup = "workload/a"   # relative to the cgroup2 mount
//! quota_us = 50000
//! period_us = 100000      # default 100000
//! burst_us = 0            # default 0
//! ```
//!
//! Validation mirrors what the kernel accepts for `cpu.max` / `cpu.max.burst`
//! (kernel/sched/core.c: tg_set_cfs_bandwidth): 1 ms <= period <= 1 s,
//! quota >= 1 ms, burst <= quota, quota + burst below the kernel's maximum.
//! Everything is checked before anything is applied, and every error names the
//! file, the group and the field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::bpf_intf;
use crate::rules::{self, RawRule, Rule};

/// Kernel limits (µs).
pub const MIN_PERIOD_US: u64 = 1_000;
pub const MAX_PERIOD_US: u64 = 1_000_000;
pub const DEFAULT_PERIOD_US: u64 = 100_000;
pub const MIN_QUOTA_US: u64 = 1_000;
/// The kernel's `max_cfs_quota_period`-independent ceiling on quota (and on
/// quota + burst): MAX_BW = 2^44 - 1 µs (kernel/sched/core.c).
pub const MAX_QUOTA_US: u64 = (1 << 44) - 1;

/// Groups the BPF side has slots for.
pub const MAX_GROUPS: usize = bpf_intf::bw_consts_BW_MAX_GROUPS as usize;
/// Limited groups a task may sit under (itself and its ancestors).
pub const MAX_CHAIN: usize = bpf_intf::bw_consts_BW_MAX_CHAIN as usize;

/// One limited cgroup, validated. Times in µs, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// Path relative to the cgroup2 mount, normalised ("a/b", no slashes at
    /// either end).
    pub cgroup: String,
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: u64,
}

impl GroupConfig {
    /// A limit read from cgroupfs (cpu.max, cpu.max.burst) of the cgroup at `path`.
    /// The kernel validated it already; this refuses anything we could not enforce.
    pub fn from_cgroupfs(path: &str, quota_us: u64, period_us: u64, burst_us: u64) -> Result<Self, String> {
        let bad = |field: &str, v: u64, min: u64, max: u64| {
            format!("cgroup {path}: {field} = {v} out of range ({min}..={max})")
        };
        if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period_us) {
            return Err(bad("cpu.max period", period_us, MIN_PERIOD_US, MAX_PERIOD_US));
        }
        if !(MIN_QUOTA_US..=MAX_QUOTA_US).contains(&quota_us) {
            return Err(bad("cpu.max quota", quota_us, MIN_QUOTA_US, MAX_QUOTA_US));
        }
        if burst_us > quota_us || quota_us + burst_us > MAX_QUOTA_US {
            return Err(bad("cpu.max.burst", burst_us, 0, quota_us.min(MAX_QUOTA_US - quota_us)));
        }
        Ok(Self { cgroup: path.to_string(), quota_us, period_us, burst_us })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub groups: Vec<GroupConfig>,
    pub rules: Vec<Rule>,
}

/// A configuration error, already phrased for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    group: Vec<RawGroup>,
    #[serde(default)]
    rule: Vec<RawRule>,
}

/// Integers are read signed so that a negative value gets our message, not
/// serde's "expected u64".
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    cgroup: Option<String>,
    quota_us: Option<i64>,
    period_us: Option<i64>,
    burst_us: Option<i64>,
}

/// Largest configuration file read: a full one (4096 groups with long paths) is well
/// under 1 MiB; anything bigger is a mistake (or /dev/zero), not a configuration.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Read and validate a configuration file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display();
    let real = check_owner_only(path)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(&real).map_err(|e| ConfigError(format!("{file}: cannot read: {e}")))?,
            MAX_CONFIG_BYTES + 1,
        ),
        &mut bytes,
    )
    .map_err(|e| ConfigError(format!("{file}: cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError(format!("{file}: larger than {} MiB; not a configuration file", MAX_CONFIG_BYTES >> 20)));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| ConfigError(format!("{file}: not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))?;
    parse(&text, &file.to_string())
}

/// The configuration sets every group's CPU limit and the daemon runs as root:
/// refuse a file that someone other than its owner (root or the user running
/// us) could change, directly or by replacing it in its directory. A symlink is
/// followed (Kubernetes mounts ConfigMaps that way) and the file it leads to is
/// what is checked, in its own directory. Returns that file's path.
fn check_owner_only(path: &Path) -> Result<std::path::PathBuf, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let file = path.display();
    let real = std::fs::canonicalize(path).map_err(|e| ConfigError(format!("{file}: cannot read: {e}")))?;
    let file = if real == path { file.to_string() } else { format!("{file} (-> {})", real.display()) };
    let meta = std::fs::metadata(&real).map_err(|e| ConfigError(format!("{file}: cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(ConfigError(format!("{file}: not a regular file")));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(ConfigError(format!(
            "{file}: writable by group or others (mode {mode:04o}); whoever can edit it sets every group's CPU limit: chmod go-w it"
        )));
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(ConfigError(format!(
            "{file}: owned by uid {}, neither root nor the user running the scheduler (uid {euid}); it could be changed behind our back",
            meta.uid()
        )));
    }
    if let Some(dir) = real.parent() {
        if let Ok(d) = std::fs::metadata(dir) {
            let dmode = d.mode() & 0o7777;
            // Sticky directories (/tmp) let only the owner replace the file.
            if dmode & 0o002 != 0 && dmode & 0o1000 == 0 {
                return Err(ConfigError(format!(
                    "{file}: its directory {} is writable by anyone (mode {dmode:04o}), so the file could be replaced",
                    dir.display()
                )));
            }
        }
    }
    Ok(real)
}

/// Parse and validate configuration text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let msg = e.message().to_string();
        match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                ConfigError(format!("{origin}:{line}: {msg}"))
            }
            None => ConfigError(format!("{origin}: {msg}")),
        }
    })?;
    if raw.group.is_empty() && raw.rule.is_empty() {
        return Err(ConfigError(format!(
            "{origin}: defines no [[group]] and no [[rule]]; run without --config for no configured limits"
        )));
    }
    if raw.rule.len() > rules::MAX_RULES {
        return Err(ConfigError(format!("{origin}: {} rules, more than {}", raw.rule.len(), rules::MAX_RULES)));
    }
    let mut rules = Vec::with_capacity(raw.rule.len());
    for (i, r) in raw.rule.into_iter().enumerate() {
        let r = rules::parse_rule(i + 1, r, origin)?;
        if let Some(first) = rules.iter().position(|o: &Rule| o.name == r.name) {
            return Err(ConfigError(format!(
                "{origin}: rule {} (\"{}\"): name: duplicate of rule {}",
                i + 1,
                r.name,
                first + 1
            )));
        }
        rules.push(r);
    }
    if raw.group.len() > MAX_GROUPS {
        return Err(ConfigError(format!(
            "{origin}: {} groups, more than the {MAX_GROUPS} the scheduler can enforce",
            raw.group.len()
        )));
    }

    let mut groups = Vec::with_capacity(raw.group.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, g) in raw.group.into_iter().enumerate() {
        let n = i + 1;
        let name = g.cgroup.clone().unwrap_or_default();
        let at = |field: &str| format!("{origin}: group {n} (cgroup \"{name}\"): {field}");

        let cgroup = match &g.cgroup {
            None => return Err(ConfigError(format!("{origin}: group {n}: missing field `cgroup`"))),
            Some(c) => normalize_cgroup(c).map_err(|why| ConfigError(format!("{}: {why}", at("cgroup"))))?,
        };
        let quota_us = match g.quota_us {
            None => return Err(ConfigError(at("missing field `quota_us`"))),
            Some(q) => range(q, MIN_QUOTA_US, MAX_QUOTA_US).map_err(|w| ConfigError(format!("{} = {q}: {w}", at("quota_us"))))?,
        };
        let period_us = match g.period_us {
            None => DEFAULT_PERIOD_US,
            Some(p) => range(p, MIN_PERIOD_US, MAX_PERIOD_US).map_err(|w| ConfigError(format!("{} = {p}: {w}", at("period_us"))))?,
        };
        let burst_us = match g.burst_us {
            None => 0,
            Some(b) => range(b, 0, quota_us).map_err(|w| {
                ConfigError(format!("{} = {b}: {w} (burst may not exceed quota_us)", at("burst_us")))
            })?,
        };
        if quota_us + burst_us > MAX_QUOTA_US {
            return Err(ConfigError(format!(
                "{}: quota_us + burst_us = {} exceeds the kernel maximum {MAX_QUOTA_US}",
                at("burst_us"),
                quota_us + burst_us
            )));
        }
        if let Some(first) = seen.insert(cgroup.clone(), n) {
            return Err(ConfigError(format!(
                "{origin}: group {n} (cgroup \"{name}\"): cgroup: duplicate of group {first}"
            )));
        }
        groups.push(GroupConfig { cgroup, quota_us, period_us, burst_us });
    }

    // A task is charged to every limited group above it; the BPF side keeps
    // at most MAX_CHAIN of them per task. (Each path's prefixes are looked up:
    // comparing every pair of groups took 160 ms at 4,096 groups.)
    for g in &groups {
        let prefixes = g.cgroup.match_indices('/').map(|(i, _)| &g.cgroup[..i]);
        let depth = 1 + prefixes.filter(|a| seen.contains_key(*a)).count();
        if depth > MAX_CHAIN {
            return Err(ConfigError(format!(
                "{origin}: cgroup \"{}\": {depth} limited groups on its path, more than {MAX_CHAIN}",
                g.cgroup
            )));
        }
    }
    Ok(Config { groups, rules })
}

/// `v` as an unsigned value within min..=max, or why not (groups and rules alike).
pub(crate) fn range(v: i64, min: u64, max: u64) -> Result<u64, String> {
    if v < 0 {
        return Err(format!("must not be negative (allowed {min}..={max})"));
    }
    let v = v as u64;
    if v < min || v > max {
        return Err(format!("out of range (allowed {min}..={max})"));
    }
    Ok(v)
}

/// Normalise a cgroup path relative to the cgroup2 mount and refuse anything
/// that could name a directory outside it or the root itself.
pub fn normalize_cgroup(path: &str) -> Result<String, String> {
    if path.starts_with('/') {
        return Err(format!(
            "\"{path}\" is absolute; give the path relative to the cgroup2 mount (e.g. \"workload/a\")"
        ));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(format!("{path:?} contains control characters"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" => continue,
            "." | ".." => return Err(format!("\"{path}\" contains \"{part}\"; use a plain relative path")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err("names the root cgroup, which cannot be limited".into());
    }
    Ok(parts.join("/"))
}

impl GroupConfig {
    pub fn path_under(&self, root: &Path) -> PathBuf {
        root.join(&self.cgroup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_limits_are_checked_like_the_kernel() {
        let g = GroupConfig::from_cgroupfs("k/a", 35_000, 100_000, 10_000).unwrap();
        assert_eq!((g.cgroup.as_str(), g.quota_us, g.period_us, g.burst_us), ("k/a", 35_000, 100_000, 10_000));
        assert!(GroupConfig::from_cgroupfs("k/a", 999, 100_000, 0).unwrap_err().contains("cpu.max quota = 999"));
        assert!(GroupConfig::from_cgroupfs("k/a", 5_000, 2_000_000, 0).unwrap_err().contains("period"));
        assert!(GroupConfig::from_cgroupfs("k/a", 5_000, 100_000, 6_000).unwrap_err().contains("cpu.max.burst = 6000"));
        assert!(GroupConfig::from_cgroupfs("k/a", u64::MAX, 100_000, 0).is_err());
    }

    fn err(text: &str) -> String {
        parse(text, "t.toml").unwrap_err().0
    }

    fn group(body: &str) -> String {
        format!("[[group]]\n{body}\n")
    }

    #[test]
    fn parses_defaults() {
        let c = parse(&group("cgroup = \"a//b/\"\nquota_us = 50000"), "t").unwrap();
        assert_eq!(c.groups, vec![GroupConfig { cgroup: "a/b".into(), quota_us: 50000, period_us: 100000, burst_us: 0 }]);
    }

    #[test]
    fn parses_all_fields() {
        let c = parse(&group("cgroup = \"w/x\"\nquota_us = 1000\nperiod_us = 1000000\nburst_us = 1000"), "t").unwrap();
        assert_eq!(c.groups[0], GroupConfig { cgroup: "w/x".into(), quota_us: 1000, period_us: 1_000_000, burst_us: 1000 });
    }

    #[test]
    fn rejects_empty_and_comment_only() {
        assert!(err("").contains("defines no [[group]] and no [[rule]]"));
        assert!(err("# nothing\n").contains("defines no [[group]]"));
    }

    #[test]
    fn rejects_unknown_keys() {
        let e = err(&group("cgroup = \"a\"\nquota_us = 5000\nqouta = 1"));
        assert!(e.contains("t.toml:4") && e.contains("unknown field `qouta`"), "{e}");
        let e = err("[[groups]]\ncgroup = \"a\"\n");
        assert!(e.contains("unknown field `groups`"), "{e}");
    }

    #[test]
    fn rejects_missing_fields() {
        assert!(err(&group("quota_us = 5000")).contains("group 1: missing field `cgroup`"));
        assert!(err(&group("cgroup = \"a\"")).contains("group 1 (cgroup \"a\"): missing field `quota_us`"));
    }

    #[test]
    fn rejects_malformed_values() {
        let e = err(&group("cgroup = \"a\"\nquota_us = \"50000\""));
        assert!(e.contains("t.toml:3") && e.contains("invalid type"), "{e}");
        let e = err(&group("cgroup = 5\nquota_us = 5000"));
        assert!(e.contains("t.toml:2") && e.contains("invalid type"), "{e}");
        let e = err(&group("cgroup = \"a\"\nquota_us = 99999999999999999999"));
        assert!(e.contains("t.toml:3"), "{e}");
        let e = err("[[group]\n");
        assert!(e.starts_with("t.toml:1"), "{e}");
    }

    #[test]
    fn rejects_duplicate_keys_and_groups() {
        let e = err(&group("cgroup = \"a\"\nquota_us = 5000\nquota_us = 6000"));
        assert!(e.contains("t.toml:4") && e.contains("duplicate key"), "{e}");
        let e = err(&(group("cgroup = \"a/b\"\nquota_us = 5000") + &group("cgroup = \"a//b/\"\nquota_us = 6000")));
        assert!(e.contains("group 2 (cgroup \"a//b/\"): cgroup: duplicate of group 1"), "{e}");
    }

    #[test]
    fn quota_limits() {
        let e = err(&group("cgroup = \"a\"\nquota_us = 999"));
        assert!(e.contains("group 1 (cgroup \"a\"): quota_us = 999: out of range (allowed 1000..="), "{e}");
        let e = err(&group("cgroup = \"a\"\nquota_us = -5"));
        assert!(e.contains("quota_us = -5: must not be negative"), "{e}");
        let e = err(&group("cgroup = \"a\"\nquota_us = 9223372036854775807"));
        assert!(e.contains("quota_us = 9223372036854775807: out of range"), "{e}");
        assert!(parse(&group(&format!("cgroup = \"a\"\nquota_us = {MAX_QUOTA_US}")), "t").is_ok());
    }

    #[test]
    fn period_limits() {
        for bad in [0i64, 999, 1_000_001, -1] {
            let e = err(&group(&format!("cgroup = \"a\"\nquota_us = 5000\nperiod_us = {bad}")));
            assert!(e.contains(&format!("period_us = {bad}")), "{e}");
        }
        for ok in [1000, 1_000_000] {
            assert!(parse(&group(&format!("cgroup = \"a\"\nquota_us = 5000\nperiod_us = {ok}")), "t").is_ok());
        }
    }

    #[test]
    fn burst_limits() {
        let e = err(&group("cgroup = \"a\"\nquota_us = 5000\nburst_us = 5001"));
        assert!(e.contains("burst_us = 5001: out of range (allowed 0..=5000) (burst may not exceed quota_us)"), "{e}");
        let e = err(&group("cgroup = \"a\"\nquota_us = 5000\nburst_us = -1"));
        assert!(e.contains("burst_us = -1: must not be negative"), "{e}");
        let big = MAX_QUOTA_US - 10;
        let e = err(&group(&format!("cgroup = \"a\"\nquota_us = {big}\nburst_us = {big}")));
        assert!(e.contains("exceeds the kernel maximum"), "{e}");
    }

    #[test]
    fn cgroup_paths() {
        for (bad, why) in [
            ("/sys/fs/cgroup/a", "is absolute"),
            ("/a", "is absolute"),
            ("a/../b", "contains \"..\""),
            ("..", "contains \"..\""),
            ("./a", "contains \".\""),
            ("", "root cgroup"),
            ("//", "is absolute"),
            ("a/./b", "contains \".\""),
            ("a\nb", "control characters"),
        ] {
            let e = err(&group(&format!("cgroup = {bad:?}\nquota_us = 5000")));
            assert!(e.contains("cgroup: ") && e.contains(why), "{bad:?}: {e}");
        }
        assert_eq!(normalize_cgroup("a//b/").unwrap(), "a/b");
    }

    #[test]
    fn nesting_depth_limit() {
        let mut text = String::new();
        let mut path = String::new();
        for i in 0..=MAX_CHAIN {
            if i > 0 {
                path.push('/');
            }
            path.push_str(&format!("l{i}"));
            text += &group(&format!("cgroup = \"{path}\"\nquota_us = 5000"));
        }
        let e = err(&text);
        assert!(e.contains(&format!("{} limited groups on its path, more than {MAX_CHAIN}", MAX_CHAIN + 1)), "{e}");
    }

    #[test]
    fn depth_counts_ancestors_only() {
        // MAX_CHAIN nested groups, each beside a look-alike ("l0/l1" and "l0/l1x"): a
        // name that extends another is no descendant of it, so this is within the limit.
        let (mut text, mut path) = (String::new(), String::new());
        for i in 0..MAX_CHAIN {
            if i > 0 {
                path.push('/');
            }
            path.push_str(&format!("l{i}"));
            text += &group(&format!("cgroup = \"{path}x\"\nquota_us = 5000"));
            text += &group(&format!("cgroup = \"{path}\"\nquota_us = 5000"));
        }
        assert_eq!(parse(&text, "t.toml").map(|c| c.groups.len()), Ok(2 * MAX_CHAIN));
    }

    fn rule(body: &str) -> String {
        format!("[[rule]]\n{body}\n")
    }

    #[test]
    fn parses_rules() {
        let c = parse(
            &(rule("name = \"pods\"\nmatch = \"kubepods.slice/**/cri-containerd-*.scope\"\nburst_pct = 50\nperiod_us = 20000")
                + &rule("match = \"system.slice/*.service\"\nquota_us = 20000")),
            "t",
        )
        .unwrap();
        assert!(c.groups.is_empty());
        assert_eq!(c.rules.len(), 2);
        let (a, b) = (&c.rules[0], &c.rules[1]);
        assert_eq!((a.name.as_str(), a.quota_us, a.period_us, a.burst), ("pods", None, Some(20_000), rules::Burst::Pct(50)));
        assert_eq!((b.name.as_str(), b.quota_us, b.period_us, b.burst), ("2", Some(20_000), None, rules::Burst::Own));
        assert_eq!(b.source(), "rule 2");
    }

    #[test]
    fn the_example_config_parses() {
        let c = parse(include_str!("../configs/example.toml"), "configs/example.toml").unwrap();
        assert_eq!((c.groups.len(), c.rules.len()), (2, 1));
        assert_eq!(c.rules[0].burst, rules::Burst::Pct(50));
    }

    #[test]
    fn bad_rules_name_file_rule_and_field() {
        for (body, want) in [
            ("burst_pct = 5", "t.toml: rule 1: missing field `match`"),
            ("match = \"/k/*\"\nburst_pct = 5", "t.toml: rule 1 (match \"/k/*\"): match: \"/k/*\" is absolute"),
            ("match = \"k/a**\"\nburst_pct = 5", "rule 1 (match \"k/a**\"): match: \"k/a**\": `**` must be a whole component"),
            ("name = \"x\"\nmatch = \"k/*\"\nburst_pct = 101", "t.toml: rule 1 (\"x\"): burst_pct = 101: out of range (allowed 0..=100)"),
            ("match = \"k/*\"\nburst_pct = -1", "burst_pct = -1: must not be negative (allowed 0..=100)"),
            ("match = \"k/*\"\nburst_pct = 5\nburst_us = 5", "burst_pct: set burst_us or burst_pct, not both"),
            ("match = \"k/*\"\nperiod_us = 999", "rule 1 (match \"k/*\"): period_us = 999: out of range (allowed 1000..=1000000)"),
            ("match = \"k/*\"\nquota_us = 999", "quota_us = 999: out of range"),
            ("match = \"k/*\"\nquota_us = 5000\nburst_us = 5001", "burst_us = 5001: out of range (allowed 0..=5000)"),
            ("match = \"k/*\"", "rule 1 (match \"k/*\"): sets nothing"),
            ("name = \"a b\"\nmatch = \"k/*\"\nburst_pct = 5", "name = \"a b\": must be non-empty"),
        ] {
            let e = err(&rule(body));
            assert!(e.contains(want), "{body:?}: {e}");
        }
        let e = err(&rule("match = \"k/*\"\nburst = 5"));
        assert!(e.contains("t.toml:3") && e.contains("unknown field `burst`"), "{e}");
        let e = err(&(rule("name = \"a\"\nmatch = \"k/*\"\nburst_pct = 5") + &rule("name = \"a\"\nmatch = \"j/*\"\nburst_pct = 5")));
        assert!(e.contains("t.toml: rule 2 (\"a\"): name: duplicate of rule 1"), "{e}");
        let many: String = (0..=rules::MAX_RULES).map(|i| rule(&format!("match = \"k{i}/*\"\nburst_pct = 5"))).collect();
        assert!(err(&many).contains(&format!("more than {}", rules::MAX_RULES)));
    }

    #[test]
    fn load_reports_io_and_utf8() {
        let dir = std::env::temp_dir().join(format!("scxbw-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.toml");
        assert!(load(&missing).unwrap_err().0.contains("missing.toml: cannot read"));
        let bin = dir.join("bin.toml");
        std::fs::write(&bin, b"[[group]]\ncgroup = \"\xff\"\n").unwrap();
        assert!(load(&bin).unwrap_err().0.contains("bin.toml: not UTF-8 text"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Property test over the parser: thousands of mutations of a valid file (bytes
    /// replaced, inserted, deleted, lines duplicated, numbers swapped for extreme
    /// values) never panic; every rejection names the file; every acceptance obeys
    /// the kernel's limits. Deterministic (fixed seed), bounded to a few ms.
    #[test]
    fn parser_survives_mutations() {
        const SEED_TEXT: &str = "[[group]]\ncgroup = \"a/b\"\nquota_us = 50000\nperiod_us = 100000\nburst_us = 1000\n\n[[group]]\ncgroup = \"c\"\nquota_us = 2000\n";
        const EXTREMES: [&str; 8] = [
            "0", "-1", "999", "1000000", "1000001", "9223372036854775807", "18446744073709551615", "17592186044415",
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let (mut ok, mut err) = (0, 0);
        for _ in 0..20_000 {
            let mut t: Vec<u8> = SEED_TEXT.as_bytes().to_vec();
            for _ in 0..1 + rnd(4) {
                let at = rnd(t.len().max(1));
                match rnd(5) {
                    0 => {
                        let i = at.min(t.len() - 1);
                        t[i] = b" =\"[]\n.-/0123456789azq"[rnd(21)];
                    }
                    1 => t.insert(at, b"\"[]=\n-9."[rnd(8)]),
                    2 if t.len() > 1 => {
                        t.remove(at.min(t.len() - 1));
                    }
                    3 => {
                        let text = String::from_utf8_lossy(&t).into_owned();
                        let lines: Vec<&str> = text.lines().collect();
                        let l = lines[rnd(lines.len())].to_string();
                        t.extend_from_slice(format!("\n{l}\n").as_bytes());
                    }
                    _ => {
                        let text = String::from_utf8_lossy(&t).into_owned();
                        let v = EXTREMES[rnd(EXTREMES.len())];
                        let key = ["quota_us = ", "period_us = ", "burst_us = "][rnd(3)];
                        if let Some(i) = text.find(key) {
                            let end = text[i..].find('\n').map_or(text.len(), |e| i + e);
                            t = format!("{}{key}{v}{}", &text[..i], &text[end..]).into_bytes();
                        }
                    }
                }
            }
            let text = String::from_utf8_lossy(&t);
            match parse(&text, "fuzz.toml") {
                Ok(c) => {
                    ok += 1;
                    for g in &c.groups {
                        assert!((MIN_PERIOD_US..=MAX_PERIOD_US).contains(&g.period_us), "{text}");
                        assert!(g.quota_us >= MIN_QUOTA_US && g.burst_us <= g.quota_us, "{text}");
                        assert!(g.quota_us + g.burst_us <= MAX_QUOTA_US, "{text}");
                        assert!(!g.cgroup.is_empty() && !g.cgroup.split('/').any(|p| p == ".."), "{text}");
                    }
                }
                Err(e) => {
                    err += 1;
                    assert!(e.0.starts_with("fuzz.toml"), "error without the file name: {e} for {text:?}");
                }
            }
        }
        // Both outcomes must be exercised, or the mutations are not reaching the checks.
        assert!(ok > 100 && err > 100, "ok {ok} err {err}");
    }
}
