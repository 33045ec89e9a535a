//! Rules: limits for cgroups found by pattern, not by exact path.
//!
//! Orchestrators create cgroups with generated names
//! (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`,
//! `system.slice/<unit>.service`). A `[[rule]]` matches such paths by glob and
//! sets, for each matching cgroup as it appears, either
//!
//! - a **full limit** (`quota_us`, optional `period_us`, `burst_us` or `burst_pct`),
//!   whether or not the cgroup has a cpu.max of its own; or
//! - a **change to its own cpu.max** (no `quota_us`): `burst_us` or `burst_pct` of
//!   its quota (kubelet cannot set cpu.max.burst), and/or `period_us`, keeping its
//!   quota/period ratio (kubelet sets one period for the whole node). A cgroup
//!   whose cpu.max is "max" stays unlimited.
//!
//! Patterns: components separated by `/`; `*` matches any run of characters
//! within one component, `**` (a whole component) any number of components,
//! none included. Precedence: a `[[group]]` of the exact path, then the most
//! specific matching rule (most literal characters; the earlier one in the file
//! on a tie), then the cgroup's own cpu.max.

use std::fmt;

use serde::Deserialize;

use crate::config::{self, ConfigError, GroupConfig};

/// Rules one configuration may hold: each new cgroup is matched against all of them.
pub const MAX_RULES: usize = 256;

/// A cgroup's own limit, as cpu.max and cpu.max.burst give it (µs); None is "max".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnLimit {
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: u64,
}

/// How a rule sets the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Burst {
    /// The cgroup's own cpu.max.burst (scaled with the quota when the period changes).
    Own,
    Us(u64),
    /// Percent of the (resulting) quota.
    Pct(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// What the statistics' `source` shows: "rule <name>".
    pub name: String,
    pub pattern: Pattern,
    /// A full limit when set; otherwise the rule changes the cgroup's own cpu.max.
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
    pub burst: Burst,
}

/// A parsed glob over cgroup paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    /// `**`
    Any,
    /// A component; `*` inside matches within it.
    Glob(String),
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('/') {
            return Err(format!("\"{text}\" is absolute; give the pattern relative to the cgroup2 mount"));
        }
        if text.chars().any(|c| c.is_control()) {
            return Err(format!("{text:?} contains control characters"));
        }
        let mut parts = Vec::new();
        for c in text.split('/').filter(|c| !c.is_empty()) {
            parts.push(match c {
                "." | ".." => return Err(format!("\"{text}\" contains \"{c}\"")),
                "**" => Part::Any,
                c if c.contains("**") => {
                    return Err(format!("\"{text}\": `**` must be a whole component (\"a/**/b\"), not part of \"{c}\""))
                }
                c => Part::Glob(c.to_string()),
            });
        }
        if parts.is_empty() {
            return Err("matches nothing: the pattern is empty".into());
        }
        if parts.iter().all(|p| *p == Part::Any) {
            return Err(format!("\"{text}\" matches every cgroup; name at least one component"));
        }
        Ok(Self { text: text.to_string(), parts })
    }

    /// Literal (non-wildcard) characters: the measure of how specific a pattern is.
    pub fn literal_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Any => 0,
                Part::Glob(g) => g.chars().filter(|&c| c != '*').count() + 1,
            })
            .sum()
    }

    /// Whether the normalised path `path` ("a/b/c") matches.
    pub fn matches(&self, path: &str) -> bool {
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        match_parts(&self.parts, &comps)
    }
}

/// Whether `parts` matches all of `comps`: a table over (part, component), so that
/// many `**` cost parts × components, never a search over every split.
fn match_parts(parts: &[Part], comps: &[&str]) -> bool {
    // next[j]: parts[i + 1..] matches comps[j..]; start with no parts left.
    let mut next: Vec<bool> = (0..=comps.len()).map(|j| j == comps.len()).collect();
    for part in parts.iter().rev() {
        let mut cur = vec![false; comps.len() + 1];
        for j in (0..=comps.len()).rev() {
            cur[j] = match part {
                Part::Any => next[j] || (j < comps.len() && cur[j + 1]),
                Part::Glob(g) => j < comps.len() && next[j + 1] && match_glob(g.as_bytes(), comps[j].as_bytes()),
            };
        }
        next = cur;
    }
    next[0]
}

/// `*` matches any run of bytes (no `/` reaches here); everything else itself.
fn match_glob(pat: &[u8], s: &[u8]) -> bool {
    // Iterative with one backtrack point: linear in practice, never exponential.
    let (mut p, mut i, mut star, mut mark) = (0, 0, None, 0);
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some(p);
            mark = i;
            p += 1;
        } else if p < pat.len() && pat[p] == s[i] {
            p += 1;
            i += 1;
        } else if let Some(sp) = star {
            p = sp + 1;
            mark += 1;
            i = mark;
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

impl Rule {
    /// The limit this rule gives a cgroup whose own cpu.max is `own`, or None when it
    /// leaves the cgroup unlimited (a change to cpu.max, which is "max").
    pub fn apply(&self, path: &str, own: Option<OwnLimit>) -> Option<GroupConfig> {
        let (quota_us, period_us, own_burst) = match (self.quota_us, own) {
            (Some(q), _) => (q, self.period_us.unwrap_or(config::DEFAULT_PERIOD_US), 0),
            (None, None) => return None,
            (None, Some(o)) => match self.period_us {
                Some(p) if p != o.period_us => {
                    let scale = |v: u64| ((v as u128 * p as u128 + o.period_us as u128 / 2) / o.period_us as u128) as u64;
                    let q = scale(o.quota_us);
                    if q < config::MIN_QUOTA_US {
                        // The kernel's floor: a shorter period would raise the limit.
                        (o.quota_us, o.period_us, o.burst_us)
                    } else {
                        (q.min(config::MAX_QUOTA_US), p, scale(o.burst_us))
                    }
                }
                _ => (o.quota_us, o.period_us, o.burst_us),
            },
        };
        let burst_us = match self.burst {
            Burst::Own => own_burst,
            Burst::Us(b) => b,
            Burst::Pct(pct) => (quota_us as u128 * pct as u128 / 100) as u64,
        }
        .min(quota_us)
        .min(config::MAX_QUOTA_US - quota_us);
        Some(GroupConfig { cgroup: path.to_string(), quota_us, period_us, burst_us })
    }

    /// What the statistics' `source` field shows for a group this rule shaped.
    pub fn source(&self) -> String {
        format!("rule {}", self.name)
    }
}

/// The rule that applies to `path`: the most specific match, the first on a tie.
pub fn best<'r>(rules: &'r [Rule], path: &str) -> Option<&'r Rule> {
    let mut best: Option<&Rule> = None;
    for r in rules.iter().filter(|r| r.pattern.matches(path)) {
        if best.is_none_or(|b| r.pattern.literal_len() > b.pattern.literal_len()) {
            best = Some(r);
        }
    }
    best
}

/// A `[[rule]]` as written. Integers signed so that a negative value gets our message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    name: Option<String>,
    #[serde(rename = "match")]
    pattern: Option<String>,
    quota_us: Option<i64>,
    period_us: Option<i64>,
    burst_us: Option<i64>,
    burst_pct: Option<i64>,
}

/// Validate rule number `n` (1-based) of `origin`.
pub(crate) fn parse_rule(n: usize, raw: RawRule, origin: &str) -> Result<Rule, ConfigError> {
    let name = raw.name.clone().unwrap_or_else(|| n.to_string());
    let label = match (&raw.name, &raw.pattern) {
        (Some(nm), _) => format!("rule {n} (\"{nm}\")"),
        (None, Some(p)) => format!("rule {n} (match \"{p}\")"),
        (None, None) => format!("rule {n}"),
    };
    let err = |field: &str, why: String| ConfigError(format!("{origin}: {label}: {field}{why}"));
    if name.is_empty() || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(err("name", format!(" = {name:?}: must be non-empty, without spaces or control characters")));
    }
    let pattern = match &raw.pattern {
        None => return Err(err("missing field `match`", String::new())),
        Some(p) => Pattern::parse(p).map_err(|why| err("match", format!(": {why}")))?,
    };
    let range = |field: &str, v: Option<i64>, min: u64, max: u64| -> Result<Option<u64>, ConfigError> {
        v.map(|v| config::range(v, min, max).map_err(|why| err(field, format!(" = {v}: {why}")))).transpose()
    };
    let quota_us = range("quota_us", raw.quota_us, config::MIN_QUOTA_US, config::MAX_QUOTA_US)?;
    let period_us = range("period_us", raw.period_us, config::MIN_PERIOD_US, config::MAX_PERIOD_US)?;
    let burst_max = quota_us.map_or(config::MAX_QUOTA_US, |q| q.min(config::MAX_QUOTA_US - q));
    let burst_us = range("burst_us", raw.burst_us, 0, burst_max)?;
    let burst_pct = range("burst_pct", raw.burst_pct, 0, 100)?;
    let burst = match (burst_us, burst_pct) {
        (Some(_), Some(_)) => return Err(err("burst_pct", ": set burst_us or burst_pct, not both".into())),
        (Some(b), None) => Burst::Us(b),
        (None, Some(p)) => Burst::Pct(p),
        (None, None) => Burst::Own,
    };
    if quota_us.is_none() && period_us.is_none() && burst == Burst::Own {
        return Err(err(
            "",
            "sets nothing: give quota_us (a full limit), or burst_us, burst_pct or period_us (a change to the cgroup's cpu.max)"
                .into(),
        ));
    }
    Ok(Rule { name, pattern, quota_us, period_us, burst })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(p: &str) -> Pattern {
        Pattern::parse(p).unwrap()
    }

    const POD: &str = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e.slice/cri-containerd-9a8b.scope";

    #[test]
    fn globs_match_within_and_across_components() {
        assert!(pat("kubepods.slice/**/cri-containerd-*.scope").matches(POD));
        assert!(pat("kubepods.slice/*/*/cri-containerd-*.scope").matches(POD));
        assert!(!pat("kubepods.slice/*/cri-containerd-*.scope").matches(POD), "* stays within one component");
        assert!(pat("**/cri-containerd-*.scope").matches(POD));
        assert!(pat("kubepods.slice/**").matches(POD));
        assert!(pat("kubepods.slice/**").matches("kubepods.slice"), "** matches no component too");
        assert!(!pat("kubepods.slice/**/x").matches("kubepods.slice"));
        assert!(pat("system.slice/*.service").matches("system.slice/nginx.service"));
        assert!(!pat("system.slice/*.service").matches("system.slice/nginx.service/child"));
        assert!(!pat("system.slice/*.service").matches("system.slice/nginx.socket"));
        assert!(pat("a/*").matches("a/b") && !pat("a/*").matches("a"));
        assert!(pat("a*b*c").matches("abc") && pat("a*b*c").matches("a-b-b-c") && !pat("a*b*c").matches("a-c-b"));
        assert!(pat("*").matches("x") && !pat("*").matches("x/y"));
        assert!(pat("a//b/").matches("a/b"));
    }

    #[test]
    fn bad_patterns_say_why() {
        for (bad, why) in [
            ("/kubepods.slice/*", "is absolute"),
            ("a/../b", "contains \"..\""),
            ("a/./b", "contains \".\""),
            ("", "empty"),
            ("**", "matches every cgroup"),
            ("**/**", "matches every cgroup"),
            ("a/b**", "must be a whole component"),
            ("a\tb", "control characters"),
        ] {
            let e = Pattern::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    fn rule(pattern: &str, quota: Option<u64>, period: Option<u64>, burst: Burst) -> Rule {
        Rule { name: pattern.into(), pattern: pat(pattern), quota_us: quota, period_us: period, burst }
    }

    const OWN: OwnLimit = OwnLimit { quota_us: 50_000, period_us: 100_000, burst_us: 10_000 };

    #[test]
    fn a_change_rule_keeps_the_ratio_and_needs_a_limit() {
        let burst = rule("p/*", None, None, Burst::Pct(50));
        assert_eq!(burst.apply("p/c", None), None, "an unlimited cgroup stays unlimited");
        let g = burst.apply("p/c", Some(OWN)).unwrap();
        assert_eq!((g.cgroup.as_str(), g.quota_us, g.period_us, g.burst_us), ("p/c", 50_000, 100_000, 25_000));
        let g = rule("p/*", None, None, Burst::Us(80_000)).apply("p/c", Some(OWN)).unwrap();
        assert_eq!(g.burst_us, 50_000, "a burst is at most the quota, as the kernel requires");
        // A period of 20 ms keeps 0.5 CPU: 10 ms per 20 ms, and the burst scales the same way.
        let g = rule("p/*", None, Some(20_000), Burst::Own).apply("p/c", Some(OWN)).unwrap();
        assert_eq!((g.quota_us, g.period_us, g.burst_us), (10_000, 20_000, 2_000));
        let g = rule("p/*", None, Some(20_000), Burst::Pct(100)).apply("p/c", Some(OWN)).unwrap();
        assert_eq!((g.quota_us, g.period_us, g.burst_us), (10_000, 20_000, 10_000));
        // 0.02 CPU per 10 ms would be a 200 µs quota, under the kernel's 1 ms floor: the own period stays.
        let small = OwnLimit { quota_us: 2_000, period_us: 100_000, burst_us: 0 };
        let g = rule("p/*", None, Some(10_000), Burst::Own).apply("p/c", Some(small)).unwrap();
        assert_eq!((g.quota_us, g.period_us), (2_000, 100_000));
    }

    #[test]
    fn a_full_rule_limits_with_or_without_cpu_max() {
        let full = rule("s/*.service", Some(20_000), None, Burst::Pct(25));
        for own in [None, Some(OWN)] {
            let g = full.apply("s/a.service", own).unwrap();
            assert_eq!((g.quota_us, g.period_us, g.burst_us), (20_000, 100_000, 5_000), "{own:?}");
        }
        let g = rule("s/*", Some(5_000), Some(10_000), Burst::Own).apply("s/a", Some(OWN)).unwrap();
        assert_eq!((g.quota_us, g.period_us, g.burst_us), (5_000, 10_000, 0), "a full limit ignores cpu.max.burst");
    }

    #[test]
    fn the_most_specific_rule_wins_then_the_first() {
        let rules = [
            rule("kubepods.slice/**", None, Some(10_000), Burst::Own),
            rule("kubepods.slice/**/cri-containerd-*.scope", None, None, Burst::Pct(50)),
            rule("kubepods.slice/**/cri-*-*.scope", None, None, Burst::Pct(10)),
            rule("**/cri-containerd-*.scope", None, None, Burst::Pct(20)),
        ];
        assert_eq!(best(&rules, POD).map(|r| r.pattern.to_string()), Some(rules[1].pattern.to_string()));
        assert_eq!(best(&rules, "kubepods.slice/kubepods-besteffort.slice").map(|r| r.burst), Some(Burst::Own));
        assert_eq!(best(&rules, "system.slice/x.service"), None);
        let tie = [rule("a/*x", None, None, Burst::Pct(1)), rule("a/x*", None, None, Burst::Pct(2))];
        assert_eq!(best(&tie, "a/xx").map(|r| r.burst), Some(Burst::Pct(1)));
    }

    #[test]
    fn globs_are_not_exponential() {
        let p = pat("a*a*a*a*a*a*a*a*a*b/**/**/**/**/c");
        let long = "a".repeat(5000);
        let path = format!("{long}/{}", vec!["x"; 200].join("/"));
        let t = std::time::Instant::now();
        assert!(!p.matches(&path));
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
    }
}
