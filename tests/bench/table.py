#!/usr/bin/env python3
"""Markdown table of a benchmark run: the kernel's CFS column beside scx_bandwidth's.

Reads the SCENARIO lines of two tests/vm/run logs (the last verdict of each scenario counts,
as a scenario interrupted by an emulator crash is run again after a reboot)."""
import contextlib
import io
import re
import sys


def results(path):
    out = {}
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"^SCENARIO (\S+) (PASS|FAIL|SKIP)(.*)$", line.rstrip("\n"))
        if m:
            figs = dict(kv.split("=", 1) for kv in m.group(3).split() if "=" in kv and not kv.startswith("reason="))
            out[m.group(1)] = figs
    return out


def num(figs, key):
    try:
        return float(figs[key])
    except (KeyError, ValueError, TypeError):
        return None


def fmt(x, spec="{:.3f}"):
    return "–" if x is None else spec.format(x)


def main(cfs_log, scx_log):
    cfs, scx = results(cfs_log), results(scx_log)
    print("### Enforcement accuracy (usage / limit over a 4 s window after 1 s warm-up)\n")
    print("| workload | kernel CFS | scx_bandwidth | error CFS | error scx | scx error ≤ CFS |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for name in sorted(set(cfs) | set(scx)):
        if not name.startswith("acc_"):
            continue
        _, period, threads, cpus = name.split("_")
        a, b = num(cfs.get(name, {}), "ratio"), num(scx.get(name, {}), "ratio")
        ea = None if a is None else abs(a - 1)
        eb = None if b is None else abs(b - 1)
        ok = "–" if ea is None or eb is None else ("yes" if eb <= ea + 0.0005 else "**no**")
        rows.append((period, f"{threads[:-1]} hog(s), {cpus} CPU, period {period}", a, b, ea, eb, ok))
    order = {"10ms": 0, "100ms": 1, "1s": 2}
    for r in sorted(rows, key=lambda r: (order.get(r[0], 9), r[1])):
        print(f"| {r[1]} | {fmt(r[2])} | {fmt(r[3])} | {fmt(r[4])} | {fmt(r[5])} | {r[6]} |")
    n = cfs.get("nested", {}), scx.get("nested", {})
    for key, label in [("p.ratio", "nested: parent 1.2 CPU"), ("p.x.ratio", "nested: child 0.5 CPU")]:
        a, b = num(n[0], key), num(n[1], key)
        ea = None if a is None else abs(a - 1)
        eb = None if b is None else abs(b - 1)
        ok = "–" if ea is None or eb is None else ("yes" if eb <= ea + 0.0005 else "**no**")
        print(f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(ea)} | {fmt(eb)} | {ok} |")

    print("\n### Burst: wall time of a 60 ms burn, 2 threads every 200 ms, quota 100 ms/100 ms (ms)\n")
    print("| burst | CFS p50 | CFS p99 | CFS max | scx p50 | scx p99 | scx max | scx p99 ÷ CFS p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, label in [("burst_latency", "100 ms"), ("burst_latency_strict", "0")]:
        a, b = cfs.get(name, {}), scx.get(name, {})
        pa, pb = num(a, "p99_ms"), num(b, "p99_ms")
        ratio = None if pa is None or pb is None else pb / pa
        print(f"| {label} | {fmt(num(a, 'p50_ms'), '{:.1f}')} | {fmt(pa, '{:.1f}')} | {fmt(num(a, 'max_ms'), '{:.1f}')} "
              f"| {fmt(num(b, 'p50_ms'), '{:.1f}')} | {fmt(pb, '{:.1f}')} | {fmt(num(b, 'max_ms'), '{:.1f}')} | {fmt(ratio)} |")

    print("\n### Throttling cost: a throttled hog's resume after each refill, behind the fastest resume (µs)\n")
    print("| | resumes | p50 | p99 | max |")
    print("| --- | --- | --- | --- | --- |")
    for label, figs in [("kernel CFS", cfs.get("throttle_cost", {})), ("scx_bandwidth", scx.get("throttle_cost", {}))]:
        print(f"| {label} | {figs.get('resumes', '–')} | {figs.get('delay_p50_us', '–')} | {figs.get('delay_p99_us', '–')} "
              f"| {figs.get('delay_max_us', '–')} |")

    o = scx.get("overhead", {})
    print("\n### Overhead without limits (same boot, alternating; median of 3 runs of 3 s, per s)\n")
    print("| workload | kernel's scheduler | scx_bandwidth | scx ÷ kernel |")
    print("| --- | --- | --- | --- |")
    for key, label in [("pingpong", "pipe ping-pong, 2 pairs (round trips)"), ("forks", "fork + exit + wait, 2 threads")]:
        print(f"| {label} | {o.get(key + '.kernel_per_s', '–')} | {o.get(key + '.scx_per_s', '–')} | {o.get(key + '.ratio', '–')} |")

    s, a = scx.get("scale", {}), scx.get("agent_cost", {})
    print("\n### Agent cost (scx_bandwidth only; CPU ms per s of the agent process)\n")
    print("| limited groups | busy groups | --stats 1 | agent CPU ms per s | agent threads run per s "
          "| a thread only waking 100/s: CPU ms per s | agent ÷ that thread |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in (10, 100, 1000):
        ag, tk = num(a, f"n{n}.agent_ms_per_s"), num(a, f"n{n}.ticker_ms_per_s")
        ratio = None if ag is None or not tk else ag / tk
        print(f"| {n} | 10 | no | {fmt(ag, '{:.1f}')} | {a.get(f'n{n}.agent_runs_per_s', '–')} | {fmt(tk, '{:.1f}')} "
              f"| {fmt(ratio, '{:.2f}')} |")
    busy = "–" if "active_groups" not in s else "11"
    print(f"| {s.get('active_groups', '–')} | {busy} | yes | {s.get('agent_ms_per_s', '–')} | – | – | – |")


# Cells with no figure by design: the --stats row of the agent table measures neither runs
# nor the yardstick.
EXPECTED_EMPTY = {"| – | – | – |"}


def check(table):
    """Rows with a missing figure ('–'), apart from the cells empty by design."""
    bad = []
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith("| ---") or "–" not in line:
            continue
        rest = line
        for ok in EXPECTED_EMPTY:
            rest = rest.replace(ok, "|")
        if "–" in rest:
            bad.append(line)
    return bad


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--check"]
    if "--check" not in sys.argv:
        main(*args)
        sys.exit(0)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(*args)
    print(buf.getvalue(), end="")
    missing = check(buf.getvalue())
    for line in missing:
        print(f"table.py: missing figures in: {line}", file=sys.stderr)
    sys.exit(1 if missing else 0)
