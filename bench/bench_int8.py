#!/usr/bin/env python3
"""Weight-only int8 against fp32 on trained runs (BENCHMARKS.md, "int8 inference"; docs/engine.md "int8 inference").

For each run directory (or checkpoint file):
  - accuracy: `canonlab eval RUN --json` and `canonlab eval RUN --json --int8`, every metric and its delta (the eval
    is deterministic, so one evaluation each is the number);
  - eval time: wall time of the two eval processes (load + quantize + eval), median over --rounds, fp32 and int8
    interleaved (A, B, B, A, ...) so both see the same load on a shared machine;
  - generation time: `canonlab generate RUN --prompt P --max-new N` (cached decoding, greedy) with and without
    --int8, the tokens/s canonlab reports for the generation itself (the model load excluded), median over the rounds;
  - the peer (unless --no-torch, or where torch or its quantize_dynamic is missing, or the family is one the
    reference lacks): the same checkpoint in the PyTorch reference (tests/torch_ref/canon_model.py) with
    torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, qint8) -- dynamic W8A8 (int8 activations too, per
    tensor, computed on the fly), so it is a speed peer, not the same numerics; forward time of one eval-sized batch
    and the relative logit change.
Prints a markdown table for BENCHMARKS.md (and --json FILE writes every number).

    python3 bench/bench_int8.py --canonlab build/canonlab --rounds 5 --threads 2 runs/copy runs/brevo ...
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str]) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:400]}")
    return p.stdout, p.stderr, seconds


def sets(args) -> list[str]:
    out = []
    if args.threads:
        out += ["--set", f"train.threads={args.threads}"]
    for s in args.set:
        out += ["--set", s]
    return out


def eval_json(args, run_dir: str, int8: bool) -> tuple[dict, float]:
    cmd = [args.canonlab, "eval", run_dir, "--json"] + (["--int8"] if int8 else []) + sets(args)
    out, _, seconds = run(cmd)
    return json.loads(out), seconds


def generate(args, run_dir: str, int8: bool) -> tuple[float, str]:
    cmd = [args.canonlab, "generate", run_dir, "--prompt", args.prompt, "--max-new", str(args.max_new)] + \
        (["--int8"] if int8 else []) + sets(args)
    out, err, _ = run(cmd)
    m = re.search(r"generated (\d+) tokens in ([0-9.eE+-]+) s", err)
    if not m:
        sys.exit(f"{' '.join(cmd)}: no timing line in: {err.strip()[:300]}")
    line = next((l for l in out.splitlines() if l.startswith("generated ")), "")
    return int(m.group(1)) / max(float(m.group(2)), 1e-12), line


def checkpoint_file(run_dir: str) -> str:
    p = Path(run_dir)
    if p.is_file():
        return str(p)
    ck = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    files = sorted(ck.glob("*.model.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.model.safetensors under {ck}")
    return str(files[-1])


def torch_peer(args, run_dir: str) -> dict | None:
    """Forward time of one eval-sized batch, fp32 vs quantize_dynamic int8, in the PyTorch reference."""
    import warnings
    warnings.filterwarnings("ignore")  # torch.ao.quantization's deprecation notices
    try:
        import torch
        import torch.nn as nn
        from torch.ao.quantization import quantize_dynamic
        sys.path.insert(0, str(ROOT / "tests" / "torch_ref"))
        import canon_model as cm
    except Exception as e:  # torch missing, or too old for torch.ao
        return {"skipped": f"torch unavailable: {e}"}
    try:
        ck = checkpoint_file(run_dir)
        cfg = cm.config_from_checkpoint(ck)
        model = cm.CanonModel(cfg).load_state(ck).eval()
    except Exception as e:  # a family or option the reference does not build
        return {"skipped": f"reference model: {e}"}
    if args.threads:
        torch.set_num_threads(args.threads)
    m = cm.resolve_config(cfg)
    B = int(m["train"].get("batch_size", 32))
    T = min(int(m["model"]["max_seq_len"]), int(cm.seq_len(m["task"])) if "task" in m else 256)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, int(m["model"]["vocab_size"]), (B, T), generator=g)
    qmodel = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)

    def timed(mod) -> tuple[float, "torch.Tensor"]:
        with torch.no_grad():
            out = mod(tokens)  # warm-up
            times = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                out = mod(tokens)
                times.append(time.perf_counter() - t0)
        return statistics.median(times), out

    t_fp32, y_fp32 = timed(model)
    t_int8, y_int8 = timed(qmodel)
    rel = float((y_int8 - y_fp32).abs().max() / y_fp32.abs().max().clamp_min(1.0))
    return {"batch": [B, T], "fp32_s": t_fp32, "int8_s": t_int8, "speedup": t_fp32 / t_int8,
            "max_rel_logit_change": rel, "tied_head_quantized": False}


def metric_names(ev: dict) -> list[str]:
    return [k for k, v in ev.items() if isinstance(v, (int, float))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories or .model.safetensors files")
    ap.add_argument("--canonlab", default=str(ROOT / "build" / "canonlab"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="train.threads for canonlab and torch (0 = the run's)")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--prompt", default="1,2,3,4,5,6,7,8", help="token ids (or text for a text-task run)")
    ap.add_argument("--set", action="append", default=[], help="extra --set for eval and generate (e.g. task.eval_samples=512)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch quantize_dynamic peer")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args()

    results = []
    for run_dir in args.runs:
        print(f"[bench_int8] {run_dir}", file=sys.stderr)
        r = {"run": run_dir}
        ev_fp32, _ = eval_json(args, run_dir, False)
        ev_int8, _ = eval_json(args, run_dir, True)
        r["int8"] = ev_int8.get("int8", {})
        r["metrics"] = {k: {"fp32": ev_fp32["eval"][k], "int8": ev_int8["eval"][k],
                            "delta": ev_int8["eval"][k] - ev_fp32["eval"][k]}
                        for k in metric_names(ev_fp32["eval"]) if k in ev_int8["eval"]}
        eval_t = {"fp32": [], "int8": []}
        gen_t = {"fp32": [], "int8": []}
        lines = {}
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for int8 in order:
                key = "int8" if int8 else "fp32"
                eval_t[key].append(eval_json(args, run_dir, int8)[1])
                tps, line = generate(args, run_dir, int8)
                gen_t[key].append(tps)
                lines[key] = line
        r["eval_s"] = {k: statistics.median(v) for k, v in eval_t.items()}
        r["eval_speedup"] = r["eval_s"]["fp32"] / r["eval_s"]["int8"]
        r["generate_tokens_per_s"] = {k: statistics.median(v) for k, v in gen_t.items()}
        r["generate_speedup"] = r["generate_tokens_per_s"]["int8"] / r["generate_tokens_per_s"]["fp32"]
        r["same_greedy_continuation"] = lines.get("fp32") == lines.get("int8")
        r["torch"] = None if args.no_torch else torch_peer(args, run_dir)
        results.append(r)

    print(f"\nint8 vs fp32 ({args.rounds} rounds, median; threads {args.threads or 'as trained'}; "
          f"generate: {args.max_new} new tokens, cached, greedy)\n")
    print("| run | metric | fp32 | int8 | Δ | eval s fp32 / int8 (×) | generate tok/s fp32 / int8 (×) | same tokens | "
          "torch dynamic int8 forward × |")
    print("|---|---|---:|---:|---:|---:|---:|:-:|---:|")
    for r in results:
        t = r["torch"]
        torch_cell = "–" if not t or "skipped" in t else f"{t['speedup']:.2f}× (Δlogit {t['max_rel_logit_change']:.1e})"
        first = True
        for name, m in r["metrics"].items():
            cells = [Path(r["run"]).name if first else "", name, f"{m['fp32']:.4f}", f"{m['int8']:.4f}",
                     f"{m['delta']:+.4f}"]
            if first:
                cells += [f"{r['eval_s']['fp32']:.2f} / {r['eval_s']['int8']:.2f} ({r['eval_speedup']:.2f}×)",
                          f"{r['generate_tokens_per_s']['fp32']:.0f} / {r['generate_tokens_per_s']['int8']:.0f} "
                          f"({r['generate_speedup']:.2f}×)",
                          "yes" if r["same_greedy_continuation"] else "no", torch_cell]
            else:
                cells += ["", "", "", ""]
            print("| " + " | ".join(cells) + " |")
            first = False
    for r in results:
        if r["torch"] and "skipped" in r["torch"]:
            print(f"\n{Path(r['run']).name}: torch peer skipped ({r['torch']['skipped'][:200]})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
