//! The common scenario shape: phases of workloads, each measured over one window and
//! checked, plus checks across phases.

use crate::runner::{short, Ctx, PHASE_WORK_S, WARMUP, WINDOW};
use crate::scenarios::{Check, Cross, Phase, Scenario};
use std::collections::HashMap;
use std::thread::sleep;

/// The cgroups a phase measures: checked ones first, then the other workloads' cgroups.
fn measured(ph: &Phase) -> Vec<&'static str> {
    let checked = ph.checks.iter().map(Check::cgroup);
    let mut v: Vec<&'static str> = Vec::new();
    for cg in checked.chain(ph.workloads.iter().map(|w| w.cgroup)) {
        if !v.contains(&cg) {
            v.push(cg);
        }
    }
    v
}

pub fn run(ctx: &mut Ctx, sc: &Scenario, phases: &[Phase], cross: &[Cross]) -> Result<(), String> {
    let sets: Vec<Vec<&str>> = phases.iter().map(measured).collect();
    let multi_phase = phases.len() > 1;
    let multi_cg = sets.iter().any(|s| s.len() > 1);
    // Figure keys: [phase.][cgroup.]name, prefixes only where needed to be unambiguous.
    let key = |phase: &str, cg: &str, name: &str| {
        let mut k = String::new();
        if multi_phase {
            k += phase;
            k += ".";
        }
        if multi_cg && !cg.is_empty() {
            k += &short(cg);
            k += ".";
        }
        k + name
    };
    let mut ratios: HashMap<(&str, &str), f64> = HashMap::new();
    for (i, ph) in phases.iter().enumerate() {
        let first = ctx.nr_workloads();
        for w in &ph.workloads {
            ctx.spawn(w, PHASE_WORK_S)?;
        }
        sleep(WARMUP);
        let usage = ctx.measure(&sets[i], WINDOW)?;
        for e in ctx.exited_works(first) {
            ctx.fail(e);
        }
        ctx.check_on_scx(first);
        ctx.healthy()
            .map_err(|e| format!("{e} (in phase {})", ph.label))?;
        // Per cgroup: its usage figures, then its checks, so each line reads in order.
        for (cg, &u) in sets[i].iter().zip(&usage) {
            let k = |name: &str| key(ph.label, cg, name);
            ctx.figure(k("usage_cpus"), format!("{u:.3}"));
            let limit = sc.limit_of(cg).map(|l| l.cpus());
            if let Some(l) = limit {
                ctx.figure(k("limit_cpus"), format!("{l:.3}"));
                ctx.figure(k("ratio"), format!("{:.3}", u / l));
                ratios.insert((ph.label, cg), u / l);
            }
            let who = if multi_phase {
                format!("{}: {cg}", ph.label)
            } else {
                cg.to_string()
            };
            for c in ph.checks.iter().filter(|c| c.cgroup() == *cg) {
                check(ctx, c, u, limit, &k, &who)?;
            }
        }
        if i + 1 < phases.len() {
            ctx.kill_works(first);
        }
    }
    for c in cross {
        let Cross::SameRatio { cgroup, a, b, tol } = *c;
        let (Some(ra), Some(rb)) = (ratios.get(&(a, cgroup)), ratios.get(&(b, cgroup))) else {
            return Err(format!(
                "cross check {c:?}: no ratio for {cgroup} in {a}/{b}"
            ));
        };
        let d = (ra - rb).abs();
        ctx.figure(
            key("", cgroup, "ratio_diff").trim_start_matches('.'),
            format!("{d:.3}"),
        );
        if d > tol {
            ctx.fail(format!(
                "{cgroup}: ratio {a} {ra:.3} vs {b} {rb:.3} differ by {d:.3} > {tol}"
            ));
        }
    }
    Ok(())
}

/// Evaluates one check on a measured usage `u` (CPUs), recording its bound as a figure.
/// Custom scenarios use it too, so every usage check reads and fails the same way.
pub fn check(
    ctx: &mut Ctx,
    c: &Check,
    u: f64,
    limit: Option<f64>,
    key: &dyn Fn(&str) -> String,
    who: &str,
) -> Result<(), String> {
    let need_limit = || limit.ok_or_else(|| format!("{who}: check {c:?} needs a limit"));
    match *c {
        Check::Ratio { tol, .. } => {
            let r = u / need_limit()?;
            ctx.figure(key("tol"), tol);
            if (r - 1.0).abs() > tol {
                ctx.fail(format!("{who}: usage/limit {r:.3} outside 1±{tol}"));
            }
        }
        Check::AtMostLimit { tol, .. } => {
            let max = need_limit()? * (1.0 + tol);
            ctx.figure(key("max_cpus"), format!("{max:.3}"));
            if u > max {
                ctx.fail(format!("{who}: {u:.3} CPUs > max {max:.3}"));
            }
        }
        Check::AtLeastLimit { tol, .. } => {
            let min = need_limit()? * (1.0 - tol);
            ctx.figure(key("min_cpus"), format!("{min:.3}"));
            if u < min {
                ctx.fail(format!("{who}: {u:.3} CPUs < min {min:.3}"));
            }
        }
        Check::AtLeast { cpus, .. } => {
            ctx.figure(key("min_cpus"), format!("{cpus:.3}"));
            if u < cpus {
                ctx.fail(format!("{who}: {u:.3} CPUs < min {cpus:.3}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenarios::all;
    use crate::scenarios::Body;

    #[test]
    fn measured_sets_have_no_duplicates() {
        let sc = all();
        let nested = sc.iter().find(|s| s.name == "nested").unwrap();
        let Body::Phases(phases, _) = &nested.body else {
            panic!()
        };
        assert_eq!(super::measured(&phases[0]), vec!["t/p", "t/p/x", "t/p/y"]);
    }
}
