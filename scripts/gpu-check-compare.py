#!/usr/bin/env python3
"""The verdicts of scripts/gpu-check.sh's training checks, read from run directories (summary.json, metrics.jsonl,
checkpoints/). Standard library only: it runs on the GPU machine's python3. Prints one line, "MEASURED|NOTE", and
exits 0 when the check passes, 1 when it fails, 2 when a run directory lacks what the check reads.

  curves A B            final train loss within --loss-rel (relative) and eval copy_acc within --acc-points
                        (percentage points) of B's: A on the GPU against B on the CPU (the largest relative gap
                        over the logged loss curve is reported too)
  same A B              the same run twice: every metrics.jsonl record equal but for its timings (tokens_per_s,
                        elapsed_s) and the final checkpoints/step_*.model.safetensors byte-identical
  learns A [B]          A finished with a finite final train loss below its step-1 loss; with B (the CPU's run of
                        the same steps), also within --loss-rel of B's final loss
  text A                the text run: bpc of its last eval record, tokens/s between its first and last train records,
                        MFU = tokens/s x FLOPs per token (--dry-run FILE) / the bf16 GEMM rate (--gemm-json FILE,
                        else the nominal 989 TFLOP/s of an H100 SXM / H200); passes when it learned (as `learns`)
  checkpoints A B       every run directory under A/runs/ has a final checkpoint byte-identical to B/<same name>'s
  progress A            (never passes) the step and tokens/s of A's last train record: where a run that timed out got
"""
import argparse
import glob
import hashlib
import json
import math
import os
import re
import sys

TIMINGS = {"tokens_per_s", "elapsed_s"}


class Missing(Exception):
    pass


def summary(run):
    path = os.path.join(run, "summary.json")
    if not os.path.exists(path):
        raise Missing(f"{path} missing (the run did not finish)")
    return json.load(open(path))


def records(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        raise Missing(f"{path} missing")
    return [json.loads(line) for line in open(path) if line.strip()]


def final_checkpoint(run):
    files = sorted(glob.glob(os.path.join(run, "checkpoints", "step_*.model.safetensors")))
    if not files:
        raise Missing(f"no checkpoints/step_*.model.safetensors in {run}")
    return files[-1]  # zero-padded step numbers: the last in name order is the last step


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def train_losses(run):
    return [r["loss"] for r in records(run) if r.get("split") == "train"]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def curves(a, b, args):
    sa, sb = summary(a), summary(b)
    la, lb = sa["final_train_loss"], sb["final_train_loss"]
    ca, cb = 100 * sa["eval"]["copy_acc"], 100 * sb["eval"]["copy_acc"]
    ok = math.isfinite(la) and rel(la, lb) <= args.loss_rel and abs(ca - cb) <= args.acc_points
    # the whole logged curve too (measured, not judged): the largest relative gap at a step both logged
    curve_b = {r["step"]: r["loss"] for r in records(b) if r.get("split") == "train"}
    gaps = [rel(r["loss"], curve_b[r["step"]]) for r in records(a) if r.get("split") == "train" and r["step"] in curve_b]
    measured = (f"final loss {la:.4f} vs {lb:.4f} ({100 * rel(la, lb):.2f}%), copy_acc {ca:.1f} vs {cb:.1f}; "
                f"largest gap over {len(gaps)} logged steps {100 * max(gaps, default=0):.2f}%")
    return ok, measured, "" if ok else f"allowed: {100 * args.loss_rel:g}% and {args.acc_points:g} points"


def same(a, b, args):
    ra = [{k: v for k, v in r.items() if k not in TIMINGS} for r in records(a)]
    rb = [{k: v for k, v in r.items() if k not in TIMINGS} for r in records(b)]
    ca, cb = final_checkpoint(a), final_checkpoint(b)
    same_metrics = ra == rb
    same_ckpt = os.path.basename(ca) == os.path.basename(cb) and sha256(ca) == sha256(cb)
    first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
    measured = (f"{len(ra)} metrics records {'identical' if same_metrics else f'differ from record {first + 1}'}; "
                f"{os.path.basename(ca)} {'identical' if same_ckpt else 'DIFFERS'}")
    note = "" if same_metrics else f"first difference: {ra[first:first + 1]} vs {rb[first:first + 1]}"[:300]
    return same_metrics and same_ckpt, measured, note


def learns(a, b, args):
    losses = train_losses(a)
    final = summary(a)["final_train_loss"]
    if not losses:
        raise Missing(f"no train records in {a}/metrics.jsonl")
    ok = math.isfinite(final) and final < losses[0]
    measured = f"loss {losses[0]:.4f} -> {final:.4f}"
    note = "" if ok else "not finite or not below step 1's"
    if b:
        other = summary(b)["final_train_loss"]
        close = rel(final, other) <= args.loss_rel
        measured += f"; cpu {other:.4f} ({100 * rel(final, other):.2f}%)"
        ok = ok and close
        note = note or ("" if close else f"more than {100 * args.loss_rel:g}% from the cpu's")
    return ok, measured, note


def flop_per_token(dry_run_file):
    """From `canonlab train ... --dry-run`'s line "step: 64 sequences x 1024 tokens = 65536 tokens, 32.60 TFLOP"."""
    m = re.search(r"= (\d+) tokens, ([\d.]+) ([kMGTPE]?)FLOP", open(dry_run_file).read())
    if not m:
        raise Missing(f"no 'step: ... tokens, ... FLOP' line in {dry_run_file}")
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}[m.group(3)]
    return float(m.group(2)) * scale / int(m.group(1))


def text(a, _b, args):
    ok, measured, note = learns(a, None, args)
    rate, source = 989.0, "nominal H100 SXM / H200 dense bf16: not measured here"
    if args.gemm_json and os.path.exists(args.gemm_json):
        try:
            gemm = json.load(open(args.gemm_json))
            rate, source = gemm["bf16_tflops"], f"bf16 GEMM measured in this run, torch.matmul 8192^3 on {gemm['device']}"
        except (ValueError, KeyError):
            pass
    per_token = flop_per_token(args.dry_run)
    evals = [r for r in records(a) if r.get("split") == "eval"]
    trains = [r for r in records(a) if r.get("split") == "train"]
    bpc = evals[-1].get("bpc") if evals else None
    # the steady rate: tokens between the first and the last train record over the time between them (the first
    # record's time includes start-up); tokens per step from the records' own rate and elapsed time
    first, last = trains[0], trains[-1]
    tokens_per_step = first["tokens_per_s"] * first["elapsed_s"] / first["step"]
    if last["step"] > first["step"] and last["elapsed_s"] > first["elapsed_s"]:
        tok_s = (last["step"] - first["step"]) * tokens_per_step / (last["elapsed_s"] - first["elapsed_s"])
    else:
        tok_s = last["tokens_per_s"]
    mfu = tok_s * per_token / (rate * 1e12)
    measured += f"; bpc {bpc:.3f}" if bpc is not None else "; no bpc in the eval record"
    measured += f"; {tok_s:,.0f} tokens/s x {per_token / 1e9:.3g} GFLOP/token; MFU {100 * mfu:.1f}% of {rate:.0f} TFLOP/s ({source})"
    return ok and bpc is not None and math.isfinite(bpc), measured, note


def progress(a, _b, args):
    """Where a run that did not finish got to (its last train record): for a timeout's row."""
    trains = [r for r in records(a) if r.get("split") == "train"]
    if not trains:
        return False, "no train record yet", ""
    last = trains[-1]
    return False, f"reached step {last['step']} at {last['tokens_per_s']:,.0f} tokens/s (loss {last['loss']:.4f})", ""


def checkpoints(a, b, args):
    names = sorted(os.path.basename(d) for d in glob.glob(os.path.join(a, "runs", "*")) if os.path.isdir(d))
    if not names:
        raise Missing(f"no run directories in {a}/runs")
    differ = [n for n in names if sha256(final_checkpoint(os.path.join(a, "runs", n))) !=
              sha256(final_checkpoint(os.path.join(b, n)))]
    measured = f"{len(names) - len(differ)} of {len(names)} final checkpoints identical"
    return not differ, measured, ("differ: " + ", ".join(differ)) if differ else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["curves", "same", "learns", "text", "checkpoints", "progress"])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?", default="")
    ap.add_argument("--loss-rel", type=float, default=0.02)
    ap.add_argument("--acc-points", type=float, default=2.0)
    ap.add_argument("--dry-run", default="", help="text: the output of `canonlab train ... --dry-run` (FLOPs)")
    ap.add_argument("--gemm-json", default="", help="text: bench_step_torch.py --gemm-only's output (else the "
                    "nominal 989 TFLOP/s)")
    args = ap.parse_args()
    try:
        ok, measured, note = globals()[args.check](args.a, args.b, args)
    except (Missing, KeyError, ValueError, IndexError) as e:
        print(f"|cannot read the runs: {type(e).__name__}: {e}")
        return 2
    print(f"{measured}|{note}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
