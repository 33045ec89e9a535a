//! The advisor: `scx_bandwidth advise` asked about a group whose cpu.max throttles it,
//! its advice applied as it says to, and the group measured again. What is checked is
//! what a user relies on: the advice is a burst (the group's average fits its quota, so
//! a burst, not more quota, is what it lacks), its replay of the recorded history at the
//! current limit finds the throttling that was recorded (within 3 points), applying it
//! brings throttled periods under the target, and the share of throttled periods the
//! advisor predicted for the new setting is the one measured, within 5 points.

use super::{Body, Scenario, Work, Workload};
use crate::runner::Ctx;
use serde_json::Value;
use std::thread::sleep;
use std::time::Duration;

const CG: &str = "t/adv";
const QUOTA_US: u64 = 50_000;
const PERIOD_US: u64 = 100_000;
/// advise's --max-throttled-pct.
const TARGET_PCT: f64 = 5.0;
/// Each measurement: 200 periods, about 67 burns.
const WINDOW: Duration = Duration::from_secs(20);

/// Share of the group's periods that ended throttled over `WINDOW` (the scheduler's
/// nr_throttled / nr_periods), and the periods counted.
fn throttled_pct() -> Result<(f64, f64), String> {
    let before = crate::stats::fetch()?;
    sleep(WINDOW);
    let after = crate::stats::fetch()?;
    let periods = crate::stats::group_delta(&before, &after, CG, "nr_periods")?;
    let throttled = crate::stats::group_delta(&before, &after, CG, "nr_throttled")?;
    if periods < 50.0 {
        return Err(format!("{CG}: only {periods} periods counted in {} s", WINDOW.as_secs()));
    }
    Ok((100.0 * throttled / periods, periods))
}

/// `scx_bandwidth ARGS` beside the running scheduler: (exit code, stdout, stderr).
fn sched_cmd(ctx: &Ctx, args: &[&str]) -> Result<(Option<i32>, String, String), String> {
    let out = std::process::Command::new(ctx.sched_bin())
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((out.status.code(), text(&out.stdout), text(&out.stderr)))
}

fn field(a: &Value, path: &[&str]) -> Result<f64, String> {
    path.iter()
        .fold(a, |v, k| &v[*k])
        .as_f64()
        .ok_or_else(|| format!("advise --json: no number at {}", path.join(".")))
}

/// One thread burning 80 ms of CPU every 300 ms: 0.27 CPU on average under a 0.5-CPU
/// quota, but each burn needs 80 ms of a 50 ms period. Strict, the group's timer stops
/// in its quiet periods and a burn restarts it, so every burn is throttled: one period in
/// three (the burn's, then the 30 ms it had left, then a quiet one). A burst of 30 ms
/// saves enough in the quiet periods to cover a burn; advise adds its margin.
fn advise(ctx: &mut Ctx) -> Result<(), String> {
    crate::cgroup::write_cpu_max(CG, QUOTA_US, PERIOD_US)?;
    let w = ctx.spawn(
        &Workload {
            cgroup: CG,
            work: Work::Duty { threads: 1, burn_ms: 80, sleep_ms: 220 },
            pin: None,
        },
        2 * WINDOW.as_secs() + 30,
    )?;
    ctx.check_on_scx(w);
    sleep(Duration::from_secs(2));
    let (before_pct, periods) = throttled_pct()?;
    ctx.figure("before.throttled_pct", format!("{before_pct:.1}"));
    ctx.figure("before.periods", periods);
    if before_pct < 20.0 {
        return Err(format!("{CG}: {before_pct:.1} % of periods throttled at {QUOTA_US}/{PERIOD_US}: the premise (at least 20 %) does not hold"));
    }

    // The picture of the same: `--monitor 1 --graph` draws the group with the share of
    // its periods throttled in each interval.
    let mut mon = std::process::Command::new(ctx.sched_bin())
        .args(["--monitor", "1", "--graph"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("start --monitor --graph: {e}"))?;
    sleep(Duration::from_millis(4500));
    let _ = mon.kill();
    let out = mon.wait_with_output().map_err(|e| format!("--monitor --graph: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut periods, mut throttled) = (0u64, 0u64);
    for line in text.lines().filter(|l| l.starts_with(CG)) {
        let counts = line.split("throttled ").nth(1).and_then(|r| r.split(' ').next()).and_then(|f| f.split_once('/'));
        if let Some((t, p)) = counts.and_then(|(t, p)| Some((t.parse::<u64>().ok()?, p.parse::<u64>().ok()?))) {
            throttled += t;
            periods += p;
        }
    }
    let drawn = if periods == 0 { f64::NAN } else { 100.0 * throttled as f64 / periods as f64 };
    ctx.figure("graph.throttled", format!("{throttled}/{periods}"));
    if !(periods >= 20 && (drawn - before_pct).abs() <= 15.0 && text.contains("quota")) {
        let head: Vec<&str> = text.lines().take(14).collect();
        ctx.fail(format!("--monitor --graph drew {throttled}/{periods} periods throttled for {CG} ({before_pct:.1} % measured): {}", head.join(" | ")));
    }

    // The table, as a user reads it: the group, and the line to paste for cpu.max.burst.
    let (code, table, err) = sched_cmd(ctx, &["advise", "--cgroup", CG])?;
    for line in table.lines() {
        println!("# advise| {line}");
    }
    let paste = format!("> /sys/fs/cgroup/{CG}/cpu.max.burst");
    if code != Some(0) || !table.lines().any(|l| l.starts_with("echo ") && l.ends_with(&paste)) {
        return Err(format!("advise --cgroup {CG}: exit {code:?}, no `echo N {paste}` line: {}", err.trim()));
    }
    let target = format!("{TARGET_PCT}");
    let (code, json, err) = sched_cmd(ctx, &["advise", "--cgroup", CG, "--json", "--max-throttled-pct", &target])?;
    let a: Value = serde_json::from_str(json.trim()).map_err(|e| format!("advise --json (exit {code:?}, {e}): {json} {err}"))?;
    let kind = a["kind"].as_str().unwrap_or("?").to_string();
    let quota = field(&a, &["advised", "quota_us"])? as u64;
    let burst = field(&a, &["advised", "burst_us"])? as u64;
    let predicted = field(&a, &["predicted_throttled_pct"])?;
    ctx.figure("kind", &kind);
    ctx.figure("advised_burst_us", burst);
    let recorded = field(&a, &["recorded_throttled_pct"])?;
    let replayed = field(&a, &["replayed_throttled_pct"])?;
    ctx.figure("recorded_pct", format!("{recorded:.1}"));
    ctx.figure("replayed_pct", format!("{replayed:.1}"));
    ctx.figure("predicted_pct", format!("{predicted:.1}"));
    ctx.figure("history_periods", field(&a, &["history_periods"])?);
    // The replay of the history at the limit it was recorded under must find the
    // throttling that was recorded: the model fits before it predicts.
    if (recorded - replayed).abs() > 3.0 {
        ctx.fail(format!("advise replays {replayed:.1} % throttled at the current limit, {recorded:.1} % recorded: more than 3 points apart"));
    }
    if kind != "burst" || quota != QUOTA_US || burst == 0 || burst > QUOTA_US {
        return Err(format!("advise: {kind} at quota {quota} burst {burst}; expected a burst (0, {QUOTA_US}] at the same quota"));
    }

    // Applied as the advice says, then measured again.
    crate::cgroup::write_cpu_max_burst(CG, burst)?;
    sleep(Duration::from_secs(2));
    let shown = crate::stats::num(crate::stats::group(&crate::stats::fetch()?, CG)?, "burst_us")?;
    if shown != burst as f64 {
        return Err(format!("{CG}: cpu.max.burst {burst} written, the statistics show {shown}"));
    }
    let (after_pct, periods) = throttled_pct()?;
    ctx.figure("after.throttled_pct", format!("{after_pct:.1}"));
    ctx.figure("after.periods", periods);
    if after_pct > TARGET_PCT {
        ctx.fail(format!("with the advised burst {burst} µs: {after_pct:.1} % of periods throttled, target {TARGET_PCT} %"));
    }
    if (predicted - after_pct).abs() > 5.0 {
        ctx.fail(format!("advise predicted {predicted:.1} % throttled, measured {after_pct:.1} %: more than 5 points apart"));
    }
    ctx.kill_works(w);

    // A cgroup it does not limit: exit 2, the cgroup named.
    let (code, _, err) = sched_cmd(ctx, &["advise", "--cgroup", "t/none"])?;
    ctx.figure("unknown_exit", code.map_or("signal".into(), |c| c.to_string()));
    if code != Some(2) || !err.contains("t/none") {
        ctx.fail(format!("advise --cgroup t/none: exit {code:?}, {}", err.trim()));
    }
    ctx.healthy()
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![Scenario {
        name: "advise",
        about: "a bursty group throttled in ≥ 20 % of periods by its cpu.max: advise recommends a burst; written to cpu.max.burst it brings throttling under the 5 % target, as predicted (±5 points)",
        needs_sched: true,
        limits: vec![],
        cgroups: vec![CG],
        body: Body::Custom(advise),
    }]
}
