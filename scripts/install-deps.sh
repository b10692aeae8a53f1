#!/usr/bin/env bash
# Installs the Debian 12 packages canonlab builds against (only those missing), fortunes-min: the small text
# corpus the byte-level text task trains on by default and its tests read, the King James Bible (bible-kjv: the
# `bible` program and, through bible-kjv-text, the text; public domain) that the natural-text tests and presets
# prepare, and clang for the fuzz tests. Needs root or sudo.
#   scripts/install-deps.sh          everything the build, the tests and the tools need (the test command's)
#   scripts/install-deps.sh --demo   only what building the CLI and running scripts/demo.sh need: no Slurm, Chromium,
#                                    clang, text corpora or Python headers (about half the download on a new machine)
set -euo pipefail
# libsentencepiece-dev trains and runs the BPE and unigram tokenizers of `canonlab data prepare`.
# python3-dev: the headers the Python package's extension compiles against (scripts/install-python.sh).
# openmpi-bin and libopenmpi-dev: the MPI communicator of data-parallel training (`mpirun -np N canonlab train`).
# slurmctld, slurmd, slurm-client and munge: the local one-node Slurm cluster the Slurm launcher's tests start
# (tests/slurm/); the product itself only calls sbatch/squeue/scontrol where a cluster provides them.
# clang and libclang-rt-14-dev (the libFuzzer, ASan and UBSan runtimes; only a Recommends of clang's own packages,
# so named here) build the fuzz targets of tests/fuzz/.
# libboost-dev (Boost.CRC's CRC-32C) and libpng-dev: TensorBoard's event files (src/io/tensorboard/).
# patchelf: scripts/gpu-check.sh --bundle-only sets the RUNPATH of the GPU bundle's executables and libraries.
packages=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libsleef-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
          libgtest-dev libbenchmark-dev libsentencepiece-dev python3 python3-venv python3-dev fortunes-min bible-kjv bible-kjv-text
          clang libclang-rt-14-dev openmpi-bin libopenmpi-dev slurmctld slurmd slurm-client munge patchelf
          libboost-dev libpng-dev)
# What the CLI's build finds with find_package (CMakeLists.txt; libopenmpi-dev too, so that the build directory's flags
# do not change when the test command adds the rest) and the demo's summary (python3).
build_packages=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libsleef-dev libyaml-cpp-dev libcli11-dev
                nlohmann-json3-dev libgtest-dev libbenchmark-dev libsentencepiece-dev libboost-dev libpng-dev
                libopenmpi-dev python3)
# Headless Chromium renders the HTML report in the report_screenshot test. Its recommends (printer setup,
# notification daemon, ...) are desktop baggage, so it goes in without them and names the one font it uses.
lean_packages=(chromium-headless-shell fonts-liberation)

missing_of() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
case "${1:-}" in
  --demo) packages=("${build_packages[@]}") lean_packages=() ;;
  "") ;;
  *) echo "error: unknown option '$1'; allowed: --demo (only what the demo needs), or none (everything)" >&2; exit 2 ;;
esac
mapfile -t missing < <(missing_of "${packages[@]}")
mapfile -t missing_lean < <(missing_of "${lean_packages[@]}")
if ((${#missing[@]} + ${#missing_lean[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing: ${missing[*]} ${missing_lean[*]}"
  $sudo apt-get update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
  if ((${#missing_lean[@]})); then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_lean[@]}"
  fi
fi
