#!/usr/bin/env bash
# Configures and builds canonlab (Release, -O3 -march=native) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CANONLAB_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)"
