#!/usr/bin/env python3
"""One training step, canonlab vs PyTorch (eager and torch.compile), on the same model and batch shape.

For configs/E1-Bk0.yaml at T = 49 (task.n_symbols = 24) and at T = 255 (task.n_symbols = 127; the copy
task has T = 2n + 1, so 255 is the closest to 256; as n_symbols may not exceed task.vocab, that row also sets
task.vocab = 127 when the config's vocab is smaller, which only widens the embedding and the LM head) it
measures:
  - ours:    `canonlab bench-step CONFIG --set task.n_symbols=N --steps S --warmup W --threads P`
  - eager:   the PyTorch reference (tests/torch_ref/canon_model.py): forward, loss, backward, grad clip,
             AdamW step, zero_grad; torch.set_num_threads(P); W warmup steps, median of S timed steps
  - compile: the same with the forward + loss under torch.compile (mode "default"); compile time is
             reported separately; a compile failure is reported and the run goes on
and the machine's float32 GEMM rate (1024^3, torch and numpy, at 1 and P threads).

    python bench/bench_train_step.py --canonlab build/canonlab --threads 2 --steps 10 [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

try:
    import torch
    import yaml
except Exception as e:  # noqa: BLE001
    print(f"bench_train_step: cannot import torch/pyyaml with {sys.executable}: {e!r}; run scripts/setup-venv.sh")
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch_ref"))
import canon_model as cm  # noqa: E402


def first_line(text: str, limit: int = 300) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


# ---------------------------------------------------------------------------------------------------------
def run_ours(args, config, sets):
    """Returns the bench-step JSON dict, or {"error": text}."""
    if not os.access(args.canonlab, os.X_OK):
        return {"error": f"binary not found: {args.canonlab}"}
    cmd = [args.canonlab, "bench-step", config]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {first_line(p.stderr or p.stdout)}", "cmd": " ".join(cmd)}
    for line in reversed(p.stdout.strip().splitlines()):
        try:
            out = json.loads(line)
            if isinstance(out, dict) and "ms_per_step" in out:
                return out
        except ValueError:
            continue
    return {"error": f"no JSON line with ms_per_step in output: {first_line(p.stdout)}"}


def time_torch(cfg, args, compiled: bool):
    """Median ms of one training step of the PyTorch reference; dict with ms, tokens, compile_s or error."""
    torch.manual_seed(0)
    tr = cfg["train"]
    model = cm.CanonModel(cfg)
    opt = cm.make_optimizer(model, tr)
    tokens, targets, mask = cm.copy_batch(cfg["task"], int(tr["batch_size"]), 1)
    tokens = tokens.long()

    def loss_fn(tok, tgt, msk):
        return cm.masked_cross_entropy(model(tok), tgt, msk)

    fn = torch.compile(loss_fn, mode="default") if compiled else loss_fn
    clip = float(tr["grad_clip"])

    def step(s):
        loss = fn(tokens, targets, mask)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for g in opt.param_groups:
            g["lr"] = cm.lr_at(s, tr)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    out = {"tokens": tokens.numel()}
    try:
        t0 = time.perf_counter()
        step(0)  # first step: includes the compilation
        out["first_s"] = time.perf_counter() - t0
        for s in range(1, args.warmup):
            step(s)
        times = []
        for s in range(args.steps):
            t0 = time.perf_counter()
            loss = step(args.warmup + s)
            times.append(time.perf_counter() - t0)
        if not torch.isfinite(loss.detach()):
            out["note"] = "non-finite loss"
        out["ms"] = statistics.median(times) * 1e3
        out["spread"] = max(times) / min(times)
    except Exception as e:  # noqa: BLE001 - torch.compile may fail on a machine without a working toolchain
        out["error"] = f"{type(e).__name__}: {first_line(e)}"
    return out


# ---------------------------------------------------------------------------------------------------------
def sgemm_torch(threads: int, n: int = 1024, reps: int = 5) -> float:
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return 2 * n ** 3 / min(times) / 1e9
    finally:
        torch.set_num_threads(old)


NUMPY_GEMM = """
import time, numpy as np
n = 1024
a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
a @ b; t = []
for _ in range(5):
    t0 = time.perf_counter(); a @ b; t.append(time.perf_counter() - t0)
print(2 * n ** 3 / min(t) / 1e9)
"""


def sgemm_numpy(threads: int):
    """numpy fixes its BLAS thread count at import, so this runs in a child with the thread env set."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        env[k] = str(threads)
    try:
        p = subprocess.run([sys.executable, "-c", NUMPY_GEMM], capture_output=True, text=True, env=env, timeout=120)
        return float(p.stdout.strip()) if p.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def bench_kernels(path: str, flt: str, timeout: float):
    """Rows (name, time, unit, counters) from google-benchmark's JSON, or an error string."""
    if not os.access(path, os.X_OK):
        return f"bench_kernels not found: {path}"
    try:
        p = subprocess.run([path, "--benchmark_format=json", f"--benchmark_filter={flt}"],
                           capture_output=True, text=True, timeout=timeout)
        data = json.loads(p.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return f"bench_kernels failed: {e}"
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index", "aggregate_name"}
    rows = []
    for b in data.get("benchmarks", []):
        counters = {k: v for k, v in b.items() if k not in skip and isinstance(v, (int, float))}
        rows.append((b.get("name"), b.get("real_time"), b.get("time_unit"), counters))
    return rows


# ---------------------------------------------------------------------------------------------------------
def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", default=os.path.join(ROOT, "build", "canonlab"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "E1-Bk0.yaml"))
    ap.add_argument("--n-symbols", default="24,127", help="comma-separated task.n_symbols values (T = 2n+1)")
    ap.add_argument("--set", action="append", default=[], help="extra key=value overrides for both sides")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (>= 1)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--bench-kernels", default=None, help="path to bench_kernels (optional)")
    ap.add_argument("--bench-kernels-filter", default="gemm|linear|matmul")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per canonlab run")
    ap.add_argument("--out", default=None, help="also write the report as Markdown to this file")
    args = ap.parse_args()
    args.warmup = max(1, args.warmup)
    args.canonlab = os.path.abspath(args.canonlab)
    P = args.threads
    torch.set_num_threads(P)

    if not os.path.exists(args.config):
        print(f"bench_train_step: config not found: {args.config}")
        return 1
    try:
        base_vocab = int(cm.resolve_config(cm.load_yaml_config(args.config, args.set))["task"]["vocab"])
    except Exception as e:  # noqa: BLE001
        print(f"bench_train_step: cannot read {args.config}: {e}")
        return 1
    name = os.path.splitext(os.path.basename(args.config))[0]

    lines = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    emit(f"# Training step: canonlab vs PyTorch ({name})")
    emit()
    emit(f"- machine: {cpu}, {os.cpu_count()} logical CPUs; threads P = {P}")
    emit(f"- torch {torch.__version__} (MKL: {torch.backends.mkl.is_available()}), python {platform.python_version()}")
    emit(f"- {args.warmup} warmup steps, median of {args.steps} timed steps; a step = forward, loss, backward, "
         "grad clip, AdamW, zero_grad; compile = forward + loss under torch.compile(mode='default')")
    emit(f"- copy task: T = 2 * n_symbols + 1 tokens per sequence")

    g1, gp = sgemm_torch(1), sgemm_torch(P)
    n1, npp = sgemm_numpy(1), sgemm_numpy(P)

    rows, notes = [], []
    runs = []  # (tag, T, cfg, sets, {"canonlab": ..., "eager": ..., "compile": ...})
    for n in [int(x) for x in args.n_symbols.split(",") if x.strip()]:
        sets = [f"task.n_symbols={n}"]
        if n > base_vocab:  # the copy task needs n distinct symbols: n_symbols <= vocab
            sets.append(f"task.vocab={n}")
            notes.append(f"n_symbols={n} exceeds task.vocab={base_vocab}: that row also sets task.vocab={n}")
        sets += args.set
        cfg = cm.resolve_config(cm.load_yaml_config(args.config, sets))
        T = cm.seq_len(cfg["task"])
        runs.append((f"{name} T={T}", T, cfg, sets, {}))

    def measure(label, fn):
        for tag, T, cfg, sets, res in runs:
            print(f"... {tag}: {label}", file=sys.stderr, flush=True)
            try:
                res[label] = fn(cfg, sets)
            except Exception as e:  # noqa: BLE001 - e.g. a config the reference does not implement
                res[label] = {"error": f"{type(e).__name__}: {first_line(e)}"}

    # canonlab first, then eager, then compile last: torch.compile leaves worker processes and caches behind
    measure("canonlab", lambda cfg, sets: run_ours(args, args.config, sets))
    measure("eager", lambda cfg, sets: time_torch(cfg, args, compiled=False))
    if args.no_compile:
        for run in runs:
            run[4]["compile"] = {"error": "skipped (--no-compile)"}
    else:
        measure("compile", lambda cfg, sets: time_torch(cfg, args, compiled=True))

    for tag, T, cfg, sets, res in runs:
        ours, eager, comp = res["canonlab"], res["eager"], res["compile"]
        for label, r in res.items():
            if "error" in r:
                notes.append(f"{tag}, {label}: {r['error']}")
            if r.get("note"):
                notes.append(f"{tag}, {label}: {r['note']}")
            if r.get("spread", 1.0) > 1.25:
                notes.append(f"{tag}, {label}: noisy timing, slowest step {r['spread']:.2f}x the fastest")
        if "first_s" in comp and "error" not in comp:
            notes.append(f"{tag}: torch.compile first step (compilation included) {comp['first_s']:.1f} s")
        ours_ms = ours.get("ms_per_step")
        tokens = ours.get("tokens_per_step", eager.get("tokens"))
        if "tokens_per_step" in ours and eager.get("tokens") and ours["tokens_per_step"] != eager["tokens"]:
            notes.append(f"{tag}: canonlab reports {ours['tokens_per_step']} tokens/step, the PyTorch batch has "
                         f"{eager['tokens']} (B x T)")
        if "threads" in ours and ours["threads"] != P:
            notes.append(f"{tag}: canonlab ran with {ours['threads']} threads, asked for {P}")
        gflop = ours.get("model_gflop_per_step")
        ratio = lambda r: (r["ms"] / ours_ms) if ours_ms and r.get("ms") else None  # noqa: E731
        rows.append([tag, str(T), str(tokens if tokens is not None else "n/a"), fmt(ours_ms), fmt(eager.get("ms")),
                     fmt(comp.get("ms")), fmt(ratio(eager), 2), fmt(ratio(comp), 2),
                     fmt(gflop / (ours_ms / 1e3) if gflop and ours_ms else None),
                     fmt(gflop / (eager["ms"] / 1e3) if gflop and eager.get("ms") else None),
                     fmt(gflop / (comp["ms"] / 1e3) if gflop and comp.get("ms") else None)])

    emit()
    head = ["config", "T", "tokens/step", "ours ms", "eager ms", "compile ms", "eager/ours", "compile/ours",
            "ours GFLOP/s", "eager GFLOP/s", "compile GFLOP/s"]
    emit("| " + " | ".join(head) + " |")
    emit("|" + "---|" * 3 + "---:|" * (len(head) - 3))
    for r in rows:
        emit("| " + " | ".join(r) + " |")
    emit()
    emit(f"GFLOP/s use canonlab's model_gflop_per_step for all three columns. Ratios > 1: canonlab is faster.")
    emit()
    emit(f"| sgemm 1024^3 float32 | 1 thread GFLOP/s | {P} threads GFLOP/s |")
    emit("|---|---:|---:|")
    emit(f"| torch | {fmt(g1)} | {fmt(gp)} |")
    emit(f"| numpy | {fmt(n1)} | {fmt(npp)} |")
    if args.bench_kernels:
        res = bench_kernels(args.bench_kernels, args.bench_kernels_filter, args.timeout)
        emit()
        if isinstance(res, str):
            emit(f"bench_kernels: {res}")
        else:
            emit(f"| bench_kernels ({args.bench_kernels_filter}) | time | counters |")
            emit("|---|---:|---|")
            for nm, t, unit, counters in res:
                c = ", ".join(f"{k}={v:.4g}" for k, v in counters.items())
                emit(f"| {nm} | {fmt(t)} {unit or ''} | {c} |")
    if notes:
        emit()
        emit("Notes:")
        for nt in notes:
            emit(f"- {nt}")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
