//! Client of the scheduler's scx_stats socket: what a monitoring tool would read. The
//! protocol is one JSON request per line, `{"req":"stats","args":{}}`, answered by one
//! line `{"errno":0,"args":{"resp":METRICS}}`.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub const SOCKET: &str = "/var/run/scx/root/stats";

/// Sends one request and returns the `resp` value.
pub fn request(req: &str) -> Result<Value, String> {
    let mut s = UnixStream::connect(SOCKET).map_err(|e| format!("connect {SOCKET}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    writeln!(s, "{{\"req\":\"{req}\",\"args\":{{}}}}").map_err(|e| format!("write {SOCKET}: {e}"))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("read {SOCKET}: {e}"))?;
    let mut v: Value = serde_json::from_str(&line).map_err(|e| format!("stats reply is not JSON ({e}): {line}"))?;
    if v["errno"].as_i64() != Some(0) {
        return Err(format!("stats request '{req}' failed: {line}"));
    }
    Ok(v["args"]["resp"].take())
}

/// The scheduler's current statistics (the `Metrics` JSON).
pub fn fetch() -> Result<Value, String> {
    request("stats")
}

/// The entry of `cgroup` in a `Metrics` value.
pub fn group<'v>(m: &'v Value, cgroup: &str) -> Result<&'v Value, String> {
    m["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["cgroup"] == cgroup))
        .ok_or_else(|| format!("no group {cgroup} in the stats"))
}

/// A numeric field of a group or of the metrics.
pub fn num(v: &Value, field: &str) -> Result<f64, String> {
    v[field].as_f64().ok_or_else(|| format!("stats field {field} missing or not a number"))
}

/// Global `field` in `after` minus the same in `before`.
pub fn delta(before: &Value, after: &Value, field: &str) -> Result<f64, String> {
    Ok(num(after, field)? - num(before, field)?)
}

/// `field` of `cgroup` in `after` minus the same in `before`.
pub fn group_delta(before: &Value, after: &Value, cgroup: &str, field: &str) -> Result<f64, String> {
    delta(group(before, cgroup)?, group(after, cgroup)?, field)
}

/// Runtime `g` (a group's entry) holds, in µs: its pool plus every CPU's local runtime, the
/// debts (negative local runtime) counted against it.
pub fn held_us(g: &Value) -> Result<f64, String> {
    let local: f64 = g["local_usec"]
        .as_array()
        .ok_or("stats field local_usec missing")?
        .iter()
        .filter_map(Value::as_f64)
        .sum();
    Ok(num(g, "pool_usec")? + local)
}

/// Where the agent's time went between two snapshots `secs` apart (its `agent_*`
/// counters), as figures: ms per s of each kind, wakeups and unthrottle runs per s.
pub fn agent_breakdown(before: &Value, after: &Value, secs: f64) -> Vec<(String, String)> {
    let rate = |f: &str, scale: f64| delta(before, after, f).map(|d| d / scale / secs);
    let mut out = Vec::new();
    for (key, field, scale, prec) in [
        ("agent.cpu_ms_s", "agent_cpu_usec", 1e3, 1),
        ("agent.process_ms_s", "agent_process_cpu_usec", 1e3, 1),
        ("agent.timers_ms_s", "agent_timers_usec", 1e3, 1),
        ("agent.unthrottle_ms_s", "agent_unthrottle_usec", 1e3, 1),
        ("agent.events_ms_s", "agent_events_usec", 1e3, 1),
        ("agent.poll_ms_s", "agent_poll_cpu_usec", 1e3, 1),
        ("agent.stats_ms_s", "agent_stats_cpu_usec", 1e3, 1),
        ("agent.wakeups_s", "agent_wakeups", 1.0, 0),
        ("agent.unthrottles_s", "agent_unthrottle_runs", 1.0, 0),
        ("agent.events_s", "agent_events", 1.0, 0),
    ] {
        let v = rate(field, scale).map_or_else(|e| e, |v| format!("{v:.prec$}"));
        out.push((key.to_string(), v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_groups_and_fields() {
        let a: Value = serde_json::from_str(r#"{"groups":[{"cgroup":"t/a","nr_throttled":3}]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"groups":[{"cgroup":"t/a","nr_throttled":5}]}"#).unwrap();
        assert_eq!(group_delta(&a, &b, "t/a", "nr_throttled"), Ok(2.0));
        assert!(group(&a, "t/b").is_err());
        assert!(num(group(&a, "t/a").unwrap(), "nope").is_err());
    }

    #[test]
    fn agent_breakdown_is_per_second() {
        let a: Value = serde_json::from_str(r#"{"agent_cpu_usec":1000,"agent_wakeups":10}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"agent_cpu_usec":5000,"agent_wakeups":50}"#).unwrap();
        let f = agent_breakdown(&a, &b, 2.0);
        assert!(f.contains(&("agent.cpu_ms_s".into(), "2.0".into())));
        assert!(f.contains(&("agent.wakeups_s".into(), "20".into())));
        assert!(f.iter().any(|(k, v)| k == "agent.stats_ms_s" && v.contains("missing")));
    }
}
