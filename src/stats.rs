//! Statistics: samples of the BPF counters and the `--stats` report.
//!
//! Per group the figures follow cpu.stat: nr_periods (periods elapsed while
//! the cgroup existed), nr_throttled (periods that ended with the group
//! throttled), throttled_usec (sum over CPUs of the time each was throttled),
//! plus the CPU time the group actually used. Every figure in the report is a
//! delta over the report interval, computed in one place ([`delta`]).

use std::fmt::Write;
use std::time::Instant;

use crate::bpf_intf;

#[derive(Clone, Debug, Default)]
pub struct GroupStats {
    pub cgroup: String,
    /// The cgroup exists and its limit is enforced.
    pub present: bool,
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: u64,
    pub usage_ns: u64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
    /// Periods whose pool consumption exceeded quota, and by how much in total
    /// (cpu.stat nr_bursts / burst_usec).
    pub nr_bursts: u64,
    pub burst_ns: u64,
    /// Periods whose CPU time really used exceeded quota, and by how much.
    pub used_nr_bursts: u64,
    pub used_burst_ns: u64,
    /// Runtime left in the pool (a level, not a counter).
    pub pool_ns: i64,
}

#[derive(Clone, Debug, Default)]
pub struct GroupSample {
    pub groups: Vec<GroupStats>,
    /// Global counters indexed by enum bw_stat_idx.
    pub counters: Vec<u64>,
}

/// Names of the global counters, in bw_stat_idx order.
pub const COUNTER_NAMES: [&str; bpf_intf::bw_stat_idx_BW_NR_STATS as usize] =
    ["enqueue", "direct", "dispatch", "park", "release", "pull", "throttle", "preempt"];

/// Counter difference that survives a counter reset (slot reused).
fn delta(now: u64, before: u64) -> u64 {
    now.checked_sub(before).unwrap_or(now)
}

/// Report state: the sample and time of the previous report.
#[derive(Default)]
pub struct StatsReport {
    prev: GroupSample,
    at: Option<Instant>,
}

impl StatsReport {
    pub fn reset(&mut self, sample: GroupSample, at: Instant) {
        self.prev = sample;
        self.at = Some(at);
    }

    /// The report for the interval since the last reset, most throttled
    /// groups first.
    pub fn format(&self, now: &GroupSample, at: Instant) -> String {
        let secs = self.at.map(|t| at.duration_since(t).as_secs_f64()).unwrap_or(0.0).max(1e-9);
        let mut rows: Vec<(u64, String)> = Vec::new();
        for (i, g) in now.groups.iter().enumerate() {
            let p = self.prev.groups.get(i).cloned().unwrap_or_default();
            let used_s = delta(g.usage_ns, p.usage_ns) as f64 / 1e9;
            let cpus = used_s / secs;
            let limit = g.quota_us as f64 / g.period_us as f64;
            let throttled_ns = delta(g.throttled_ns, p.throttled_ns);
            let row = format!(
                "{:<28} {:>8}/{:<8} {:>6.3} {:>6.3} {:>7.1}% {:>8} {:>9} {:>12.1} {:>6} {:>9.1} {:>6} {:>9.1}{}",
                clip(&g.cgroup, 28),
                g.quota_us,
                g.period_us,
                limit,
                cpus,
                100.0 * cpus / limit,
                delta(g.nr_periods, p.nr_periods),
                delta(g.nr_throttled, p.nr_throttled),
                throttled_ns as f64 / 1e6,
                delta(g.nr_bursts, p.nr_bursts),
                delta(g.burst_ns, p.burst_ns) as f64 / 1e6,
                delta(g.used_nr_bursts, p.used_nr_bursts),
                delta(g.used_burst_ns, p.used_burst_ns) as f64 / 1e6,
                if g.present { "" } else { "  (absent)" },
            );
            rows.push((throttled_ns, row));
        }
        rows.sort_by(|a, b| b.0.cmp(&a.0));

        let mut out = String::new();
        let _ = writeln!(
            out,
            "--- scx_bandwidth {:.1}s ---\n{:<28} {:>17} {:>6} {:>6} {:>8} {:>8} {:>9} {:>12} {:>6} {:>9} {:>6} {:>9}",
            secs,
            "cgroup",
            "quota/period us",
            "limit",
            "cpus",
            "of lim",
            "periods",
            "throttled",
            "throttled_ms",
            "bursts",
            "burst_ms",
            "used_b",
            "used_b_ms"
        );
        for (_, r) in rows {
            let _ = writeln!(out, "{r}");
        }
        let counters: Vec<String> = COUNTER_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let d = delta(*now.counters.get(i).unwrap_or(&0), *self.prev.counters.get(i).unwrap_or(&0));
                format!("{n}={d}")
            })
            .collect();
        let _ = writeln!(out, "counters: {}", counters.join(" "));
        out
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s.chars().rev().take(n - 1).collect::<Vec<_>>().into_iter().rev().collect();
        format!("…{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn group(name: &str, usage_ns: u64, throttled_ns: u64, periods: u64) -> GroupStats {
        GroupStats {
            cgroup: name.into(),
            present: true,
            quota_us: 30_000,
            period_us: 100_000,
            usage_ns,
            nr_periods: periods,
            nr_throttled: periods,
            throttled_ns,
            ..Default::default()
        }
    }

    #[test]
    fn report_uses_deltas_and_sorts_by_throttling() {
        let t0 = Instant::now();
        let mut r = StatsReport::default();
        let before = GroupSample {
            groups: vec![group("a", 1_000_000_000, 0, 10), group("b", 0, 0, 10)],
            counters: vec![0; COUNTER_NAMES.len()],
        };
        r.reset(before, t0);
        let after = GroupSample {
            groups: vec![group("a", 1_300_000_000, 100_000_000, 20), group("b", 300_000_000, 700_000_000, 20)],
            counters: vec![5; COUNTER_NAMES.len()],
        };
        let text = r.format(&after, t0 + Duration::from_secs(1));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("b "), "{text}");
        assert!(lines[2].contains(" 0.300 ") && lines[2].contains("100.0%") && lines[2].contains("700.0"), "{text}");
        assert!(lines[3].starts_with("a ") && lines[3].contains("100.0"), "{text}");
        assert!(text.contains("enqueue=5"), "{text}");
    }

    #[test]
    fn clip_keeps_the_tail() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("workload/very/long/name", 8), "…ng/name");
    }

    #[test]
    fn delta_survives_reset() {
        assert_eq!(delta(10, 4), 6);
        assert_eq!(delta(3, 9), 3);
    }
}
