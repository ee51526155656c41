#!/usr/bin/python3
"""Compares builds (or settings) of an interleaved benchmark over many launches.

On the 2-core VMs one launch of bench_messages or bench_sync measures one machine state: the
same binary's ratios move by several hundredths from launch to launch, more than most single
changes. This runs the benchmark N times per variant, alternating the variants launch by launch
(A, B, A, B, ...), reads the ratio column of the table bench_report.hpp prints, and reports
each variant's median ratio and range per table row.

A variant is NAME=LIBDIR[:VAR=VALUE,...]: LIBDIR holds the libmdsm.so.0 to load instead of the
one the binary was linked with (LD_LIBRARY_PATH; '-' keeps the linked one), and the optional
environment settings apply to that variant only. Copy a build's library aside to compare it
with another:

    mkdir -p /tmp/old && cp build-rel/lib/libmdsm.so.0 /tmp/old/      # before the change
    ... rebuild ...
    /usr/bin/python3 bench/compare_launches.py -n 8 build-rel/bench/bench_messages \\
        old=/tmp/old new=- nothread=-:MDSM_PROGRESS_THREAD=0

Such variants must be ABI-compatible with the benchmark binary (the benchmark itself is not
swapped). When a change alters the ABI (an inline accessor in a public header, say), compare
whole builds instead: NAME=@BUILDDIR runs BUILDDIR/bench/<the benchmark's file name>, that
build's own binary with its own library, e.g. a worktree of the old commit:

    git worktree add /tmp/old HEAD~1 && meson setup /tmp/old/build-rel --buildtype=release \\
        -Dtests=false && ninja -C /tmp/old/build-rel
    /usr/bin/python3 bench/compare_launches.py -n 20 build-rel/bench/bench_messages \\
        old=@/tmp/old/build-rel new=-

Launches go through tools/mdsmrun with 2 ranks; --mpirun-args passes it more (for instance
'--mca btl self,tcp' to run over TCP on one host). Besides the ratios it prints each row's
median time per iteration, with its range, over the launches (each launch's median round).
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_settings(name, settings):
    env = {}
    for item in filter(None, settings.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise argparse.ArgumentTypeError(f"setting '{item}' of variant '{name}' is not VAR=VALUE")
        env[key] = value
    return env


def parse_variant(text):
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"variant '{text}' is not NAME=LIBDIR[:VAR=VALUE,...]")
    libdir, _, settings = rest.partition(":")
    if libdir.startswith("@"):  # a whole build: its own benchmark binary and library
        if not Path(libdir[1:], "bench").is_dir():
            raise argparse.ArgumentTypeError(f"variant '{name}': no bench/ in build {libdir[1:]}")
        return name, libdir, parse_settings(name, settings)
    env = parse_settings(name, settings)
    if libdir not in ("", "-") and not (Path(libdir) / "libmdsm.so.0").exists():
        raise argparse.ArgumentTypeError(f"variant '{name}': no libmdsm.so.0 in {libdir}")
    return name, (None if libdir in ("", "-") else libdir), env


def ratios(output):
    """(group, variant) -> ratio for every non-baseline row of the report table."""
    rows = {}
    for line in output.splitlines():
        fields = line.split()
        # group variant median fastest runs ratio [target...]
        if len(fields) >= 6 and fields[5].endswith("x") and fields[2].endswith("us"):
            try:
                rows[(fields[0], fields[1])] = float(fields[5][:-1])
            except ValueError:
                pass
    return rows


def times(output):
    """(group, variant) -> median time in us for every row of the report table, baselines too."""
    rows = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[2].endswith("us") and (fields[5].endswith("x") or fields[5] == "baseline"):
            try:
                rows[(fields[0], fields[1])] = float(fields[2][:-2])
            except ValueError:
                pass
    return rows


def print_table(title, results, fmt):
    print(title)
    keys = []
    for per_variant in results.values():
        keys += [k for k in per_variant if k not in keys]
    width = max(len(f"{g} {v}") for g, v in keys)
    print(f"{'row':<{width}}  " + "  ".join(f"{name:>26}" for name in results))
    for key in keys:
        cells = []
        for name in results:
            vals = results[name].get(key, [])
            cells.append(f"{fmt(statistics.median(vals))} [{fmt(min(vals))}-{fmt(max(vals))}]" if vals else "-")
        print(f"{key[0] + ' ' + key[1]:<{width}}  " + "  ".join(f"{c:>26}" for c in cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--launches", type=int, default=6, help="launches per variant (default 6)")
    ap.add_argument("benchmark", help="benchmark binary, e.g. build-rel/bench/bench_messages")
    ap.add_argument("variants", nargs="+", type=parse_variant, help="NAME=LIBDIR[:VAR=VALUE,...]")
    ap.add_argument("--args", default="", help="extra arguments for the benchmark")
    ap.add_argument("--mpirun-args", default="", help="extra arguments for tools/mdsmrun, e.g. '--mca btl self,tcp'")
    args = ap.parse_args()

    runner = str(ROOT / "tools" / "mdsmrun")
    results = {name: {} for name, _, _ in args.variants}
    medians = {name: {} for name, _, _ in args.variants}
    for launch in range(args.launches):
        for name, libdir, extra in args.variants:
            env = dict(os.environ)
            env.update(extra)
            cmd = [runner, "-n", "2"] + args.mpirun_args.split()
            for key in extra:
                cmd += ["-x", key]
            binary = args.benchmark
            if libdir and libdir.startswith("@"):
                binary = str(Path(libdir[1:]) / "bench" / Path(args.benchmark).name)
            elif libdir:
                env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
                cmd += ["-x", "LD_LIBRARY_PATH"]
            cmd += [binary] + args.args.split()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            rows = ratios(done.stdout)
            if done.returncode != 0 or not rows:
                sys.stderr.write(done.stdout + done.stderr)
                sys.exit(f"launch {launch + 1} of variant '{name}' failed (exit {done.returncode})")
            for key, value in rows.items():
                results[name].setdefault(key, []).append(value)
            for key, value in times(done.stdout).items():
                medians[name].setdefault(key, []).append(value)
            print(f"launch {launch + 1}/{args.launches} {name}: " +
                  " ".join(f"{g.split('/')[-1]}/{v}={r:.3f}" for (g, v), r in rows.items()), flush=True)

    print_table(f"\nmedian ratio over {args.launches} launches [min - max]", results, lambda v: f"{v:.3f}")
    print_table(f"\nmedian time per iteration (us) over {args.launches} launches [min - max]", medians,
                lambda v: f"{v:.3f}" if v < 100 else f"{v:.0f}")


if __name__ == "__main__":
    main()
