#!/usr/bin/env bash
# The GPU benchmark of the linear families' kernels (issue 27), run by scripts/gpu-check.sh on the GPU machine after
# the tests (its output becomes OUT_DIR/bench.log there):
#
#   bench/gpu-bench.sh OUT_DIR        (CANONLAB_GPU_BUNDLE: the bundle; CANONLAB_GPU_SECONDS: the time budget)
#   bench/gpu-bench.sh --small OUT    B 2, T 256 only: that everything launches, in seconds
#
# 1. canonlab_gpu_bench (bench/gpu/bench_linear_layers.cpp, carried in the bundle): GLA, Gated DeltaNet and Mamba2's
#    SSD, forward and backward of one layer at B 2, T 256, then at the paper's 12L768D shapes (B 16, T 2048), fp32.
# 2. fla 0.6.0 at the same shapes (bench/gpu/bench_fla.py), fp32 and bf16, when the machine's python3 has torch and
#    triton: the bundle carries fla's pure-Python wheels (fla-core, flash-linear-attention, einops), unpacked into a
#    temporary directory (a wheel is a zip file; nothing is installed). Their first call (Triton's autotuning: the
#    issue saw it exceed 200 s on a fresh H200) is reported apart; the small size goes first, so its tuning serves
#    both, and rows print as they are measured, so a budget spent in tuning still leaves what came before.
# Exit status: 0 both ran, 1 one failed, 2 bad usage.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
small=()
[[ "${1:-}" == "--small" ]] && { small=(--small); shift; }
[[ $# -eq 1 ]] || { echo "usage: bench/gpu-bench.sh [--small] OUT_DIR" >&2; exit 2; }
bundle="${CANONLAB_GPU_BUNDLE:-$root/build-cuda/gpu-bundle}"
bench_bin="${CANONLAB_GPU_BENCH_BIN:-$bundle/canonlab_gpu_bench}"  # gpu-check.sh's rebuild, when the bundle's did not start
seconds="${CANONLAB_GPU_SECONDS:-300}"
start=$SECONDS
left() { echo $((seconds - (SECONDS - start))); }
status=0

echo "== canonlab's element kernels (fp32)"
if [[ -x "$bench_bin" ]]; then
  # B 2, T 256 first (seconds: everything launches and a table exists), then the paper's size with half the budget
  timeout "$(left)" "$bench_bin" --small --seconds "$(left)" || status=1
  if ((${#small[@]} == 0)); then
    timeout "$(( $(left) / 2 ))" "$bench_bin" --seconds "$(( $(left) / 3 ))" || status=1
  fi
else
  echo "no $bench_bin (scripts/gpu-check.sh --bundle-only builds it)"
  status=1
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
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout "$(left)" python3 "$root/bench/gpu/bench_fla.py" \
    "${small[@]}" --seconds "$(( $(left) - 20 ))" || status=1
  rm -rf "$site"
fi
exit $status
