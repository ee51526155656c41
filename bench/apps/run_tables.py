#!/usr/bin/python3
"""The application table harness: runs every version of every application at 1..4 ranks and
prints the CarlOS paper's tables (version, N, time, speedup, messages, average message size,
plus diffs created and diff requests), writes them to DIR/apps.csv and plots them.

    /usr/bin/python3 bench/apps/run_tables.py                      # everything, paper sizes
    /usr/bin/python3 bench/apps/run_tables.py --apps matmul,sor --ranks 1,2 --quick

Every run is launched with tools/mdsmrun; the program prints MDSM_APP and MDSM_APP_RANK lines
(apps/common/app.hpp), which are all this script reads. Exits non-zero if any run crashed, timed
out, printed no result or failed verification. Raw output of every run goes to DIR/logs/.
"""

import argparse
import csv
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

# app -> (executable under the build directory, versions in table order)
APPS = {
    "tsp": ("apps/tsp/tsp", ["lock", "hybrid", "msg"]),
    "quicksort": ("apps/quicksort/quicksort", ["lock", "hybrid1", "hybrid2"]),
    "water": ("apps/water/water", ["lock", "hybrid"]),
    "matmul": ("apps/matmul/matmul", ["barrier", "hybrid"]),
    "apsp": ("apps/apsp/apsp", ["barrier", "hybrid"]),
    "sor": ("apps/sor/sor", ["barrier", "hybrid"]),
}

CSV_HEADER = ["app", "version", "ranks", "oversubscribed", "time_s", "speedup", "messages",
              "avg_msg_bytes", "diffs", "diff_requests", "verified"]
RANK_CSV_HEADER = ["app", "version", "ranks", "rank", "time_s", "application_s", "library_s", "wait_s"]

REPO = Path(__file__).resolve().parent.parent.parent


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", default=",".join(APPS), help="comma-separated apps (default: all)")
    p.add_argument("--ranks", default="1,2,3,4", help="comma-separated rank counts (default 1,2,3,4)")
    p.add_argument("--build", default="build", help="meson build directory (default: build)")
    p.add_argument("--out", default=None, help="output directory (default: bench/results)")
    p.add_argument("--quick", action="store_true", help="pass --quick (the small CI sizes)")
    p.add_argument("--no-plots", action="store_true", help="do not render PNG plots")
    p.add_argument("--repeat", type=int, default=1, help="runs per configuration; the median time counts")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a run counts as hung")
    p.add_argument("--mdsmrun", default=str(REPO / "tools" / "mdsmrun"), help="launcher")
    p.add_argument("--extra", default="", help="extra program arguments, e.g. '--seed=3'")
    a = p.parse_args(argv)
    a.apps = [x for x in a.apps.split(",") if x]
    for x in a.apps:
        if x not in APPS:
            p.error(f"unknown app '{x}' (known: {', '.join(APPS)})")
    try:
        a.ranks = sorted({int(x) for x in a.ranks.split(",") if x})
    except ValueError:
        p.error("--ranks takes comma-separated integers")
    if not a.ranks or min(a.ranks) < 1:
        p.error("--ranks needs positive rank counts")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    a.build = resolve(a.build)
    a.out = Path(a.out) if a.out else REPO / "bench" / "results"
    return a


def resolve(path):
    """A relative build directory: from the current directory if it exists there, else the repo."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p.resolve()
    return (REPO / p).resolve()


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


def run_once(args, app, exe, version, nranks, attempt):
    cmd = [args.mdsmrun, "-n", str(nranks), str(exe), f"--version={version}"]
    if args.quick:
        cmd.append("--quick")
    cmd += shlex.split(args.extra)
    log = args.out / "logs" / f"{app}-{version}-{nranks}-{attempt}.log"
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
    log.write_text(f"$ {shlex.join(cmd)}\n# exit {rc}, {wall:.1f} s wall\n--- stdout\n{out}\n--- stderr\n{err}")
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
    return problem, result, ranks


def run_config(args, app, exe, version, nranks):
    """Runs one configuration --repeat times; returns the row of the median-time run."""
    runs = []
    failed = None
    for attempt in range(args.repeat):
        problem, result, ranks = run_once(args, app, exe, version, nranks, attempt)
        if problem:
            failed = problem
            if result is None:
                continue
        runs.append((float(result["time_s"]), result, ranks))
    if not runs:
        return {"app": app, "version": version, "ranks": nranks, "failed": failed}
    runs.sort(key=lambda r: r[0])
    median_time = statistics.median(r[0] for r in runs)
    _, result, ranks = runs[(len(runs) - 1) // 2]
    messages = int(result["messages"])
    msg_bytes = int(result["msg_bytes"])
    return {
        "app": app, "version": version, "ranks": nranks,
        "oversubscribed": nranks > (os.cpu_count() or 1),
        "time_s": median_time,
        "messages": messages,
        "avg_msg_bytes": msg_bytes / messages if messages else 0.0,
        "diffs": int(result["diffs"]),
        "diff_requests": int(result["diff_requests"]),
        "verified": failed is None,
        "failed": failed,
        "per_rank": [
            {"rank": int(r["rank"]), "time_s": float(r["time_s"]), "wait_s": float(r["wait_s"]),
             "handler_s": float(r["handler_s"])} for r in ranks
        ],
    }


def add_speedups(rows):
    base = {(r["app"], r["version"]): r["time_s"] for r in rows
            if r["ranks"] == 1 and "time_s" in r and r["time_s"] > 0}
    for r in rows:
        b = base.get((r["app"], r["version"]))
        r["speedup"] = b / r["time_s"] if b is not None and r.get("time_s") else None


def print_tables(rows, apps):
    for app in apps:
        mine = [r for r in rows if r["app"] == app]
        if not mine:
            continue
        print(f"\n{app}")
        head = f"{'version':<10}{'N':>3}{'time (s)':>11}{'speedup':>9}{'messages':>10}{'avg msg (B)':>13}" \
               f"{'diffs':>8}{'diff reqs':>11}  verified"
        print(head)
        print("-" * len(head))
        for r in mine:
            if "time_s" not in r:
                print(f"{r['version']:<10}{r['ranks']:>3}  {'--- ' + r['failed']}")
                continue
            sp = f"{r['speedup']:.2f}" if r["speedup"] is not None else "-"
            star = "*" if r["oversubscribed"] else " "
            print(f"{r['version']:<10}{r['ranks']:>3}{r['time_s']:>10.3f}{star}{sp:>9}{r['messages']:>10}"
                  f"{r['avg_msg_bytes']:>13.0f}{r['diffs']:>8}{r['diff_requests']:>11}  "
                  f"{'yes' if r['verified'] else 'NO: ' + str(r['failed'])}")
    if any(r.get("oversubscribed") for r in rows):
        print(f"\n* oversubscribed: more ranks than the {os.cpu_count()} hardware threads of this machine")


def breakdown(p):
    """(application, library, waiting) seconds of one rank: library = time in message handlers,
    waiting = time the application thread waited on remote events, application = the rest."""
    app_s = max(0.0, p["time_s"] - p["wait_s"] - p["handler_s"])
    return app_s, p["handler_s"], p["wait_s"]


def write_csv(rows, out):
    with open(out / "apps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_HEADER)
        for r in rows:
            if "time_s" not in r:
                w.writerow([r["app"], r["version"], r["ranks"], int(r["ranks"] > (os.cpu_count() or 1)),
                            "", "", "", "", "", "", 0])
                continue
            w.writerow([r["app"], r["version"], r["ranks"], int(r["oversubscribed"]), f"{r['time_s']:.6f}",
                        f"{r['speedup']:.4f}" if r["speedup"] is not None else "", r["messages"],
                        f"{r['avg_msg_bytes']:.1f}", r["diffs"], r["diff_requests"], int(r["verified"])])
    with open(out / "apps_ranks.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RANK_CSV_HEADER)
        for r in rows:
            for p in r.get("per_rank", []):
                a, lib, wait = breakdown(p)
                w.writerow([r["app"], r["version"], r["ranks"], p["rank"], f"{p['time_s']:.6f}", f"{a:.6f}",
                            f"{lib:.6f}", f"{wait:.6f}"])


def plot(rows, apps, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = [a for a in apps if any(r["app"] == a and "time_s" in r for r in rows)]
    if not apps:
        return []
    written = []
    ncol = min(3, len(apps))
    nrow = (len(apps) + ncol - 1) // ncol

    # Speedup per version, one subplot per app.
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.8 * nrow), squeeze=False)
    max_ranks = max(r["ranks"] for r in rows)
    for ax, app in zip(axes.flat, apps):
        for version in APPS[app][1]:
            pts = sorted((r["ranks"], r["speedup"]) for r in rows
                         if r["app"] == app and r["version"] == version and r.get("speedup") is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=version)
        ax.plot([1, max_ranks], [1, max_ranks], color="grey", linestyle=":", linewidth=1, label="ideal")
        over = os.cpu_count() or 1
        if max_ranks > over:
            ax.axvspan(over + 0.5, max_ranks + 0.5, color="grey", alpha=0.12, label="oversubscribed")
        ax.set_title(app)
        ax.set_xlabel("ranks")
        ax.set_ylabel("speedup over 1 rank")
        ax.set_xticks(range(1, max_ranks + 1))
        ax.set_xlim(0.5, max_ranks + 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(apps):]:
        ax.set_visible(False)
    fig.suptitle("Speedup per version (same version at 1 rank = 1)")
    fig.tight_layout()
    path = out / "speedup.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # Per-rank time breakdown at the largest rank count (the CarlOS paper's Figure 2).
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.8 * nrow), squeeze=False)
    colours = {"application": "#4c72b0", "library (handlers)": "#dd8452", "waiting": "#c0c0c0"}
    for ax, app in zip(axes.flat, apps):
        done = [r for r in rows if r["app"] == app and r.get("per_rank")]
        if not done:
            ax.set_visible(False)
            continue
        n = max(r["ranks"] for r in done)
        x, labels, ticks = 0.0, [], []
        for version in APPS[app][1]:
            r = next((r for r in done if r["version"] == version and r["ranks"] == n), None)
            if r is None:
                continue
            start = x
            for p in sorted(r["per_rank"], key=lambda p: p["rank"]):
                parts = breakdown(p)
                bottom = 0.0
                for (name, colour), v in zip(colours.items(), parts):
                    ax.bar(x, v, bottom=bottom, color=colour, width=0.8,
                           label=name if x == 0 else None, edgecolor="white", linewidth=0.5)
                    bottom += v
                labels.append(str(p["rank"]))
                ticks.append(x)
                x += 1
            ax.text((start + x - 1) / 2, -0.16, version, ha="center", va="top",
                    transform=ax.get_xaxis_transform(), fontsize=9, fontweight="bold")
            x += 0.7
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(f"{app}, {n} ranks")
        ax.set_ylabel("seconds")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[len(apps):]:
        ax.set_visible(False)
    fig.suptitle("Time per rank: application, library (message handlers), waiting")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
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
    print(f"build {args.build}, ranks {','.join(map(str, args.ranks))}, {cpus} hardware threads, "
          f"{'quick' if args.quick else 'paper'} sizes, repeat {args.repeat}")

    rows, apps_run, missing = [], [], []
    for app in args.apps:
        rel, versions = APPS[app]
        exe = args.build / rel
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            print(f"warning: {app}: no executable {exe}; skipping it", file=sys.stderr)
            missing.append(app)
            continue
        apps_run.append(app)
        for version in versions:
            for n in args.ranks:
                over = " (oversubscribed)" if n > cpus else ""
                print(f"  {app} {version} {n} ranks{over} ...", flush=True)
                rows.append(run_config(args, app, exe, version, n))

    add_speedups(rows)
    print_tables(rows, apps_run)
    write_csv(rows, args.out)
    print(f"\nwrote {args.out / 'apps.csv'} and {args.out / 'apps_ranks.csv'}")
    if not args.no_plots and rows:
        for path in plot(rows, apps_run, args.out):
            print(f"wrote {path}")

    failures = [r for r in rows if r.get("failed")]
    if failures:
        print(f"\n{len(failures)} configuration(s) failed:", file=sys.stderr)
        for r in failures:
            print(f"  {r['app']} {r['version']} {r['ranks']} ranks: {r['failed']}", file=sys.stderr)
        return 1
    if not rows:
        print("error: nothing ran (every selected app's executable is missing)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
