#!/usr/bin/env python3
"""One training step on the GPU, canonlab against PyTorch, in one run (bench/gpu-bench.sh runs it on the GPU machine).

Configs (the same batch and length on both sides):
  E1-Bk0    configs/E1-Bk0.yaml                  fp32, 64 x 49 tokens
  75M       configs/text/75m.yaml                bf16, 64 x 1024 tokens (32, 16 when PyTorch runs out of memory)
  Llama     bench/gpu/llama-12L768D-T2048.yaml   bf16, 8 x 2048 tokens, vocabulary 32,000
Implementations, each the median of --steps timed steps after --warmup, every step synchronised (as bench-step does):
  canonlab        `canonlab bench-step CONFIG --set train.device=cuda --set train.precision=P --steps N --warmup W`
  torch eager     tests/torch_ref/canon_model.py's model on the GPU (its attention through
                  F.scaled_dot_product_attention: the reference materialises T x T scores and builds its masks on the
                  CPU), AdamW (foreach), gradient clipping, bf16 autocast where canonlab runs bf16
  torch graph     the whole step (forward, backward, clipping, AdamW with capturable=True) captured once in a
                  torch.cuda.CUDAGraph and replayed
  torch compile   the model under torch.compile (--compile-mode, default "default"), the rest eager; its first step
                  (the compilation) is reported apart
MFU = model FLOPs per step / time per step / the GEMM rate measured at the start of this run (torch.matmul of two
8192 x 8192 matrices, bf16 or fp32 as the row's precision, best of 10). The FLOPs are canonlab's own count, the
"step: ... FLOP" line of `canonlab train CONFIG --dry-run` with the same settings, for every row of a config.

Rows print as they are measured; --seconds bounds the whole run (rows past it: "not run: out of time"). Each
config's PyTorch rows run in a child process (a fresh CUDA context, killed at the budget: a long compilation
cannot overrun it). Without torch or CUDA every row reads "not run: ..." and the exit status is 0.

    python3 bench/gpu/bench_step_torch.py --canonlab build-cuda/gpu-bundle/canonlab --bundle build-cuda/gpu-bundle
    python3 bench/gpu/bench_step_torch.py --gemm-only      # the two GEMM rates as JSON (gpu-check.sh's MFU)
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# name, config file (relative to the bundle or the checkout), precision, batch sizes to try (the next when PyTorch
# runs out of memory), settings, and whether it reads text (task.text.path: the bundle's KJV tokens)
CONFIGS = [
    ("E1-Bk0", "configs/E1-Bk0.yaml", "fp32", [64], [], False),
    ("75M", "configs/text/75m.yaml", "bf16", [64, 32, 16], ["task.text.eval_whole_split=false"], True),
    ("Llama-12L768D-T2048", "bench/gpu/llama-12L768D-T2048.yaml", "bf16", [8, 4], [], True),
]
IMPLS = ["canonlab", "torch eager", "torch graph", "torch compile"]
HEADER = "| config | implementation | batch | ms/step | tokens/s | MFU | note |\n|---|---|---:|---:|---:|---:|---|"


def row(config, impl, batch="", ms=None, tokens=None, flops=None, rate=None, note=""):
    """One table line; ms None: not measured (the note says why)."""
    if ms is None:
        return f"| {config} | {impl} | {batch} | | | | {note} |"
    tok_s = tokens / (ms / 1e3)
    mfu = f"{100 * flops / (ms / 1e3) / rate:.1f}%" if flops and rate else ""
    return f"| {config} | {impl} | {batch} | {ms:.2f} | {tok_s:,.0f} | {mfu} | {note} |"


def emit(line, results):
    print(line, flush=True)
    results.append(line)


# ---- the GEMM rates ---------------------------------------------------------------------------------------------
def gemm_rates():
    """TFLOP/s of torch.matmul on 8192 x 8192 matrices, bf16 and fp32 (true fp32: TF32 off), best of 10."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    n, rates = 8192, {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        best = math.inf
        for _ in range(10):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            stop.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(stop) / 1e3)
        rates[name] = 2 * n**3 / best / 1e12
        del a, b
    return rates


# ---- canonlab's side ----------------------------------------------------------------------------------------------
def canonlab_env(canonlab):
    """The bundle's executables find their libraries through RUNPATH ($ORIGIN/lib); LD_LIBRARY_PATH names them too,
    for canonlab only (this python's torch must keep the machine's own libstdc++)."""
    lib = os.path.join(os.path.dirname(os.path.abspath(canonlab)), "lib")
    return dict(os.environ, LD_LIBRARY_PATH=lib) if os.path.isdir(lib) else None


def canonlab_settings(config_sets, precision, batch, data):
    sets = ["train.device=cuda", f"train.precision={precision}", f"train.batch_size={batch}"] + config_sets
    if data:
        sets.append(f"task.text.path={data}")
    return sets


def dry_run(canonlab, config, sets, timeout):
    """canonlab's own numbers for the run: vocabulary, batch, tokens per sequence and FLOPs per step."""
    cmd = [canonlab, "train", config, "--dry-run"] + [a for s in sets for a in ("--set", s)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=canonlab_env(canonlab))
    text = p.stdout + p.stderr  # a run the machine cannot hold exits 2 after printing the estimate
    m = re.search(r"vocab (\d+)", text)
    s = re.search(r"step: (\d+) sequences x (\d+) tokens = \d+ tokens, ([\d.]+) ([kMGTPE]?)FLOP", text)
    if not m or not s:
        raise RuntimeError(f"{' '.join(cmd)}: no 'vocab' or 'step: ... FLOP' line in: {text.strip()[:300]}")
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}[s.group(4)]
    return {"vocab": int(m.group(1)), "batch": int(s.group(1)), "T": int(s.group(2)),
            "flops": float(s.group(3)) * scale}


def bench_step(canonlab, config, sets, steps, warmup, timeout):
    cmd = [canonlab, "bench-step", config, "--steps", str(steps), "--warmup", str(warmup)]
    cmd += [a for s in sets for a in ("--set", s)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=canonlab_env(canonlab))
    for line in reversed(p.stdout.strip().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict) and "ms_per_step" in out:
            return out
    lines = [x for x in (p.stderr or p.stdout).strip().splitlines() if x.strip()]
    raise RuntimeError(f"exit status {p.returncode}: {lines[-1][:200] if lines else 'no output'}")


# ---- PyTorch's side (a child process per config: --worker SPEC.json) -------------------------------------------------
def worker(spec_path):
    """Times the PyTorch modes of one config; prints each row as measured and writes {"rows", "oom"} to spec's out."""
    import torch
    import torch.nn.functional as F

    spec = json.load(open(spec_path))
    sys.path.insert(0, spec["torch_ref"])
    import canon_model as cm

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rope_cache, mask_cache = {}, {}

    def rope(x, rope_dim, base):  # canon_model.rope with its tables on x's device, cached per length
        T, half = x.shape[1], rope_dim // 2
        key = (T, rope_dim, base, x.device, x.dtype)
        if key not in rope_cache:
            i = torch.arange(half, dtype=torch.float64, device=x.device)
            theta = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * (base ** (-2.0 * i / rope_dim))
            rope_cache[key] = (torch.cos(theta).to(x.dtype)[None, :, None, :], torch.sin(theta).to(x.dtype)[None, :, None, :])
        cos, sin = rope_cache[key]
        a, b, rest = x[..., :half], x[..., half:rope_dim], x[..., rope_dim:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)

    def additive_mask(att, T, device, dtype):  # ALiBi and/or a window as one (H, T, T) bias with -inf masked out
        key = (id(att), T, device, dtype)
        if key not in mask_cache:
            pos = torch.arange(T, device=device)
            dist = (pos[:, None] - pos[None, :]).to(torch.float64)
            bias = torch.zeros(att.H, T, T, dtype=torch.float64, device=device)
            if att.position == "alibi":
                bias -= cm.alibi_slopes(att.H, att.alibi_rule).to(device)[:, None, None] * dist
            bias.masked_fill_(dist < 0, float("-inf"))
            if att.window:
                bias.masked_fill_(dist >= att.window, float("-inf"))
            mask_cache[key] = bias.to(dtype)
        return mask_cache[key]

    def attention_forward(self, h):  # canon_model.Attention.forward with SDPA in place of the explicit T x T softmax
        B, T, C = h.shape
        hk = h + cm.shift(h, self.key_shift) if self.key_shift else h
        q, k, v = self.q_proj(h), self.k_proj(hk), self.v_proj(h)
        if self.canon_b is not None:
            q, k, v = self.canon_b(torch.cat([q, k, v], dim=-1)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, self.D) for t in (q, k, v))
        if self.position == "rope":
            q, k = rope(q, self.rope_dim, self.rope_base), rope(k, self.rope_dim, self.rope_base)
        if self.scoring == "sign_ste":
            q, k = cm.SignSTE.apply(q, self.ste_clipped), cm.SignSTE.apply(k, self.ste_clipped)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.position == "alibi" or self.window:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask(self, T, q.device, q.dtype))
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, C))

    cm.Attention.forward = attention_forward
    dev = spec.get("device", "cuda")  # "cpu": this code checked on a machine without a GPU (no graph mode there)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    cfg = spec["cfg"]
    cfg = cm.deep_merge(cfg, {"model": {"vocab_size": spec["vocab"], "max_seq_len": spec["T"]},
                              "train": {"batch_size": spec["batch"]}})
    B, T, V, bf16 = spec["batch"], spec["T"], spec["vocab"], spec["precision"] == "bf16"
    tr = cm.resolve_config(cfg)["train"]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, V, (B, T), generator=g).to(dev)
    targets = torch.randint(0, V, (B, T), generator=g).to(dev)
    mask = torch.ones(B, T, device=dev)
    rows, eager_oom = [], False

    def measure(mode):
        torch.manual_seed(0)
        model = cm.CanonModel(cfg).to(dev)
        opt = cm.make_optimizer(model, tr, capturable=(mode == "graph"))
        clip = float(tr["grad_clip"])
        forward = torch.compile(model, mode=spec["compile_mode"]) if mode == "compile" else model

        def step():
            # autocast's weight cache is off: a captured graph must not keep casts made outside it
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
                loss = cm.masked_cross_entropy(forward(tokens), targets, mask)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            return loss

        def eager_step():
            loss = step()
            opt.zero_grad(set_to_none=True)
            return loss

        t0 = time.perf_counter()
        eager_step()  # the first step: torch.compile's compilation, cuBLAS/cuDNN setup
        sync()
        first = time.perf_counter() - t0
        run = eager_step
        if mode == "graph":
            # PyTorch's whole-network capture recipe: warm up on a side stream, then capture one step whose
            # backward allocates the gradients inside the graph's pool (so each replay writes them afresh)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    eager_step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        for _ in range(spec["warmup"]):
            run()
        sync()
        times = []
        for _ in range(spec["steps"]):
            t0 = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3, first

    for mode in spec["modes"]:
        impl = f"torch {mode}"
        try:
            ms, first = measure(mode)
            note = f"first step {first:.1f} s" + (f" (compile mode {spec['compile_mode']})" if mode == "compile" else "")
            line = row(spec["name"], impl, B, ms, B * T, spec["flops"], spec["rate"], note)
        except torch.cuda.OutOfMemoryError:
            eager_oom = eager_oom or mode == "eager"
            line = row(spec["name"], impl, B, note="out of GPU memory")
        except Exception as e:  # noqa: BLE001 - one mode failing (a compiler error, a capture refused) leaves the rest
            line = row(spec["name"], impl, B, note=f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:150] if str(e).strip() else ''}")
        print(line, flush=True)
        rows.append(line)
        gc.collect()  # the mode's model, optimizer and graph pool go before the next mode allocates
        if dev == "cuda":
            torch.cuda.empty_cache()
        if eager_oom:
            break  # a smaller batch next (the parent retries both sides)
    json.dump({"rows": rows, "oom": eager_oom}, open(spec["out"], "w"))


def run_torch(spec, timeout):
    """The child for one config and batch: its rows and whether eager ran out of memory; rows of a killed child are
    lost past what it printed."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = dict(spec, out=os.path.join(tmp, "out.json"))
        path = os.path.join(tmp, "spec.json")
        json.dump(spec, open(path, "w"))
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path], timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, False, "not run: out of time (killed at the budget)"
        if not os.path.exists(spec["out"]):
            return None, False, f"failed: the PyTorch child exited with status {p.returncode}"
        out = json.load(open(spec["out"]))
        return out["rows"], out["oom"], ""


def load_config(base, path):
    """The config as a dict, its base: chain applied: from the bundle's bench/gpu/configs.json when it has it (written
    by --write-configs on the build machine: the GPU machine's python3 may lack PyYAML), else the YAML file read by
    canon_model.load_yaml_config."""
    configs_json = os.path.join(base, "bench", "gpu", "configs.json")
    if os.path.exists(configs_json):
        cfg = json.load(open(configs_json)).get(path)
        if cfg is not None:
            return cfg
    import canon_model as cm

    return cm.load_yaml_config(os.path.join(base, path))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canonlab", default=os.path.join(ROOT, "build-cuda", "gpu-bundle", "canonlab"))
    ap.add_argument("--bundle", default="", help="the GPU bundle: configs/, tests/torch_ref/, data/ (default: this "
                    "checkout and runs/data/kjv-bpe4096)")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (max-autotune-no-cudagraphs tunes "
                    "for minutes)")
    ap.add_argument("--only", default="", help="comma-separated config names (default: all)")
    ap.add_argument("--out", default="", help="also write the table to this file")
    ap.add_argument("--gemm-only", action="store_true", help="print the bf16 and fp32 GEMM rates as JSON and exit")
    ap.add_argument("--write-configs", default="", help="write the configs as JSON (for a python3 without PyYAML) "
                    "to this file and exit")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker)
    start = time.monotonic()
    left = lambda: args.seconds - (time.monotonic() - start)  # noqa: E731
    base = args.bundle or ROOT
    torch_ref = os.path.join(base, "tests", "torch_ref")
    sys.path.insert(0, torch_ref)
    data = os.path.join(args.bundle, "data", "kjv-bpe4096") if args.bundle else os.path.join(ROOT, "runs", "data", "kjv-bpe4096")
    if args.write_configs:
        import canon_model as cm

        configs = {path: cm.load_yaml_config(os.path.join(base, path)) for _, path, *_ in CONFIGS}
        json.dump(configs, open(args.write_configs, "w"), indent=1)
        return 0
    selected = [c for c in CONFIGS if not args.only or c[0] in args.only.split(",")]

    try:
        import torch

        cuda = torch.cuda.is_available()
        why = "" if cuda else "not run: no CUDA (torch.cuda.is_available() is false)"
    except Exception as e:  # noqa: BLE001
        why = f"not run: no torch in {sys.executable} ({type(e).__name__})"
    if why:
        if args.gemm_only:
            print(json.dumps({"error": why}))
            return 0
        print(HEADER)
        for name, *_ in selected:
            for impl in IMPLS:
                print(row(name, impl, note=why))
        return 0
    rates = gemm_rates()
    if args.gemm_only:
        print(json.dumps({"bf16_tflops": rates["bf16"], "fp32_tflops": rates["fp32"],
                          "device": torch.cuda.get_device_name()}))
        return 0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; GEMM 8192^3 (best of 10): "
          f"bf16 {rates['bf16']:.0f} TFLOP/s, fp32 {rates['fp32']:.1f} TFLOP/s (MFU below is against these)")
    print(HEADER, flush=True)
    results = []
    for name, path, precision, batches, config_sets, text in selected:
        config = os.path.join(base, path)
        for i, batch in enumerate(batches):
            if left() < 10:
                for impl in IMPLS:
                    emit(row(name, impl, batch, note="not run: out of time"), results)
                break
            sets = canonlab_settings(config_sets, precision, batch, data if text else "")
            try:
                info = dry_run(args.canonlab, config, sets, timeout=max(1, min(60, left())))
            except Exception as e:  # noqa: BLE001
                emit(row(name, "canonlab", batch, note=f"failed: dry run: {e}"), results)
                break
            rate = rates[precision] * 1e12
            try:
                out = bench_step(args.canonlab, config, sets, args.steps, args.warmup, timeout=max(1, left()))
                emit(row(name, "canonlab", batch, out["ms_per_step"], info["batch"] * info["T"], info["flops"], rate,
                         f"{precision}, {info['flops'] / 1e12:.3g} TFLOP/step"), results)
            except subprocess.TimeoutExpired:
                emit(row(name, "canonlab", batch, note="not run: out of time"), results)
            except Exception as e:  # noqa: BLE001
                emit(row(name, "canonlab", batch, note=f"failed: {e}"), results)
            spec = {"name": name, "cfg": load_config(base, path),
                    "torch_ref": torch_ref, "precision": precision, "batch": info["batch"], "T": info["T"],
                    "vocab": info["vocab"], "flops": info["flops"], "rate": rate, "steps": args.steps,
                    "warmup": args.warmup, "compile_mode": args.compile_mode, "modes": ["eager", "graph", "compile"]}
            rows, oom, note = run_torch(spec, timeout=max(1, left()))
            results.extend(rows or [row(name, "torch", batch, note=note)])
            if not rows:
                print(results[-1], flush=True)
            if not oom or i + 1 == len(batches):
                break
            print(f"(PyTorch ran out of memory at batch {batch}: both sides again at {batches[i + 1]})", flush=True)
    print(f"\n{HEADER}\n" + "\n".join(results))
    if args.out:
        with open(args.out, "w") as f:
            f.write(HEADER + "\n" + "\n".join(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
