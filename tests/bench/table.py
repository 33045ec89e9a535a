#!/usr/bin/env python3
"""The benchmark tables of a run (the kernel's CFS column beside scx_bandwidth's), and
BENCHMARKS.md made from them.

  table.py [--check] CFS_LOG SCX_LOG [WIDE_LOG]
      print the tables; --check: exit 1 if a figure is missing (a benchmark that broke);
      WIDE_LOG is the 8-vCPU run of `wide_bench` (without it that table has no figures)
  table.py --record INFO --qemu QEMU --accel ACCEL --smp N --mem SIZE
      write to INFO what BENCHMARKS.md says about the run besides its figures: the host's CPU,
      the qemu binary's version, the guest's size, the git revision and the date
      (tests/bench/run does this as a run starts)
  table.py [--check] --write FILE --info INFO CFS_LOG SCX_LOG [WIDE_LOG]
      print the tables and write FILE: a generated header, the tables, what each one means,
      and links to the pictures, written beside it as bench/*.svg (svg.py draws them)

Reads the SCENARIO lines of the tests/vm/run logs (the last verdict of each scenario counts,
as a scenario interrupted by an emulator crash is run again after a reboot), and the guest's
kernel from their "scxbw-init: kernel ..." line. Every figure in FILE and its pictures comes
from the logs or INFO; the prose below is about what they measure, not about one run.

--check also fails if a picture has no data: the pictures are figures of BENCHMARKS.md like
the tables' cells, and a missing series means the guest's printing of it broke."""
import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import textwrap

import svg

# Our error counts as no worse than the kernel's within this much.
TIE = 0.0005


def results(path):
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"^SCENARIO (\S+) (PASS|FAIL|SKIP)(.*)$", line.rstrip("\r\n"))
            if m:
                figs = dict(kv.split("=", 1) for kv in m.group(3).split() if "=" in kv and not kv.startswith("reason="))
                out[m.group(1)] = figs
    return out


def guest(path):
    """(kernel release, CPUs) from the last "scxbw-init: kernel R, N CPUs" line of a log."""
    found = (None, None)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.search(r"scxbw-init: kernel (\S+), (\d+) CPUs", line)
            if m:
                found = (m.group(1), int(m.group(2)))
    return found


def num(figs, key):
    try:
        return float(figs[key])
    except (KeyError, ValueError, TypeError):
        return None


def series(figs, key):
    """The numbers of a figure that is a comma-separated list, None if it is absent or not
    all finite numbers (a line cut short)."""
    try:
        values = [float(v) for v in figs[key].split(",")]
    except (KeyError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def fmt(x, spec="{:.3f}"):
    return "–" if x is None else spec.format(x)


def accuracy(cfs, scx, wide):
    lines = ["| workload | kernel CFS | scx_bandwidth | error CFS | error scx | scx error ≤ CFS |",
             "| --- | --- | --- | --- | --- | --- |"]

    def row(label, a, b):
        ea = None if a is None else abs(a - 1)
        eb = None if b is None else abs(b - 1)
        ok = "–" if ea is None or eb is None else ("yes" if eb <= ea + TIE else "**no**")
        return f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(ea)} | {fmt(eb)} | {ok} |"

    rows = []
    for name in sorted(set(cfs) | set(scx)):
        if not name.startswith("acc_"):
            continue
        _, period, threads, cpus = name.split("_")
        label = f"{threads[:-1]} hog(s), {cpus} CPU, period {period}"
        rows.append((period, label, row(label, num(cfs.get(name, {}), "ratio"), num(scx.get(name, {}), "ratio"))))
    order = {"10ms": 0, "100ms": 1, "1s": 2}
    lines += [r[2] for r in sorted(rows, key=lambda r: (order.get(r[0], 9), r[1]))]
    n = cfs.get("nested", {}), scx.get("nested", {})
    for key, label in [("p.ratio", "nested: parent 1.2 CPU"), ("p.x.ratio", "nested: child 0.5 CPU")]:
        lines.append(row(label, num(n[0], key), num(n[1], key)))
    return lines


def burst(cfs, scx, wide):
    lines = ["| burst | CFS p50 | CFS p99 | CFS max | scx p50 | scx p99 | scx max | scx p99 ÷ CFS p99 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, label in [("burst_latency", "100 ms"), ("burst_latency_strict", "0")]:
        a, b = cfs.get(name, {}), scx.get(name, {})
        pa, pb = num(a, "p99_ms"), num(b, "p99_ms")
        ratio = None if pa is None or pb is None else pb / pa
        lines.append(f"| {label} | {fmt(num(a, 'p50_ms'), '{:.1f}')} | {fmt(pa, '{:.1f}')} | {fmt(num(a, 'max_ms'), '{:.1f}')} "
                     f"| {fmt(num(b, 'p50_ms'), '{:.1f}')} | {fmt(pb, '{:.1f}')} | {fmt(num(b, 'max_ms'), '{:.1f}')} | {fmt(ratio)} |")
    return lines


# The burst sweep's goal: our p99 burn time at most this many times the kernel's, per cell.
SWEEP_GOAL = 1.05


def burst_sweep(cfs, scx, wide):
    """One row per cell of the `burst_sweep` scenario: its figures are keyed b<burn>d<duty>t<threads>."""
    lines = ["| burn (ms) | duty | threads | quota = burst (ms) | CFS p50 | CFS p99 | scx p50 | scx p99 | scx p99 ÷ CFS p99 "
             f"| ≤ {SWEEP_GOAL}× |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    a, b = cfs.get("burst_sweep", {}), scx.get("burst_sweep", {})
    cells = set()
    for figs in (a, b):
        for key in figs:
            m = re.match(r"^b(\d+)d(\d+)t(\d+)\.p99_ms$", key)
            if m:
                cells.add(tuple(int(g) for g in m.groups()))
    if not cells:
        return lines + ["| – | – | – | – | – | – | – | – | – | – |"]
    for burn, duty, threads in sorted(cells):
        k = f"b{burn}d{duty}t{threads}."
        pa, pb = num(a, k + "p99_ms"), num(b, k + "p99_ms")
        ratio = None if pa is None or pb is None else pb / pa
        ok = "–" if ratio is None else ("yes" if ratio <= SWEEP_GOAL else "**no**")
        quota = a.get(k + "quota_ms", b.get(k + "quota_ms", "–"))
        lines.append(f"| {burn} | {duty} % | {threads} | {quota} | {fmt(num(a, k + 'p50_ms'), '{:.1f}')} | {fmt(pa, '{:.1f}')} "
                     f"| {fmt(num(b, k + 'p50_ms'), '{:.1f}')} | {fmt(pb, '{:.1f}')} | {fmt(ratio)} | {ok} |")
    return lines


def throttling(cfs, scx, wide):
    """Each enforcer's resume delays, then where a resume's time goes (throttle_cost's trace
    figures): the agent's cells of the kernel's row say so, it has none."""
    lines = ["| | resumes | p50 | p99 | max | task on CPU → running seen, p50 | agent's wakeup behind its "
             "fastest, p50 / p99 | agent's wakeup → task on CPU, p50 / p99 | resumes on the agent's CPU |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, figs, has_agent in [("kernel CFS", cfs.get("throttle_cost", {}), False),
                                   ("scx_bandwidth", scx.get("throttle_cost", {}), True)]:
        pair = lambda a, b: f"{figs.get(a, '–')} / {figs.get(b, '–')}"
        if has_agent:
            agent = [pair("agent_p50_us", "agent_p99_us"), pair("agent_to_run_p50_us", "agent_to_run_p99_us"),
                     f"{figs.get('same_cpu_pct', '–')} %"]
        else:
            agent = ["no agent"] * 3
        cells = [figs.get(k, "–") for k in ("resumes", "delay_p50_us", "delay_p99_us", "delay_max_us", "run_to_seen_p50_us")]
        lines.append(f"| {label} | " + " | ".join(cells + agent) + " |")
    return lines


def agent_steps(cfs, scx, wide):
    """scx_bandwidth's part of a resume, step by step (throttle_cost's bpf() and IPI trace)."""
    f = scx.get("throttle_cost", {})
    keys = ["wake_to_call_p50_us", "call_p50_us", "ret_to_off_p50_us", "kicked_pct", "on_kicked_pct",
            "kick_to_run_p50_us"]
    cells = [f.get(k, "–") + (" %" if k.endswith("_pct") and k in f else "") for k in keys]
    cells[0] += f" ({f.get('wake_to_user_p50_us', '–')})"
    return ["| agent's wakeup → bw_unthrottle (→ back in user space) | bw_unthrottle's run | its end → agent off its CPU "
            "| releases that kicked the other CPU | of those, resumes on the kicked CPU "
            "| kick → task on the kicked CPU |",
            "| --- | --- | --- | --- | --- | --- |",
            "| " + " | ".join(cells) + " |"]


def compared(o, pairs, groups, workers):
    """The rows of a bench.rs `compare` scenario's figures (`overhead`, `wide_bench`)."""
    lines = ["| workload | kernel's scheduler | floor scheduler | scx_bandwidth | scx ÷ kernel | floor ÷ kernel "
             "| scx ÷ floor |", "| --- | --- | --- | --- | --- | --- | --- |"]
    counts = [("pingpong", f"pipe ping-pong, {pairs} pairs (round trips per s)"),
              ("forks", f"fork + exit + wait, {pairs} threads (per s)"),
              ("messaging", f"messaging, {groups} × (4 senders + 4 receivers) (messages per s)")]
    rows = [(label, key + ".", "_per_s") for key, label in counts]
    rows += [(f"wake to run, {workers} workers woken every 2 ms: {q} (µs, lower is better)", f"wakelat.{q}_us.", "")
             for q in ("p50", "p99")]
    for label, k, unit in rows:
        cells = [o.get(k + what, "–") for what in ("kernel" + unit, "floor" + unit, "scx" + unit, "ratio", "floor_ratio",
                                                  "scx_per_floor")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def overhead(cfs, scx, wide):
    return compared(scx.get("overhead", {}), 2, 1, 4)


def overhead_wide(cfs, scx, wide):
    return compared(wide.get("wide_bench", {}), 8, 4, 16)


OP_NAMES = ["select_cpu", "enqueue", "dispatch", "runnable", "running", "stopping", "quiescent", "tick",
            "sched_switch", "update_idle"]
FLOOR_OP_NAMES = ["select_cpu", "enqueue"]


def op_costs(cfs, scx, wide):
    o2, o8 = scx.get("overhead", {}), wide.get("wide_bench", {})
    lines = ["| op | 2 vCPUs: calls per round trip | 2 vCPUs: ns per call | 8 vCPUs: calls per round trip "
             "| 8 vCPUs: ns per call |", "| --- | --- | --- | --- | --- |"]
    for op in OP_NAMES:
        k = f"bpf.bw_{op}."
        lines.append(f"| {op} | {o2.get(k + 'calls_per_unit', '–')} | {o2.get(k + 'ns_per_call', '–')} "
                     f"| {o8.get(k + 'calls_per_unit', '–')} | {o8.get(k + 'ns_per_call', '–')} |")
    lines.append(f"| all programs: ns per round trip | | {o2.get('bpf.ns_per_unit', '–')} | | {o8.get('bpf.ns_per_unit', '–')} |")
    lines.append(f"| all programs: share of the guest's CPU time | | {o2.get('bpf.cpu_share', '–')} | "
                 f"| {o8.get('bpf.cpu_share', '–')} |")
    for op in FLOOR_OP_NAMES:
        k = f"floor.bpf.fl_{op}."
        lines.append(f"| floor scheduler: {op} | {o2.get(k + 'calls_per_unit', '–')} | {o2.get(k + 'ns_per_call', '–')} "
                     f"| {o8.get(k + 'calls_per_unit', '–')} | {o8.get(k + 'ns_per_call', '–')} |")
    lines.append(f"| floor scheduler, all programs: ns per round trip | | {o2.get('floor.bpf.ns_per_unit', '–')} | "
                 f"| {o8.get('floor.bpf.ns_per_unit', '–')} |")
    lines.append(f"| floor scheduler, all programs: share of the guest's CPU time | | {o2.get('floor.bpf.cpu_share', '–')} | "
                 f"| {o8.get('floor.bpf.cpu_share', '–')} |")
    return lines


def limited_rest(cfs, scx, wide):
    o = wide.get("wide_limited_rest", {})
    lines = ["| workload in the unlimited rest | beside 8 unlimited groups | beside 8 limited groups | limited ÷ unlimited |",
             "| --- | --- | --- | --- |"]
    for key, label in (("pingpong", "pipe ping-pong, 8 pairs (round trips per s)"),
                       ("messaging", "messaging, 4 × (4 senders + 4 receivers) (messages per s)")):
        lines.append(f"| {label} | {o.get(key + '.free_per_s', '–')} | {o.get(key + '.limited_per_s', '–')} | {o.get(key + '.ratio', '–')} |")
    lines.append(f"| CPUs the 8 groups used | {o.get('groups.free_cpus', '–')} | {o.get('groups.limited_cpus', '–')} | |")
    return lines


def agent(cfs, scx, wide):
    s, a = scx.get("scale", {}), scx.get("agent_cost", {})
    lines = ["| limited groups | busy groups | --stats 1 | agent CPU ms per s | agent threads run per s "
             "| a thread only waking 100/s: CPU ms per s | agent ÷ that thread |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in (10, 100, 1000):
        ag, tk = num(a, f"n{n}.agent_ms_per_s"), num(a, f"n{n}.ticker_ms_per_s")
        ratio = None if ag is None or not tk else ag / tk
        lines.append(f"| {n} | 10 | no | {fmt(ag, '{:.1f}')} | {a.get(f'n{n}.agent_runs_per_s', '–')} | {fmt(tk, '{:.1f}')} "
                     f"| {fmt(ratio, '{:.2f}')} |")
    busy = "–" if "active_groups" not in s else "11"
    lines.append(f"| {s.get('active_groups', '–')} | {busy} | yes | {s.get('agent_ms_per_s', '–')} | – | – | – |")
    return lines


# (heading, table, what it means) in the order of the document. The texts hold for any run:
# they say what is measured and why the columns differ, never what one run measured.
SECTIONS = [
    ("Enforcement accuracy (usage / limit over a 4 s window after 1 s warm-up)", accuracy,
     f"""Hog threads in one group, limited as the row says, under each enforcer; the error is
|usage / limit − 1|, and the last column says whether ours is at most the kernel's (within
{TIE}). At this size which rows say "no", and by how much, changes from run to run: one run
neither meets nor refutes "error ≤ the kernel's in every row"; the worst error of each
column says more."""),
    ("Burst: wall time of a 60 ms burn, 2 threads every 200 ms, quota 100 ms/100 ms (ms)", burst,
     """The `burst_latency` scenario (with a 100 ms burst) and `burst_latency_strict` (without);
p99 is the nearest-rank p99 over both threads' burns, of which there are enough that it is
not the slowest one. With the burst the unused quota of the quiet periods covers the peaks,
so neither enforcer should throttle, and `burst_latency` holds our p99 to its target.
Where ours is slower it is the `SCHED_FIFO` agent waking for refills while both threads burn
(docs/design.md, "Burst latency"). Without a burst both throttle the burns that fall early in
a period; how many a strict quota catches depends on where they fall against the period, for
both, so that row's p99 and max move from run to run."""),
    ("Burst sweep: wall time of a burn across burn lengths, duty cycles and threads, burst = quota (ms)", burst_sweep,
     f"""The `burst_sweep` scenario: each cell is a cgroup of its own with cpu.max and cpu.max.burst
written to cgroupfs, idle for 1 s (its pool fills to quota + burst), then threads burning the
given CPU time at the given duty cycle for about 100 burns (6 to 20 s). The quota is 20
points of duty above the average use, per thread, so the kernel does not throttle these
groups: what differs is what each enforcer costs a bursty group that stays within its limit.
The goal is our p99 at most {SWEEP_GOAL}× the kernel's in every cell; a cell that misses it
says **no**. A burn is delayed when something else takes its CPU: with 2 threads no CPU of
the guest is idle while both burn, and under scx_bandwidth the agent, a `SCHED_FIFO` task,
wakes for each period's refill of the group (docs/design.md, "Burst latency")."""),
    ("Throttling cost: a throttled hog's resume after each refill, behind the fastest resume (µs)", throttling,
     """How much later than the fastest resume a hog throttled every period ran again after each
refill (the refills lie on a grid of one period: each resume's phase on it, less the earliest).
The kernel refills from an hrtimer and unthrottles in the same interrupt; scx_bandwidth waits
for its agent (`SCHED_FIFO`) to wake, refill and run the unthrottle program, and then for a
CPU to dispatch, so its resumes come later, and its tail is the agent's timer lateness under
TCG. The last columns come from the context switches of the same run (tracefs): how long the
task had been on its CPU when the workload saw it run; the agent's wakeups (the refills) on
the same grid, behind the fastest of them; from the agent's last wakeup before a resume to
the task's switch-in (the refill, the unthrottle program and the dispatch); and the share of
resumes that ran on the CPU the agent had just woken on."""),
    ("Throttling cost: the agent's part of a resume, step by step (scx_bandwidth only; p50, µs)", agent_steps,
     """From the same run, with the agent's `bpf()` calls and the IPIs traced too: from the agent's
wakeup to its run of the unthrottle program (in brackets: to its return from `ppoll`, the
kernel's part), the run (which moves the parked task to its
LLC's queue and kicks an idle CPU for it), from the run's end to the agent leaving its CPU;
how often the release kicked the other CPU, and how often that CPU, rather than the agent's
own once the agent sleeps, ran the task. Under TCG a kicked vCPU takes about as long to
leave idle and dispatch as the agent takes to go back to sleep."""),
    ("Overhead without limits (same boot, alternating; median of 3 runs of 3 s, per s)", overhead,
     """Throughput in an unlimited cgroup under scx_bandwidth and, in the same boot with
scx_bandwidth detached, under the kernel's own scheduler and under the floor scheduler
(`tests/bench/floor`: the least a sched_ext scheduler does, the kernel's idle-CPU choice and
one FIFO queue, no fairness, no cgroups, no limits). Floor ÷ kernel is what sched_ext itself
costs here; scx ÷ floor is what scx_bandwidth adds to it. The goal for pipe ping-pong is 0.95
of the kernel's; the spread between runs of one revision is large under TCG, so one run does
not settle it."""),
    ("Overhead at 8 vCPUs in 2 sockets and 2 NUMA nodes (same boot, alternating; median of 3 runs of 3 s)", overhead_wide,
     """The same comparison in a guest of 8 vCPUs (2 sockets of 4 cores, 2 NUMA nodes, so
scx_bandwidth runs two LLC queues) with four times the tasks: the `wide_bench` scenario of
`tests/vm/run --wide`. The 8 vCPUs share the host's CPUs, fewer than 8, so the guest is
oversubscribed and every figure is far from what the same guest would do on 8 real CPUs;
the ratios come from one boot. The goals are 0.95 of the kernel's throughput and a wakeup
p99 at most 1.2 times the kernel's."""),
    ("What the scheduler's BPF ops cost during pipe ping-pong (scx_bandwidth and the floor scheduler; one run of 3 s each at each size)", op_costs,
     """Each op of the scheduler is a BPF program; with the kernel's per-program statistics on
(`kernel.bpf_stats_enabled`), one more ping-pong run of each overhead table (2 pairs at 2
vCPUs, 8 pairs at 8) counted how often each ran per round trip and how long a run took,
the kfuncs it calls (the kernel's idle-CPU search, queue inserts and moves) included. A
round trip is two wakeups and two context switches. The statistics add two clock reads per
run, so that run is slower than the table's. Under TCG only the proportions mean something:
the share of the guest's CPU time spent in the programs bounds what making them cheaper can
gain against the kernel; the rest of the difference is the kernel's sched_ext core beside
its own scheduler. The last rows are the same run under the floor scheduler, whose
select_cpu is little more than the kernel's idle-CPU search: what of scx_bandwidth's
select_cpu is the kernel's."""),
    ("Limited groups beside the unlimited rest at 8 vCPUs (scx_bandwidth; same boot, alternating; median of 3 runs of 3 s)", limited_rest,
     """What throttling costs the tasks that are not limited: the same workloads in an unlimited
cgroup beside 8 cgroups of one hog each limited to 10 ms per 100 ms (throttled every period:
parked, released, kicked), and beside 8 unlimited cgroups of one thread each that burns 10 ms
at a time paced to the same 0.1 CPU; the last row shows the two used the same CPU. The
`wide_limited_rest` scenario of `tests/vm/run --wide --bench`, in the boot of the table
above. The goal is 0.95 or more."""),
    ("Agent cost (scx_bandwidth only; CPU ms per s of the agent process)", agent,
     """The agent's CPU time without `--stats`, each group limited to 10 ms per 100 ms: 10 groups
busy and throttled every period (100 refills a second), the others idle with their timers
stopped, so the cost follows refills, not groups. Beside it, as a yardstick, a `SCHED_FIFO`
thread that does nothing but wake as often as the busy groups refill: under TCG a wakeup alone
costs far more than on hardware, and the ratio of the two is what means something there. The
last row is the `scale` scenario (every group limited, 11 busy), with `--stats 1`. The goal, at
most 1 % of a CPU at 1,000 groups, is one for hardware; under TCG only the ratio speaks to it."""),
]

# The pictures' folder, beside the file --write writes (its links are relative to it).
PICTURES = "docs/bench"
ENFORCERS = [("kernel CFS", "#1f77b4"), ("scx_bandwidth", "#d62728")]
# The duty workload of both burst scenarios burns 60 ms of CPU time (burst_slack.rs).
NOMINAL_BURN_MS = 60
# The start of burst_latency_strict's usage series that is drawn: 50 intervals of 100 ms stay
# readable side by side, the run's 200 would not.
USAGE_SECONDS = 5


def lacking(names):
    """The logs named, as the subject of "... no X"."""
    return f"the {' and '.join(names)} log" + ("s have" if len(names) > 1 else " has")


def burst_cdf(cfs, scx):
    """The picture of burst_latency's burn times: (SVG, None), or (None, why it is missing)."""
    burns = [series(log.get("burst_latency", {}), "burns_ms") for log in (cfs, scx)]
    missing = [name for (name, _), b in zip(ENFORCERS, burns) if not b]
    if missing:
        return None, f"{lacking(missing)} no burn times (`burns_ms`) of `burst_latency`"
    curves = [(name, colour, svg.cdf_steps(b)) for (name, colour), b in zip(ENFORCERS, burns)]
    return svg.chart(f"burst_latency: wall time of every {NOMINAL_BURN_MS} ms burn", "burn wall time (ms)",
                     "fraction of burns ≤ x", curves, [(f"nominal {NOMINAL_BURN_MS} ms", "x", NOMINAL_BURN_MS)],
                     ylo=0, yhi=1), None


def burst_usage(cfs, scx):
    """The picture of burst_latency_strict's usage per 100 ms, as burst_cdf()."""
    figs = [log.get("burst_latency_strict", {}) for log in (cfs, scx)]
    usage = [series(f, "usage_ms_per_100ms") for f in figs]
    # Both runs have the same limit (one scenario list); the kernel's log is read first.
    limit = next((v for v in (num(f, "limit_ms_per_100ms") for f in figs) if v is not None), None)
    missing = [name for (name, _), u in zip(ENFORCERS, usage) if not u]
    if missing:
        return None, f"{lacking(missing)} no usage series (`usage_ms_per_100ms`) of `burst_latency_strict`"
    if limit is None:
        return None, "the logs have no limit (`limit_ms_per_100ms`) of `burst_latency_strict`"
    shown = [u[:USAGE_SECONDS * 10] for u in usage]
    lines = [(name, colour, svg.interval_steps(u, 0.1)) for (name, colour), u in zip(ENFORCERS, shown)]
    seconds = max(map(len, shown)) / 10
    return svg.chart(f"burst_latency_strict: the group's CPU time per 100 ms, first {seconds:g} s",
                     "time since the workload started (s)", "CPU time in the 100 ms (ms)", lines,
                     [(f"limit {limit:g} ms per 100 ms", "y", limit)], ylo=0), None


# (file in PICTURES, alt text, what it shows, drawing), linked under the burst table.
FIGURES = [
    ("burst_cdf.svg", "Distribution of burn wall times in burst_latency, kernel CFS and scx_bandwidth",
     f"""Every burn of `burst_latency` (with the burst) under each enforcer: the fraction of
burns that took at most x ms of wall time, beside the nominal {NOMINAL_BURN_MS} ms of CPU time
(dashed), which no burn can beat; the further right a curve rises, the longer its burns went
without a CPU.""", burst_cdf),
    ("burst_usage.svg", "CPU time per 100 ms of burst_latency_strict's group, kernel CFS and scx_bandwidth",
     f"""The group's CPU time (`cpu.stat` `usage_usec`) in each 100 ms of the first
{USAGE_SECONDS} s of `burst_latency_strict`, against the limit's share of 100 ms (dashed): the
intervals are wall-clock ones, not in phase with either enforcer's periods, so one that
straddles two periods can hold more than a quota.""", burst_usage),
]


def pictures(cfs_log, scx_log):
    """(file, alt, text, SVG or None, why it is missing) of each of FIGURES."""
    cfs, scx = results(cfs_log), results(scx_log)
    return [(file, alt, text, *draw(cfs, scx)) for file, alt, text, draw in FIGURES]


def pictures_text(drawn):
    """The markdown under the burst table: each picture's link and what it shows."""
    out = []
    for file, alt, text, picture, why in drawn:
        if picture is None:
            out += ["", wrap(f"Picture `{PICTURES}/{file}` missing: {why}.")]
        else:
            out += ["", f"![{alt}]({PICTURES}/{file})", "", wrap(" ".join(text.split()))]
    return out


INTRO = """The kernel column is the same VM with no sched_ext scheduler loaded and the limits written to
`cpu.max` (`cpu.max.burst`), enforced by CFS; the scx_bandwidth column loads the same limits
from its configuration. The overhead rows come from one boot, alternating scx_bandwidth
attached and detached. One run of each; figures are ratios (usage/limit from cgroupfs
`usage_usec`) or wall times and rates inside the emulated guest, where only comparisons within
one run mean anything. Earlier tables are in this file's git history."""

MICRO = """`cargo bench` (benches/agent.rs) measures the agent's user-space work on the host, outside
the VM: one period of 10,000 groups' timers (expire, refill, book, re-queue) and parsing the
largest configuration. Criterion prints and keeps its own figures (`target/criterion/`); they
are not part of this file. The release of parked tasks is a BPF program (`bw_unthrottle`) and
needs a sched_ext kernel."""


def tables(cfs_log, scx_log, wide_log=None):
    cfs, scx = results(cfs_log), results(scx_log)
    wide = results(wide_log) if wide_log else {}
    return [(heading, make(cfs, scx, wide), text) for heading, make, text in SECTIONS]


def tables_text(sections):
    return "\n\n".join(f"### {h}\n\n" + "\n".join(lines) for h, lines, _ in sections) + "\n"


# Cells with no figure by design: the --stats row of the agent table (the one with "| yes |")
# measures neither runs nor the yardstick.
EXPECTED_EMPTY = {"| yes |": "| – | – | – |"}


def check(table):
    """Rows with a missing figure ('–'), apart from the cells empty by design."""
    bad = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| ---") or "–" not in line:
            continue
        rest = line
        for marker, ok in EXPECTED_EMPTY.items():
            if marker in rest:
                rest = rest.replace(ok, "|")
        if "–" in rest:
            bad.append(line)
    return bad


def cpu_model(cpuinfo):
    """(model name, number of CPUs) from the text of /proc/cpuinfo."""
    models = re.findall(r"^model name\s*:\s*(.*?)\s*$", cpuinfo, re.M)
    return (models[0] if models else "unknown CPU"), len(re.findall(r"^processor\s*:", cpuinfo, re.M))


def revision(repo):
    """`git rev-parse --short HEAD`, with "-dirty" if the tree differs from it in any file git
    does not ignore."""
    git = ["git", "-C", repo]
    rev = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    changes = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    return rev + ("-dirty" if changes.strip() else "")


def record(path, qemu, accel, smp, mem, repo, cpuinfo="/proc/cpuinfo", now=None):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    with open(cpuinfo, encoding="utf-8", errors="replace") as f:
        model, cpus = cpu_model(f.read())
    try:
        version = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        version = f"{qemu} (version unknown)"
    info = {
        "revision": revision(repo),
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "start": int(now.timestamp()),
        "host_cpu": model,
        "host_cpus": cpus,
        "qemu": version,
        "accel": accel,
        "guest_smp": smp,
        "guest_mem": mem,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


NBSP = "\u00a0"


def keep(text):
    """`text` kept on one line by wrap()."""
    return text.replace(" ", NBSP)


def wrap(text):
    """A paragraph in lines of at most 95 characters, never broken inside a `code span`."""
    text = re.sub(r"`[^`]*`", lambda m: keep(m.group(0)), text)
    return "\n".join(textwrap.wrap(text, 95, break_long_words=False, break_on_hyphens=False)).replace(NBSP, " ")


def document(sections, info, cfs_log, scx_log, wide_log=None, drawn=()):
    kernels = {guest(cfs_log)[0], guest(scx_log)[0]} - {None}
    vcpus = guest(scx_log)[1] or guest(cfs_log)[1] or info["guest_smp"]
    minutes = (max(os.path.getmtime(p) for p in (cfs_log, scx_log, wide_log) if p) - info["start"]) / 60
    took = f" (it took {minutes:.0f} minutes)" if minutes >= 0.5 else ""
    run = (f"Generated by `tests/bench/run --write` from its run of revision {info['revision']} on "
           f"{keep(info['date'])}{took}. Reproduce: `tests/vm/setup.sh` once, then `tests/bench/run --write`, "
           "which boots the VM below once per enforcer, runs the benchmark set (`scxbw-guest scenarios "
           "--bench`) in each and writes this file and its pictures (`docs/bench/`), both from that run; "
           "`tests/bench/run --table --write` writes them again from that run's logs (`target/bench/`).")
    machine = (f"Machine: host {keep(info['host_cpu'])}, {info['host_cpus']} CPUs; {info['qemu']}, "
               f"`-accel {info['accel']}`; guest {vcpus} vCPUs and {info['guest_mem']} of memory, kernel "
               f"{', '.join(sorted(kernels)) or 'unknown'}.")
    if wide_log and guest(wide_log)[1]:
        machine += f" The 8-vCPU table: the same host and kernel, guest {guest(wide_log)[1]} vCPUs in 2 sockets and 2 NUMA nodes."
    out = [
        "# Benchmarks: scx_bandwidth beside the kernel's CFS bandwidth control",
        "",
        "<!-- Generated by tests/bench/table.py; edit the texts there, not here. -->",
        "",
        wrap(run),
        "",
        wrap(machine),
        "",
        INTRO,
    ]
    under = next(heading for heading, make, _ in SECTIONS if make is burst)
    for heading, lines, text in sections:
        out += ["", f"### {heading}", "", *lines, "", text]
        if heading == under:
            out += pictures_text(drawn)
    out += ["", "### Micro-benchmarks", "", MICRO, ""]
    return "\n".join(out)


def main(argv):
    p = argparse.ArgumentParser(prog="table.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a figure is missing")
    p.add_argument("--record", metavar="INFO", help="write the run's facts to INFO and exit")
    p.add_argument("--qemu", default="qemu-system-x86_64")
    p.add_argument("--accel")
    p.add_argument("--smp")
    p.add_argument("--mem")
    p.add_argument("--write", metavar="FILE", help="write the document to FILE")
    p.add_argument("--info", metavar="INFO", help="with --write: the facts --record wrote")
    p.add_argument("logs", nargs="*", metavar="LOG", help="CFS_LOG SCX_LOG [WIDE_LOG]")
    a = p.parse_args(argv)
    if a.record:
        if a.logs or a.write or not (a.accel and a.smp and a.mem):
            p.error("--record takes --accel, --smp and --mem, and no logs")
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        record(a.record, a.qemu, a.accel, int(a.smp), a.mem, repo)
        return 0
    if len(a.logs) not in (2, 3):
        p.error("two or three logs: CFS_LOG SCX_LOG [WIDE_LOG]")
    if a.write and not a.info:
        p.error("--write needs --info")
    sections = tables(*a.logs)
    text = tables_text(sections)
    print(text, end="")
    drawn = pictures(*a.logs[:2])
    if a.write:
        try:
            with open(a.info, encoding="utf-8") as f:
                info = json.load(f)
        except OSError as e:
            print(f"table.py: {e}: the facts of the run are missing (tests/bench/run writes them as it runs)",
                  file=sys.stderr)
            return 1
        folder = os.path.join(os.path.dirname(os.path.abspath(a.write)), PICTURES)
        os.makedirs(folder, exist_ok=True)
        for file, _, _, picture, _ in drawn:
            path = os.path.join(folder, file)
            if picture is not None:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(picture)
                print(f"table.py: wrote {path}", file=sys.stderr)
            elif os.path.exists(path):
                # An earlier run's picture beside this run's file would pass for this run's.
                os.remove(path)
        with open(a.write, "w", encoding="utf-8") as f:
            f.write(document(sections, info, *a.logs, drawn=drawn))
        print(f"table.py: wrote {a.write}", file=sys.stderr)
    for file, _, _, picture, why in drawn:
        if picture is None:
            print(f"table.py: picture {PICTURES}/{file} missing: {why}", file=sys.stderr)
    if a.check:
        missing = check(text)
        for line in missing:
            print(f"table.py: missing figures in: {line}", file=sys.stderr)
        return 1 if missing or any(d[3] is None for d in drawn) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
