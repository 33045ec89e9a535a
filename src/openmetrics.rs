//! The statistics as Prometheus text (exposition format 0.0.4, which Prometheus,
//! node_exporter's textfile collector and `promtool check metrics` read), served over
//! HTTP by `--metrics-addr`, or written to a file by `--metrics-textfile` for
//! node_exporter's textfile collector.
//!
//! Under sched_ext the kernel's `cpu.stat` throttling counters stay 0, so cAdvisor's
//! `container_cpu_cfs_*` series and the alerts built on them (kube-prometheus'
//! CPUThrottlingHigh) see nothing. The per-cgroup series here carry the same counts
//! under the same meaning: `scx_bandwidth_cgroup_periods_total`,
//! `..._throttled_periods_total` and `..._throttled_seconds_total`, labelled with the
//! cgroup path and, where the path shows them, the Kubernetes pod UID and container id.
//!
//! The endpoint's thread asks the agent's own stats socket for a snapshot per scrape, as
//! `--monitor` does, so a scrape costs what a `--monitor` interval costs and the run loop
//! stays the only owner of the scheduler's state.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use log::{info, warn};

use crate::stats::{bucket_upper_us, GroupMetrics, Metrics};

/// Prefix of every metric name.
const NS: &str = "scx_bandwidth";

/// The pod UID and container id a cgroup path shows, for both of the kubelet's cgroup
/// drivers: systemd (`kubepods-burstable-pod<uid with _>.slice`,
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`) and cgroupfs
/// (`pod<uid>`, `<id>`). A container id is 12 to 64 hex digits.
pub fn kube_ids(path: &str) -> (Option<String>, Option<String>) {
    let mut pod = None;
    let mut container = None;
    for comp in path.split('/') {
        if let Some(s) = comp.strip_suffix(".slice") {
            if let Some(i) = s.rfind("-pod") {
                pod = uid(&s[i + 4..].replace('_', "-"));
            }
        } else if let Some(s) = comp.strip_prefix("pod") {
            pod = uid(s).or(pod);
        } else {
            let s = comp.strip_suffix(".scope").unwrap_or(comp);
            let id = ["cri-containerd-", "crio-", "docker-", "libpod-"]
                .iter()
                .find_map(|p| s.strip_prefix(p))
                .unwrap_or(s);
            if (12..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                container = Some(id.to_ascii_lowercase());
            }
        }
    }
    (pod, container)
}

/// `s` if it has the shape of a UUID (8-4-4-4-12 hex digits).
fn uid(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    (parts.len() == 5
        && parts.iter().zip(shape).all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit())))
    .then(|| s.to_ascii_lowercase())
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n")
}

/// The label set of a group's series: `cgroup`, and `pod_uid` / `container_id` when the
/// path shows them.
fn group_labels(g: &GroupMetrics) -> String {
    let mut l = format!("cgroup=\"{}\"", escape(&g.cgroup));
    let (pod, container) = kube_ids(&g.cgroup);
    if let Some(p) = pod {
        let _ = write!(l, ",pod_uid=\"{p}\"");
    }
    if let Some(c) = container {
        let _ = write!(l, ",container_id=\"{c}\"");
    }
    l
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {NS}_{name} {help}");
        let _ = writeln!(self.0, "# TYPE {NS}_{name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &str, v: f64) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{NS}_{name} {v}");
        } else {
            let _ = writeln!(self.0, "{NS}_{name}{{{labels}}} {v}");
        }
    }
}

const US: f64 = 1e6;

/// The throttle-wait histogram's bucket bounds (µs): powers of 4 from 4 µs to 67 s, the same
/// in every scrape (rate() and histogram_quantile() need a fixed set), each the bound of a
/// bucket of the BPF side's finer histogram.
const WAIT_LE_US: [u64; 13] = [4, 16, 64, 256, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26];

/// The Prometheus text of a snapshot. Counters end in `_total`; times are in seconds.
pub fn render(m: &Metrics) -> String {
    let mut o = Out(String::new());
    let groups: Vec<(&GroupMetrics, String)> = m.groups.iter().map(|g| (g, group_labels(g))).collect();
    type Field = fn(&GroupMetrics) -> f64;
    let per_group: [(&str, &str, &str, Field); 12] = [
        ("cgroup_usage_seconds_total", "counter", "CPU time used by the cgroup and its descendants", |g| g.usage_usec as f64 / US),
        ("cgroup_periods_total", "counter", "Periods elapsed while the cgroup was active (cpu.stat nr_periods)", |g| g.nr_periods as f64),
        ("cgroup_throttled_periods_total", "counter", "Periods that ended with the cgroup throttled (cpu.stat nr_throttled)", |g| g.nr_throttled as f64),
        ("cgroup_throttled_seconds_total", "counter", "Sum over CPUs of the time each was throttled (cpu.stat throttled_usec)", |g| g.throttled_usec as f64 / US),
        ("cgroup_parked_tasks_total", "counter", "Tasks parked because the cgroup was throttled", |g| g.nr_parked as f64),
        ("cgroup_slack_returned_seconds_total", "counter", "Local runtime CPUs returned to the cgroup's pool", |g| g.slack_returned_usec as f64 / US),
        ("cgroup_throttled_discard_seconds_total", "counter", "Quota a refill discarded at the cap while the cgroup was throttled", |g| g.throttled_discard_usec as f64 / US),
        ("cgroup_quota_seconds", "gauge", "Quota per period", |g| g.quota_us as f64 / US),
        ("cgroup_period_seconds", "gauge", "Period", |g| g.period_us as f64 / US),
        ("cgroup_burst_limit_seconds", "gauge", "Burst: unused quota that may accumulate", |g| g.burst_us as f64 / US),
        ("cgroup_limit_cpus", "gauge", "Quota over period: the limit in CPUs", |g| g.quota_us as f64 / (g.period_us.max(1) as f64)),
        ("cgroup_pool_seconds", "gauge", "Runtime left in the pool now (below 0: a short-period group's overdraft)", |g| g.pool_usec as f64 / US),
    ];
    for (name, kind, help, f) in per_group {
        o.head(name, kind, help);
        for (g, l) in &groups {
            o.sample(name, l, f(g));
        }
    }
    // (name, help, kind="pool", kind="used")
    let by_kind: [(&str, &str, Field, Field); 2] = [
        ("cgroup_bursts_total", "Periods that went above quota: kind=pool counts pool consumption (cpu.stat nr_bursts), kind=used CPU time used",
         |g| g.nr_bursts as f64, |g| g.used_nr_bursts as f64),
        ("cgroup_burst_seconds_total", "Time above quota in those periods, by the same two kinds (cpu.stat burst_usec for kind=pool)",
         |g| g.burst_usec as f64 / US, |g| g.used_burst_usec as f64 / US),
    ];
    for (name, help, pool, used) in by_kind {
        o.head(name, "counter", help);
        for (g, l) in &groups {
            o.sample(name, &format!("{l},kind=\"pool\""), pool(g));
            o.sample(name, &format!("{l},kind=\"used\""), used(g));
        }
    }
    let wait = "cgroup_throttle_wait_seconds";
    o.head(wait, "histogram", "Throttle wait of the cgroup's tasks: parked to running again");
    for (g, l) in &groups {
        for le in WAIT_LE_US {
            // The fine buckets (four per power of two) whose bounds are within `le`: a wait
            // of exactly a bound counts in the bucket above it, a difference under a µs.
            let n: u64 = g.wait_hist.iter().enumerate().filter(|(b, _)| bucket_upper_us(*b) <= le).map(|(_, n)| n).sum();
            o.sample(&format!("{wait}_bucket"), &format!("{l},le=\"{}\"", le as f64 / US), n as f64);
        }
        let count: u64 = g.wait_hist.iter().sum();
        o.sample(&format!("{wait}_bucket"), &format!("{l},le=\"+Inf\""), count as f64);
        o.sample(&format!("{wait}_sum"), l, g.wait_sum_us as f64 / US);
        o.sample(&format!("{wait}_count"), l, count as f64);
    }
    type Global = fn(&Metrics) -> f64;
    let global: [(&str, &str, &str, Global); 10] = [
        ("limited_cgroups", "gauge", "Limited cgroups enforced now", |m| m.active_groups as f64),
        ("idle_cgroups", "gauge", "Of those, cgroups idle for a period with a full pool", |m| m.idle_groups as f64),
        ("llc_queues", "gauge", "LLC queues the scheduling core uses", |m| m.llc_queues as f64),
        ("throttles_total", "counter", "CPU-level throttle events", |m| m.throttle as f64),
        ("rescued_tasks_total", "counter", "Parked tasks that had waited 5 s and ran once on credit", |m| m.rescued as f64),
        ("safety_refills_total", "counter", "Refills the BPF safety net did while the agent was stalled", |m| m.safety_refills as f64),
        ("events_lost_total", "counter", "Events lost because the ring to the agent was full", |m| m.event_lost as f64),
        ("agent_cpu_seconds_total", "counter", "CPU time of the agent process", |m| m.agent_process_cpu_usec as f64 / US),
        ("agent_wakeups_total", "counter", "Times the agent's run loop woke", |m| m.agent_wakeups as f64),
        ("agent_timer_late_p99_seconds", "gauge", "Agent period-timer lateness, 99th percentile of the last 1024 refills", |m| m.timer_late_p99_us as f64 / US),
    ];
    for (name, kind, help, f) in global {
        o.head(name, kind, help);
        o.sample(name, "", f(m));
    }
    o.0
}

/// `--metrics-addr`: bind now (a bad or taken address is an error before anything is
/// attached) and serve on a thread of its own; it starts before the agent turns
/// SCHED_FIFO and stays SCHED_OTHER.
pub fn serve(addr: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}: cannot listen there"))?;
    info!("Prometheus metrics on http://{addr}/metrics");
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => {
                        if let Err(e) = answer(s, &snapshot) {
                            warn!("metrics request: {e:#}");
                        }
                    }
                    Err(e) => warn!("metrics: accept: {e}"),
                }
            }
        })
        .context("spawning the metrics thread")?;
    Ok(())
}

/// One HTTP/1.0-style exchange: GET /metrics (or /) gets the text, anything else an error
/// status; the connection is closed after it.
fn answer(mut s: TcpStream, snapshot: &dyn Fn() -> Result<Metrics>) -> Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(req.split(|&b| b == b'\n').next().unwrap_or_default()).to_string();
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET", "/metrics" | "/") => match snapshot() {
            Ok(m) => ("200 OK", render(&m)),
            Err(e) => ("503 Service Unavailable", format!("statistics unavailable: {e:#}\n")),
        },
        ("GET", _) => ("404 Not Found", "only /metrics is served\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET is served\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    Ok(())
}

/// How often `--metrics-textfile` is rewritten. node_exporter reads the file at each of
/// its scrapes (Prometheus' default interval is 15 s), so what it serves is at most this
/// old; counters stay exact, only their time stamps lag.
pub const TEXTFILE_EVERY: Duration = Duration::from_secs(5);

/// Where the text is written before it replaces the file: beside it (a rename within
/// one directory is atomic, so a reader never sees half a file), under a name the
/// collector skips (it reads `*.prom` only).
fn textfile_tmp(path: &Path) -> PathBuf {
    let mut t = path.as_os_str().to_owned();
    t.push(".tmp");
    PathBuf::from(t)
}

/// Replace `path` with `text` atomically (mode 0644: node_exporter need not run as root).
pub fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = textfile_tmp(path);
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// `--metrics-textfile`, checked before anything is attached: its directory must exist
/// and take a file from us (the temporary one is created and removed).
pub fn check_textfile(path: &Path) -> Result<()> {
    let tmp = textfile_tmp(path);
    if path.is_dir() {
        anyhow::bail!("--metrics-textfile {}: is a directory; give a file name (node_exporter reads *.prom)", path.display());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .with_context(|| format!("--metrics-textfile {}: cannot write {}", path.display(), tmp.display()))?;
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// Rewrite `path` every [`TEXTFILE_EVERY`] from a thread of its own (started before the
/// agent turns SCHED_FIFO, so it stays SCHED_OTHER). Until the scheduler answers the file
/// is not written; a failed write is logged and tried again.
pub fn textfile(path: PathBuf) -> Result<()> {
    info!("Prometheus metrics written to {} every {} s", path.display(), TEXTFILE_EVERY.as_secs());
    std::thread::Builder::new()
        .name("metrics-file".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                if let Ok(m) = snapshot() {
                    match write_textfile(&path, &render(&m)) {
                        Ok(()) => failing = false,
                        Err(e) if !failing => {
                            warn!("--metrics-textfile {}: {e}", path.display());
                            failing = true;
                        }
                        Err(_) => {}
                    }
                }
                std::thread::sleep(TEXTFILE_EVERY);
            }
        })
        .context("spawning the metrics file thread")?;
    Ok(())
}

/// A snapshot from the agent's stats socket (the same request `--monitor` makes).
fn snapshot() -> Result<Metrics> {
    scx_stats::prelude::StatsClient::new()
        .connect(Some(2000))
        .context("connecting to the stats socket")?
        .request::<Metrics>("stats", vec![])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textfile_is_replaced_whole_and_checked() {
        let dir = std::env::temp_dir().join(format!("scxbw-om-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("scx_bandwidth.prom");
        check_textfile(&f).unwrap();
        assert!(!f.exists() && !textfile_tmp(&f).exists(), "the check leaves nothing behind");
        write_textfile(&f, "a 1\n").unwrap();
        write_textfile(&f, "b 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "b 2\n");
        assert!(!textfile_tmp(&f).exists());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o644);
        let e = check_textfile(&dir.join("missing/x.prom")).unwrap_err();
        assert!(format!("{e:#}").contains("missing/x.prom: cannot write"), "{e:#}");
        assert!(format!("{:#}", check_textfile(&dir).unwrap_err()).contains("is a directory"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_from_both_cgroup_drivers() {
        let sd = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f3a2c1e_7b4d_4e5f_9a8b_1c2d3e4f5a6b.slice/cri-containerd-4c5f0a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b.scope";
        let (pod, c) = kube_ids(sd);
        assert_eq!(pod.as_deref(), Some("0f3a2c1e-7b4d-4e5f-9a8b-1c2d3e4f5a6b"));
        assert_eq!(c.as_deref(), Some("4c5f0a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b"));
        let guaranteed = "kubepods.slice/kubepods-pod0f3a2c1e_7b4d_4e5f_9a8b_1c2d3e4f5a6b.slice";
        assert_eq!(kube_ids(guaranteed), (Some("0f3a2c1e-7b4d-4e5f-9a8b-1c2d3e4f5a6b".into()), None));
        let cgfs = "kubepods/besteffort/pod0f3a2c1e-7b4d-4e5f-9a8b-1c2d3e4f5a6b/4c5f0a9b8e7d";
        assert_eq!(kube_ids(cgfs), (Some("0f3a2c1e-7b4d-4e5f-9a8b-1c2d3e4f5a6b".into()), Some("4c5f0a9b8e7d".into())));
        assert_eq!(kube_ids("system.slice/nginx.service"), (None, None));
        // Not ids: a short hex name, a podcast, a uid of the wrong shape.
        assert_eq!(kube_ids("t/abc123/podcast/pod1234"), (None, None));
    }

    fn group(cgroup: &str) -> GroupMetrics {
        GroupMetrics {
            cgroup: cgroup.into(),
            quota_us: 50_000,
            period_us: 100_000,
            usage_usec: 2_500_000,
            nr_periods: 40,
            nr_throttled: 10,
            throttled_usec: 750_000,
            nr_bursts: 3,
            used_nr_bursts: 2,
            wait_hist: vec![0, 2, 0, 0, 0, 0, 0, 0, 0, 5],
            wait_sum_us: 42,
            ..Default::default()
        }
    }

    /// The value of the one sample whose line starts with `series` (name and labels).
    fn value(text: &str, series: &str) -> f64 {
        let hits: Vec<&str> = text.lines().filter(|l| l.starts_with(series) && l[series.len()..].starts_with(' ')).collect();
        assert_eq!(hits.len(), 1, "{series} in\n{text}");
        hits[0][series.len() + 1..].parse().unwrap()
    }

    #[test]
    fn counters_histogram_and_labels() {
        let m = Metrics { active_groups: 2, groups: vec![group("t/a"), group("t/q\"x")], ..Default::default() };
        let t = render(&m);
        let l = "cgroup=\"t/a\"";
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_throttled_periods_total{{{l}}}")), 10.0);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_periods_total{{{l}}}")), 40.0);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_throttled_seconds_total{{{l}}}")), 0.75);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_usage_seconds_total{{{l}}}")), 2.5);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_limit_cpus{{{l}}}")), 0.5);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_bursts_total{{{l},kind=\"pool\"}}")), 3.0);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_bursts_total{{{l},kind=\"used\"}}")), 2.0);
        // Cumulative buckets at fixed bounds: bucket 1 (below 2 µs) in le=4 µs, bucket 9
        // (below 6 µs) from le=16 µs on; +Inf, sum, count.
        let b = |le: &str| value(&t, &format!("scx_bandwidth_cgroup_throttle_wait_seconds_bucket{{{l},le=\"{le}\"}}"));
        assert_eq!(bucket_upper_us(9), 6);
        assert_eq!(b("0.000004"), 2.0);
        assert_eq!(b("0.000016"), 7.0);
        assert_eq!(b("67.108864"), 7.0);
        assert_eq!(b("+Inf"), 7.0);
        let buckets = t.lines().filter(|x| x.starts_with(&format!("scx_bandwidth_cgroup_throttle_wait_seconds_bucket{{{l},"))).count();
        assert_eq!(buckets, WAIT_LE_US.len() + 1);
        // Each bound is that of a fine bucket, so no wait is split across one.
        assert!(WAIT_LE_US.iter().all(|&le| (0..200).any(|b| bucket_upper_us(b) == le)));
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_throttle_wait_seconds_count{{{l}}}")), 7.0);
        assert_eq!(value(&t, &format!("scx_bandwidth_cgroup_throttle_wait_seconds_sum{{{l}}}")), 42e-6);
        assert_eq!(value(&t, "scx_bandwidth_limited_cgroups"), 2.0);
        // The quote in the second path is escaped.
        assert!(t.contains("cgroup=\"t/q\\\"x\""));
        // Every family has HELP and TYPE once, before its samples.
        let types: Vec<&str> = t.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert_eq!(t.lines().filter(|l| l.starts_with("# HELP ")).count(), n);
    }

    #[test]
    fn serves_get_and_refuses_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let down = || -> Result<Metrics> { anyhow::bail!("no agent") };
            let up = || -> Result<Metrics> { Ok(Metrics { groups: vec![group("t/a")], ..Default::default() }) };
            for i in 0..4 {
                let (s, _) = listener.accept().unwrap();
                answer(s, if i == 0 { &down } else { &up }).unwrap();
            }
        });
        let ask = |req: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        // Without an agent /metrics answers 503 with the reason, not a hang or an empty 200.
        let down = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(down.starts_with("HTTP/1.1 503 ") && down.ends_with("no agent\n"), "{down}");
        let up = ask("GET /metrics?x=1 HTTP/1.1\r\n\r\n");
        let (head, body) = up.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 ") && head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
        assert_eq!(value(body, "scx_bandwidth_cgroup_throttled_periods_total{cgroup=\"t/a\"}"), 10.0);
        assert!(ask("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(ask("POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        server.join().unwrap();
    }
}
