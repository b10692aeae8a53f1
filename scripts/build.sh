#!/usr/bin/env bash
# Configures and builds canonlab (Release, -O3 -march=native) into build/: everything (the CLI, the tests, the GPU
# tests and the CUDA kernels where nvcc is found), or only the targets named (scripts/build.sh canonlab: the CLI alone,
# what scripts/demo.sh needs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CANONLAB_CMAKE_ARGS:-} >/dev/null
if (($#)); then
  cmake --build build -j "$(nproc)" --target "$@"
else
  cmake --build build -j "$(nproc)"
fi
