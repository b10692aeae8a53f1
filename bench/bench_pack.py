#!/usr/bin/env python3
"""Packs on the CPU: a sweep trained with `--pack` (its runs side by side in one process per pack) against the same
sweep with one process per run (`--jobs`), interleaved over rounds, wall time of the whole `canonlab sweep` each.
The runs' results are the same bits either way (checked here too: every checkpoint byte-equal); only time differs.

    python3 bench/bench_pack.py --canonlab build/canonlab --sweep configs/sweeps/ks-placement-4L-9seeds.yaml \\
        --runs 8 --steps 300 --jobs 2 --pack 8 --rounds 3

--runs keeps the first N runs of the grid (the sweep file is rewritten with fewer seeds), --steps overrides
train.steps.
"""
from __future__ import annotations

import argparse
import filecmp
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loop import cpu_model, isa  # noqa: E402


def write_sweep(src: str, dst: str, steps: int, seeds: int) -> None:
    """The sweep file with train.steps set and its seed axis cut to the first `seeds` values."""
    lines, out, in_seed_axis = open(src).read().splitlines(), [], False
    base_dir = os.path.dirname(os.path.abspath(src))
    for line in lines:
        if line.startswith("base:"):
            line = "base: " + os.path.join(base_dir, line.split(":", 1)[1].strip())
        if line.strip() == "- key: seed":
            in_seed_axis = True
        elif in_seed_axis and line.strip().startswith("values:"):
            values = line.split("[", 1)[1].rsplit("]", 1)[0].split(",")
            line = line.split("values:")[0] + "values: [" + ",".join(values[:seeds]) + "]"
            in_seed_axis = False
        out.append(line)
        if line.startswith("set:"):
            out.append("  train.steps: %d" % steps)
    open(dst, "w").write("\n".join(out) + "\n")


def timed_sweep(canonlab: str, sweep: str, out: str, extra: list[str]) -> float:
    """Wall seconds of the whole sweep."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    p = subprocess.run([canonlab, "sweep", sweep, "--out", out] + extra, capture_output=True, text=True,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    seconds = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit("sweep failed (%s):\n%s%s" % (" ".join(extra), p.stdout, p.stderr))
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--canonlab", required=True)
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--runs", type=int, default=8, help="runs of the grid (whole seeds per axis value)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--pack", default="8")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="canonlab_bench_pack_")
    sweep = os.path.join(work, "sweep.yaml")
    # The seed axis is the fastest one: `runs` runs are runs / (other axes' size) seeds of each; find the seed count
    # by dry runs.
    for seeds in range(1, 100):
        write_sweep(args.sweep, sweep, args.steps, seeds)
        listing = subprocess.run([args.canonlab, "sweep", sweep, "--dry-run", "--out", os.path.join(work, "dry")],
                                 capture_output=True, text=True).stdout
        count = int(listing.strip().splitlines()[-1].split()[0])
        if count >= args.runs:
            break
    print("# %s, %s; canonlab %s; %d runs x %d steps, --jobs %d" % (cpu_model(), isa(), args.canonlab, count,
                                                                 args.steps, args.jobs))
    variants = {"processes (--jobs %d)" % args.jobs: ["--jobs", str(args.jobs)],
                "packs (--jobs %d --pack %s)" % (args.jobs, args.pack): ["--jobs", str(args.jobs), "--pack", args.pack]}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, extra in variants.items():
            seconds = timed_sweep(args.canonlab, sweep, os.path.join(work, name.split()[0]), extra)
            times[name].append(seconds)
            print("round %d  %-32s %7.1f s" % (r + 1, name, seconds), flush=True)
    a, b = (os.path.join(work, name.split()[0]) for name in variants)
    same = all(filecmp.cmp(f, f.replace(a, b, 1), shallow=False)
               for f in glob.glob(os.path.join(a, "runs", "*", "checkpoints", "*.safetensors")))
    names = list(variants)
    medians = [statistics.median(times[n]) for n in names]
    print("\n| sweep | median wall s | runs/min |\n|---|---:|---:|")
    for n, m in zip(names, medians):
        print("| %s | %.1f | %.1f |" % (n, m, 60 * count / m))
    print("\npacks / processes (time): %.3f; checkpoints byte-equal: %s" % (medians[1] / medians[0], same))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
