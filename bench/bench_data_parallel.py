#!/usr/bin/env python3
"""Data-parallel training on one machine: `mpirun -np 2 canonlab train` (one thread per rank) against one process
with 2 threads, interleaved round by round so both see the same load (BENCHMARKS.md, "Data-parallel training").

    python3 bench/bench_data_parallel.py --canonlab build/canonlab --rounds 3 --steps 40 configs/E1-Bk0.yaml

Each measurement is a real `canonlab train` run (no evaluation until the last step, no checkpoints until the
end); its time per step is read from metrics.jsonl (elapsed_s of every step's record, log_every 1) over the steps
after the first 5, so start-up, the last evaluation and the probe are left out. Modes:
  ranks2     mpirun -np 2, train.threads=1 per rank (bit-identical to micro2-t1)
  threads2   one process, train.threads=2 (the usual way to use 2 cores)
  micro2-t2  one process, 2 threads, train.micro_batches=2 (what accumulation alone costs)
  threads1   one process, 1 thread (the scaling baseline)
GFLOP/s use the model-FLOP count of `canonlab train --dry-run`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

MODES = {
    "ranks2": (2, ["train.threads=1"]),
    "threads2": (1, ["train.threads=2"]),
    "micro2-t2": (1, ["train.threads=2", "train.micro_batches=2"]),
    "threads1": (1, ["train.threads=1"]),
}


def env():
    e = dict(os.environ)
    e.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
    e.pop("OMP_NUM_THREADS", None)
    return e


def seconds_per_step(args, config, mode, workdir):
    ranks, sets = MODES[mode]
    out = os.path.join(workdir, mode)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.canonlab, "train", config, "--out", out, "--quiet"]
    for s in sets + [f"train.steps={args.steps}", "train.log_every=1", "train.eval_every=0",
                     "train.checkpoint_every=0", "probe.n_sequences=16"]:
        cmd += ["--set", s]
    if ranks > 1:
        cmd = [args.mpirun, "-np", str(ranks)] + cmd
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout)[-500:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        t = {j["step"]: j["elapsed_s"] for j in map(json.loads, f) if j.get("split") == "train"}
    first, last = 5, args.steps - 1
    return (t[last] - t[first]) / (last - first)


def gflop_per_step(args, config):
    p = subprocess.run([args.canonlab, "train", config, "--dry-run"], capture_output=True, text=True, check=True)
    return float(re.search(r"([\d.]+) GFLOP \(forward \+ backward\)", p.stdout).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", default="build/canonlab")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    modes = args.modes.split(",")
    workdir = tempfile.mkdtemp(prefix="canonlab_bench_dp_")
    print("| config | mode | ms/step (median of %d) | runs | vs threads2 | GFLOP/s |" % args.rounds)
    print("|---|---|---|---|---|---|")
    for config in args.configs:
        flop = gflop_per_step(args, config)
        times = {m: [] for m in modes}
        for r in range(args.rounds):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                times[m].append(seconds_per_step(args, config, m, workdir))
        base = statistics.median(times["threads2"]) if "threads2" in times else None
        for m in modes:
            med = statistics.median(times[m])
            ratio = f"{base / med:.3f}" if base else "-"
            runs = ", ".join(f"{1000 * t:.0f}" for t in times[m])
            print(f"| {os.path.basename(config)} | {m} | {1000 * med:.1f} | {runs} | {ratio} | {flop / med:.1f} |")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
