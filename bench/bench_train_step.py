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
each at every thread count of --threads (default 1,2) and precision of --precisions (default fp32,bf16: ours with
train.precision=bf16, PyTorch's forward + loss under torch.autocast("cpu", dtype=torch.bfloat16)), side by side in
one run. The limit each step is measured against is the machine's GEMM rate at the model's own shapes (every
nn.Linear of the reference model: forward, dx and dw GEMMs with B x T rows, torch.matmul in the step's precision, at
the same thread count), beside the float32 GEMM rate at 1024^3 (torch and numpy).

    python bench/bench_train_step.py --canonlab build/canonlab --threads 1,2 --steps 10 [--out FILE.md]
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
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.P)]
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


def time_torch(cfg, args, compiled: bool, bf16: bool):
    """Median ms of one training step of the PyTorch reference; dict with ms, tokens, compile_s or error. bf16: the
    forward and the loss under CPU autocast (bfloat16 matmuls, fp32 weights and optimizer), as PyTorch users do."""
    torch.manual_seed(0)
    tr = cfg["train"]
    model = cm.CanonModel(cfg)
    opt = cm.make_optimizer(model, tr)
    tokens, targets, mask = cm.copy_batch(cfg["task"], int(tr["batch_size"]), 1)
    tokens = tokens.long()

    def plain_loss(tok, tgt, msk):
        return cm.masked_cross_entropy(model(tok), tgt, msk)

    def loss_fn(tok, tgt, msk):
        if not bf16:
            return plain_loss(tok, tgt, msk)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return plain_loss(tok, tgt, msk)

    if compiled:
        torch._dynamo.reset()  # each (threads, precision, T) compiles afresh
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
def model_gemm_shapes(cfg):
    """(M, K, N) of every GEMM of the reference model's linear layers in one training step with B x T rows: the
    forward (rows, in) @ (in, out), dx (rows, out) @ (out, in) and dw (out, rows) @ (rows, in); a tied LM head is
    the embedding matrix used as a linear layer."""
    model = cm.CanonModel(cfg)
    rows = int(cfg["train"]["batch_size"]) * cm.seq_len(cfg["task"])
    layers = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if getattr(model, "lm_head", None) is None:
        emb = next(p for n, p in model.named_parameters() if p.dim() == 2 and "emb" in n)
        layers.append((emb.shape[1], emb.shape[0]))
    shapes = []
    for fan_in, fan_out in layers:
        shapes += [(rows, fan_in, fan_out), (rows, fan_out, fan_in), (fan_out, rows, fan_in)]
    return shapes


def gemm_rate_at_shapes(shapes, threads: int, dtype, reps: int = 5) -> float:
    """GFLOP/s of torch.matmul over the given shapes (total FLOPs / sum of each shape's fastest time)."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        total_flop, total_s = 0.0, 0.0
        for M, K, N in shapes:
            a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
            a @ b
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                a @ b
                times.append(time.perf_counter() - t0)
            total_flop += 2.0 * M * N * K
            total_s += min(times)
        return total_flop / total_s / 1e9
    finally:
        torch.set_num_threads(old)


def sgemm_torch(threads: int, n: int = 1024) -> float:
    return gemm_rate_at_shapes([(n, n, n)], threads, torch.float32)


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
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
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
    thread_counts = [int(x) for x in args.threads.split(",") if x.strip()]
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    bad = [p for p in precisions if p not in ("fp32", "bf16")]
    if bad or not thread_counts or min(thread_counts) < 1:
        print(f"bench_train_step: --precisions takes fp32 and bf16 (got {args.precisions}); --threads positive "
              f"integers (got {args.threads})")
        return 1

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
    flags = set()
    try:
        with open("/proc/cpuinfo") as fh:
            info = fh.read().splitlines()
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), cpu)
        flags = set(next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), []))
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    emit(f"# Training step: canonlab vs PyTorch ({name})")
    emit()
    emit(f"- machine: {cpu}, {os.cpu_count()} logical CPUs; ISA: {' '.join(isa) or 'n/a'}")
    emit(f"- torch {torch.__version__} (MKL: {torch.backends.mkl.is_available()}, "
         f"mkldnn: {torch.backends.mkldnn.is_available()}), python {platform.python_version()}")
    emit(f"- {args.warmup} warmup steps, median of {args.steps} timed steps; a step = forward, loss, backward, "
         "grad clip, AdamW, zero_grad; compile = forward + loss under torch.compile(mode='default'); bf16 = "
         "canonlab train.precision=bf16, PyTorch forward + loss under torch.autocast('cpu', torch.bfloat16)")
    emit(f"- copy task: T = 2 * n_symbols + 1 tokens per sequence")

    rows, notes = [], []
    runs = []  # (tag, T, cfg, sets)
    for n in [int(x) for x in args.n_symbols.split(",") if x.strip()]:
        sets = [f"task.n_symbols={n}"]
        if n > base_vocab:  # the copy task needs n distinct symbols: n_symbols <= vocab
            sets.append(f"task.vocab={n}")
            notes.append(f"n_symbols={n} exceeds task.vocab={base_vocab}: that row also sets task.vocab={n}")
        sets += args.set
        cfg = cm.resolve_config(cm.load_yaml_config(args.config, sets))
        runs.append((f"{name} T={cm.seq_len(cfg['task'])}", cm.seq_len(cfg["task"]), cfg, sets))

    sgemm_rows = []
    for P in thread_counts:
        args.P = P
        torch.set_num_threads(P)
        sgemm_rows.append((P, sgemm_torch(P), sgemm_numpy(P)))
        for prec in precisions:
            bf16 = prec == "bf16"
            for tag, T, cfg, sets in runs:
                print(f"... {tag}, {P} thread(s), {prec}", file=sys.stderr, flush=True)
                res = {}
                res["canonlab"] = run_ours(args, args.config, sets + [f"train.precision={prec}"])
                for label, compiled in (("eager", False), ("compile", True)):
                    if compiled and args.no_compile:
                        res[label] = {"error": "skipped (--no-compile)"}
                        continue
                    try:
                        res[label] = time_torch(cfg, args, compiled=compiled, bf16=bf16)
                    except Exception as e:  # noqa: BLE001 - e.g. a config the reference does not implement
                        res[label] = {"error": f"{type(e).__name__}: {first_line(e)}"}
                limit = gemm_rate_at_shapes(model_gemm_shapes(cfg), P, torch.bfloat16 if bf16 else torch.float32)
                ours, eager, comp = res["canonlab"], res["eager"], res["compile"]
                where = f"{tag}, {P}T, {prec}"
                for label, r in res.items():
                    if "error" in r:
                        notes.append(f"{where}, {label}: {r['error']}")
                    if r.get("note"):
                        notes.append(f"{where}, {label}: {r['note']}")
                    if r.get("spread", 1.0) > 1.25:
                        notes.append(f"{where}, {label}: noisy timing, slowest step {r['spread']:.2f}x the fastest")
                if ours.get("bf16_gemm") and f"canonlab bf16: {ours['bf16_gemm']}" not in notes:
                    notes.append(f"canonlab bf16: {ours['bf16_gemm']}")
                if "threads" in ours and ours["threads"] != P:
                    notes.append(f"{where}: canonlab ran with {ours['threads']} threads, asked for {P}")
                ours_ms, gflop = ours.get("ms_per_step"), ours.get("model_gflop_per_step")
                ratio = lambda r: (r["ms"] / ours_ms) if ours_ms and r.get("ms") else None  # noqa: E731
                rate = gflop / (ours_ms / 1e3) if gflop and ours_ms else None
                rows.append([tag, str(P), prec, fmt(ours_ms), fmt(eager.get("ms")), fmt(comp.get("ms")),
                             fmt(ratio(eager), 2), fmt(ratio(comp), 2), fmt(rate), fmt(limit),
                             f"{100 * rate / limit:.0f}%" if rate and limit else "n/a"])

    emit()
    head = ["config", "threads", "precision", "ours ms", "eager ms", "compile ms", "eager/ours", "compile/ours",
            "ours GFLOP/s", "GEMM limit GFLOP/s", "ours / limit"]
    emit("| " + " | ".join(head) + " |")
    emit("|" + "---|" * 3 + "---:|" * (len(head) - 3))
    for r in rows:
        emit("| " + " | ".join(r) + " |")
    emit()
    emit("GFLOP/s: canonlab's model_gflop_per_step over its median step. GEMM limit: torch.matmul at the model's own "
         "linear-layer shapes (forward, dx, dw with B x T rows) in the row's precision and thread count. Ratios > 1: "
         "canonlab is faster.")
    emit()
    emit("| sgemm 1024^3 float32 | threads | GFLOP/s torch | GFLOP/s numpy |")
    emit("|---|---:|---:|---:|")
    for P, g, n in sgemm_rows:
        emit(f"| | {P} | {fmt(g)} | {fmt(n)} |")
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
