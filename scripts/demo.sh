#!/usr/bin/env bash
# Quick start, part 1: install what is missing, build, and train the demo (a small copy-task model with
# Canon-ABCD), which prints copy_acc and the induction (IPMR) table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
rm -rf runs/demo
build/canonlab train configs/demo.yaml --out runs/demo
