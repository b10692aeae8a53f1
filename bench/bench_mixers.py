#!/usr/bin/env python3
"""Linear-time mixers: our chunked kernels vs the PyTorch naive recurrence, and a full training step of each
linear family vs the Transformer's, side by side in one run.

Part 1, the mixer kernels (B = 64, H = 4, head dim 32, T = 64 and 256 by default), forward + backward:
  - ours:  bench_mixers (bench/bench_mixers.cpp): the chunked kernels of src/engine/ops/{ssd,gla,delta_rule},
           chunk 64, median of --reps repetitions, omp threads = P; it also times the naive C++ recurrence once
           and reports the chunked-vs-naive max relative error
  - torch: the per-timestep recurrence written below (a Python loop over t, autograd for the backward),
           torch.set_num_threads(P), 1 warmup + median of --torch-reps repetitions
  mixers: ssd (Mamba2: P = 32, N = 32, G = 1), gla (K = V = 32), gdn (Gated DeltaNet, K = V = 32),
          deltanet (no decay gate), with gate values in the ranges the models produce (see bench_mixers.cpp).
  GFLOP/s use bench_mixers' FLOP count (the chunk form's matrix products; see its header) and are compared
  with the machine's sgemm rate (torch, 1024^3 float32, at P threads, measured in the same run).

Part 2, a training step (`canonlab bench-step`, forward + loss + backward + clip + AdamW) of a 4-layer
d_model = 128, 4-head, SwiGLU model on the copy task at T = 255 (n_symbols = 127, vocab = 127), batch
--batch (16), from --config (configs/demo.yaml) with --set overrides, for family in transformer, mamba2
(model.mamba2.mlp = true), gla, gdn, deltanet, with Canon (ABCD for the transformer, AbCD for the linear
families) and without (the transformer with no Canon, the linear families with only their own conv "b").
The transformer is run first and again last; ratios are to the mean of its two runs.

Every number is reported twice: by wall time (the medians) and by process CPU time (all threads together;
for a step, the CPU time of a run minus that of the same run with --steps 0). On a machine shared with other
work the CPU-time view still counts only our own running time; at one thread, on a quiet machine, the two agree.

    .venv/bin/python bench/bench_mixers.py --bench-mixers build/bench/bench_mixers --canonlab build/canonlab \
        --threads 2 [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print(f"bench_mixers: cannot import torch with {sys.executable}: {e!r}; run scripts/setup-venv.sh")
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H, D = 4, 32  # heads, head dim (P = N = K = V = 32), as in bench_mixers.cpp


def first_line(text, limit: int = 300) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:.{digits}f}"


def loadavg():
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


# ---------------------------------------------------------------------------------------------------------
# The PyTorch naive recurrences: one Python iteration per token, batched over (B, H), autograd backward.
def ssd_recurrence(x, dt, A, Bm, Cm):
    """x: (B,T,H,P), dt: (B,T,H), A: (H), Bm, Cm: (B,T,G,N). h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_tᵀ,
    y_t = h_t C_t (state (B,H,P,N))."""
    Bn, T, Hh, P = x.shape
    G, N = Bm.shape[2], Bm.shape[3]
    Bh = Bm.repeat_interleave(Hh // G, dim=2)  # (B,T,H,N)
    Ch = Cm.repeat_interleave(Hh // G, dim=2)
    h = x.new_zeros(Bn, Hh, P, N)
    ys = []
    for t in range(T):
        a = torch.exp(dt[:, t] * A)  # (B,H)
        h = a[:, :, None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((h * Ch[:, t, :, None, :]).sum(-1))
    return torch.stack(ys, 1)


def gla_recurrence(q, k, v, g, scale):
    """q, k, g: (B,T,H,K), v: (B,T,H,V). S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ, o_t = scale S_tᵀ q_t."""
    Bn, T, Hh, K = q.shape
    S = q.new_zeros(Bn, Hh, K, v.shape[-1])
    os_ = []
    for t in range(T):
        S = torch.exp(g[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        os_.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(os_, 1)


def delta_recurrence(q, k, v, beta, g, scale):
    """q, k: (B,T,H,K), v: (B,T,H,V), beta: (B,T,H), g: (B,T,H) or None. S <- exp(g_t) S;
    u = beta_t (v_t - Sᵀ k_t); S <- S + k_t uᵀ; o_t = scale Sᵀ q_t."""
    Bn, T, Hh, K = q.shape
    S = q.new_zeros(Bn, Hh, K, v.shape[-1])
    os_ = []
    for t in range(T):
        if g is not None:
            S = S * torch.exp(g[:, t])[..., None, None]
        pred = torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        u = beta[:, t, :, None] * (v[:, t] - pred)
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        os_.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * scale))
    return torch.stack(os_, 1)


def make_inputs(mixer: str, B: int, T: int, gen: torch.Generator):
    """(function, list of leaf inputs, dout), drawn as in bench_mixers.cpp."""
    rn = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    ru = lambda lo, hi, *s: torch.rand(*s, generator=gen) * (hi - lo) + lo  # noqa: E731
    scale = D ** -0.5
    if mixer == "ssd":
        x, Bm, Cm = rn(B, T, H, D), rn(B, T, 1, D), rn(B, T, 1, D)
        dt = F.softplus(rn(B, T, H) - 4)
        A = -ru(1, 16, H)
        leaves = [x, dt, A, Bm, Cm]
        fn = ssd_recurrence
        dout = rn(B, T, H, D)
    elif mixer == "gla":
        q, k, v = rn(B, T, H, D), rn(B, T, H, D), rn(B, T, H, D)
        g = F.logsigmoid(rn(B, T, H, D)) / 16
        leaves = [q, k, v, g]
        fn = lambda q, k, v, g: gla_recurrence(q, k, v, g, scale)  # noqa: E731
        dout = rn(B, T, H, D)
    elif mixer in ("gdn", "deltanet"):
        q = F.normalize(F.silu(rn(B, T, H, D)), dim=-1, eps=1e-6)
        k = F.normalize(F.silu(rn(B, T, H, D)), dim=-1, eps=1e-6)
        v = rn(B, T, H, D)
        beta = torch.sigmoid(rn(B, T, H))
        if mixer == "gdn":
            a = ru(0, 16, H)  # exp(A_log), A_log = log U[0, 16]
            dt0 = torch.exp(ru(torch.log(torch.tensor(1e-3)).item(), torch.log(torch.tensor(0.1)).item(), H))
            dt_bias = dt0 + torch.log(-torch.expm1(-dt0))
            g = (-a * F.softplus(rn(B, T, H) + dt_bias)).clamp_min(-20)
            leaves = [q, k, v, beta, g]
            fn = lambda q, k, v, beta, g: delta_recurrence(q, k, v, beta, g, scale)  # noqa: E731
        else:
            leaves = [q, k, v, beta]
            fn = lambda q, k, v, beta: delta_recurrence(q, k, v, beta, None, scale)  # noqa: E731
        dout = rn(B, T, H, D)
    else:
        raise ValueError(mixer)
    leaves = [t.contiguous().requires_grad_() for t in leaves]
    return fn, leaves, dout


def time_torch_mixer(mixer: str, B: int, T: int, reps: int):
    """Median ms of forward, backward and both, of the PyTorch recurrence; 1 warmup repetition."""
    gen = torch.Generator().manual_seed(1234 + T)
    fn, leaves, dout = make_inputs(mixer, B, T, gen)
    tf, tb, tt, ct = [], [], [], []
    for rep in range(1 + reps):
        for t in leaves:
            t.grad = None
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn(*leaves)
        loss = (out * dout).sum()
        t1 = time.perf_counter()
        loss.backward()
        t2, c2 = time.perf_counter(), time.process_time()
        if rep > 0:
            tf.append((t1 - t0) * 1e3)
            tb.append((t2 - t1) * 1e3)
            tt.append((t2 - t0) * 1e3)
            ct.append((c2 - c0) * 1e3)
    return {"ms_fwd": statistics.median(tf), "ms_bwd": statistics.median(tb), "ms_total": statistics.median(tt),
            "cpu_ms_total": statistics.median(ct), "spread": max(tt) / min(tt)}


def sgemm_torch(threads: int, n: int = 1024, reps: int = 5):
    """(GFLOP/s by wall time, GFLOP/s by CPU time / threads) of the best of `reps` 1024^3 matmuls."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        times, cpu = [], []
        for _ in range(reps):
            c0, t0 = time.process_time(), time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        return 2 * n ** 3 / min(times) / 1e9, 2 * n ** 3 / (min(cpu) / threads) / 1e9
    finally:
        torch.set_num_threads(old)


KERNEL_HEADERS = ["src/engine/ops/ssd/chunked.h", "src/engine/ops/gla/chunked.h", "src/engine/ops/delta_rule/chunked.h"]


def kernel_versions(binary: str, src_root: str):
    """'path hash' of each kernel header (git hash-object, the blob id), and the headers newer than the binary."""
    ids, stale = [], []
    bin_mtime = os.path.getmtime(binary) if os.path.exists(binary) else None
    for rel in KERNEL_HEADERS:
        path = os.path.join(src_root, rel)
        try:
            h = subprocess.run(["git", "hash-object", path], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            h = ""
        ids.append(f"{rel.removeprefix('src/engine/ops/')} {h[:10] or '?'}")
        if bin_mtime is not None and os.path.exists(path) and os.path.getmtime(path) > bin_mtime:
            stale.append(rel)
    return ids, stale


# ---------------------------------------------------------------------------------------------------------
def run_bench_mixers(args):
    """(list of JSON dicts, command string) or raises RuntimeError."""
    if not os.access(args.bench_mixers, os.X_OK):
        raise RuntimeError(f"binary not found: {args.bench_mixers} (cmake --build build --target bench_mixers)")
    cmd = [args.bench_mixers, "--threads", str(args.threads), "--T", args.T, "--B", str(args.B),
           "--chunk", str(args.chunk), "--reps", str(args.reps), "--warmup", str(args.warmup),
           "--mixers", args.mixers]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{' '.join(cmd)}: {e}") from e
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {first_line(p.stderr or p.stdout)}")
    out = []
    for line in p.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out, " ".join(cmd)


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench_step_once(args, sets, steps):
    """(bench-step JSON dict or {"error": text}, CPU seconds the child used)."""
    cmd = [args.canonlab, "bench-step", args.config]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["--steps", str(steps), "--warmup", str(args.step_warmup), "--threads", str(args.threads)]
    c0 = children_cpu_s()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{' '.join(cmd)}: {e}"}, 0.0
    cpu = children_cpu_s() - c0
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {first_line(p.stderr or p.stdout)}"}, cpu
    for line in reversed(p.stdout.strip().splitlines()):
        try:
            out = json.loads(line)
            if isinstance(out, dict) and "ms_per_step" in out:
                return out, cpu
        except ValueError:
            continue
    return {"error": f"no JSON line with ms_per_step in output: {first_line(p.stdout)}"}, cpu


def run_step(args, sets):
    """The bench-step JSON dict (median wall ms_per_step) plus cpu_ms_per_step, or {"error": text}.
    CPU per step = (CPU of a run with --steps S) − (CPU of the same run with --steps 0), over S: the setup and
    warmup cancel, and other load on the machine does not count."""
    if not os.access(args.canonlab, os.X_OK):
        return {"error": f"binary not found: {args.canonlab}"}
    out, cpu_s = bench_step_once(args, sets, args.steps)
    if "error" in out:
        return out
    base, cpu0 = bench_step_once(args, sets, 0)
    if "error" not in base:
        out["cpu_ms_per_step"] = (cpu_s - cpu0) * 1e3 / args.steps
    return out


# family -> (extra sets, canon set with Canon, canon set without Canon)
FAMILIES = [
    ("transformer", ["model.family=transformer"], "ABCD", ""),
    ("mamba2", ["model.family=mamba2", "model.mamba2.mlp=true"], "AbCD", "b"),
    ("gla", ["model.family=gla"], "AbCD", "b"),
    ("gdn", ["model.family=gdn"], "AbCD", "b"),
    ("deltanet", ["model.family=deltanet"], "AbCD", "b"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-mixers", default=os.path.join(ROOT, "build", "bench", "bench_mixers"))
    ap.add_argument("--canonlab", default=os.path.join(ROOT, "build", "canonlab"))
    ap.add_argument("--kernel-src", default=ROOT,
                    help="tree bench_mixers was built from (for the kernel headers' blob ids in the report)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--T", default="64,256", help="sequence lengths of the kernel part")
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--mixers", default="ssd,gla,gdn,deltanet")
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions of our kernels (median)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed repetitions of our kernels first")
    ap.add_argument("--torch-reps", type=int, default=3, help="timed repetitions of the torch recurrence (median)")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "demo.yaml"), help="base config of the step")
    ap.add_argument("--batch", type=int, default=16, help="train.batch_size of the step part")
    ap.add_argument("--n-symbols", type=int, default=127, help="copy task: T = 2 n + 1 (vocab set to n)")
    ap.add_argument("--steps", type=int, default=5, help="timed training steps (median)")
    ap.add_argument("--step-warmup", type=int, default=2)
    ap.add_argument("--no-step", action="store_true", help="skip the training-step part")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess")
    ap.add_argument("--out", default=None, help="also write the report as Markdown to this file")
    args = ap.parse_args()
    args.bench_mixers = os.path.abspath(args.bench_mixers)
    args.canonlab = os.path.abspath(args.canonlab)
    P = args.threads
    torch.set_num_threads(P)

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
    load0 = loadavg()
    emit("# Linear-time mixers: chunked kernels vs the PyTorch recurrence; training step vs the Transformer")
    emit()
    emit(f"- machine: {cpu}, {os.cpu_count()} logical CPUs; threads P = {P}; load average at start {load0}")
    emit(f"- torch {torch.__version__}, python {platform.python_version()}")

    # ---- part 1: kernels ----
    (g1, g1c), (gp, gpc) = sgemm_torch(1), sgemm_torch(P)
    notes = []
    try:
        ours_rows, ours_cmd = run_bench_mixers(args)
    except RuntimeError as e:
        emit(f"\nbench_mixers failed: {e}")
        return 1
    ids, stale = kernel_versions(args.bench_mixers, args.kernel_src)
    for rel in stale:
        notes.append(f"{rel} is newer than {args.bench_mixers}: the binary may not contain its latest version")
    ours = {(r["mixer"], r["T"]): r for r in ours_rows if r.get("kind") == "mixer"}
    dnnl = next((r for r in ours_rows if r.get("kind") == "sgemm"), {})
    small = next((r for r in ours_rows if r.get("kind") == "small_gemm"), {})
    rows_wall, rows_cpu = [], []
    for (mixer, T), r in ours.items():
        print(f"... torch recurrence {mixer} T={T}", file=sys.stderr, flush=True)
        try:
            tr = time_torch_mixer(mixer, args.B, T, args.torch_reps)
        except Exception as e:  # noqa: BLE001
            tr = {"error": f"{type(e).__name__}: {first_line(e)}"}
            notes.append(f"{mixer} T={T}, torch: {tr['error']}")
        if tr.get("spread", 1) > 1.25:
            notes.append(f"{mixer} T={T}, torch: noisy wall time, slowest repetition {tr['spread']:.2f}x the fastest")
        if r.get("spread", 1) > 1.25:
            notes.append(f"{mixer} T={T}, ours: noisy wall time, slowest repetition {r['spread']:.2f}x the fastest")
        if r.get("max_rel_err", 0) > 1e-4:
            notes.append(f"{mixer} T={T}: chunked vs naive max relative error {r['max_rel_err']:.2g}")
        flop = (r["gflop_fwd"] + r["gflop_bwd"]) * 1e9
        speed = tr["ms_total"] / r["ms_total"] if "ms_total" in tr else None
        rows_wall.append([mixer, str(T), fmt(r["ms_fwd"], 2), fmt(r["ms_bwd"], 2), fmt(r["ms_total"], 2),
                          fmt(tr.get("ms_fwd")), fmt(tr.get("ms_bwd")), fmt(tr.get("ms_total")),
                          f"**{speed:.1f}×**" if speed else "n/a", fmt(r.get("naive_ms_total")),
                          fmt(r["gflops_fwd"]), fmt(r["gflops_bwd"]), fmt(r["gflops"]),
                          fmt(100 * r["gflops"] / gp if gp else None, 1),
                          fmt(tr["ms_total"] * 1e-3 * gp * 1e9 / flop if "ms_total" in tr and gp else None),
                          "yes" if speed and speed >= 50 else "**no**"])
        # CPU-time view: what the run would take with the P cores to itself (CPU time / P), if it parallelised
        cs = tr["cpu_ms_total"] / r["cpu_ms_total"] if "cpu_ms_total" in tr else None
        eff = flop / (r["cpu_ms_total"] / P * 1e-3) / 1e9
        rows_cpu.append([mixer, str(T), fmt(r["cpu_ms_fwd"], 2), fmt(r["cpu_ms_bwd"], 2), fmt(r["cpu_ms_total"], 2),
                         fmt(tr.get("cpu_ms_total")), f"**{cs:.1f}×**" if cs else "n/a", fmt(eff),
                         fmt(100 * eff / gpc if gpc else None, 1),
                         fmt(tr["cpu_ms_total"] * 1e-3 * g1c * 1e9 / flop if "cpu_ms_total" in tr and g1c else None),
                         "yes" if cs and cs >= 50 else "**no**"])
    emit(f"- kernels: B = {args.B}, H = {H}, head dim {D} (ssd: P = N = 32, G = 1; others K = V = 32), chunk "
         f"{args.chunk}; ours: {args.warmup} warmup + median of {args.reps}; torch: 1 warmup + median of "
         f"{args.torch_reps}; forward = the mixer alone, backward = all input gradients from a given dout")
    emit(f"- ours: `{ours_cmd.replace(ROOT + os.sep, '')}`; kernel headers (git blob ids): {', '.join(ids)}")
    emit()
    emit("**Wall time** (medians; the ≥ 50× target reads this on a quiet machine). \"ceiling ×\": torch's time "
         "over the time our FLOP count would take at the sgemm rate, i.e. the largest torch/ours a kernel doing this "
         "work could reach")
    emit()
    head = ["mixer", "T", "ours fwd ms", "ours bwd ms", "ours ms", "torch fwd ms", "torch bwd ms", "torch ms",
            "torch/ours", "C++ naive ms (1 thr)", "ours fwd GFLOP/s", "ours bwd GFLOP/s", "ours GFLOP/s",
            f"% of sgemm ({P} thr)", "ceiling ×", "≥ 50×?"]
    emit("| " + " | ".join(head) + " |")
    emit("|---|---|" + "---:|" * (len(head) - 3) + "---|")
    for row in rows_wall:
        emit("| " + " | ".join(row) + " |")
    emit()
    emit(f"**CPU time** (process CPU time, all threads; counts only our own running time, so it holds on a loaded "
         f"machine; GFLOP/s here = FLOPs / (CPU time / {P}), the rate with {P} cores to ourselves; ceiling against the "
         "1-thread sgemm rate by CPU time)")
    emit()
    head = ["mixer", "T", "ours fwd CPU ms", "ours bwd CPU ms", "ours CPU ms", "torch CPU ms", "torch/ours (CPU)",
            "ours GFLOP/s (CPU)", f"% of sgemm (CPU, {P} thr)", "ceiling ×", "≥ 50×?"]
    emit("| " + " | ".join(head) + " |")
    emit("|---|---|" + "---:|" * (len(head) - 3) + "---|")
    for row in rows_cpu:
        emit("| " + " | ".join(row) + " |")
    emit()
    emit(f"| sgemm 1024^3 float32 | 1 thread GFLOP/s | {P} threads GFLOP/s | 1 thread (CPU time) | "
         f"{P} threads (CPU time / {P}) |")
    emit("|---|---:|---:|---:|---:|")
    emit(f"| torch | {fmt(g1)} | {fmt(gp)} | {fmt(g1c)} | {fmt(gpc)} |")
    if dnnl:
        emit(f"| oneDNN (ours) | {fmt(dnnl.get('gflops_1thread'))} | {fmt(dnnl.get('gflops_threads'))} | | |")
    if small:
        emit()
        emit("oneDNN sgemm on one chunk's shapes (1 thread, wall, GFLOP/s): " + ", ".join(
            f"{k.removeprefix('gflops_')} {v:.1f}" for k, v in small.items() if k.startswith("gflops_")))

    # ---- part 2: training step ----
    if not args.no_step:
        n = args.n_symbols
        base = ["model.n_layers=4", "model.d_model=128", "model.n_heads=4", "model.mlp.kind=swiglu",
                f"task.n_symbols={n}", f"task.vocab={n}", f"train.batch_size={args.batch}"]
        runs = []  # (family, canon_label, canon_set, result)
        order = FAMILIES + [FAMILIES[0]]  # the transformer again at the end: the drift of the machine
        for k, (fam, extra, with_c, without_c) in enumerate(order):
            for label, cset in (("Canon", with_c), ("no Canon", without_c)):
                print(f"... bench-step {fam} canon.set={cset!r}", file=sys.stderr, flush=True)
                res = run_step(args, base + extra + [f"model.canon.set={cset}"])
                runs.append((fam if k < len(order) - 1 else "transformer (again)", label, cset, res))
                if "error" in res:
                    notes.append(f"bench-step {fam} canon.set='{cset}': {res['error']}")

        def baseline(label, key):
            t = [r[key] for f, lb, _, r in runs if f.startswith("transformer") and lb == label and key in r]
            return (statistics.mean(t) if t else None), t

        emit()
        emit(f"Training step (`canonlab bench-step {os.path.relpath(args.config, ROOT)}`): 4 layers, d_model 128, "
             f"4 heads, SwiGLU MLP, copy task T = {2 * n + 1} (n_symbols = vocab = {n}), batch {args.batch} "
             f"({args.batch * (2 * n + 1)} tokens), {args.step_warmup} warmup + median of {args.steps} steps, "
             f"{P} threads; mamba2 with model.mamba2.mlp = true. Ratios are to the transformer with the same "
             "Canon setting (mean of its first and last run).")
        emit()
        if os.path.exists(args.canonlab):
            built = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(args.canonlab)))
            emit(f"- canonlab binary {os.path.relpath(args.canonlab, ROOT)} built {built} (its mixer kernels are those "
                 "of that time, which may differ from the bench_mixers build above)")
            emit()
        emit(f"`{os.path.relpath(args.canonlab, ROOT)} bench-step {os.path.relpath(args.config, ROOT)} --set "
             + " --set ".join(base) + " --set model.family=F [--set model.mamba2.mlp=true] --set model.canon.set=S "
             f"--steps {args.steps} --warmup {args.step_warmup} --threads {P}`")
        emit()
        head = ["family", "canon.set", "ms/step", "/ transformer", "CPU ms/step", "/ transformer (CPU)",
                "model GFLOP/step", "model GFLOP/s", "arena MiB", "≤ 1.5×? (wall / CPU)"]
        emit("| " + " | ".join(head) + " |")
        emit("|---|---|" + "---:|" * (len(head) - 3) + "---|")
        for fam, label, cset, r in runs:
            ms, cms = r.get("ms_per_step"), r.get("cpu_ms_per_step")
            bw, bc = baseline(label, "ms_per_step")[0], baseline(label, "cpu_ms_per_step")[0]
            ratio = ms / bw if ms and bw else None
            cratio = cms / bc if cms and bc else None
            gf = r.get("model_gflop_per_step")
            verdict = lambda x: "n/a" if x is None else ("yes" if x <= 1.5 else "**no**")  # noqa: E731
            ok = "" if fam.startswith("transformer") else f"{verdict(ratio)} / {verdict(cratio)}"
            emit(f"| {fam} | `{cset}` | {fmt(ms)} | {fmt(ratio, 2)} | {fmt(cms)} | {fmt(cratio, 2)} | {fmt(gf, 2)} | "
                 f"{fmt(gf / (ms / 1e3) if gf and ms else None)} | {fmt(r.get('arena_mib'))} | {ok} |")
        emit()
        for label in ("Canon", "no Canon"):
            for key, unit in (("ms_per_step", "ms"), ("cpu_ms_per_step", "CPU ms")):
                mean, t = baseline(label, key)
                if len(t) == 2:
                    emit(f"- transformer ({label}) first / last run: {t[0]:.1f} / {t[1]:.1f} {unit}")
        emit("- CPU ms/step = (CPU time of the run) − (CPU time of the same run with --steps 0), over the steps: "
             "mean, not median; includes OpenMP spin-waiting")
        emit("- model GFLOP: canonlab's count (src/eval/flops.h: matrix products + per-token recurrence work, "
             "x3 for forward + backward); model GFLOP/s by wall time")

    emit()
    emit(f"- load average at end {loadavg()} (start {load0})")
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
