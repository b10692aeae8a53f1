#!/usr/bin/env python3
"""The training loop against the bare step: `canonlab train` per step (from its own metrics.jsonl) beside
`canonlab bench-step` (forward, loss, backward, clip, AdamW on one fixed batch) on the same config and thread
count, interleaved over rounds, for each binary given. What the loop adds (drawing batches, metrics, guards,
the progress bar) is the ratio train / bench-step; the target is <= 1.05 (BENCHMARKS.md, "The training loop").

    python3 bench/bench_loop.py --canonlab build/canonlab [--canonlab OLD/canonlab] --threads 1 --steps 200

Two figures per run: `loop` = (elapsed at the last step - elapsed at step `--skip`) / steps between, which leaves
out start-up, the first steps' page faults and the final evaluation; `metrics` = the tokens/s of the last train
record (all of the run up to its last step, as the progress bar shows it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def isa() -> str:
    try:
        flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        return "?"
    return " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)


def train_ms(binary: str, config: str, sets: list[str], threads: int, steps: int, skip: int) -> tuple[float, float]:
    out = tempfile.mkdtemp(prefix="bench_loop_")
    try:
        cmd = [binary, "train", config, "--out", out, "--quiet", "--set", f"train.threads={threads}",
               "--set", f"train.steps={steps}", "--set", "train.log_every=1"]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:300]}")
        records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
        train = {r["step"]: r for r in records if r.get("split") == "train"}
        tokens = float(train[steps]["tokens_per_s"])
        tokens_per_step = tokens * float(train[steps]["elapsed_s"]) / steps
        loop = (train[steps]["elapsed_s"] - train[skip]["elapsed_s"]) / (steps - skip) * 1e3
        return loop, tokens_per_step / tokens * 1e3
    finally:
        shutil.rmtree(out, ignore_errors=True)


def step_ms(binary: str, config: str, sets: list[str], threads: int, steps: int) -> float:
    cmd = [binary, "bench-step", config, "--threads", str(threads), "--steps", str(steps), "--warmup", "3"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(json.loads(p.stdout.strip().splitlines()[-1])["ms_per_step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", action="append", default=None, help="binary (repeatable; default build/canonlab)")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "E1-Bk0.yaml"))
    ap.add_argument("--set", action="append", default=[], help="extra key=value overrides")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200, help="training steps per train run")
    ap.add_argument("--skip", type=int, default=20, help="steps left out at the start of the loop figure")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    binaries = args.canonlab or [os.path.join(ROOT, "build", "canonlab")]
    print(f"CPU: {cpu_model()} ({isa()}), {os.cpu_count()} cores; {args.config}, {args.threads} thread(s), "
          f"{args.steps} steps, {args.rounds} rounds interleaved")
    results: dict[str, dict[str, list[float]]] = {b: {"loop": [], "metrics": [], "step": []} for b in binaries}
    for r in range(args.rounds):
        for b in binaries:
            loop, metrics = train_ms(b, args.config, args.set, args.threads, args.steps, args.skip)
            results[b]["loop"].append(loop)
            results[b]["metrics"].append(metrics)
            results[b]["step"].append(step_ms(b, args.config, args.set, args.threads, 20))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print("| binary | bench-step ms | train loop ms/step | loop / step | train ms/step from its tokens/s | that / step |")
    print("|---|---:|---:|---:|---:|---:|")
    for b in binaries:
        s, l, m = (statistics.median(results[b][k]) for k in ("step", "loop", "metrics"))
        print(f"| `{b}` | {s:.1f} | {l:.1f} | {l / s:.3f} | {m:.1f} | {m / s:.3f} |")
    print("all measurements (ms):", json.dumps(results))


if __name__ == "__main__":
    main()
