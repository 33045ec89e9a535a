"""Unit tests of table.py: the tables and BENCHMARKS.md from a small fabricated pair of logs.

Run: python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import contextlib
import datetime
import io
import json
import os
import re
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

import table

INIT = "scxbw-init: kernel 7.3.4+deb13-amd64, 2 CPUs, sched_ext disabled, args: scenarios --bench\r\n"

# The pictures' series: the burns of burst_latency in the order they started, and the group's
# usage per 100 ms in burst_latency_strict; the kernel's usage runs longer than the 5 s drawn.
CFS_BURNS = [60.1, 61.0, 60.1, 60.8]
SCX_BURNS = [60.5, 64.5, 62.9, 60.2]
CFS_USAGE = [100.0, 20.0, 120.5, 0.0, 60.0] * 12
SCX_USAGE = [100.0, 100.0, 40.0, 60.0]


def listed(values):
    return ",".join(f"{v:.1f}" for v in values)


# Both logs as tests/vm/run prints them: console lines end in \r\n, kernel messages carry a
# "scxbw-init: kernel: " prefix, and a scenario cut short by a reboot gets a second verdict.
CFS_LOG = INIT + f"""scxbw-init: kernel: [    1.234] clocksource: Switched to clocksource tsc
SCENARIO acc_10ms_1t_0.1 PASS usage_cpus=0.100 ratio=1.001 tol=1.0\r
SCENARIO acc_1s_8t_1.9 PASS ratio=0.979
SCENARIO nested PASS p.ratio=1.000 p.x.ratio=0.996
SCENARIO burst_latency PASS p50_ms=60.1 p99_ms=60.8 max_ms=61.0 burns_ms={listed(CFS_BURNS)}\r
SCENARIO burst_latency_strict FAIL p50_ms=60.0 p99_ms=61.9 max_ms=104.3 usage_ms_per_100ms={listed(CFS_USAGE)} \
limit_ms_per_100ms=100.0 reason=first burns 61.0 ms: no visible throttling
SCENARIO burst_sweep PASS b20d30t1.quota_ms=50 b20d30t1.burns=140 b20d30t1.p50_ms=20.1 b20d30t1.p99_ms=21.0 b90d70t2.quota_ms=180 b90d70t2.burns=150 b90d70t2.p50_ms=90.2 b90d70t2.p99_ms=96.0
SCENARIO throttle_cost PASS resumes=111 delay_p50_us=69 delay_p99_us=215 delay_max_us=225 run_to_seen_p50_us=31
SCENARIO overhead SKIP
SCENARIO agent_cost SKIP
SCENARIO scale SKIP
scenarios: 6 passed, 1 failed
"""

SCX_LOG = INIT + f"""SCENARIO acc_10ms_1t_0.1 PASS ratio=0.994
SCENARIO acc_1s_8t_1.9 PASS ratio=1.001
SCENARIO nested PASS p.ratio=1.002 p.x.ratio=0.998
SCENARIO burst_latency FAIL p50_ms=90.0 p99_ms=99.0 max_ms=99.9 burns_ms=90.0,99.9 reason=interrupted
SCENARIO burst_latency PASS p50_ms=60.5 p99_ms=62.9 max_ms=64.5 burns_ms={listed(SCX_BURNS)}
SCENARIO burst_latency_strict PASS p50_ms=60.0 p99_ms=70.5 max_ms=107.8 usage_ms_per_100ms={listed(SCX_USAGE)} \
limit_ms_per_100ms=100.0
SCENARIO burst_sweep PASS b20d30t1.quota_ms=50 b20d30t1.burns=139 b20d30t1.p50_ms=20.2 b20d30t1.p99_ms=21.5 b20d30t1.throttled=0 b90d70t2.quota_ms=180 b90d70t2.burns=150 b90d70t2.p50_ms=91.0 b90d70t2.p99_ms=105.6 b90d70t2.throttled=1
SCENARIO throttle_cost PASS resumes=108 delay_p50_us=364 delay_p99_us=2896 delay_max_us=3625 run_to_seen_p50_us=35 agent_p50_us=120 agent_p99_us=1400 agent_to_run_p50_us=690 agent_to_run_p99_us=2100 same_cpu_pct=80 traced=120runs/550rets/540ipis wake_to_call_p50_us=248 wake_to_user_p50_us=130 call_p50_us=309 ret_to_off_p50_us=238 kicked_pct=99 on_kicked_pct=17 kick_to_run_p50_us=294
SCENARIO overhead PASS pingpong.scx_per_s=39302 pingpong.kernel_per_s=51155 pingpong.floor_per_s=45000 pingpong.floor_ratio=0.880 pingpong.scx_per_floor=0.873 pingpong.ratio=0.768 forks.scx_per_s=644 forks.kernel_per_s=609 forks.floor_per_s=620 forks.floor_ratio=1.018 forks.scx_per_floor=1.039 forks.ratio=1.057 messaging.scx_per_s=90000 messaging.kernel_per_s=95000 messaging.floor_per_s=93000 messaging.floor_ratio=0.979 messaging.scx_per_floor=0.968 messaging.ratio=0.947 wakelat.p50_us.scx=500 wakelat.p50_us.kernel=700 wakelat.p50_us.floor=650 wakelat.p50_us.floor_ratio=0.929 wakelat.p50_us.scx_per_floor=0.769 wakelat.p50_us.ratio=0.714 wakelat.p99_us.scx=9000 wakelat.p99_us.kernel=6000 wakelat.p99_us.floor=7000 wakelat.p99_us.floor_ratio=1.167 wakelat.p99_us.scx_per_floor=1.286 wakelat.p99_us.ratio=1.500 bpf.bw_select_cpu.ns_per_call=200 bpf.bw_select_cpu.calls_per_unit=0.200 bpf.bw_enqueue.ns_per_call=400 bpf.bw_enqueue.calls_per_unit=1.200 bpf.bw_dispatch.ns_per_call=600 bpf.bw_dispatch.calls_per_unit=2.200 bpf.bw_runnable.ns_per_call=800 bpf.bw_runnable.calls_per_unit=0.200 bpf.bw_running.ns_per_call=1000 bpf.bw_running.calls_per_unit=1.200 bpf.bw_stopping.ns_per_call=1200 bpf.bw_stopping.calls_per_unit=2.200 bpf.bw_quiescent.ns_per_call=1400 bpf.bw_quiescent.calls_per_unit=0.200 bpf.bw_tick.ns_per_call=1600 bpf.bw_tick.calls_per_unit=1.200 bpf.bw_sched_switch.ns_per_call=1800 bpf.bw_sched_switch.calls_per_unit=2.200 bpf.bw_update_idle.ns_per_call=2000 bpf.bw_update_idle.calls_per_unit=0.200 bpf.ns_per_unit=2000 bpf.cpu_share=0.200 floor.bpf.fl_select_cpu.ns_per_call=1300 floor.bpf.fl_select_cpu.calls_per_unit=2.000 floor.bpf.fl_enqueue.ns_per_call=500 floor.bpf.fl_enqueue.calls_per_unit=0.050 floor.bpf.ns_per_unit=2700 floor.bpf.cpu_share=0.050
SCENARIO agent_cost PASS n10.agent_ms_per_s=36.2 n10.agent_runs_per_s=101 n10.ticker_ms_per_s=20.8 n100.agent_ms_per_s=36.1 n100.agent_runs_per_s=81 n100.ticker_ms_per_s=20.0 n1000.agent_ms_per_s=41.6 n1000.agent_runs_per_s=91 n1000.ticker_ms_per_s=24.7
SCENARIO scale PASS agent_ms_per_s=100.0 active_groups=1026
scenarios: 9 passed, 1 failed
"""

WIDE_LOG = INIT.replace("2 CPUs", "8 CPUs") + """SCENARIO wide_bench PASS pingpong.scx_per_s=25320 pingpong.kernel_per_s=39717 pingpong.floor_per_s=31000 pingpong.floor_ratio=0.781 pingpong.scx_per_floor=0.817 pingpong.ratio=0.638 forks.scx_per_s=150 forks.kernel_per_s=157 forks.floor_per_s=155 forks.floor_ratio=0.987 forks.scx_per_floor=0.968 forks.ratio=0.958 messaging.scx_per_s=89176 messaging.kernel_per_s=92984 messaging.floor_per_s=91000 messaging.floor_ratio=0.979 messaging.scx_per_floor=0.980 messaging.ratio=0.959 wakelat.p50_us.scx=497 wakelat.p50_us.kernel=782 wakelat.p50_us.floor=700 wakelat.p50_us.floor_ratio=0.895 wakelat.p50_us.scx_per_floor=0.710 wakelat.p50_us.ratio=0.636 wakelat.p99_us.scx=10026 wakelat.p99_us.kernel=5663 wakelat.p99_us.floor=6100 wakelat.p99_us.floor_ratio=1.077 wakelat.p99_us.scx_per_floor=1.644 wakelat.p99_us.ratio=1.770 bpf.bw_select_cpu.ns_per_call=800 bpf.bw_select_cpu.calls_per_unit=0.800 bpf.bw_enqueue.ns_per_call=1600 bpf.bw_enqueue.calls_per_unit=1.800 bpf.bw_dispatch.ns_per_call=2400 bpf.bw_dispatch.calls_per_unit=2.800 bpf.bw_runnable.ns_per_call=3200 bpf.bw_runnable.calls_per_unit=0.800 bpf.bw_running.ns_per_call=4000 bpf.bw_running.calls_per_unit=1.800 bpf.bw_stopping.ns_per_call=4800 bpf.bw_stopping.calls_per_unit=2.800 bpf.bw_quiescent.ns_per_call=5600 bpf.bw_quiescent.calls_per_unit=0.800 bpf.bw_tick.ns_per_call=6400 bpf.bw_tick.calls_per_unit=1.800 bpf.bw_sched_switch.ns_per_call=7200 bpf.bw_sched_switch.calls_per_unit=2.800 bpf.bw_update_idle.ns_per_call=8000 bpf.bw_update_idle.calls_per_unit=0.800 bpf.ns_per_unit=8000 bpf.cpu_share=0.800 floor.bpf.fl_select_cpu.ns_per_call=6100 floor.bpf.fl_select_cpu.calls_per_unit=2.010 floor.bpf.fl_enqueue.ns_per_call=900 floor.bpf.fl_enqueue.calls_per_unit=0.120 floor.bpf.ns_per_unit=12400 floor.bpf.cpu_share=0.061
SCENARIO wide_limited_rest PASS pingpong.limited_per_s=20901 pingpong.free_per_s=20867 pingpong.ratio=1.002 messaging.limited_per_s=121980 messaging.free_per_s=116713 messaging.ratio=1.045 groups.limited_cpus=0.807 groups.free_cpus=0.803
scenarios: 2 passed, 0 failed
"""

INFO = {
    "revision": "abc1234-dirty",
    "date": "2026-12-02 03:40 UTC",
    "host_cpu": "AMD EPYC",
    "host_cpus": 2,
    "qemu": "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)",
    "accel": "tcg,thread=multi",
    "guest_smp": 2,
    "guest_mem": "1G",
}


class Run:
    """A fabricated run in a temporary directory: the two logs and the facts of the run."""

    def __init__(self, cfs=CFS_LOG, scx=SCX_LOG, wide=WIDE_LOG):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.cfs, self.scx, self.wide, self.info, self.out = (
            os.path.join(d, n) for n in ("cfs.log", "scx.log", "wide.log", "run.json", "B.md"))
        for path, text in ((self.cfs, cfs), (self.scx, scx), (self.wide, wide)):
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        # The run began 8 minutes before its last log was written.
        info = dict(INFO, start=int(os.path.getmtime(self.scx)) - 480)
        with open(self.info, "w", encoding="utf-8") as f:
            json.dump(info, f)

    def main(self, *args):
        """table.main's exit code, stdout and stderr."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = table.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def write(self, *extra):
        rc, out, err = self.main(*extra, "--write", self.out, "--info", self.info, self.cfs, self.scx, self.wide)
        with open(self.out, encoding="utf-8") as f:
            return rc, out, f.read()


class Writer(unittest.TestCase):
    def run_of(self, **logs):
        run = Run(**logs)
        self.addCleanup(run.dir.cleanup)
        return run

    def test_header_names_the_run_and_the_machine(self):
        rc, _, doc = self.run_of().write()
        self.assertEqual(rc, 0)
        self.assertTrue(doc.startswith("# Benchmarks: scx_bandwidth beside the kernel's CFS bandwidth control\n"))
        head = " ".join(doc[:doc.index("###")].split())
        for fact in ("Generated by `tests/bench/run --write`", "revision abc1234-dirty", "on 2026-12-02 03:40 UTC",
                     "it took 8 minutes", "`tests/vm/setup.sh` once, then `tests/bench/run --write`",
                     "`tests/bench/run --table --write`", "host AMD EPYC, 2 CPUs",
                     "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3), `-accel tcg,thread=multi`",
                     "guest 2 vCPUs and 1G of memory", "kernel 7.3.4+deb13-amd64.",
                     "The 8-vCPU table: the same host and kernel, guest 8 vCPUs in 2 sockets and 2 NUMA nodes.",
                     " ".join(table.INTRO.split())):
            self.assertIn(fact, head)

    def test_tables_hold_the_logs_figures(self):
        rc, printed, doc = self.run_of().write()
        self.assertEqual(rc, 0)
        for row in (
            "| 1 hog(s), 0.1 CPU, period 10ms | 1.001 | 0.994 | 0.001 | 0.006 | **no** |",
            "| 8 hog(s), 1.9 CPU, period 1s | 0.979 | 1.001 | 0.021 | 0.001 | yes |",
            "| nested: child 0.5 CPU | 0.996 | 0.998 | 0.004 | 0.002 | yes |",
            # The last verdict of a scenario counts (the first was cut short).
            "| 100 ms | 60.1 | 60.8 | 61.0 | 60.5 | 62.9 | 64.5 | 1.035 |",
            "| scx_bandwidth | 108 | 364 | 2896 | 3625 |",
            "| pipe ping-pong, 2 pairs (round trips per s) | 51155 | 45000 | 39302 | 0.768 | 0.880 | 0.873 |",
            "| messaging, 1 × (4 senders + 4 receivers) (messages per s) | 95000 | 93000 | 90000 | 0.947 | 0.979 | 0.968 |",
            "| wake to run, 4 workers woken every 2 ms: p99 (µs, lower is better) | 6000 | 7000 | 9000 | 1.500 | 1.167 | 1.286 |",
            "| pipe ping-pong, 8 pairs (round trips per s) | 39717 | 31000 | 25320 | 0.638 | 0.781 | 0.817 |",
            "| wake to run, 16 workers woken every 2 ms: p50 (µs, lower is better) | 782 | 700 | 497 | 0.636 | 0.895 | 0.710 |",
            # Each op's figures of both sizes in one row: dispatch is the third op of each log.
            "| dispatch | 2.200 | 600 | 2.800 | 2400 |",
            "| all programs: ns per round trip | | 2000 | | 8000 |",
            "| all programs: share of the guest's CPU time | | 0.200 | | 0.800 |",
            "| floor scheduler: select_cpu | 2.000 | 1300 | 2.010 | 6100 |",
            "| floor scheduler, all programs: share of the guest's CPU time | | 0.050 | | 0.061 |",
            "| 1000 | 10 | no | 41.6 | 91 | 24.7 | 1.68 |",
            "| 1026 | 11 | yes | 100.0 | – | – | – |",
        ):
            self.assertIn(row, doc)
            self.assertIn(row, printed)
        # The document holds exactly the tables the script prints, each followed by its text.
        tables = [block for block in printed.strip().split("\n\n") if block.startswith("|")]
        self.assertEqual(len(tables), len(table.SECTIONS))
        for block, (heading, _, text) in zip(tables, table.SECTIONS):
            self.assertIn(f"### {heading}\n\n{block}\n\n{text}\n", doc)
        self.assertIn(table.MICRO, doc)

    def test_duration_counts_the_last_log(self):
        run = self.run_of()
        t = os.path.getmtime(run.scx)
        os.utime(run.wide, (t + 120, t + 120))
        self.assertIn("it took 10 minutes", " ".join(run.write()[2].split()))

    def test_regenerated_from_the_same_logs_is_the_same(self):
        run = self.run_of()
        first = run.write()[2]
        self.assertEqual(run.write()[2], first)

    def test_burst_sweep_rows_and_goal(self):
        lines = table.burst_sweep(table.results(self.run_of().cfs), table.results(self.run_of().scx), {})
        # 21.5 / 21.0 = 1.024 meets the 1.05 goal; 105.6 / 96.0 = 1.100 does not.
        self.assertEqual(lines[2], "| 20 | 30 % | 1 | 50 | 20.1 | 21.0 | 20.2 | 21.5 | 1.024 | yes |")
        self.assertEqual(lines[3], "| 90 | 70 % | 2 | 180 | 90.2 | 96.0 | 91.0 | 105.6 | 1.100 | **no** |")
        self.assertEqual(len(lines), 4)
        # A cell one enforcer lacks is a missing figure, and no sweep at all is one too.
        run = self.run_of(scx=SCX_LOG.replace(" b90d70t2.p99_ms=105.6", ""))
        rc, _, err = run.main("--check", run.cfs, run.scx, run.wide)
        self.assertEqual(rc, 1)
        self.assertIn("| 90 | 70 % | 2 | 180 | 90.2 | 96.0 | 91.0 | – | – | – |", err)
        self.assertEqual(table.burst_sweep({}, {}, {})[2:], ["| – | – | – | – | – | – | – | – | – | – |"])

    def test_throttling_rows_and_where_the_time_goes(self):
        lines = table.throttling(table.results(self.run_of().cfs), table.results(self.run_of().scx), {})
        self.assertEqual(lines[2], "| kernel CFS | 111 | 69 | 215 | 225 | 31 | no agent | no agent | no agent |")
        self.assertEqual(lines[3], "| scx_bandwidth | 108 | 364 | 2896 | 3625 | 35 | 120 / 1400 | 690 / 2100 | 80 % |")
        self.assertEqual(len(lines), 4)
        # The trace's figures are required of scx_bandwidth: without them --check fails.
        run = self.run_of(scx=SCX_LOG.replace(" agent_to_run_p99_us=2100", ""))
        rc, _, err = run.main("--check", run.cfs, run.scx, run.wide)
        self.assertEqual(rc, 1)
        self.assertIn("| 690 / – |", err)

    def test_the_agents_steps(self):
        lines = table.agent_steps({}, table.results(self.run_of().scx), {})
        self.assertEqual(lines[2], "| 248 (130) | 309 | 238 | 99 % | 17 % | 294 |")
        # Without the trace's step figures --check fails.
        run = self.run_of(scx=SCX_LOG.replace(" call_p50_us=309", ""))
        rc, _, err = run.main("--check", run.cfs, run.scx, run.wide)
        self.assertEqual(rc, 1)
        self.assertIn("| 248 (130) | – | 238 |", err)

    def test_check_fails_on_a_missing_figure(self):
        run = self.run_of(scx=SCX_LOG.replace("n100.agent_ms_per_s=36.1 ", ""))
        rc, _, doc = run.write("--check")
        self.assertEqual(rc, 1)
        self.assertIn("| 100 | 10 | no | – | 81 | 20.0 | – |", doc)
        complete = self.run_of()
        self.assertEqual(complete.main("--check", complete.cfs, complete.scx, complete.wide)[0], 0)
        # Without the 8-vCPU log its table has no figures, and --check says so.
        rc, _, err = complete.main("--check", complete.cfs, complete.scx)
        self.assertEqual(rc, 1)
        self.assertIn("| pipe ping-pong, 8 pairs (round trips per s) | – | – | – |", err)

    def test_write_without_the_facts_of_the_run_fails(self):
        run = self.run_of()
        os.remove(run.info)
        rc, _, err = run.main("--write", run.out, "--info", run.info, run.cfs, run.scx)
        self.assertEqual(rc, 1)
        self.assertIn("facts of the run are missing", err)
        self.assertFalse(os.path.exists(run.out))


SVG = "{http://www.w3.org/2000/svg}"


class Picture:
    """An SVG that table.py wrote, read back: its frame, the values of its ticks, and the pixel
    where a value belongs on a frame that runs from the first tick to the last."""

    def __init__(self, path):
        self.root = ET.parse(path).getroot()
        frame = self.root.find(f"{SVG}rect[@class='frame']")
        self.left, self.top = float(frame.get("x")), float(frame.get("y"))
        self.right, self.bottom = self.left + float(frame.get("width")), self.top + float(frame.get("height"))
        self.texts = {c: [t for t in self.root.iter(f"{SVG}text") if t.get("class") == c] for c in ("xtick", "ytick")}
        self.xticks = [float(t.text) for t in self.texts["xtick"]]
        self.yticks = [float(t.text) for t in self.texts["ytick"]]

    def px(self, x):
        return self.left + (x - self.xticks[0]) / (self.xticks[-1] - self.xticks[0]) * (self.right - self.left)

    def py(self, y):
        return self.bottom - (y - self.yticks[0]) / (self.yticks[-1] - self.yticks[0]) * (self.bottom - self.top)

    def titled(self, tag, name):
        found = [e for e in self.root.iter(f"{SVG}{tag}") if e.findtext(f"{SVG}title") == name]
        assert len(found) == 1, f"{len(found)} {tag} titled {name!r}"
        return found[0]

    def points(self, name):
        return [tuple(map(float, p.split(","))) for p in self.titled("polyline", name).get("points").split()]

    def legend(self):
        """(name, colour, dashed) of each legend entry, left to right."""
        entries = sorted(self.root.iter(f"{SVG}g"), key=lambda g: float(g.find(f"{SVG}text").get("x")))
        return [(g.findtext(f"{SVG}text"), g.find(f"{SVG}line").get("stroke"),
                 g.find(f"{SVG}line").get("stroke-dasharray") is not None) for g in entries if g.get("class") == "legend"]

    def assertLegend(self, test, marks):
        """The legend names each series in its curve's colour, then the dashed marks."""
        series = [(e.findtext(f"{SVG}title"), e.get("stroke"), False) for e in self.root.iter(f"{SVG}polyline")]
        test.assertEqual([s[0] for s in series], ["kernel CFS", "scx_bandwidth"])
        test.assertNotEqual(series[0][1], series[1][1])
        test.assertEqual(self.legend(), series + [(m, "black", True) for m in marks])


class Pictures(unittest.TestCase):
    # Coordinates are written to 0.1 px.
    PX = 0.051

    def setUp(self):
        self.run = Run()
        self.addCleanup(self.run.dir.cleanup)
        self.bench = os.path.join(self.run.dir.name, table.PICTURES)

    def assertNear(self, got, want):
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertLess(max(abs(a - b) for a, b in zip(g, w)), self.PX, f"{g} != {w}")

    def assertTicksPlaced(self, pic):
        for t, v in zip(pic.texts["xtick"], pic.xticks):
            self.assertAlmostEqual(float(t.get("x")), pic.px(v), delta=self.PX)
        for t, v in zip(pic.texts["ytick"], pic.yticks):
            # The label's baseline sits 4 px below its tick, to centre the digits on it.
            self.assertAlmostEqual(float(t.get("y")) - 4, pic.py(v), delta=self.PX)

    def test_burn_distribution_rises_at_each_burn(self):
        self.assertEqual(self.run.write()[0], 0)
        pic = Picture(os.path.join(self.bench, "burst_cdf.svg"))
        # The burns span 60.1-64.5 ms (the interrupted verdict's 90-99.9 are not drawn); the
        # nominal 60 ms would sit on the frame's edge, so the axis starts a step earlier.
        self.assertEqual(pic.xticks, [59, 60, 61, 62, 63, 64, 65])
        self.assertEqual(pic.yticks, [0, 0.2, 0.4, 0.6, 0.8, 1])
        self.assertTicksPlaced(pic)
        for name, burns in (("kernel CFS", CFS_BURNS), ("scx_bandwidth", SCX_BURNS)):
            points, n = pic.points(name), len(burns)
            want = []
            for i, ms in enumerate(sorted(burns)):
                want += [(pic.px(ms), pic.py(i / n)), (pic.px(ms), pic.py((i + 1) / n))]
            self.assertNear(points, want)
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            self.assertEqual(xs, sorted(xs))
            self.assertEqual(ys, sorted(ys, reverse=True))
            self.assertAlmostEqual(ys[0], pic.bottom, delta=self.PX)
            self.assertAlmostEqual(ys[-1], pic.top, delta=self.PX)
        # Two of the kernel's four burns took 60.1 ms: the curve is at 0.5 from there to 60.8.
        self.assertIn((round(pic.px(60.1), 1), round(pic.py(0.5), 1)), pic.points("kernel CFS"))
        nominal = pic.titled("line", "nominal 60 ms")
        x = pic.left + (pic.right - pic.left) / 6
        self.assertEqual([float(nominal.get(k)) for k in ("x1", "y1", "x2", "y2")], [x, pic.bottom, x, pic.top])
        pic.assertLegend(self, ["nominal 60 ms"])

    def test_usage_per_interval_beside_the_limit(self):
        self.assertEqual(self.run.write()[0], 0)
        pic = Picture(os.path.join(self.bench, "burst_usage.svg"))
        self.assertEqual(pic.xticks, [0, 1, 2, 3, 4, 5])
        self.assertEqual(pic.yticks, [0, 50, 100, 150])
        self.assertTicksPlaced(pic)
        # The kernel's 60 intervals are cut to the first 50 (5 s); ours has 4.
        for name, usage in (("kernel CFS", CFS_USAGE[:50]), ("scx_bandwidth", SCX_USAGE)):
            want = []
            for i, ms in enumerate(usage):
                want += [(pic.px(i / 10), pic.py(ms)), (pic.px((i + 1) / 10), pic.py(ms))]
            self.assertNear(pic.points(name), want)
        self.assertEqual(len(pic.points("kernel CFS")), 100)
        limit = pic.titled("line", "limit 100 ms per 100 ms")
        y = pic.top + (pic.bottom - pic.top) / 3
        self.assertEqual([float(limit.get(k)) for k in ("x1", "y1", "x2", "y2")], [pic.left, y, pic.right, y])
        pic.assertLegend(self, ["limit 100 ms per 100 ms"])
        self.assertIn("first 5 s", "".join(pic.root.itertext()))

    def test_document_links_them_under_the_burst_table(self):
        rc, _, doc = self.run.write()
        self.assertEqual(rc, 0)
        burst = doc[doc.index("### Burst"):]
        burst = burst[:burst.index("\n### ", 1)]
        links = [line for line in burst.splitlines() if line.startswith("![")]
        self.assertEqual(links, [f"![{alt}](docs/bench/{file})" for file, alt, _, _ in table.FIGURES])
        flat = " ".join(burst.split())
        for file, alt, text, _ in table.FIGURES:
            self.assertTrue(os.path.exists(os.path.join(self.bench, file)))
            # The link, then what the picture shows, after the table and its text.
            self.assertIn(f"![{alt}](docs/bench/{file}) {' '.join(text.split())}", flat)
        text = next(text for _, make, text in table.SECTIONS if make is table.burst)
        self.assertLess(burst.index(text), burst.index("!["))
        self.assertIn("writes this file and its pictures (`docs/bench/`), both from that run", " ".join(doc.split()))

    def test_the_same_logs_draw_the_same_pictures(self):
        def drawn():
            self.run.write()
            out = {}
            for file, _, _, _ in table.FIGURES:
                with open(os.path.join(self.bench, file), encoding="utf-8") as f:
                    out[file] = f.read()
            return out
        self.assertEqual(drawn(), drawn())

    def test_logs_without_the_series(self):
        """Logs from before the guest printed the series: the file is written without the
        pictures, saying so, an earlier run's pictures are removed, and --check fails for them
        alone."""
        self.run.write()
        old = re.compile(r" (burns_ms|usage_ms_per_100ms|limit_ms_per_100ms)=\S+")
        for path, text in ((self.run.cfs, CFS_LOG), (self.run.scx, SCX_LOG)):
            with open(path, "w", encoding="utf-8") as f:
                f.write(old.sub("", text))
        rc, _, doc = self.run.write()
        self.assertEqual(rc, 0)
        flat = " ".join(doc.split())
        self.assertIn("Picture `docs/bench/burst_cdf.svg` missing: the kernel CFS and scx_bandwidth logs have no burn "
                      "times (`burns_ms`) of `burst_latency`.", flat)
        self.assertIn("Picture `docs/bench/burst_usage.svg` missing: the kernel CFS and scx_bandwidth logs have no "
                      "usage series", flat)
        self.assertNotIn("![", doc)
        self.assertEqual(os.listdir(self.bench), [])
        rc, _, err = self.run.main("--check", self.run.cfs, self.run.scx, self.run.wide)
        self.assertEqual(rc, 1)
        self.assertIn("table.py: picture docs/bench/burst_cdf.svg missing", err)
        self.assertNotIn("missing figures in", err)

    def test_a_broken_or_missing_list_is_no_picture(self):
        # A list cut short by a console line in the middle, and one log without its list.
        scx = SCX_LOG.replace(f"burns_ms={listed(SCX_BURNS)}", "burns_ms=60.5,64.5,6x")
        cfs = CFS_LOG.replace(" limit_ms_per_100ms=100.0", "").replace(f"usage_ms_per_100ms={listed(CFS_USAGE)}", "")
        run = Run(cfs=cfs, scx=scx)
        self.addCleanup(run.dir.cleanup)
        rc, _, err = run.main("--check", run.cfs, run.scx, run.wide)
        self.assertEqual(rc, 1)
        self.assertIn("burst_cdf.svg missing: the scx_bandwidth log has no burn times", err)
        self.assertIn("burst_usage.svg missing: the kernel CFS log has no usage series", err)
        no_limit = Run(cfs=CFS_LOG.replace(" limit_ms_per_100ms=100.0", ""), scx=SCX_LOG.replace(" limit_ms_per_100ms=100.0", ""))
        self.addCleanup(no_limit.dir.cleanup)
        rc, _, err = no_limit.main("--check", no_limit.cfs, no_limit.scx, no_limit.wide)
        self.assertEqual(rc, 1)
        self.assertIn("burst_usage.svg missing: the logs have no limit (`limit_ms_per_100ms`)", err)


class Record(unittest.TestCase):
    def test_cpu_model_and_count(self):
        text = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
        self.assertEqual(table.cpu_model(text), ("AMD EPYC 7B13", 2))

    def test_record_writes_the_facts_of_the_run(self):
        with tempfile.TemporaryDirectory() as d:
            git = ["git", "-C", d, "-c", "user.name=t", "-c", "user.email=t@example.org"]
            subprocess.run(["git", "init", "-q", d], check=True)
            with open(os.path.join(d, "f"), "w") as f:
                f.write("a\n")
            subprocess.run(git + ["add", "f"], check=True)
            subprocess.run(git + ["commit", "-qm", "c"], check=True)
            cpuinfo = os.path.join(d, "cpuinfo")
            with open(cpuinfo, "w") as f:
                f.write("processor\t: 0\nmodel name\t: Test CPU\nprocessor\t: 1\nmodel name\t: Test CPU\n")
            qemu = os.path.join(d, "qemu")
            with open(qemu, "w") as f:
                f.write("#!/bin/sh\necho 'QEMU emulator version 9.9.9'\necho 'Copyright'\n")
            os.chmod(qemu, 0o755)
            info = os.path.join(d, "run.json")
            now = datetime.datetime(2026, 12, 2, 3, 40, tzinfo=datetime.timezone.utc)

            def recorded():
                table.record(info, qemu, "tcg", 2, "1G", d, cpuinfo=cpuinfo, now=now)
                with open(info) as f:
                    return json.load(f)

            # cpuinfo, qemu and run.json are untracked: commit an ignore file for them first.
            with open(os.path.join(d, ".gitignore"), "w") as f:
                f.write("cpuinfo\nqemu\nrun.json\n")
            subprocess.run(git + ["add", ".gitignore"], check=True)
            subprocess.run(git + ["commit", "-qm", "ignore"], check=True)
            head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
            r = recorded()
            self.assertEqual(r, {"revision": head, "date": "2026-12-02 03:40 UTC", "start": int(now.timestamp()),
                                 "host_cpu": "Test CPU", "host_cpus": 2, "qemu": "QEMU emulator version 9.9.9",
                                 "accel": "tcg", "guest_smp": 2, "guest_mem": "1G"})
            with open(os.path.join(d, "f"), "a") as f:
                f.write("b\n")
            self.assertEqual(recorded()["revision"], head + "-dirty")
            subprocess.run(git + ["checkout", "-q", "f"], check=True)
            with open(os.path.join(d, "new"), "w") as f:
                f.write("x\n")
            self.assertEqual(recorded()["revision"], head + "-dirty")


if __name__ == "__main__":
    unittest.main()
