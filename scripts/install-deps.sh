#!/usr/bin/env bash
# Installs every Debian package xtrain needs to build, test and run the demo.
# Idempotent and quiet when everything is already there. Usage: scripts/install-deps.sh [--test]
#   --test   also install what the test suite needs (PyTorch for reference checks and the torchrun
#            comparison; node and npm, which fetch the GPT-2 tokenizer's reference:
#            scripts/fetch-gpt2-reference.sh; Chromium to render the run report headless; iproute2
#            for the network-namespace tests; python3-yaml to parse docs/kubernetes.md's manifests;
#            qemu-user to run xlaunch and the worker on emulated CPUs without x86-64-v3)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.74-dev libboost-filesystem1.74-dev libboost-context1.74-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  libgloo-dev libopenblas-dev
  fortunes-min fortunes
  procps
  time
)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(python3-torch python3-numpy python3-yaml chromium iproute2 qemu-user)
  # Any node will do (a newer one may come from elsewhere): Debian's only where there is none.
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
