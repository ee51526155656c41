#!/usr/bin/python3
"""The application table harness: runs every version of every application (the mdsm versions and
the plain-MPI reference versions) at 1..4 ranks, several times, and prints the CarlOS paper's
tables (version, N, time, speedup, messages, average message size, plus diffs created and diff
requests) with medians and ranges, a per-rank time breakdown, and plots.

    /usr/bin/python3 bench/apps/run_tables.py --build build-rel      # everything, realistic sizes
    /usr/bin/python3 bench/apps/run_tables.py --apps matmul,sor --ranks 1,2 --quick
    /usr/bin/python3 bench/apps/run_tables.py --build build-rel --demo

Runs are interleaved: for each repetition, every app, version and rank count runs once, so the
configurations compared are measured side by side in time. Every timed run (one mpirun) holds
the machine lock (an exclusive flock on /tmp/mdsm-machine.lock) and first waits, up to
--idle-wait seconds, for the machine to be idle. Each run is launched with tools/mdsmrun; the
program prints MDSM_APP and MDSM_APP_RANK lines (apps/common/report.hpp), which are all this
script reads. Exits non-zero if any run crashed, timed out, printed no result or failed
verification. Raw output of every run goes to DIR/logs/.

With 2 ranks at the realistic sizes (or --ceiling), each repetition also runs bench/compute_spread
once at 2 ranks: the speedup of two ranks that never communicate, the machine's ceiling in the
same run. The script then checks issue 20's targets (TARGETS) as written and relative to it.
"""

import argparse
import csv
import fcntl
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

# app -> (executable under the build directory, versions in table order, arguments of the
# realistic size). A realistic size keeps one rank computing for 1-3 s on our 2-core machine
# (release build), so that a run measures the protocols and not start-up noise. The version
# "mpi" is the plain-MPI reference version, the executable with "_mpi" appended.
APPS = {
    "tsp": ("apps/tsp/tsp", ["lock", "fibers", "hybrid", "msg"], ["--size=20"]),
    "quicksort": ("apps/quicksort/quicksort", ["lock", "hybrid1", "hybrid2"], ["--size=2097152"]),
    "water": ("apps/water/water", ["lock", "hybrid", "mpi"], ["--size=2744", "--steps=40"]),
    "matmul": ("apps/matmul/matmul", ["barrier", "hybrid", "mpi"], ["--size=2048"]),
    "apsp": ("apps/apsp/apsp", ["barrier", "hybrid", "mpi"], ["--size=1536"]),
    "sor": ("apps/sor/sor", ["barrier", "hybrid", "mdsm_mpi", "mpi"], ["--size=2048", "--steps=250"]),
}
MPI_VERSION = "mpi"

# What ./quickstart demo runs (--demo): one app, the versions to compare and a size at which one
# rank computes for about 1-2 s, at 1 and 2 ranks.
DEMO = ("water", ["lock", "hybrid", "mpi"], ["--size=1728", "--steps=30"])

LOCK_FILE = "/tmp/mdsm-machine.lock"

# The ceiling (--ceiling): bench/compute_spread, one round per repetition at 2 ranks, SOR's kernel
# over the table's SOR grid with no communication at all: the speedup this machine gives two ranks
# that never communicate, measured side by side with the applications (docs/APPS_numeric.md).
CEILING = ("bench/compute_spread", ["2048", "250", "1"])

# Issue 20's targets at 2 ranks. ("speedup", app, versions, T): the speedup is at least T;
# ("mpi", app, versions, f): at least f times the plain-MPI reference's speedup in the same run;
# versions None means every mdsm version. A speedup target T is also checked relative to the
# ceiling c measured in the same run: at least T * min(c, 2) / 2 (the same share of what two ranks
# can reach here as T is of 2), except T <= 1 (never slower than one rank), which stays as it is.
TARGETS = [
    ("speedup", "sor", ["barrier", "hybrid"], 1.7),
    ("speedup", "matmul", ["barrier", "hybrid"], 1.7),
    ("speedup", "apsp", ["barrier", "hybrid"], 1.7),
    ("mpi", "sor", None, 0.9),
    ("mpi", "matmul", None, 0.9),
    ("speedup", "water", ["hybrid"], 1.7),
    ("mpi", "water", ["hybrid"], 0.9),
    ("speedup", "quicksort", ["hybrid1"], 1.5),
    ("speedup", "tsp", ["hybrid"], 1.8),
    ("speedup", None, ["lock"], 1.3),
    ("speedup", None, None, 1.0),
]


CSV_HEADER = ["app", "version", "ranks", "oversubscribed", "runs", "time_s", "time_min_s", "time_max_s", "speedup",
              "speedup_min", "speedup_max", "messages", "avg_msg_bytes", "diffs", "diff_requests", "verified"]
RANK_CSV_HEADER = ["app", "version", "ranks", "rank", "time_s", "compute_s", "fault_s", "sync_wait_s",
                   "coherence_s", "gc_s", "handler_s", "wait_s"]
RUNS_CSV_HEADER = ["app", "version", "ranks", "repeat", "time_s", "verified", "start_utc", "lock_wait_s", "load1",
                   "busy_cpus", "idle_wait_s", "busy", "others_cpus"]

REPO = Path(__file__).resolve().parent.parent.parent


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", default=None, help="comma-separated apps (default: all)")
    p.add_argument("--versions", default=None,
                   help="comma-separated versions to run (default: every version of each app)")
    p.add_argument("--ranks", default=None, help="comma-separated rank counts (default 1,2,3,4)")
    p.add_argument("--build", default="build", help="meson build directory (default: build)")
    p.add_argument("--out", default=None, help="output directory (default: bench/results)")
    p.add_argument("--quick", action="store_true", help="pass --quick (the small CI sizes)")
    p.add_argument("--paper-sizes", action="store_true",
                   help="pass no size: the programs' own defaults, the CarlOS paper's sizes")
    p.add_argument("--size", type=int, default=None, help="--size=N for every app, instead of the table's")
    p.add_argument("--steps", type=int, default=None, help="--steps=N for every app, instead of the table's")
    p.add_argument("--demo", action="store_true",
                   help=f"the demo: {DEMO[0]} ({', '.join(DEMO[1])}) at 1 and 2 ranks, {' '.join(DEMO[2])}")
    p.add_argument("--no-plots", action="store_true", help="do not render PNG plots")
    p.add_argument("--repeat", type=int, default=3, help="runs per configuration (default 3), interleaved")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a run counts as hung")
    p.add_argument("--idle-wait", type=float, default=60,
                   help="seconds to wait at most, before each run, for the machine to be idle (default 60)")
    p.add_argument("--idle-cpus", type=float, default=0.3,
                   help="idle: other work keeps at most this many CPUs busy (default 0.3)")
    p.add_argument("--no-lock", action="store_true",
                   help=f"do not take the machine lock ({LOCK_FILE}); for runs inside a test that holds it")
    p.add_argument("--nice", type=int, default=0,
                   help="run the programs at this niceness (negative: ahead of other work; needs root)")
    p.add_argument("--mdsmrun", default=str(REPO / "tools" / "mdsmrun"), help="launcher")
    p.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=None,
                   help="also run compute_spread once per repetition at 2 ranks (the machine's ceiling) and check "
                        "issue 20's targets against it (default: on for the realistic sizes with 2 ranks)")
    p.add_argument("--extra", default="", help="extra program arguments, after the size, e.g. '--seed=3'")
    a = p.parse_args(argv)
    if a.demo:
        app, versions, _ = DEMO
        a.apps = a.apps or app
        a.versions = a.versions or ",".join(versions)
        a.ranks = a.ranks or "1,2"
    a.apps = [x for x in (a.apps or ",".join(APPS)).split(",") if x]
    for x in a.apps:
        if x not in APPS:
            p.error(f"unknown app '{x}' (known: {', '.join(APPS)})")
    a.versions = None if a.versions is None else [x for x in a.versions.split(",") if x]
    if a.versions is not None:
        known = {v for app in a.apps for v in APPS[app][1]}
        for v in a.versions:
            if v not in known:
                p.error(f"no app selected has a version '{v}' (they have: {', '.join(sorted(known))})")
    try:
        a.ranks = sorted({int(x) for x in (a.ranks or "1,2,3,4").split(",") if x})
    except ValueError:
        p.error("--ranks takes comma-separated integers")
    if not a.ranks or min(a.ranks) < 1:
        p.error("--ranks needs positive rank counts")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.quick and a.paper_sizes:
        p.error("--quick and --paper-sizes exclude each other")
    a.build = resolve(a.build)
    if a.ceiling is None:
        a.ceiling = 2 in a.ranks and not (a.quick or a.paper_sizes or a.demo or a.size or a.steps)
    a.out = Path(a.out) if a.out else REPO / "bench" / "results"
    return a


def resolve(path):
    """A relative build directory: from the current directory if it exists there, else the repo."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p.resolve()
    return (REPO / p).resolve()


def executable(app, version):
    rel = APPS[app][0]
    return rel + "_mpi" if version == MPI_VERSION else rel


def size_args(args, app):
    """The program's size arguments: --quick, the programs' defaults, the demo's or the table's,
    with --size and --steps replacing theirs."""
    if args.quick:
        out = ["--quick"]
    elif args.paper_sizes:
        out = []
    elif args.demo and app == DEMO[0]:
        out = list(DEMO[2])
    else:
        out = list(APPS[app][2])
    for name in ("size", "steps"):
        value = getattr(args, name)
        if value is not None:
            out = [a for a in out if not a.startswith(f"--{name}=")] + [f"--{name}={value}"]
    return out


def parse_fields(line):
    out = {}
    for tok in line.split()[1:]:
        key, sep, value = tok.partition("=")
        if sep:
            out[key] = value
    return out


def parse_output(text):
    """The MDSM_APP line (dict) and the MDSM_APP_RANK lines (list of dicts) of one run."""
    result, ranks = None, []
    for line in text.splitlines():
        if line.startswith("MDSM_APP "):
            result = parse_fields(line)
        elif line.startswith("MDSM_APP_RANK "):
            ranks.append(parse_fields(line))
    return result, ranks


# ---- protecting timed runs from the machine's other work ----------------------------------------

class machine_lock:
    """The exclusive machine lock around one timed run. Builds and tests of other users of the
    machine take it shared (flock -s), so they wait while a run is timed; other timed runs take it
    exclusively, so timed runs never overlap. A no-op with --no-lock."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.fd = None

    def __enter__(self):
        if self.enabled:
            # Read-only, as flock(1) opens it: whoever created the file, everyone can lock it.
            self.fd = os.open(LOCK_FILE, os.O_RDONLY | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def cpu_times():
    """(busy, total) jiffies over all CPUs from /proc/stat; busy counts everything but idle and
    iowait (steal too: time the hypervisor gave to someone else)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    idle = fields[3] + fields[4]
    total = sum(fields)
    return total - idle, total


def children_cpu_s():
    """User + system CPU seconds of this process's reaped descendants (a finished mpirun and,
    through it, its ranks)."""
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def busy_cpus(window=0.25):
    """How many CPUs the machine's other work kept busy over the next `window` seconds."""
    b0, t0 = cpu_times()
    time.sleep(window)
    b1, t1 = cpu_times()
    if t1 <= t0:
        return 0.0
    return (os.cpu_count() or 1) * (b1 - b0) / (t1 - t0)


def wait_for_idle(args):
    """Waits (at most --idle-wait seconds) until other work keeps at most --idle-cpus CPUs busy.
    Returns (busy CPUs at the start of the run, seconds waited, whether it stayed busy)."""
    start = time.monotonic()
    while True:
        busy = busy_cpus()
        waited = time.monotonic() - start
        if busy <= args.idle_cpus:
            return busy, waited, False
        if waited >= args.idle_wait:
            return busy, waited, True


# ---- running ------------------------------------------------------------------------------------

def launch(args, cmd, log):
    """Runs one timed command under the machine lock, after waiting for the machine to be idle, and
    writes its output to `log`. Returns (exit code or None if it hung, stdout, stderr, facts about
    the machine during the run)."""
    t_lock = time.monotonic()
    with machine_lock(not args.no_lock):
        lock_wait = time.monotonic() - t_lock
        busy, waited, still_busy = wait_for_idle(args) if args.idle_wait > 0 else (busy_cpus(0.1), 0.0, False)
        load1 = os.getloadavg()[0]
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        machine0, ours0 = cpu_times(), children_cpu_s()
        t0 = time.monotonic()
        # Its own session, so that a hung run is ended with all its ranks (mpirun's process group).
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=args.timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc, out, err = None, "", ""
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    out, err = proc.communicate(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        wall = time.monotonic() - t0
        machine1, ours1 = cpu_times(), children_cpu_s()
    # Other work during the run: the machine's busy CPU time less the run's own (mpirun and its
    # ranks, counted once reaped), per second of the run.
    busy_s = (machine1[0] - machine0[0]) / (os.sysconf("SC_CLK_TCK") or 100)
    others = max(0.0, busy_s - (ours1 - ours0)) / wall if wall > 0 else 0.0
    machine = (f"# started {started} after {lock_wait:.1f} s waiting for the machine lock, "
               f"load average (1 min) {load1:.2f}, other work {busy:.2f} CPUs busy "
               f"after waiting {waited:.1f} s{' (gave up waiting: machine busy)' if still_busy else ''}; "
               f"during the run other work kept {others:.2f} CPUs busy")
    log.write_text(f"$ {shlex.join(cmd)}\n{machine}\n# exit {rc}, {wall:.1f} s wall\n"
                   f"--- stdout\n{out}\n--- stderr\n{err}")
    facts = {"start_utc": started, "load1": load1, "busy_cpus": busy, "idle_wait_s": waited, "busy": still_busy,
             "others_cpus": others, "lock_wait_s": lock_wait}
    return rc, out, err, facts


def run_once(args, app, version, nranks, repeat):
    exe = args.build / executable(app, version)
    cmd = [args.mdsmrun, "-n", str(nranks), str(exe), f"--version={version}"]
    cmd += size_args(args, app) + shlex.split(args.extra)
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    log = args.out / "logs" / f"{app}-{version}-{nranks}-{repeat}.log"
    rc, out, err, facts = launch(args, cmd, log)
    result, ranks = parse_output(out)
    problem = None
    if rc is None:
        problem = f"timed out after {args.timeout:.0f} s"
    elif result is None:
        problem = f"exit code {rc} and no MDSM_APP line"
    elif result.get("verified") != "1":
        problem = "verification FAILED"
    elif rc != 0:
        problem = f"exit code {rc}"
    elif int(result.get("ranks", -1)) != nranks:
        problem = f"reported {result.get('ranks')} ranks"
    if problem:
        # The program's own message comes first; mpirun's boxed notice after it.
        lines = [l for l in (err or out).splitlines() if l.strip() and not l.startswith("---")]
        tail = "\n".join(lines[:4])
        print(f"  FAILED: {app} {version} {nranks} ranks: {problem} (log: {log})", file=sys.stderr)
        if tail:
            print("    " + tail.replace("\n", "\n    "), file=sys.stderr)
    return {
        "app": app, "version": version, "ranks": nranks, "repeat": repeat, "problem": problem,
        "result": result, "per_rank": ranks, "time_s": float(result["time_s"]) if result else None, **facts,
    }


def run_ceiling(args, repeat):
    """One round of compute_spread at 2 ranks: {"repeat", "ratio", "alone_s", "slowest_s"} (None
    values if it failed)."""
    exe = args.build / CEILING[0]
    cmd = [args.mdsmrun, "-n", "2", str(exe)] + CEILING[1]
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    rc, out, _, facts = launch(args, cmd, args.out / "logs" / f"ceiling-2-{repeat}.log")
    row = {"repeat": repeat, "ratio": None, "alone_s": None, "slowest_s": None, **facts}
    # The round's line: "round  alone_s  slowest_s  ideal_speedup".
    lines = [l.split() for l in out.splitlines()]
    rounds = [l for l in lines if len(l) == 4 and l[0].isdigit()]
    if rc == 0 and rounds:
        row["alone_s"], row["slowest_s"], row["ratio"] = (float(x) for x in rounds[-1][1:])
    return row


def ceiling_summary(ceiling):
    """(median, min, max) of the ceiling's ratios, or None."""
    ratios = [c["ratio"] for c in ceiling if c["ratio"] is not None]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def check_targets(rows, c):
    """Issue 20's targets at 2 ranks, each as written and relative to the ceiling c (its
    ceiling_summary, or None): a list of (label, measured, target, met, relative target or None,
    met relative)."""
    two = {(r["app"], r["version"]): r for r in rows if r["ranks"] == 2 and r.get("speedup") is not None}
    checks = []
    for kind, app, versions, value in TARGETS:
        for (a, v), r in sorted(two.items()):
            if v == MPI_VERSION or (app is not None and a != app) or (versions is not None and v not in versions):
                continue
            if kind == "speedup":
                # "No slower than one rank" is not scaled: it is what a second rank must never cost.
                if value <= 1.0:
                    rel = value
                else:
                    rel = value * min(c[0], 2.0) / 2.0 if c else None
                label = f"{a} {v}: speedup >= {value:g}"
                checks.append((label, r["speedup"], value, r["speedup"] >= value, rel,
                               rel is not None and r["speedup"] >= rel))
            else:
                m = two.get((a, MPI_VERSION))
                if m is None:
                    continue
                want = value * m["speedup"]
                label = f"{a} {v}: >= {value:g} x plain MPI ({m['speedup']:.2f})"
                met = r["speedup"] >= want
                checks.append((label, r["speedup"], want, met, want, met))
    return checks


def print_targets(rows, ceiling):
    c = ceiling_summary(ceiling)
    checks = check_targets(rows, c)
    if not checks:
        return
    print("\nIssue 20's targets at 2 ranks (medians)")
    if c:
        print(f"ceiling (compute_spread, two ranks that never communicate, {len(ceiling)} rounds interleaved with "
              f"the apps): {c[0]:.2f} [{c[1]:.2f}-{c[2]:.2f}]; relative target = target x min(ceiling, 2) / 2")
    head = f"{'target':<44}{'measured':>9}{'target':>8}{'met':>5}{'relative':>10}{'met':>5}"
    print(head)
    print("-" * len(head))
    for label, got, want, met, rel, met_rel in checks:
        print(f"{label:<44}{got:>9.2f}{want:>8.2f}{'yes' if met else 'no':>5}{fmt(rel, 2):>10}"
              f"{'yes' if met_rel else 'no':>5}")
    print(f"met as written: {sum(x[3] for x in checks)} of {len(checks)}; relative to the ceiling: "
          f"{sum(x[5] for x in checks)} of {len(checks)}")
    # The same problem at 2 ranks against the plain-MPI reference's time: no 1-rank baseline in it,
    # whose spread (one rank's time moves by 20-50% here run to run) decides many speedup verdicts.
    times = {(r["app"], r["version"]): r["time_s"] for r in rows if r["ranks"] == 2 and r.get("time_s")}
    ratios = [f"{a} {v} {t / times[(a, MPI_VERSION)]:.2f}" for (a, v), t in sorted(times.items())
              if v != MPI_VERSION and (a, MPI_VERSION) in times]
    if ratios:
        print("2-rank time / plain MPI's 2-rank time (medians): " + ", ".join(ratios))


def rank_breakdown(p):
    """One rank's seconds in the median run: compute = time - fault - sync wait - coherence - gc
    (the application thread's own work; coherence is the consistency work its threads did at
    releases and acquires, waits excluded); handlers ran on any thread and are not part of the sum."""
    f = {k: float(p.get(k, 0))
         for k in ("time_s", "fault_s", "sync_wait_s", "coherence_s", "gc_s", "handler_s", "wait_s")}
    f["compute_s"] = max(0.0, f["time_s"] - f["fault_s"] - f["sync_wait_s"] - f["coherence_s"] - f["gc_s"])
    f["rank"] = int(p["rank"])
    return f


def summarize(runs, app, version, nranks):
    """The row of one configuration from its runs: median time (and the counters of the median
    run, the lower middle one for an even count), time range, failures."""
    mine = [r for r in runs if (r["app"], r["version"], r["ranks"]) == (app, version, nranks)]
    failed = next((r["problem"] for r in mine if r["problem"]), None)
    done = sorted((r for r in mine if r["result"] is not None), key=lambda r: r["time_s"])
    row = {"app": app, "version": version, "ranks": nranks, "failed": failed,
           "oversubscribed": nranks > (os.cpu_count() or 1)}
    if not done:
        return row
    median_run = done[(len(done) - 1) // 2]
    result = median_run["result"]
    messages = int(result["messages"])
    row.update({
        "runs": len(done),
        "times": {r["repeat"]: r["time_s"] for r in done},
        "time_s": statistics.median(r["time_s"] for r in done),
        "time_min_s": done[0]["time_s"],
        "time_max_s": done[-1]["time_s"],
        "messages": messages,
        "avg_msg_bytes": int(result["msg_bytes"]) / messages if messages else 0.0,
        "diffs": int(result["diffs"]),
        "diff_requests": int(result["diff_requests"]),
        "verified": failed is None,
        "per_rank": [rank_breakdown(p) for p in median_run["per_rank"]],
    })
    return row


def add_speedups(rows):
    """Speedup over the same version at 1 rank: the ratio of the median times; its range is that
    of the per-repetition ratios, each pairing the 1-rank and the N-rank run of one repetition
    (measured close together in time, since runs are interleaved)."""
    base = {(r["app"], r["version"]): r for r in rows if r["ranks"] == 1 and r.get("time_s")}
    for r in rows:
        b = base.get((r["app"], r["version"]))
        r["speedup"] = r["speedup_min"] = r["speedup_max"] = None
        if b is None or not r.get("time_s"):
            continue
        r["speedup"] = b["time_s"] / r["time_s"]
        pairs = [b["times"][k] / t for k, t in r["times"].items() if k in b["times"] and t > 0]
        if pairs:
            r["speedup_min"], r["speedup_max"] = min(pairs), max(pairs)


# ---- output -------------------------------------------------------------------------------------

def fmt(x, digits, missing="-"):
    return missing if x is None else f"{x:.{digits}f}"


def print_tables(rows, apps):
    for app in apps:
        mine = [r for r in rows if r["app"] == app]
        if not mine:
            continue
        print(f"\n{app}")
        head = (f"{'version':<9}{'N':>3}{'time (s)':>10} {'range':<15}{'speedup':>8} {'range':<11}{'messages':>10}"
                f"{'avg msg (B)':>12}{'diffs':>8}{'diff reqs':>10}  verified")
        print(head)
        print("-" * len(head))
        for r in mine:
            if "time_s" not in r:
                print(f"{r['version']:<9}{r['ranks']:>3}  {'--- ' + str(r['failed'])}")
                continue
            star = "*" if r["oversubscribed"] else " "
            t_range = f"{r['time_min_s']:.3f}-{r['time_max_s']:.3f}"
            s_range = f"{fmt(r['speedup_min'], 2)}-{fmt(r['speedup_max'], 2)}" if r["speedup_min"] else ""
            print(f"{r['version']:<9}{r['ranks']:>3}{r['time_s']:>9.3f}{star} {t_range:<15}{fmt(r['speedup'], 2):>8} "
                  f"{s_range:<11}{r['messages']:>10}{r['avg_msg_bytes']:>12.0f}{r['diffs']:>8}"
                  f"{r['diff_requests']:>10}  "
                  f"{'yes' if r['verified'] else 'NO: ' + str(r['failed'])}")
    if any(r.get("oversubscribed") for r in rows):
        print(f"\n* oversubscribed: more ranks than the {os.cpu_count()} hardware threads of this machine")


def breakdown_ranks(rows, app):
    """The rank count the breakdown shows: 2 if it ran, else the largest count that does not
    oversubscribe the machine, else the smallest."""
    counts = sorted({r["ranks"] for r in rows if r["app"] == app and r.get("per_rank")})
    if not counts:
        return None
    if 2 in counts:
        return 2
    fitting = [n for n in counts if n <= (os.cpu_count() or 1)]
    return fitting[-1] if fitting else counts[0]


BREAKDOWN_PARTS = [("compute", "compute_s"), ("fault", "fault_s"), ("sync wait", "sync_wait_s"),
                   ("coherence", "coherence_s"), ("gc", "gc_s")]


def print_breakdowns(rows, apps):
    print("\nWhere the time went (median run; seconds per rank): compute = time - fault - sync wait - coherence - gc;"
          "\ncoherence = consistency work at releases and acquires on the application's threads (waits excluded);"
          "\nhandlers = message handlers on any of the rank's threads (progress thread included), not part of the sum")
    for app in apps:
        n = breakdown_ranks(rows, app)
        if n is None:
            continue
        print(f"\n{app}, {n} rank{'s' if n > 1 else ''}")
        head = (f"{'version':<9}{'rank':>5}{'time':>9}{'compute':>9}{'fault':>9}{'sync wait':>10}{'coherence':>10}"
                f"{'gc':>8}{'handlers':>10}")
        print(head)
        print("-" * len(head))
        for r in rows:
            if r["app"] != app or r["ranks"] != n or not r.get("per_rank"):
                continue
            for p in sorted(r["per_rank"], key=lambda p: p["rank"]):
                print(f"{r['version']:<9}{p['rank']:>5}{p['time_s']:>9.3f}{p['compute_s']:>9.3f}{p['fault_s']:>9.3f}"
                      f"{p['sync_wait_s']:>10.3f}{p['coherence_s']:>10.3f}{p['gc_s']:>8.3f}{p['handler_s']:>10.3f}")


def print_speedup_chart(rows, apps, width=40):
    """Speedups as bars in the terminal, one per version and rank count above 1."""
    shown = [r for r in rows if r["app"] in apps and r["ranks"] > 1 and r.get("speedup") is not None]
    if not shown:
        return
    top = max(2.0, max(r["speedup"] for r in shown))
    one = int(round(width / top))
    print(f"\nSpeedup over the same version at 1 rank (median; '|' marks 1.0, a full bar is {top:.2f})")
    for app in apps:
        mine = [r for r in shown if r["app"] == app]
        if not mine:
            continue
        print(app)
        for r in mine:
            cells = int(round(width * r["speedup"] / top))
            bar = ["#" if i < cells else " " for i in range(max(cells, one + 1))]
            bar[one] = "|"
            star = "*" if r["oversubscribed"] else " "
            print(f"  {r['version']:<9}{r['ranks']:>2} ranks{star} {r['speedup']:5.2f}  {''.join(bar)}")


def write_csv(rows, runs, out):
    with open(out / "apps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_HEADER)
        for r in rows:
            if "time_s" not in r:
                w.writerow([r["app"], r["version"], r["ranks"], int(r["oversubscribed"]), 0] + [""] * 10 + [0])
                continue
            w.writerow([r["app"], r["version"], r["ranks"], int(r["oversubscribed"]), r["runs"],
                        f"{r['time_s']:.6f}", f"{r['time_min_s']:.6f}", f"{r['time_max_s']:.6f}",
                        fmt(r["speedup"], 4, ""), fmt(r["speedup_min"], 4, ""), fmt(r["speedup_max"], 4, ""),
                        r["messages"], f"{r['avg_msg_bytes']:.1f}",
                        r["diffs"], r["diff_requests"], int(r["verified"])])
    with open(out / "apps_ranks.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RANK_CSV_HEADER)
        for r in rows:
            for p in r.get("per_rank", []):
                w.writerow([r["app"], r["version"], r["ranks"], p["rank"]] +
                           [f"{p[k]:.6f}" for k in RANK_CSV_HEADER[4:]])
    with open(out / "apps_runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RUNS_CSV_HEADER)
        for r in runs:
            w.writerow([r["app"], r["version"], r["ranks"], r["repeat"],
                        f"{r['time_s']:.6f}" if r["time_s"] is not None else "", int(r["problem"] is None),
                        r["start_utc"], f"{r['lock_wait_s']:.1f}", f"{r['load1']:.2f}", f"{r['busy_cpus']:.2f}",
                        f"{r['idle_wait_s']:.1f}",
                        int(r["busy"]), f"{r['others_cpus']:.2f}"])


def write_ceiling_csv(ceiling, out):
    with open(out / "ceiling.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["repeat", "alone_s", "slowest_s", "ideal_speedup", "start_utc", "others_cpus"])
        for c in ceiling:
            w.writerow([c["repeat"]] + ["" if c[k] is None else c[k] for k in ("alone_s", "slowest_s", "ratio")] +
                       [c["start_utc"], f"{c['others_cpus']:.2f}"])


def plot(rows, apps, out):
    try:
        import matplotlib
    except ImportError:  # after a long run, the tables and CSV files must not be lost to this
        print("note: no plots: matplotlib is not installed (Debian: python3-matplotlib; ./quickstart installs it)",
              file=sys.stderr)
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = [a for a in apps if any(r["app"] == a and "time_s" in r for r in rows)]
    if not apps:
        return []
    written = []
    ncol = min(3, len(apps))
    nrow = (len(apps) + ncol - 1) // ncol

    # Speedup per version (median, range as error bars), one subplot per app.
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.8 * nrow), squeeze=False)
    max_ranks = max(r["ranks"] for r in rows)
    over = os.cpu_count() or 1
    for ax, app in zip(axes.flat, apps):
        versions = APPS[app][1]
        for i, version in enumerate(versions):
            pts = sorted((r["ranks"], r["speedup"], r["speedup_min"], r["speedup_max"]) for r in rows
                         if r["app"] == app and r["version"] == version and r.get("speedup") is not None)
            if not pts:
                continue
            # Versions side by side around each rank count, so that their range bars do not overlap.
            dodge = 0.06 * (i - (len(versions) - 1) / 2)
            x = [p[0] + dodge for p in pts]
            y = [p[1] for p in pts]
            lo = [p[1] - (p[2] if p[2] is not None else p[1]) for p in pts]
            hi = [(p[3] if p[3] is not None else p[1]) - p[1] for p in pts]
            style = {"linestyle": "--"} if version == MPI_VERSION else {}
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=version, **style)
        ax.plot([1, max_ranks], [1, max_ranks], color="grey", linestyle=":", linewidth=1, label="ideal")
        if max_ranks > over:
            ax.axvspan(over + 0.5, max_ranks + 0.5, color="grey", alpha=0.12, label="oversubscribed")
        ax.set_title(app)
        ax.set_xlabel("ranks")
        ax.set_ylabel("speedup over 1 rank")
        ax.set_xticks(range(1, max_ranks + 1))
        ax.set_xlim(0.5, max_ranks + 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[len(apps):]:
        ax.set_visible(False)
    fig.suptitle("Speedup per version (same version at 1 rank = 1; median, bars: range over repetitions)")
    fig.tight_layout()
    path = out / "speedup.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # Per-rank time breakdown of the median run at 2 ranks (or the largest count that fits).
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.8 * nrow), squeeze=False)
    colours = {"compute": "#4c72b0", "fault": "#c44e52", "sync wait": "#c0c0c0", "coherence": "#55a868",
               "gc": "#8172b2"}
    for ax, app in zip(axes.flat, apps):
        n = breakdown_ranks(rows, app)
        done = [r for r in rows if r["app"] == app and r["ranks"] == n and r.get("per_rank")]
        if not done:
            ax.set_visible(False)
            continue
        x, labels, ticks, labelled = 0.0, [], [], set()
        for version in APPS[app][1]:
            r = next((r for r in done if r["version"] == version), None)
            if r is None:
                continue
            start = x
            for p in sorted(r["per_rank"], key=lambda p: p["rank"]):
                bottom = 0.0
                for name, key in BREAKDOWN_PARTS:
                    ax.bar(x, p[key], bottom=bottom, color=colours[name], width=0.62, edgecolor="white",
                           linewidth=0.5, label=None if name in labelled else name)
                    labelled.add(name)
                    bottom += p[key]
                ax.bar(x + 0.4, p["handler_s"], color="#dd8452", width=0.18, hatch="///", edgecolor="white",
                       linewidth=0.3, label=None if "handlers" in labelled else "handlers (any thread)")
                labelled.add("handlers")
                labels.append(str(p["rank"]))
                ticks.append(x + 0.1)
                x += 1
            ax.text((start + x - 1) / 2 + 0.1, -0.16, version, ha="center", va="top",
                    transform=ax.get_xaxis_transform(), fontsize=9, fontweight="bold")
            x += 0.6
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(f"{app}, {n} rank{'s' if n > 1 else ''} (median run)")
        ax.set_ylabel("seconds")
        # A zero-height segment on top of a stack would pin the axis to the stack's top.
        ax.use_sticky_edges = False
        ax.margins(y=0.08)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(apps):]:
        ax.set_visible(False)
    handles, names = [], []
    for ax in axes.flat:
        for h, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(h)
                names.append(name)
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    fig.suptitle("Time per rank: compute, coherence faults, synchronization waits, consistency work, GC; "
                 "message handlers beside")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.subplots_adjust(hspace=0.55)
    path = out / "breakdown.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def main(argv):
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    cpus = os.cpu_count() or 1
    sizes = "quick" if args.quick else "paper (program defaults)" if args.paper_sizes else "realistic"
    print(f"build {args.build}, ranks {','.join(map(str, args.ranks))}, {cpus} hardware threads, "
          f"{sizes} sizes, repeat {args.repeat} (interleaved)")
    protection = [f"exclusive lock {LOCK_FILE}" if not args.no_lock else "no machine lock"]
    if args.idle_wait > 0:
        protection.append(f"wait up to {args.idle_wait:.0f} s for other work <= {args.idle_cpus} CPUs")
    if args.nice:
        protection.append(f"nice {args.nice}")
    print("each run: " + ", ".join(protection))
    if args.demo:
        print(f"demo (DEMO in {Path(__file__).resolve().relative_to(REPO)}): {DEMO[0]}, versions {', '.join(DEMO[1])}, "
              f"{' '.join(DEMO[2])}")

    plan, apps_run = [], []
    for app in args.apps:
        versions = [v for v in APPS[app][1] if args.versions is None or v in args.versions]
        present = []
        for version in versions:
            exe = args.build / executable(app, version)
            if exe.is_file() and os.access(exe, os.X_OK):
                present.append(version)
            else:
                print(f"warning: {app} {version}: no executable {exe}; skipping it", file=sys.stderr)
        if present:
            apps_run.append(app)
            plan += [(app, v, n) for v in present for n in args.ranks]

    runs, ceiling = [], []
    if args.ceiling and not (args.build / CEILING[0]).is_file():
        print(f"warning: no {args.build / CEILING[0]} (benchmarks not built): no ceiling", file=sys.stderr)
        args.ceiling = False
    for repeat in range(args.repeat):
        for app, version, n in plan:
            over = " (oversubscribed)" if n > cpus else ""
            print(f"  [{repeat + 1}/{args.repeat}] {app} {version} {n} ranks{over} ...", end="", flush=True)
            run = run_once(args, app, version, n, repeat)
            runs.append(run)
            note = f" {run['time_s']:.3f} s" if run["time_s"] is not None else " failed"
            if run["busy"]:
                note += f" (machine busy at the start: {run['busy_cpus']:.1f} CPUs)"
            if run["others_cpus"] > args.idle_cpus:
                note += f" (other work during the run: {run['others_cpus']:.1f} CPUs)"
            print(note, flush=True)
        if args.ceiling:
            print(f"  [{repeat + 1}/{args.repeat}] ceiling (compute_spread) 2 ranks ...", end="", flush=True)
            ceiling.append(run_ceiling(args, repeat))
            got = ceiling[-1]["ratio"]
            print(f" {got:.2f}" if got is not None else " failed", flush=True)

    rows = [summarize(runs, app, version, n) for app, version, n in plan]
    add_speedups(rows)
    print_tables(rows, apps_run)
    print_breakdowns(rows, apps_run)
    print_speedup_chart(rows, apps_run)
    if args.ceiling:
        print_targets(rows, ceiling)
    write_csv(rows, runs, args.out)
    if ceiling:
        write_ceiling_csv(ceiling, args.out)
    print(f"\nwrote {args.out / 'apps.csv'}, {args.out / 'apps_ranks.csv'} and {args.out / 'apps_runs.csv'}")
    if not args.no_plots and rows:
        for path in plot(rows, apps_run, args.out):
            print(f"wrote {path}")

    busy = [r for r in runs if r["busy"]]
    if busy:
        print(f"\nnote: {len(busy)} of {len(runs)} runs started on a busy machine (after {args.idle_wait:.0f} s of "
              f"waiting); see apps_runs.csv")
    disturbed = [r for r in runs if r["others_cpus"] > args.idle_cpus]
    if disturbed:
        print(f"\nnote: in {len(disturbed)} of {len(runs)} runs other work kept more than {args.idle_cpus} CPUs busy "
              f"(up to {max(r['others_cpus'] for r in disturbed):.1f}); see apps_runs.csv")
    failures = [r for r in rows if r.get("failed")]
    if failures:
        print(f"\n{len(failures)} configuration(s) failed:", file=sys.stderr)
        for r in failures:
            print(f"  {r['app']} {r['version']} {r['ranks']} ranks: {r['failed']}", file=sys.stderr)
        return 1
    if not rows:
        print("error: nothing ran (every selected executable is missing)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
