#!/usr/bin/env bash
# Quick start, part 2: install what is missing, build, prepare the PyTorch test virtualenv, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/setup-venv.sh
cd build
ctest --output-on-failure -j 2 "$@"
