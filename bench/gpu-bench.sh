#!/usr/bin/env bash
# The GPU benchmark, run by scripts/gpu-check.sh on the GPU machine after the checks (its output becomes
# OUT_DIR/bench.log there, the step table OUT_DIR/bench_step.md):
#
#   bench/gpu-bench.sh OUT_DIR        (CANONLAB_GPU_BUNDLE: the bundle; CANONLAB_GPU_RUN: where its executables run,
#                                      lib.tar.xz unpacked; CANONLAB_GPU_SECONDS: the time budget)
#   bench/gpu-bench.sh --small OUT    seconds: that everything launches
#
# 1. canonlab_gpu_bench (bench/gpu/bench_linear_layers.cpp, carried in the bundle): GLA, Gated DeltaNet and Mamba2's
#    SSD, forward and backward of one layer at B 2, T 256 (then, after 2., at the paper's 12L768D shapes, B 16,
#    T 2048), fp32.
# 2. One training step, canonlab against PyTorch (bench/gpu/bench_step_torch.py): E1-Bk0 (fp32), the 75M text model
#    and a Llama 12L768D at T 2048 (bf16), canonlab's `bench-step` beside tests/torch_ref's model eager, as one
#    captured CUDA graph and under torch.compile, with MFU against the GEMM rate measured in the same run. Rows print
#    as measured; the table is also written to OUT_DIR/bench_step.md. Half the budget at most.
# 3. fla 0.6.0 at the shapes of 1. (bench/gpu/bench_fla.py), fp32 and bf16, when the machine's python3 has torch and
#    triton: the bundle carries fla's pure-Python wheels (fla-core, flash-linear-attention, einops), unpacked into a
#    temporary directory (a wheel is a zip file; nothing is installed). Their first call (Triton's autotuning: the
#    issue saw it exceed 200 s on a fresh H200) is reported apart; the small size goes first, so its tuning serves
#    both, and rows print as they are measured, so a budget spent in tuning still leaves what came before.
# Exit status: 0 all ran (rows the budget did not reach say so), 1 one failed, 2 bad usage.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
small=()
[[ "${1:-}" == "--small" ]] && { small=(--small); shift; }
[[ $# -eq 1 ]] || { echo "usage: bench/gpu-bench.sh [--small] OUT_DIR" >&2; exit 2; }
out="$1"
bundle="${CANONLAB_GPU_BUNDLE:-$root/build-cuda/gpu-bundle}"
run="${CANONLAB_GPU_RUN:-$bundle}"  # gpu-check.sh's unpacked copy when the bundle carries lib.tar.xz
bench_bin="${CANONLAB_GPU_BENCH_BIN:-$run/canonlab_gpu_bench}"  # gpu-check.sh's rebuild, when the bundle's did not start
seconds="${CANONLAB_GPU_SECONDS:-300}"
# the bundle's copy of bench/gpu (what was built and checked together), else this checkout's
bench_dir="$bundle/bench/gpu"
[[ -f "$bench_dir/bench_step_torch.py" ]] || bench_dir="$root/bench/gpu"
start=$SECONDS
left() { echo $((seconds - (SECONDS - start))); }
status=0
mkdir -p "$out"

echo "== canonlab's element kernels (fp32), B 2, T 256"
if [[ -x "$bench_bin" ]]; then
  timeout "$(left)" "$bench_bin" --small --seconds "$(left)" || status=1
else
  echo "no $bench_bin (scripts/gpu-check.sh --bundle-only builds it)"
  status=1
fi

echo
echo "== one training step: canonlab against PyTorch"
if [[ ! -x "$run/canonlab" ]]; then
  echo "not run: no $run/canonlab"
  status=1
else
  step_args=(--canonlab "$run/canonlab" --out "$out/bench_step.md")
  [[ -d "$bundle/configs" ]] && step_args+=(--bundle "$bundle")
  ((${#small[@]})) && step_args+=(--only E1-Bk0 --steps 10 --warmup 3)
  budget=$(( $(left) / 2 ))
  timeout "$((budget + 15))" python3 "$bench_dir/bench_step_torch.py" "${step_args[@]}" --seconds "$budget" || status=1
fi

if ((${#small[@]} == 0)); then
  echo
  echo "== canonlab's element kernels (fp32), the paper's size"
  # half of what is left (the rest for fla)
  [[ -x "$bench_bin" ]] && { timeout "$(( $(left) / 2 ))" "$bench_bin" --seconds "$(( $(left) / 3 ))" || status=1; }
fi

echo
echo "== fla 0.6.0 at the same shapes"
if ! python3 -c "import torch, triton; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "not run: python3 here has no torch/triton with CUDA"
elif ! ls "$bundle"/wheels/*.whl >/dev/null 2>&1; then
  echo "not run: no wheels in $bundle/wheels (the build machine could not download them)"
else
  site="$(mktemp -d)"
  for w in "$bundle"/wheels/*.whl; do python3 -m zipfile -e "$w" "$site" || status=1; done
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout "$(left)" python3 "$bench_dir/bench_fla.py" \
    "${small[@]}" --seconds "$(( $(left) - 20 ))" || status=1
  rm -rf "$site"
fi
exit $status
