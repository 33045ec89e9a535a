//! `--monitor SECS --graph`: the running instance's limited groups drawn in the
//! terminal, one block per group, where the table gives one row.
//!
//! Per group: a header (cgroup, where the limit comes from, quota/period and
//! burst, periods throttled in the interval), a bar chart of the CPU time each of
//! its last periods used against quota (and quota + burst), and the distribution
//! of its tasks' throttle waits in the interval. The table says how much a group
//! was throttled; the shape says why: quota used every period or in spikes a
//! burst would absorb, tasks held up for a tick or for the rest of a period.
//!
//! [`render`] is pure (two snapshots and a width in, lines out), so the tests
//! read the drawing back; [`print`] adds what a terminal needs.

use std::io::{IsTerminal, Write};

use anyhow::Result;

use crate::stats::{bucket_upper_us, clip, delta, hist_percentile, GroupMetrics, Metrics};

/// Rows of the usage chart: with eighth-cell blocks, 64 steps over the scale.
const CHART_ROWS: usize = 8;

/// Most rows of the wait histogram; neighbouring buckets are added up beyond that.
const HIST_ROWS: usize = 10;

/// Groups drawn per frame, most throttled first: each takes up to 22 lines.
const GROUPS: usize = 6;

/// Widths of the chart's y labels ("12.5ms") and the histogram's bucket labels ("<1.28ms").
const Y_LABEL: usize = 6;
const BUCKET_LABEL: usize = 7;

const VBLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const HBLOCKS: [char; 9] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'];

/// An empty cell whose top edge is a limit: the upper eighth block lies on that edge.
const LIMIT_LINE: char = '▔';

/// On the x axis under a period that used more than quota (a burst, or runtime on credit).
const OVER_QUOTA: char = '▲';

/// Top cell of a period beyond the chart's scale (only when quota is under 1/8 of the peak).
const CLIPPED: char = '↑';

/// A duration in µs to at most 3 significant digits, short enough for the labels.
fn fmt_us(us: u64) -> String {
    let (v, unit) = match us {
        0..1_000 => return format!("{us}µs"),
        1_000..1_000_000 => (us as f64 / 1e3, "ms"),
        _ => (us as f64 / 1e6, "s"),
    };
    let digits = if v < 10.0 { 2 } else if v < 100.0 { 1 } else { 0 };
    let s = format!("{v:.digits$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    format!("{s}{unit}")
}

/// The frame for the interval from `prev` to `now`, no line longer than `width` chars.
pub fn render(prev: &Metrics, now: &Metrics, width: usize) -> Vec<String> {
    let secs = now.interval_secs(prev);
    let order = now.by_throttling(prev);
    let mut out = vec![format!("--- scx_bandwidth {secs:.1}s: {} limited group(s), most throttled first ---", order.len())];
    for &(_, g, p) in order.iter().take(GROUPS) {
        out.push(String::new());
        out.push(header(g, p, secs, width));
        usage_chart(g, width, &mut out);
        waits(g, p, secs, width, &mut out);
    }
    if order.len() > GROUPS {
        out.push(String::new());
        out.push(format!("… {} more group(s), less throttled: the table (no --graph) shows 30", order.len() - GROUPS));
    }
    // Layout keeps within `width` where it can; what cannot shrink (labels at a tiny width) is cut.
    out.into_iter().map(|l| l.trim_end().chars().take(width).collect()).collect()
}

fn header(g: &GroupMetrics, p: &GroupMetrics, secs: f64, width: usize) -> String {
    let burst = if g.burst_us > 0 { format!("+{}", fmt_us(g.burst_us)) } else { String::new() };
    let rest = format!(
        " [{}] {}/{}{burst}  throttled {}/{} periods  {:.2} CPUs{}",
        g.source,
        fmt_us(g.quota_us),
        fmt_us(g.period_us),
        delta(g.nr_throttled, p.nr_throttled),
        delta(g.nr_periods, p.nr_periods),
        delta(g.usage_usec, p.usage_usec) as f64 / 1e6 / secs,
        if g.state == "enforced" { "" } else { "  (absent)" },
    );
    // The cgroup gives way first, keeping its tail (the leaf names the workload).
    let room = width.saturating_sub(rest.chars().count()).max(12);
    format!("{}{rest}", clip(&g.cgroup, room))
}

/// Rows top to bottom, then the x axis. The scale puts quota on a cell edge, so a
/// period at quota fills whole cells up to the quota line and what it used beyond
/// quota lies in the rows above; at least one row stays above quota.
fn usage_chart(g: &GroupMetrics, width: usize, out: &mut Vec<String>) {
    // The newest periods that fit beside the axis.
    let room = width.saturating_sub(Y_LABEL + 2).max(1);
    let used = &g.history_usec[g.history_usec.len().saturating_sub(room)..];
    if used.is_empty() {
        out.push("  usage: no period recorded yet (none ended since it started, or --history-secs 0)".into());
        return;
    }
    let quota = g.quota_us.max(1);
    let limit = quota + g.burst_us;
    let peak = used.iter().copied().max().unwrap_or(0).max(limit);
    let quota_rows = ((CHART_ROWS as u64 * quota / peak) as usize).clamp(1, CHART_ROWS - 1);
    let cell = quota as f64 / quota_rows as f64;
    let top = cell * CHART_ROWS as f64;
    // quota + burst need not fall on an edge: the row whose top edge is nearest.
    let burst_row =
        (g.burst_us > 0).then(|| ((limit as f64 / cell).round() as usize).clamp(quota_rows + 1, CHART_ROWS) - 1);
    let eighths: Vec<usize> = used.iter().map(|&v| ((v as f64 / cell * 8.0).round() as usize).min(CHART_ROWS * 8)).collect();
    for row in (0..CHART_ROWS).rev() {
        let edge = if row + 1 == quota_rows {
            Some(("quota", quota))
        } else if Some(row) == burst_row {
            Some(("quota+burst", limit))
        } else {
            None
        };
        let label = match edge {
            Some((_, v)) => fmt_us(v),
            None if row + 1 == CHART_ROWS => fmt_us(top.round() as u64),
            None => String::new(),
        };
        let mut line = format!("{label:>Y_LABEL$} {}", if label.is_empty() { '│' } else { '┤' });
        for (&e, &v) in eighths.iter().zip(used) {
            let fill = e.saturating_sub(row * 8).min(8);
            line.push(match fill {
                _ if row + 1 == CHART_ROWS && v as f64 > top => CLIPPED,
                0 if edge.is_some() => LIMIT_LINE,
                f => VBLOCKS[f],
            });
        }
        if let Some((name, _)) = edge {
            line.push(' ');
            line.push_str(name);
        }
        out.push(line);
    }
    let mut axis = format!("{:>Y_LABEL$} └", 0);
    axis.extend(used.iter().map(|&v| if v > quota { OVER_QUOTA } else { '─' }));
    axis.push_str(&format!(" {} periods of {}", used.len(), fmt_us(g.period_us)));
    let over = match used.iter().filter(|&&v| v > quota).count() {
        0 => String::new(),
        n => format!(", {OVER_QUOTA} {n} over quota"),
    };
    // The reading hint goes first when space runs short.
    let hint = " (oldest left)";
    if axis.chars().count() + hint.len() + over.chars().count() <= width {
        axis.push_str(hint);
    }
    out.push(axis + &over);
}

/// The interval's throttle waits: one bar per bucket (or run of buckets) from the
/// shortest wait seen to the longest, empty ones included so the gaps show.
fn waits(g: &GroupMetrics, p: &GroupMetrics, secs: f64, width: usize, out: &mut Vec<String>) {
    let hist = g.wait_hist_since(p);
    let total: u64 = hist.iter().sum();
    let since = match g.wait_p99_us {
        0 => String::new(),
        p99 => format!(" (since start p50 {} p99 {} max {})", fmt_us(g.wait_p50_us), fmt_us(p99), fmt_us(g.wait_max_us)),
    };
    let (Some(lo), Some(hi)) = (hist.iter().position(|&n| n > 0), hist.iter().rposition(|&n| n > 0)) else {
        out.push(format!("  throttle waits: none in {secs:.1}s{since}"));
        return;
    };
    let head = format!(
        "  throttle waits: {total} in {secs:.1}s, p50 {} p99 {}",
        fmt_us(hist_percentile(&hist, 0.5)),
        fmt_us(hist_percentile(&hist, 0.99)),
    );
    // The figures since start are an aside: left out rather than cut.
    let fits = head.chars().count() + since.chars().count() <= width;
    out.push(if fits { head + &since } else { head });
    // Runs of 1, 2 or a multiple of 4 buckets, aligned: a power of two's four
    // buckets stay together, so grouped rows end at powers of two.
    let per_row = [1, 2].into_iter().chain((1..).map(|k| 4 * k)).find(|n| hi / n - lo / n < HIST_ROWS).unwrap_or(1);
    let rows: Vec<(u64, u64)> = (lo / per_row * per_row..=hi)
        .step_by(per_row)
        // Buckets 4..8 are never counted (4 µs and up start at bucket 8).
        .filter(|&b| !(4..8).contains(&b) || b + per_row > 8)
        .map(|b| {
            let last = (b + per_row).min(hist.len()) - 1;
            (bucket_upper_us(last), hist[b..=last].iter().sum())
        })
        .collect();
    let most = rows.iter().map(|r| r.1).max().unwrap_or(1);
    let count_w = most.to_string().len();
    let bar_w = width.saturating_sub(2 + BUCKET_LABEL + 1 + count_w + 1).max(1);
    for (upper, n) in rows {
        // A bucket with any wait gets a sliver at least, so it is not read as empty.
        let e = ((n as f64 / most as f64 * (bar_w * 8) as f64).round() as usize).max(usize::from(n > 0));
        let mut bar = "█".repeat(e / 8);
        if e % 8 > 0 {
            bar.push(HBLOCKS[e % 8]);
        }
        let label = format!("<{}", fmt_us(upper));
        out.push(format!("  {label:>BUCKET_LABEL$} {n:>count_w$} {bar}"));
    }
}

/// One frame on stdout. On a terminal the screen is cleared first so frames replace
/// each other; piped, frames follow one another as plain text.
pub fn print(prev: &Metrics, now: &Metrics) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let tty = out.is_terminal();
    if tty {
        write!(out, "\x1b[H\x1b[2J")?;
    }
    for line in render(prev, now, width(tty)) {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// COLUMNS when set, else the terminal's width (shells rarely export COLUMNS),
/// else 80. Asked every frame, so a resized window is followed.
fn width(tty: bool) -> usize {
    if let Some(w) = std::env::var("COLUMNS").ok().and_then(|s| s.trim().parse().ok()).filter(|&w: &usize| w > 0) {
        return w;
    }
    if tty {
        // SAFETY: winsize is plain integers; TIOCGWINSZ fills the one it is given.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            return ws.ws_col as usize;
        }
    }
    80
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000;

    fn group(name: &str, quota_us: u64, burst_us: u64, history_ms: &[u64]) -> GroupMetrics {
        GroupMetrics {
            cgroup: name.into(),
            state: "enforced".into(),
            source: "config".into(),
            quota_us,
            period_us: 100 * MS,
            burst_us,
            history_usec: history_ms.iter().map(|ms| ms * MS).collect(),
            ..Default::default()
        }
    }

    fn frame(before: Vec<GroupMetrics>, after: Vec<GroupMetrics>, width: usize) -> Vec<String> {
        let prev = Metrics { at_us: 1_000_000, groups: before, ..Default::default() };
        let now = Metrics { at_us: 3_000_000, groups: after, ..Default::default() };
        render(&prev, &now, width)
    }

    /// A label read back: "12.5ms" -> 12500.
    fn parse_us(s: &str) -> u64 {
        let s = s.trim().trim_start_matches('<');
        let (v, scale) = if let Some(v) = s.strip_suffix("µs") {
            (v, 1.0)
        } else if let Some(v) = s.strip_suffix("ms") {
            (v, 1e3)
        } else {
            (s.strip_suffix('s').unwrap_or_else(|| panic!("no unit in {s:?}")), 1e6)
        };
        (v.parse::<f64>().unwrap() * scale).round() as u64
    }

    /// The first usage chart of a frame, read back: rows bottom first, the x axis,
    /// and where its first column is.
    struct Chart {
        rows: Vec<Vec<char>>,
        axis: Vec<char>,
        x0: usize,
    }

    impl Chart {
        fn of(lines: &[String]) -> Chart {
            let a = lines.iter().position(|l| l.contains('└')).expect("no x axis");
            let axis: Vec<char> = lines[a].chars().collect();
            let x0 = axis.iter().position(|&c| c == '└').unwrap() + 1;
            let rows = lines[a - CHART_ROWS..a].iter().rev().map(|l| l.chars().collect()).collect();
            Chart { rows, axis, x0 }
        }
        fn cell(&self, row: usize, col: usize) -> char {
            self.rows[row].get(self.x0 + col).copied().unwrap_or(' ')
        }
        /// Blocks in a column, in eighths of a cell.
        fn height(&self, col: usize) -> usize {
            (0..CHART_ROWS).map(|r| VBLOCKS.iter().position(|&b| b == self.cell(r, col)).unwrap_or(0)).sum()
        }
        fn label(&self, row: usize) -> String {
            self.rows[row][..self.x0 - 2].iter().collect::<String>().trim().to_string()
        }
        fn row_named(&self, name: &str) -> usize {
            let tail: Vec<char> = format!(" {name}").chars().collect();
            self.rows.iter().position(|r| r.ends_with(&tail)).unwrap_or_else(|| panic!("no {name} row"))
        }
        /// The scale: the top row's label is the value at the chart's top edge.
        fn top_us(&self) -> f64 {
            parse_us(&self.label(CHART_ROWS - 1)) as f64
        }
    }

    #[test]
    fn columns_are_as_high_as_the_periods_used() {
        let history = [50, 100, 0, 25];
        let lines = frame(vec![], vec![group("web", 50 * MS, 0, &history)], 80);
        let c = Chart::of(&lines);
        let top = c.top_us();
        assert!(top >= 100_000.0, "the scale must reach the peak: {top}\n{}", lines.join("\n"));
        for (col, ms) in history.iter().enumerate() {
            let want = (ms * MS) as f64 / top * (CHART_ROWS * 8) as f64;
            let got = c.height(col) as f64;
            assert!((got - want).abs() < 8.0, "column {col} ({ms} ms): {got} eighths, want {want}\n{}", lines.join("\n"));
        }
        // Proportional to each other too: 50 ms is half of 100 ms, 25 ms a quarter.
        assert!((2 * c.height(0)).abs_diff(c.height(1)) <= 8 && (4 * c.height(3)).abs_diff(c.height(1)) <= 8);
        assert_eq!(c.height(2), 0);
    }

    #[test]
    fn quota_line_is_at_quota() {
        let lines = frame(vec![], vec![group("web", 50 * MS, 0, &[50, 100, 0, 25])], 80);
        let c = Chart::of(&lines);
        let q = c.row_named("quota");
        assert_eq!(parse_us(&c.label(q)), 50 * MS);
        // Its top edge is quota on the scale ...
        let edge = (q + 1) as f64 * c.top_us() / CHART_ROWS as f64;
        assert!((edge - 50_000.0).abs() < 1.0, "quota row's edge at {edge} µs\n{}", lines.join("\n"));
        // ... so the period at exactly quota ends in that row, full, and the empty period shows the line.
        assert_eq!((c.cell(q, 0), c.cell(q + 1, 0)), ('█', ' '), "{}", lines.join("\n"));
        assert_eq!(c.cell(q, 2), LIMIT_LINE);
    }

    #[test]
    fn periods_over_quota_are_marked() {
        let lines = frame(vec![], vec![group("web", 50 * MS, 0, &[50, 100, 0, 25, 51])], 80);
        let c = Chart::of(&lines);
        let marks: String = (0..5).map(|col| c.axis[c.x0 + col]).collect();
        assert_eq!(marks, format!("─{OVER_QUOTA}──{OVER_QUOTA}"));
        assert!(c.axis.iter().collect::<String>().ends_with(" 5 periods of 100ms (oldest left), ▲ 2 over quota"));
    }

    #[test]
    fn burst_line_is_at_quota_plus_burst() {
        let lines = frame(vec![], vec![group("batch", 40 * MS, 20 * MS, &[60, 40, 10, 55, 30])], 80);
        let c = Chart::of(&lines);
        let (q, b) = (c.row_named("quota"), c.row_named("quota+burst"));
        assert!(b > q, "{}", lines.join("\n"));
        assert_eq!(parse_us(&c.label(b)), 60 * MS);
        // (The scale from quota's edge: the top row's label is quota + burst here.)
        let cell = 40_000.0 / (q + 1) as f64;
        let edge = (b + 1) as f64 * cell;
        assert!((edge - 60_000.0).abs() <= cell, "quota+burst row's edge at {edge} µs\n{}", lines.join("\n"));
        // The 60 ms period reaches the burst row, the 40 ms one stops at quota.
        assert_ne!(c.cell(b, 0), ' ');
        assert_eq!(c.cell(q + 1, 1), ' ');
    }

    #[test]
    fn periods_beyond_the_scale_are_marked() {
        // 1 ms quota, a 100 ms period (a late refill's several periods): the scale
        // keeps quota one row high and the tall column is cut, with a mark.
        let lines = frame(vec![], vec![group("x", MS, 0, &[100, 1])], 80);
        let c = Chart::of(&lines);
        assert_eq!(c.cell(CHART_ROWS - 1, 0), CLIPPED, "{}", lines.join("\n"));
        assert_eq!(c.height(1), 8);
    }

    fn hist(counts: &[(usize, u64)]) -> Vec<u64> {
        let mut h = vec![0; 96];
        for &(b, n) in counts {
            h[b] = n;
        }
        h
    }

    /// The histogram rows of a frame: (label, count, bar length in eighths).
    fn bars(lines: &[String]) -> Vec<(String, u64, usize)> {
        let start = lines.iter().position(|l| l.contains("throttle waits:")).unwrap() + 1;
        lines[start..]
            .iter()
            .take_while(|l| l.trim_start().starts_with('<'))
            .map(|l| {
                let mut f = l.split_whitespace();
                let (label, n) = (f.next().unwrap().to_string(), f.next().unwrap().parse().unwrap());
                let bar: usize = l.chars().map(|ch| HBLOCKS.iter().position(|&b| b == ch).unwrap_or(0)).sum();
                (label, n, bar)
            })
            .collect()
    }

    #[test]
    fn wait_bars_follow_the_interval_counts() {
        // Since start: waits before the interval (1000 below 1.28 ms, 10 near 0.5 s)
        // that the interval's bars must leave out.
        let before = GroupMetrics { wait_hist: hist(&[(40, 1000), (60, 10)]), ..group("web", 50 * MS, 0, &[]) };
        let after = GroupMetrics {
            wait_hist: hist(&[(40, 1050), (41, 25), (43, 100), (60, 10)]),
            wait_p50_us: bucket_upper_us(40),
            wait_p99_us: 40 * MS,
            wait_max_us: 45 * MS,
            ..group("web", 50 * MS, 0, &[])
        };
        let interval = hist(&[(40, 50), (41, 25), (43, 100)]);
        let width = 120;
        let lines = frame(vec![before], vec![after], width);
        let rows = bars(&lines);
        let want = [(40, 50), (41, 25), (42, 0), (43, 100)];
        assert_eq!(rows.len(), want.len(), "{}", lines.join("\n"));
        assert_eq!((rows[0].0.as_str(), rows[3].0.as_str()), ("<1.28ms", "<2.05ms"));
        let longest = rows.iter().map(|r| r.2).max().unwrap();
        for ((label, n, bar), (b, count)) in rows.iter().zip(want) {
            assert_eq!(label, &format!("<{}", fmt_us(bucket_upper_us(b))));
            assert_eq!(*n, count);
            assert!((bar * 100).abs_diff(longest * count as usize) <= 8 * 100, "{label}: {bar} of {longest}\n{}", lines.join("\n"));
        }
        // The longest bar takes the width that is left.
        assert!(lines.iter().any(|l| l.chars().count() == width && l.ends_with('█')), "{}", lines.join("\n"));
        let head = lines.iter().find(|l| l.contains("throttle waits:")).unwrap();
        let (now, since) = head.split_once(" (since start").unwrap();
        assert!(now.contains("175 in 2.0s"), "{head}");
        assert!(now.ends_with(&format!("p50 {} p99 {}", fmt_us(hist_percentile(&interval, 0.5)), fmt_us(hist_percentile(&interval, 0.99)))), "{head}");
        // (The interval's median is not the one since start: the counts were differenced.)
        assert_eq!(fmt_us(hist_percentile(&interval, 0.5)), "2.05ms");
        assert!(since.contains("p50 1.28ms p99 40ms max 45ms"), "{head}");
    }

    #[test]
    fn wide_wait_ranges_are_grouped() {
        // Buckets 10..=70: 61 buckets, 8 powers of two (buckets 8..72) as 8 rows of 8 buckets.
        let counts: Vec<(usize, u64)> = (10..=70).step_by(3).map(|b| (b, b as u64)).collect();
        let h = hist(&counts);
        let g = GroupMetrics { wait_hist: h.clone(), ..group("web", 50 * MS, 0, &[]) };
        let rows = bars(&frame(vec![], vec![g], 80));
        assert_eq!(rows.len(), 8, "{rows:?}");
        for (i, (label, n, _)) in rows.iter().enumerate() {
            let first = 8 + 8 * i;
            assert_eq!(*n, h[first..first + 8].iter().sum::<u64>(), "{label}");
            // Each row ends at a power of two: bucket 4k+3 ends at 2^(k+1) µs.
            assert_eq!(bucket_upper_us(first + 7), 1 << (first / 4 + 2));
            assert_eq!(label, &format!("<{}", fmt_us(1 << (first / 4 + 2))));
        }
        assert_eq!(rows[1].0, "<64µs");
        // Below 4 µs the buckets are one per µs and 4..8 are never used: no row for them.
        let g = GroupMetrics { wait_hist: hist(&[(1, 1), (9, 2)]), ..group("web", 50 * MS, 0, &[]) };
        let labels: Vec<String> = bars(&frame(vec![], vec![g], 80)).into_iter().map(|r| r.0).collect();
        assert_eq!(labels, ["<2µs", "<3µs", "<4µs", "<5µs", "<6µs"]);
    }

    #[test]
    fn header_gives_the_limit_and_the_interval() {
        let before = GroupMetrics { nr_periods: 10, nr_throttled: 5, usage_usec: 1_000_000, ..group("a/b", 50 * MS, 0, &[]) };
        let after = GroupMetrics {
            nr_periods: 30,
            nr_throttled: 8,
            usage_usec: 1_900_000,
            source: "rule pods".into(),
            ..group("a/b", 50 * MS, 20 * MS, &[])
        };
        let lines = frame(vec![before], vec![after], 100);
        assert!(lines.contains(&"a/b [rule pods] 50ms/100ms+20ms  throttled 3/20 periods  0.45 CPUs".to_string()), "{}", lines.join("\n"));
    }

    #[test]
    fn most_throttled_groups_first_and_the_rest_counted() {
        let n = GROUPS + 2;
        let after: Vec<GroupMetrics> =
            (0..n).map(|i| GroupMetrics { throttled_usec: i as u64, ..group(&format!("g{i}"), 50 * MS, 0, &[]) }).collect();
        let lines = frame(vec![], after, 80);
        let heads: Vec<&String> = lines.iter().filter(|l| l.starts_with('g')).collect();
        assert_eq!(heads.len(), GROUPS);
        assert!(heads[0].starts_with(&format!("g{} ", n - 1)));
        assert!(lines.last().unwrap().starts_with("… 2 more group(s)"));
    }

    #[test]
    fn lines_fit_the_width() {
        let name = "kubepods.slice/".repeat(12) + "the-workload";
        let g = GroupMetrics {
            source: "rule a-rather-long-rule-name".into(),
            wait_hist: hist(&[(12, 123_456_789), (80, 1)]),
            wait_p50_us: 10,
            wait_p99_us: 16_000_000,
            wait_max_us: 16_000_000,
            ..group(&name, 50 * MS, 50 * MS, &(0..32).map(|i| i * 5).collect::<Vec<_>>())
        };
        for width in [1, 24, 40, 60, 80, 132] {
            let lines = frame(vec![], vec![g.clone()], width);
            for l in &lines {
                assert!(l.chars().count() <= width, "width {width}: {l:?}");
            }
            if width >= 80 {
                // Wide enough: every period is drawn, and the cgroup keeps its tail.
                assert!(lines.iter().any(|l| l.contains(" 32 periods of 100ms")), "{}", lines.join("\n"));
                assert!(lines[2].starts_with('…') && lines[2].contains("workload [rule"), "{}", lines.join("\n"));
            }
            if width >= 132 {
                assert!(lines[2].contains("/the-workload [rule") && lines[2].ends_with("0.00 CPUs"), "{}", lines.join("\n"));
            }
        }
        // Narrow: the newest periods that fit are drawn, the newest last.
        let width = 30;
        let cols = width - Y_LABEL - 2;
        let lines = frame(vec![], vec![g], width);
        let c = Chart::of(&lines);
        for col in [0, cols - 1] {
            let us = ((32 - cols + col) * 5) as f64 * 1000.0;
            let want = us / c.top_us() * (CHART_ROWS * 8) as f64;
            assert!((c.height(col) as f64 - want).abs() <= 8.0, "column {col}: {}\n{}", c.height(col), lines.join("\n"));
        }
    }

    #[test]
    fn nothing_to_draw_says_so() {
        let lines = frame(vec![], vec![], 80);
        assert_eq!(lines, vec!["--- scx_bandwidth 2.0s: 0 limited group(s), most throttled first ---"]);
        let absent = GroupMetrics { state: "absent".into(), ..group("gone", 50 * MS, 0, &[]) };
        let lines = frame(vec![], vec![absent], 80);
        assert!(lines[2].ends_with("(absent)"), "{}", lines.join("\n"));
        assert!(lines[3].contains("no period recorded yet"), "{}", lines.join("\n"));
        assert_eq!(lines[4], "  throttle waits: none in 2.0s");
        // All periods idle at zero: a flat chart under the quota line, no panic on the scale.
        let c = Chart::of(&frame(vec![], vec![group("idle", 50 * MS, 0, &[0, 0])], 80));
        assert_eq!((c.height(0), c.height(1)), (0, 0));
    }

    #[test]
    fn durations_read_short() {
        let cases = [(0, "0µs"), (999, "999µs"), (1280, "1.28ms"), (12_500, "12.5ms"), (100_000, "100ms"), (2_000_000, "2s"), (16_777_216, "16.8s")];
        for (us, s) in cases {
            assert_eq!(fmt_us(us), s);
        }
    }
}
