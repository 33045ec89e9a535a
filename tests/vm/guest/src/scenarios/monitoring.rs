//! Monitoring: what operators and tools see. `scx_bandwidth --monitor` run from a second
//! process agrees with cgroupfs, the stats socket's JSON carries every field its metadata
//! describes, and the socket is root-only unless --stats-group opens it to one group. The
//! statistics are how anyone tells that a limit holds, and the socket's permissions decide
//! who may read every cgroup's figures. `--metrics-addr` serves the same figures to
//! Prometheus.

use super::{custom, hog, lim, Scenario};
use crate::runner::Ctx;
use std::thread::sleep;
use std::time::Duration;

/// One stats request from a child process running as `uid`:`gid` (no other groups).
fn fetch_as(uid: u32, gid: u32) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg("stats-fetch")
        .uid(uid)
        .gid(gid)
        .output()
        .map_err(|e| format!("run stats-fetch as {uid}:{gid}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() && text.contains("STATS groups=1") {
        Ok(())
    } else {
        Err(text.trim().to_string())
    }
}

/// Who may read the statistics. Default: the socket is 0600 root, a process running as
/// nobody:nogroup is refused and root is served. With `--stats-group 4242`: 0660 root:4242,
/// its directory 0750 root:4242; nobody with gid 4242 is served (the JSON has the group),
/// nobody with any other gid is still refused.
fn stats_access(ctx: &mut Ctx) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const NOBODY: u32 = 65534;
    let sock = std::path::Path::new(crate::stats::SOCKET);
    let mode = |p: &std::path::Path| -> Result<(u32, u32, u32), String> {
        let m = std::fs::metadata(p).map_err(|e| format!("stat {}: {e}", p.display()))?;
        Ok((m.permissions().mode() & 0o777, m.uid(), m.gid()))
    };
    let check = |ctx: &mut Ctx, label: &str, uid: u32, gid: u32, allowed: bool| {
        let r = fetch_as(uid, gid);
        ctx.figure(format!("{label}.{uid}:{gid}"), if r.is_ok() { "served" } else { "refused" });
        match (r, allowed) {
            (Ok(()), false) => ctx.fail(format!("{label}: {uid}:{gid} was served")),
            (Err(e), true) => ctx.fail(format!("{label}: {uid}:{gid} was refused: {e}")),
            _ => {}
        }
    };
    let (m, u, g) = mode(sock)?;
    ctx.figure("default.socket", format!("{m:o}:{u}:{g}"));
    if m & 0o077 != 0 || u != 0 {
        ctx.fail(format!("default socket mode {m:o} owner {u}: not root-only"));
    }
    check(ctx, "default", 0, 0, true);
    check(ctx, "default", NOBODY, NOBODY, false);

    ctx.stop_sched()?;
    ctx.start_sched(&["--stats-group", "4242"])?;
    let (m, u, g) = mode(sock)?;
    let (dm, _, dg) = mode(sock.parent().ok_or("socket path")?)?;
    ctx.figure("group.socket", format!("{m:o}:{u}:{g}"));
    ctx.figure("group.dir", format!("{dm:o}:{dg}"));
    if m != 0o660 || u != 0 || g != 4242 || dm != 0o750 || dg != 4242 {
        ctx.fail(format!("--stats-group 4242: socket {m:o} {u}:{g}, directory {dm:o} group {dg}"));
    }
    check(ctx, "group", NOBODY, 4242, true);
    check(ctx, "group", NOBODY, NOBODY, false);
    Ok(())
}

/// What a monitoring tool sees: `scx_bandwidth --monitor 1` started as a second process
/// prints the group; its CPU figure averaged over three intervals agrees with cgroupfs
/// usage over the same time within ±2 %. The stats socket is root-only (0600) and its JSON
/// carries every field that stats_meta describes, at the top level and per group.
fn monitor(ctx: &mut Ctx) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let w = ctx.spawn(&hog("t/a", 2), 60)?;
    ctx.check_on_scx(w);
    sleep(crate::runner::WARMUP);

    let mode = std::fs::metadata(crate::stats::SOCKET).map_err(|e| format!("{}: {e}", crate::stats::SOCKET))?.permissions().mode();
    ctx.figure("socket_mode", format!("{:o}", mode & 0o777));
    if mode & 0o777 != 0o600 {
        ctx.fail(format!("stats socket mode {:o}: want 600 (root-only, as --stats-group's help says)", mode & 0o777));
    }
    let meta = crate::stats::request("stats_meta")?;
    let m = crate::stats::fetch()?;
    let g = crate::stats::group(&m, "t/a")?;
    let mut missing = Vec::new();
    for (name, target) in [("Metrics", &m), ("GroupMetrics", g)] {
        let fields = meta[name]["fields"].as_object().ok_or(format!("stats_meta has no {name}"))?;
        for f in fields.keys() {
            if target.get(f).is_none() {
                missing.push(format!("{name}.{f}"));
            }
        }
    }
    ctx.figure("json_group_fields", g.as_object().map_or(0, |o| o.len()));
    if !missing.is_empty() {
        ctx.fail(format!("stats JSON lacks {}", missing.join(",")));
    }

    // Read the monitor's output as it comes and take cgroupfs's usage the moment each
    // table's header arrives: the monitor's rows k+1..=n then cover (almost exactly) the
    // time between the k-th and the n-th header, so both figures describe one window.
    let mut mon = std::process::Command::new(ctx.sched_bin())
        .args(["--monitor", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("start --monitor: {e}"))?;
    let stdout = mon.stdout.take().ok_or("--monitor: no stdout")?;
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        // (when the header arrived, cgroupfs usage then, the t/a row's CPUs)
        let mut tables: Vec<(u64, Result<u64, String>, Option<f64>)> = Vec::new();
        let mut text = Vec::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("--- scx_bandwidth") {
                tables.push((crate::workload::mono_ns(), crate::cgroup::read_usage_usec("t/a"), None));
            } else if let (Some(last), true) = (tables.last_mut(), line.starts_with("t/a ")) {
                last.2 = line.split_whitespace().nth(3).and_then(|v| v.parse().ok());
            }
            text.push(line);
        }
        (tables, text)
    });
    sleep(Duration::from_millis(5300));
    let _ = mon.kill();
    let _ = mon.wait();
    let (tables, text) = reader.join().map_err(|_| "--monitor reader panicked")?;
    ctx.figure("monitor_rows", tables.iter().filter(|t| t.2.is_some()).count());
    // The first table (the window opened before this process saw anything) only anchors
    // the start; the rows of the next ones are compared.
    let rows: Vec<f64> = tables.iter().skip(1).filter_map(|t| t.2).collect();
    if tables.len() < 4 || rows.len() != tables.len() - 1 {
        let head: Vec<&str> = text.iter().take(5).map(String::as_str).collect();
        return Err(format!("--monitor printed {} tables, {} rows for t/a: {}", tables.len(), rows.len(), head.join(" | ")));
    }
    let (t0, u0) = (tables[0].0, tables[0].1.clone()?);
    let (t1, u1) = (tables[tables.len() - 1].0, tables[tables.len() - 1].1.clone()?);
    let cg = (u1 - u0) as f64 * 1e3 / (t1 - t0) as f64;
    let shown = rows.iter().sum::<f64>() / rows.len() as f64;
    ctx.figure("monitor_cpus", format!("{shown:.3}"));
    ctx.figure("cgroupfs_cpus", format!("{cg:.3}"));
    ctx.figure("window_s", format!("{:.2}", (t1 - t0) as f64 / 1e9));
    if (shown / cg - 1.0).abs() > 0.01 {
        ctx.fail(format!("--monitor shows {shown:.3} CPUs, cgroupfs {cg:.3} over the same {} tables: more than 1 % apart", rows.len()));
    }
    Ok(())
}

/// Where `metrics` serves the Prometheus text.
const METRICS_ADDR: &str = "127.0.0.1:9567";
/// `--metrics-textfile`: node_exporter's textfile collector reads such a file.
const TEXTFILE: &str = "/tmp/scx_bandwidth.prom";

/// GET http://METRICS_ADDR/metrics: (status line, body).
fn scrape() -> Result<(String, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(METRICS_ADDR).map_err(|e| format!("connect {METRICS_ADDR}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| format!("read: {e}"))?;
    let (head, body) = out.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP header in {out:?}"))?;
    Ok((head.lines().next().unwrap_or("").to_string(), body.to_string()))
}

/// The value of the sample `name{labels}` in Prometheus text.
fn sample(text: &str, series: &str) -> Result<f64, String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or_else(|| format!("no sample {series}"))
}

/// What Prometheus sees: the agent started with `--metrics-addr 127.0.0.1:9567` serves the
/// statistics as Prometheus text while a 2-thread hog is held to 3 ms / 10 ms. Each counter
/// of the group (periods, throttled periods, throttled time, usage, the throttle-wait
/// histogram's count) lies between the stats socket's JSON read just before and just after
/// the scrape; the usage rate between two scrapes 3 s apart agrees with cgroupfs over the
/// same time within ±2 % and the throttled-periods rate with the periods the limit
/// throttled (at least 90 % of the periods). The kernel's own cpu.stat nr_throttled stays 0
/// under sched_ext, which is why the series exist. A second instance asking for the same
/// address exits 2 naming it, before attaching. `--metrics-textfile` is rewritten within
/// 7 s with counters between the JSON before and after. The scrape is printed (`OPENMETRICS| `
/// lines) for the host's `promtool check metrics`.
fn metrics(ctx: &mut Ctx) -> Result<(), String> {
    ctx.stop_sched()?;
    ctx.start_sched(&["--metrics-addr", METRICS_ADDR, "--metrics-textfile", TEXTFILE])?;
    let w = ctx.spawn(&hog("t/a", 2), 60)?;
    ctx.check_on_scx(w);
    sleep(crate::runner::WARMUP);
    let l = "{cgroup=\"t/a\"}";
    let counters = [
        ("cgroup_periods_total", "nr_periods", 1.0),
        ("cgroup_throttled_periods_total", "nr_throttled", 1.0),
        ("cgroup_throttled_seconds_total", "throttled_usec", 1e6),
        ("cgroup_usage_seconds_total", "usage_usec", 1e6),
    ];
    let mut rounds = Vec::new();
    for round in 0..2 {
        if round > 0 {
            sleep(Duration::from_secs(3));
        }
        let before = crate::stats::fetch()?;
        let u0 = crate::cgroup::read_usage_usec("t/a")?;
        let t = std::time::Instant::now();
        let (status, body) = scrape()?;
        ctx.figure(format!("scrape{round}_ms"), format!("{:.1}", t.elapsed().as_secs_f64() * 1e3));
        let u1 = crate::cgroup::read_usage_usec("t/a")?;
        let after = crate::stats::fetch()?;
        if !status.contains(" 200 ") {
            return Err(format!("GET /metrics: {status}: {}", body.trim()));
        }
        let (g0, g1) = (crate::stats::group(&before, "t/a")?, crate::stats::group(&after, "t/a")?);
        for (name, field, scale) in counters {
            let v = sample(&body, &format!("scx_bandwidth_{name}{l}"))? * scale;
            let (lo, hi) = (crate::stats::num(g0, field)?, crate::stats::num(g1, field)?);
            // 1 µs of slack: seconds printed as a decimal round-trip to the µs.
            if v < lo - 1.0 || v > hi + 1.0 {
                ctx.fail(format!("{name} = {v} outside the JSON's {field} before/after the scrape: {lo}..{hi}"));
            }
        }
        let count = sample(&body, &format!("scx_bandwidth_cgroup_throttle_wait_seconds_count{l}"))?;
        let hist = |g: &serde_json::Value| g["wait_hist"].as_array().map_or(0.0, |a| a.iter().filter_map(|v| v.as_f64()).sum::<f64>());
        if count < hist(g0) || count > hist(g1) {
            ctx.fail(format!("throttle-wait count {count} outside the JSON's {}..{}", hist(g0), hist(g1)));
        }
        let inf = sample(&body, "scx_bandwidth_cgroup_throttle_wait_seconds_bucket{cgroup=\"t/a\",le=\"+Inf\"}")?;
        if inf != count {
            ctx.fail(format!("+Inf bucket {inf} != count {count}"));
        }
        rounds.push((body, (u0 + u1) / 2, crate::workload::mono_ns()));
    }
    let rate = |name: &str| -> Result<f64, String> {
        let series = format!("scx_bandwidth_{name}{l}");
        Ok(sample(&rounds[1].0, &series)? - sample(&rounds[0].0, &series)?)
    };
    let secs = (rounds[1].2 - rounds[0].2) as f64 / 1e9;
    let prom_cpus = rate("cgroup_usage_seconds_total")? / secs;
    let cg_cpus = (rounds[1].1 - rounds[0].1) as f64 / 1e6 / secs;
    let periods = rate("cgroup_periods_total")?;
    let throttled = rate("cgroup_throttled_periods_total")?;
    ctx.figure("prom_cpus", format!("{prom_cpus:.3}"));
    ctx.figure("cgroupfs_cpus", format!("{cg_cpus:.3}"));
    ctx.figure("periods", periods);
    ctx.figure("throttled_periods", throttled);
    if (prom_cpus / cg_cpus - 1.0).abs() > 0.02 {
        ctx.fail(format!("usage rate {prom_cpus:.3} CPUs from the scrapes, cgroupfs {cg_cpus:.3}: more than 2 % apart"));
    }
    if periods < 0.9 * secs * 100.0 || throttled < 0.9 * periods {
        ctx.fail(format!("{throttled} of {periods} periods throttled in {secs:.1} s of a 10 ms period held to 0.3 CPU by 2 hogs"));
    }
    let stat = std::fs::read_to_string(crate::cgroup::path("t/a").join("cpu.stat")).map_err(|e| e.to_string())?;
    let kernel = stat.lines().find_map(|l| l.strip_prefix("nr_throttled ")).unwrap_or("absent").to_string();
    ctx.figure("kernel_nr_throttled", &kernel);
    // The same text in --metrics-textfile, rewritten every 5 s: a version written after a
    // JSON snapshot lies between it and the next one.
    let before = crate::stats::fetch()?;
    let t0 = std::time::SystemTime::now();
    let fresh = crate::sched::wait_for(Duration::from_secs(7), || {
        std::fs::metadata(TEXTFILE).and_then(|m| m.modified()).is_ok_and(|m| m > t0)
    });
    let text = std::fs::read_to_string(TEXTFILE).unwrap_or_default();
    let after = crate::stats::fetch()?;
    ctx.figure("textfile_fresh", fresh);
    if !fresh {
        ctx.fail(format!("{TEXTFILE} not rewritten within 7 s"));
    } else {
        let v = sample(&text, &format!("scx_bandwidth_cgroup_throttled_periods_total{l}"))?;
        let (lo, hi) = (crate::stats::num(crate::stats::group(&before, "t/a")?, "nr_throttled")?, crate::stats::num(crate::stats::group(&after, "t/a")?, "nr_throttled")?);
        ctx.figure("textfile_throttled_periods", v);
        if v < lo || v > hi {
            ctx.fail(format!("{TEXTFILE}: throttled periods {v} outside the JSON's {lo}..{hi} around its rewrite"));
        }
    }
    println!("OPENMETRICS_BEGIN");
    for line in rounds[1].0.lines() {
        println!("OPENMETRICS| {line}");
    }
    // A second instance wanting the same address: exit 2, the address named, nothing attached.
    let out = std::process::Command::new(ctx.sched_bin())
        .args(["--metrics-addr", METRICS_ADDR])
        .output()
        .map_err(|e| format!("second instance: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    ctx.figure("taken_exit", out.status.code().map_or("signal".into(), |c| c.to_string()));
    if out.status.code() != Some(2) || !err.contains(METRICS_ADDR) {
        ctx.fail(format!("second --metrics-addr {METRICS_ADDR}: {} ({})", out.status, err.trim()));
    }
    ctx.healthy()
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![
        custom(
            "stats_access",
            "stats socket root-only (0600) by default; --stats-group opens it to that group only",
            true,
            lim("t/a", 30_000, 100_000),
            stats_access,
        ),
        custom(
            "monitor",
            "--monitor 1 from a second process agrees with cgroupfs over the same tables (±1%); the stats socket is 0600 and its JSON has every field",
            true,
            // A short period: a window's edges cut at most one 3 ms run, not a 30 ms one
            // (with 30/100 ms, one cut alone moves a 3 s average by up to 1 %).
            lim("t/a", 3_000, 10_000),
            monitor,
        ),
        custom(
            "metrics",
            "--metrics-addr serves Prometheus text whose counters match the stats JSON and whose usage rate matches cgroupfs (±2%); a taken address exits 2",
            true,
            lim("t/a", 3_000, 10_000),
            metrics,
        ),
    ]
}
