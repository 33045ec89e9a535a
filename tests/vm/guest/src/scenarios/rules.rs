//! Rules: `[[rule]]` tables that limit cgroups found by glob, on a hierarchy laid out as
//! the kubelet (systemd driver) and systemd lay theirs out, created while the scheduler runs.

use super::{hog, leak, measure_ratio, slots_back, Body, Scenario};
use crate::cgroup::{create_tree, remove_tree, write_cpu_max};
use crate::runner::Ctx;
use serde_json::Value;
use std::time::{Duration, Instant};

const K: &str = "t/k/kubepods.slice";
const BURSTABLE: &str = "t/k/kubepods.slice/kubepods-burstable.slice";
const SERVICE: &str = "t/s/system.slice/batch.service";
/// A container a [[group]] names exactly, inside the containers rule's glob.
const PINNED: &str = "t/k/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podpin.slice/cri-containerd-pin.scope";

fn config(containers_burst_pct: u32, with_services: bool) -> String {
    let mut s = format!(
        "[[group]]\ncgroup = \"{PINNED}\"\nquota_us = 40000\n\n\
         [[rule]]\nname = \"containers\"\nmatch = \"{K}/**/cri-containerd-*.scope\"\nburst_pct = {containers_burst_pct}\nperiod_us = 20000\n\n\
         [[rule]]\nname = \"guaranteed\"\nmatch = \"{K}/kubepods-pod*.slice/cri-containerd-*.scope\"\nburst_pct = 100\n"
    );
    if with_services {
        s += "\n[[rule]]\nname = \"services\"\nmatch = \"t/s/system.slice/*.service\"\nquota_us = 20000\n";
    }
    s
}

/// Pod `i` of the burstable class and its container, as the kubelet names them.
fn container(i: usize) -> (String, String) {
    let pod = format!("{BURSTABLE}/kubepods-burstable-pod{i:04x}c0de.slice");
    let c = format!("{pod}/cri-containerd-{:016x}.scope", 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1));
    (pod, c)
}

/// The stats entry of `cgroup` once it is enforced with a limit from `source`, within `wait`.
fn wait_group(cgroup: &str, source: &str, wait: Duration) -> Option<Value> {
    let mut found = None;
    crate::sched::wait_for(wait, || {
        found = crate::stats::fetch().ok().and_then(|m| crate::stats::group(&m, cgroup).ok().cloned()).filter(|g| g["source"] == source && g["state"] == "enforced");
        found.is_some()
    });
    found
}

fn limits(g: &Value) -> (u64, u64, u64) {
    let n = |f: &str| g[f].as_u64().unwrap_or(u64::MAX);
    (n("quota_us"), n("period_us"), n("burst_us"))
}

/// The limits the rules give the two groups whose shares are measured, written to cpu.max
/// and enforced by the kernel's CFS instead (--cfs, or the kernel reference of a retry):
/// the same hogs and windows, for `measure_ratio` to hold ours against.
fn kernel_shares(ctx: &mut Ctx) -> Result<(), String> {
    let (_, hc) = container(100);
    let hc: &'static str = leak(hc);
    for (label, cg, (quota, period, burst), cpus) in [("service", SERVICE, (20_000, 100_000, 0), 0.2), ("container", hc, (6_000, 20_000, 3_000), 0.3)] {
        create_tree(&[cg])?;
        write_cpu_max(cg, quota, period)?;
        if burst > 0 {
            crate::cgroup::write_cpu_max_burst(cg, burst)?;
        }
        let w = ctx.spawn(&hog(cg, 2), 60)?;
        measure_ratio(ctx, label, cg, cpus, 0.02)?;
        ctx.kill_works(w);
    }
    Ok(())
}

/// (1) A full-limit rule limits a service created while running, with no cpu.max of its
/// own: 2 hogs held to 0.2 CPU ±2 %. (2) 50 pod containers are created one after another
/// (each with cpu.max written after mkdir, as the kubelet does) while older ones are
/// removed: each gets the containers rule within 1 s — period 20 ms keeping its cpu.max
/// ratio, burst 50 % of that quota, source "rule containers" — and the slots come back.
/// (3) A hog in a container with cpu.max 30000/100000 gets 0.3 CPU ±2 % in 50 periods a
/// second (±10 %): the rule's period is what runs. (4) Precedence: a guaranteed pod's
/// container takes the more specific rule; a container a [[group]] names takes the group.
/// (5) Reload: burst_pct 50 → 25 reaches the existing containers, and removing the
/// services rule leaves the service unlimited.
fn rules(ctx: &mut Ctx) -> Result<(), String> {
    if !ctx.has_sched() {
        return kernel_shares(ctx);
    }
    let cfg = std::path::PathBuf::from("/tmp/rules.toml");
    let write = |text: &str| std::fs::write(&cfg, text).map_err(|e| format!("write {}: {e}", cfg.display()));
    write(&config(50, true))?;
    ctx.stop_sched()?;
    ctx.set_sched_config(Some(cfg.clone()));
    create_tree(&[BURSTABLE])?;
    ctx.start_sched(&[])?;
    let base = crate::stats::num(&crate::stats::fetch()?, "active_groups")?;

    // (1) A service without cpu.max, created after start.
    create_tree(&[SERVICE])?;
    let svc = ctx.spawn(&hog(SERVICE, 2), 60)?;
    ctx.check_on_scx(svc);
    match wait_group(SERVICE, "rule services", Duration::from_secs(2)) {
        Some(g) if limits(&g) == (20_000, 100_000, 0) => {}
        other => ctx.fail(format!("{SERVICE}: {:?}, want rule services 20000/100000", other.map(|g| limits(&g)))),
    }
    measure_ratio(ctx, "service", SERVICE, 0.2, 0.02)?;
    ctx.kill_works(svc);

    // (2) 50 containers, each removed 10 creations later.
    let (mut worst_ms, mut wrong) = (0u128, Vec::new());
    let mut live: Vec<(String, String)> = Vec::new();
    for i in 0..50 {
        let (pod, c) = container(i);
        create_tree(&[c.as_str()])?;
        let quota = 10_000 * (1 + i as u64 % 5);
        let t = Instant::now();
        write_cpu_max(&c, quota, 100_000)?;
        let want = (quota / 5, 20_000, quota / 10);
        match wait_group(&c, "rule containers", Duration::from_secs(1)) {
            Some(g) if limits(&g) == want => worst_ms = worst_ms.max(t.elapsed().as_millis()),
            other => wrong.push(format!("container {i}: {:?}, want {want:?}", other.map(|g| limits(&g)))),
        }
        live.push((pod, c));
        if live.len() > 10 {
            let (pod, _) = live.remove(0);
            remove_tree(&pod)?;
        }
    }
    ctx.figure("containers.created", 50);
    ctx.figure("containers.wrong", wrong.len());
    ctx.figure("containers.worst_ms", worst_ms);
    if !wrong.is_empty() {
        ctx.fail(format!("{} of 50 containers without the rule's limit: {}", wrong.len(), wrong.join("; ")));
    }

    // (3) The rule's period runs: a hog in a live container.
    let (_, hc) = container(100);
    create_tree(&[hc.as_str()])?;
    write_cpu_max(&hc, 30_000, 100_000)?;
    let hc: &'static str = leak(hc);
    let w = ctx.spawn(&hog(hc, 2), 60)?;
    ctx.check_on_scx(w);
    let before = crate::stats::fetch()?;
    let t = Instant::now();
    measure_ratio(ctx, "container", hc, 0.3, 0.02)?;
    let periods = crate::stats::group_delta(&before, &crate::stats::fetch()?, hc, "nr_periods")? / t.elapsed().as_secs_f64();
    ctx.figure("container.periods_per_s", format!("{periods:.1}"));
    if (periods / 50.0 - 1.0).abs() > 0.10 {
        ctx.fail(format!("{hc}: {periods:.1} periods per second, want 50 (period 20 ms) ±10 %"));
    }

    // (4) Precedence.
    let guaranteed = format!("{K}/kubepods-podg1.slice/cri-containerd-g1.scope");
    create_tree(&[guaranteed.as_str(), PINNED])?;
    write_cpu_max(&guaranteed, 20_000, 100_000)?;
    write_cpu_max(PINNED, 90_000, 100_000)?;
    for (cg, source, want) in [(guaranteed.as_str(), "rule guaranteed", (20_000, 100_000, 20_000)), (PINNED, "config", (40_000, 100_000, 0))] {
        match wait_group(cg, source, Duration::from_secs(2)) {
            Some(g) if limits(&g) == want => ctx.figure(format!("precedence.{}", source.replace(' ', "_")), "ok"),
            other => ctx.fail(format!("{cg}: {:?} from {:?}, want {want:?} from {source}", other.as_ref().map(limits), other.map(|g| g["source"].clone()))),
        }
    }

    // (5) Reload.
    write(&config(25, false))?;
    crate::sched::signal(ctx.sched_pid().ok_or("no scheduler")?, libc::SIGHUP);
    let mut reloaded = 0;
    for (i, (_, c)) in (40..50).zip(&live) {
        let quota = 10_000 * (1 + i as u64 % 5) / 5;
        match wait_group(c, "rule containers", Duration::from_secs(2)) {
            Some(g) if limits(&g) == (quota, 20_000, quota / 4) => reloaded += 1,
            other => ctx.fail(format!("after reload {c}: {:?}, want burst 25 % of {quota}", other.map(|g| limits(&g)))),
        }
    }
    ctx.figure("reload.containers_changed", format!("{reloaded}/10"));
    let gone = crate::sched::wait_for(Duration::from_secs(2), || {
        crate::stats::fetch().is_ok_and(|m| crate::stats::group(&m, SERVICE).is_err())
    });
    ctx.figure("reload.service_unlimited", gone);
    if !gone {
        ctx.fail(format!("{SERVICE} still limited after its rule was removed"));
    }
    ctx.kill_works(w);

    // Everything removed: every slot comes back.
    remove_tree("t/k/kubepods.slice")?;
    remove_tree("t/s/system.slice")?;
    slots_back(ctx, base, "every container was removed");
    ctx.healthy()
}

/// The scenarios of this file, in the order a run takes them.
pub(super) fn scenarios() -> Vec<Scenario> {
    vec![Scenario {
        name: "rules",
        about: "[[rule]] globs on a kubelet/systemd-like hierarchy: a full limit on a new service (±2%), 50 containers created and removed each get burst/period from their cpu.max (period 20 ms runs), precedence group > specific rule, reload re-evaluates",
        needs_sched: false,
        limits: vec![],
        cgroups: vec!["t/k", "t/s"],
        body: Body::Custom(rules),
    }]
}
