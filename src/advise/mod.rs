//! `scx_bandwidth advise`: which quota and burst a group needs, from what it used.
//!
//! It reads each limited group's history from the stats socket, replays it
//! (model.rs) for other settings, searches the smallest burst (else quota) that
//! meets the user's target, and prints the advice with the lines to paste.

mod model;

pub use model::{demand, replay, GroupHistory, Outcome, Setting, Step};

use serde::{Deserialize, Serialize};

use crate::config;
use crate::pools::Record;

/// The smallest value in `lo..=hi` for which `ok` holds, assuming it holds from
/// some value on (more runtime never throttles more); None if not even at `hi`.
fn smallest(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if lo > hi || !ok(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// Headroom added to the burst or quota the replay found just enough: the replay
/// is exact arithmetic on estimated demand, the real group runs in slices and its
/// burns vary; 10 % of the found value, at least 1 ms, rounded up to whole ms.
pub fn with_margin(us: u64) -> u64 {
    let m = us + (us / 10).max(1_000);
    m.div_ceil(1_000) * 1_000
}

/// What the user asks of a group's limit: at most this share of periods
/// throttled and, if given, no throttled period's tasks waiting longer than this
/// in 99 % of the periods (as [`Outcome::wait_p99_us`] estimates it).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub throttled_pct: f64,
    pub wait_ms: Option<f64>,
}

impl Target {
    pub fn met_by(&self, o: &Outcome) -> bool {
        o.throttled_pct() <= self.throttled_pct && self.wait_ms.is_none_or(|ms| o.wait_p99_us as f64 <= ms * 1e3)
    }
}

/// What `advise` tells of one group.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Advice {
    pub cgroup: String,
    pub source: String,
    pub current: Setting,
    pub period_us: u64,
    /// Periods in the history used (idle ones included) and the time they span.
    pub history_periods: u64,
    pub window_s: f64,
    /// Share of periods recorded throttled, and the replay's at the current setting
    /// (how well the model fits).
    pub recorded_throttled_pct: f64,
    pub replayed_throttled_pct: f64,
    pub wait_p99_us: u64,
    /// The replay's p99 wait at the current setting (µs), the estimate the wait
    /// target is checked against.
    pub replayed_wait_p99_us: u64,
    pub target: Target,
    /// "keep" (the target is met), "burst", "quota", or "none" (not even all
    /// CPUs would do), "what-if" for a setting the user gave.
    pub kind: String,
    pub advised: Setting,
    pub predicted: Outcome,
    pub predicted_throttled_pct: f64,
    /// Average CPUs the advised setting allows beyond the current one (a burst
    /// adds none: it only lets saved quota be spent later), and the most it lets
    /// the group use in one period.
    pub adds_cpus: f64,
    pub peak_cpus: f64,
    /// Lines to paste: the cpu.max.burst / cpu.max values and a config stanza.
    pub paste: Vec<String>,
}

/// Advise on one group's history: keep its limit if the target is met, else the
/// smallest burst (≤ quota, the kernel's bound) that meets it, else the smallest
/// quota (with a burst of one quota). `what_if` replays a given setting instead.
pub fn advise(h: &GroupHistory, target: Target, what_if: Option<Setting>) -> Result<Advice, String> {
    let mut records = h.records()?;
    // The newest period's waits are booked in the next one.
    records.pop();
    let steps = demand(&records, h.period_us, h.nr_cpus);
    let current = Setting { quota_us: h.quota_us, burst_us: h.burst_us };
    let run = |s: Setting| replay(&steps, h.period_us, h.nr_cpus, s);
    let meets = |s: Setting| target.met_by(&run(s));
    let active: Vec<&Record> = records.iter().filter(|r| !r.idle).collect();
    let periods: u64 = active.iter().map(|r| r.periods).sum();
    let throttled: u64 = active.iter().filter(|r| r.throttled).map(|r| r.periods).sum();
    let max_quota = (h.nr_cpus.max(1) * h.period_us).min(config::MAX_QUOTA_US / 2);

    let (kind, advised) = if let Some(s) = what_if {
        ("what-if", s)
    } else if meets(current) {
        ("keep", current)
    } else if let Some(b) = smallest(h.burst_us, h.quota_us, |b| meets(Setting { quota_us: h.quota_us, burst_us: b })) {
        ("burst", Setting { quota_us: h.quota_us, burst_us: with_margin(b).min(h.quota_us) })
    } else if let Some(q) = smallest(h.quota_us, max_quota, |q| meets(Setting { quota_us: q, burst_us: q })) {
        let b = smallest(0, q, |b| meets(Setting { quota_us: q, burst_us: b })).unwrap_or(q);
        let q2 = with_margin(q).min(max_quota);
        ("quota", Setting { quota_us: q2, burst_us: with_margin(b).min(q2) })
    } else {
        ("none", Setting { quota_us: max_quota, burst_us: max_quota })
    };
    let predicted = run(advised);
    let period_s = h.period_us as f64 / 1e6;
    let mut paste = Vec::new();
    if kind != "keep" && kind != "none" {
        paste = paste_lines(h, advised);
    }
    Ok(Advice {
        cgroup: h.cgroup.clone(),
        source: h.source.clone(),
        current,
        period_us: h.period_us,
        history_periods: records.iter().map(|r| r.periods).sum(),
        window_s: records.iter().map(|r| r.periods).sum::<u64>() as f64 * period_s,
        recorded_throttled_pct: if periods == 0 { 0.0 } else { 100.0 * throttled as f64 / periods as f64 },
        replayed_throttled_pct: run(current).throttled_pct(),
        wait_p99_us: h.wait_p99_us,
        replayed_wait_p99_us: run(current).wait_p99_us,
        target,
        kind: kind.into(),
        advised,
        predicted,
        predicted_throttled_pct: predicted.throttled_pct(),
        adds_cpus: (advised.quota_us as f64 - current.quota_us as f64) / h.period_us as f64,
        peak_cpus: (advised.quota_us + advised.burst_us) as f64 / h.period_us as f64,
        paste,
    })
}

/// How to apply `s` where the group's limit comes from.
fn paste_lines(h: &GroupHistory, s: Setting) -> Vec<String> {
    let dir = format!("/sys/fs/cgroup/{}", h.cgroup.trim_start_matches('/'));
    let mut lines = Vec::new();
    if h.source == "cpu.max" {
        if s.quota_us != h.quota_us {
            lines.push(format!("echo '{} {}' > {dir}/cpu.max", s.quota_us, h.period_us));
        }
        lines.push(format!("echo {} > {dir}/cpu.max.burst", s.burst_us));
    } else if let Some(rule) = h.source.strip_prefix("rule ") {
        lines.push(format!("# limit from rule {rule}: change the rule, or add this [[group]] for the one cgroup"));
    }
    lines.push("[[group]]".into());
    lines.push(format!("cgroup = \"{}\"", h.cgroup));
    lines.push(format!("quota_us = {}", s.quota_us));
    lines.push(format!("period_us = {}", h.period_us));
    lines.push(format!("burst_us = {}", s.burst_us));
    lines
}

/// Why `advise` failed: bad input (exit 2) or anything else.
#[derive(Debug)]
pub enum Error {
    Usage(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Self {
        Error::Other(e)
    }
}

/// `scx_bandwidth advise`: ask the running instance for each group's history
/// (or `--cgroup`'s), advise, print.
pub fn run(o: &crate::opts::AdviseOpts, out: &mut impl std::io::Write) -> Result<(), Error> {
    use anyhow::Context;
    if let (Some(q), Some(b)) = (o.quota_us, o.burst_us) {
        if b > q {
            return Err(Error::Usage(format!("--burst-us {b}: out of range (allowed 0..={q}, --quota-us: the kernel's bound)")));
        }
    }
    let mut client = scx_stats::prelude::StatsClient::new()
        .set_path(crate::stats::SOCKET)
        .connect(Some(10_000))
        .with_context(|| format!("cannot reach a running scx_bandwidth at {} (is it running? root?)", crate::stats::SOCKET))?;
    let mut ask = |args: Vec<(String, String)>| -> anyhow::Result<serde_json::Value> {
        let mut a = vec![("target".to_string(), "history".to_string())];
        a.extend(args);
        client.request::<serde_json::Value>("stats", a)
    };
    let names: Vec<String> = match &o.cgroup {
        Some(cg) => vec![cg.clone()],
        None => serde_json::from_value(ask(vec![])?["cgroups"].clone()).context("history: the list of groups")?,
    };
    let mut all = Vec::new();
    for name in &names {
        let h = match ask(vec![("cgroup".into(), name.clone())]) {
            Ok(v) => serde_json::from_value::<GroupHistory>(v).with_context(|| format!("history of {name}"))?,
            Err(e) if o.cgroup.is_some() => return Err(Error::Usage(format!("--cgroup {name}: {e:#}"))),
            // A group that left between the list and its request.
            Err(_) => continue,
        };
        let what_if = (o.burst_us.is_some() || o.quota_us.is_some()).then(|| Setting {
            quota_us: o.quota_us.unwrap_or(h.quota_us),
            burst_us: o.burst_us.unwrap_or(h.burst_us),
        });
        if let Some(s) = what_if {
            if s.burst_us > s.quota_us {
                return Err(Error::Usage(format!(
                    "--burst-us {}: out of range for {name} (allowed 0..={}, the quota: the kernel's bound)",
                    s.burst_us, s.quota_us
                )));
            }
        }
        let target = Target { throttled_pct: o.max_throttled_pct, wait_ms: o.max_wait_ms };
        all.push(advise(&h, target, what_if).map_err(|e| Error::Other(anyhow::anyhow!(e)))?);
    }
    if o.json {
        for a in &all {
            writeln!(out, "{}", serde_json::to_string(a).context("json")?).context("stdout")?;
        }
    } else {
        format(&all, out).context("stdout")?;
    }
    Ok(())
}

/// The human report of `advise`.
pub fn format(advice: &[Advice], out: &mut impl std::io::Write) -> std::io::Result<()> {
    let ms = |us: u64| us as f64 / 1e3;
    writeln!(
        out,
        "{:<32} {:>22} {:>8} {:>9} {:>9} {:>9}  advice",
        "cgroup", "limit q/p+burst (ms)", "window", "throttled", "replayed", "wait p99"
    )?;
    for a in advice {
        writeln!(
            out,
            "{:<32} {:>22} {:>7.0}s {:>8.1}% {:>8.1}% {:>7.1}ms  {}",
            crate::stats::clip(&a.cgroup, 32),
            format!("{}/{}+{}", ms(a.current.quota_us), ms(a.period_us), ms(a.current.burst_us)),
            a.window_s,
            a.recorded_throttled_pct,
            a.replayed_throttled_pct,
            ms(a.wait_p99_us),
            summary(a),
        )?;
    }
    for a in advice.iter().filter(|a| !a.paste.is_empty()) {
        writeln!(out, "\n# {}", a.cgroup)?;
        for l in &a.paste {
            writeln!(out, "{l}")?;
        }
    }
    Ok(())
}

fn summary(a: &Advice) -> String {
    let ms = |us: u64| us as f64 / 1e3;
    let mut pred = format!("{:.1}% throttled", a.predicted_throttled_pct);
    match a.target.wait_ms {
        Some(w) => pred += &format!(", p99 wait {:.1} ms (target {:.1}%, {w:.1} ms)", ms(a.predicted.wait_p99_us), a.target.throttled_pct),
        None => pred += &format!(" (target {:.1}%)", a.target.throttled_pct),
    }
    match a.kind.as_str() {
        "keep" => format!("keep: {pred}"),
        "burst" => format!(
            "burst {} ms: {pred}; average unchanged, peak {:.2} CPUs",
            ms(a.advised.burst_us),
            a.peak_cpus
        ),
        "quota" => format!(
            "no burst is enough: quota {} ms + burst {} ms: {pred}; +{:.2} CPUs on average",
            ms(a.advised.quota_us),
            ms(a.advised.burst_us),
            a.adds_cpus
        ),
        "what-if" => format!("at {}/{}+{} ms: {pred}", ms(a.advised.quota_us), ms(a.period_us), ms(a.advised.burst_us)),
        _ => format!("not met even with every CPU: {pred}"),
    }
}

#[cfg(test)]
mod tests {
    use super::model::tests::{rec, MS};
    use super::*;

    fn pct(throttled_pct: f64) -> Target {
        Target { throttled_pct, wait_ms: None }
    }

    #[test]
    fn burst_that_covers_a_burn_stops_the_throttling() {
        // 80 ms burns every 4 periods, 50 ms quota.
        let mut r = Vec::new();
        for _ in 0..25 {
            r.extend([rec(50, 50, true), rec(30, 0, false), rec(0, 0, false), rec(0, 0, false)]);
        }
        let steps = demand(&r, 100 * MS, 2);
        let at = |b: u64| replay(&steps, 100 * MS, 2, Setting { quota_us: 50 * MS, burst_us: b * MS });
        assert_eq!(at(0).throttled, 25);
        // Strict, the first quiet period of each cycle refills the pool to its cap
        // (one quota): the timer stops, and the second quiet period is not counted.
        assert_eq!(at(0).periods, 75);
        // With the burst the burn takes its whole period and the next is the quiet
        // one that fills the pool: 2 periods a cycle (3 in the first, throttled).
        assert_eq!(at(30).periods, 51);
        assert_eq!(at(29).throttled, 25);
        // The pool starts at one quota (a group's activation): the first burn finds
        // no saved quota; every later one does.
        assert_eq!(at(30).throttled, 1);
        // Usage is the same either way: a burst moves it, adds none.
        assert_eq!(at(0).used_us, at(30).used_us);
        let h = history("a", 50, 0, &r);
        let a = advise(&h, pct(5.0), None).unwrap();
        assert_eq!(a.kind, "burst");
        // 30 ms found, +10 % rounded up to ms.
        assert_eq!(a.advised, Setting { quota_us: 50 * MS, burst_us: 33 * MS });
        assert_eq!(a.predicted.throttled, 1);
        assert!((a.recorded_throttled_pct - 25.0).abs() < 1.1, "{a:?}");
        assert_eq!(a.adds_cpus, 0.0);
        assert!(a.paste.contains(&format!("echo 33000 > /sys/fs/cgroup/a/cpu.max.burst")), "{:?}", a.paste);
    }

    /// A wait target asks for what the share of throttled periods alone would not:
    /// 80 ms burns every 4 periods at 50 ms quota throttle a third of the periods
    /// counted (the quiet ones stop the timer), within a 40 % target, but each
    /// waits 100 ms × (1 − 50/80) = 37.5 ms for its refill.
    #[test]
    fn a_wait_target_asks_for_a_burst_the_share_alone_does_not() {
        let mut r = Vec::new();
        for _ in 0..25 {
            r.extend([rec(50, 50, true), rec(30, 0, false), rec(0, 0, false), rec(0, 0, false)]);
        }
        let h = history("a", 50, 0, &r);
        let a = advise(&h, pct(40.0), None).unwrap();
        assert_eq!(a.kind, "keep", "{a:?}");
        assert_eq!(a.replayed_wait_p99_us, 37_500);
        let a = advise(&h, Target { throttled_pct: 40.0, wait_ms: Some(10.0) }, None).unwrap();
        assert_eq!(a.kind, "burst", "{a:?}");
        // Waits ≤ 10 ms need 72 ms of the 80 in the pool: a 22 ms burst, + margin.
        assert_eq!(a.advised.burst_us, with_margin(22 * MS), "{a:?}");
        // Only the first burn, before any quota was saved, still waits 37.5 ms.
        assert!(a.predicted.wait_p99_us <= 10 * MS, "{a:?}");
        assert_eq!(a.predicted.wait_max_us, 37_500, "{a:?}");
        let at_21 = replay(&demand(&h.records().unwrap()[..100], 100 * MS, 2), 100 * MS, 2, Setting { quota_us: 50 * MS, burst_us: 21 * MS });
        assert!(at_21.wait_p99_us > 10 * MS, "{at_21:?}");
    }

    #[test]
    fn a_group_that_always_wants_more_needs_quota() {
        let r: Vec<Record> = (0..50).map(|_| rec(50, 30, true)).collect();
        let h = history("hog", 50, 0, &r);
        let a = advise(&h, pct(5.0), None).unwrap();
        assert_eq!(a.kind, "quota");
        // 80 ms per period: the smallest quota with a burst of one quota is 80 ms
        // (the first period starts with a full pool), + margin.
        assert!(a.advised.quota_us >= 80 * MS && a.advised.quota_us <= 89 * MS, "{a:?}");
        assert!(a.adds_cpus > 0.29, "{a:?}");
        assert!(a.predicted_throttled_pct <= 5.0);
        // More than the machine: none.
        let r: Vec<Record> = (0..50).map(|_| rec(50, 500, true)).collect();
        let a = advise(&history("big", 50, 0, &r), pct(5.0), None).unwrap();
        assert!(a.kind == "none" || a.advised.quota_us <= 200 * MS, "{a:?}");
    }

    fn history(cg: &str, q_ms: u64, b_ms: u64, r: &[Record]) -> GroupHistory {
        let mut r = r.to_vec();
        r.push(rec(0, 0, false)); // the newest, left out
        GroupHistory {
            cgroup: cg.into(),
            source: "cpu.max".into(),
            quota_us: q_ms * MS,
            period_us: 100 * MS,
            burst_us: b_ms * MS,
            nr_cpus: 2,
            ..Default::default()
        }
        .from_records(r.into_iter())
    }

    #[test]
    fn records_survive_the_socket() {
        let r = [rec(5, 7, true), Record { periods: 40, idle: true, ..Default::default() }];
        let h = history("x", 10, 0, &r);
        let json = serde_json::to_string(&h).unwrap();
        let back: GroupHistory = serde_json::from_str(&json).unwrap();
        assert_eq!(back.records().unwrap()[..2], r);
        let mut bad = back.clone();
        bad.idle.pop();
        assert!(bad.records().unwrap_err().contains("x: history columns"));
    }

    #[test]
    fn margin() {
        assert_eq!(with_margin(0), 1_000);
        assert_eq!(with_margin(30_000), 33_000);
        assert_eq!(with_margin(4_500), 6_000);
    }
}
