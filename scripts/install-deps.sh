#!/usr/bin/env bash
# Installs the Debian 12 packages canonlab builds against (only those missing). Needs root or sudo.
set -euo pipefail
packages=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
          libgtest-dev libbenchmark-dev python3 python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
