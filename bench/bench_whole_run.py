#!/usr/bin/env python3
"""A whole training run as a user starts it: `canonlab train` against a PyTorch script training the same model, each
timed as one process from launch to exit (start-up, drawing batches, the steps, checkpoints and the final evaluation
for canonlab; `import torch`, building the model and the steps for PyTorch), paired and interleaved over rounds.

    .venv/bin/python bench/bench_whole_run.py --canonlab build/canonlab --steps 200 --threads 1 --rounds 3

canonlab runs `train CONFIG --set train.steps=S --set train.threads=P --quiet` into a fresh directory (its periodic
evaluations and checkpoints as the config sets them, capped by the step count). PyTorch runs the reference model
(tests/torch_ref/canon_model.py) eagerly, and with --compile also under torch.compile (compile time included), on a
fresh copy-task batch every step (canon_model.copy_batch), with the same clipping, AdamW and learning-rate schedule;
it does not evaluate or checkpoint, so the comparison favours it slightly. The table gives each side's median wall
time over the rounds and the ratio PyTorch / canonlab (> 1: canonlab is faster).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loop import cpu_model, isa  # noqa: E402

TORCH_RUN = r"""
import sys
import torch
sys.path.insert(0, {ref!r})
import canon_model as cm
torch.set_num_threads({threads})
torch.manual_seed(0)
cfg = cm.resolve_config(cm.load_yaml_config({config!r}, []))
tr = cfg["train"]
model = cm.CanonModel(cfg)
opt = cm.make_optimizer(model, tr)
def loss_fn(tok, tgt, msk):
    return cm.masked_cross_entropy(model(tok), tgt, msk)
fn = torch.compile(loss_fn, mode="default") if {compiled} else loss_fn
for s in range({steps}):
    tokens, targets, mask = cm.copy_batch(cfg["task"], int(tr["batch_size"]), s)
    loss = cm.train_step(model, opt, s, tokens.long(), targets, mask, tr, loss_fn=fn)
print("final loss", loss)
"""


def timed(cmd, env=None, cwd=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-600:]}")
    return wall, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", default=os.path.join(ROOT, "build", "canonlab"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "E1-Bk0.yaml"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time PyTorch under torch.compile")
    args = ap.parse_args()

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    sides = {"canonlab": [], "torch eager": []}
    if args.compile:
        sides["torch.compile"] = []
    ref = os.path.join(ROOT, "tests", "torch_ref")
    for rnd in range(args.rounds):
        run_dir = tempfile.mkdtemp(prefix="whole_run_")
        try:
            wall, _ = timed([args.canonlab, "train", args.config, "--set", f"train.steps={args.steps}", "--set",
                             f"train.threads={args.threads}", "--quiet", "--force", "--out", run_dir], env=env)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        sides["canonlab"].append(wall)
        for name in [n for n in sides if n != "canonlab"]:
            code = TORCH_RUN.format(ref=ref, threads=args.threads, config=args.config, steps=args.steps,
                                    compiled=name == "torch.compile")
            wall, _ = timed([sys.executable, "-c", code], env=env)
            sides[name].append(wall)
        print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in sides.items()),
              file=sys.stderr)

    ours = statistics.median(sides["canonlab"])
    print(f"Whole run: {os.path.basename(args.config)}, {args.steps} steps, {args.threads} thread(s); {cpu_model()} "
          f"({isa()}); median of {args.rounds} interleaved rounds.\n")
    print("| program | median s | every round s | vs canonlab |")
    print("|---|---:|---|---:|")
    for name, walls in sides.items():
        med = statistics.median(walls)
        print(f"| {name} | {med:.1f} | {' '.join(f'{w:.1f}' for w in walls)} | {med / ours:.2f} |")


if __name__ == "__main__":
    main()
