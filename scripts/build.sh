#!/usr/bin/env bash
# Configures and builds canonlab (Release, -O3 -march=native) into build/: everything (the CLI, the tests, the GPU
# tests and the CUDA kernels where nvcc is found), or only the targets named (scripts/build.sh canonlab: the CLI alone,
# what scripts/demo.sh needs).
# A build of everything turns the CUDA kernels back on (the demo builds its CLI without them on a machine without a GPU;
# CANONLAB_CMAKE_ARGS=-DCANONLAB_CUDA=OFF keeps them off).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=()
(($#)) || cuda=(-DCANONLAB_CUDA=ON)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" ${CANONLAB_CMAKE_ARGS:-} >/dev/null
if (($#)); then
  cmake --build build -j "$(nproc)" --target "$@"
else
  cmake --build build -j "$(nproc)"
fi
