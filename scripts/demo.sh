#!/usr/bin/env bash
# Quick start 1: set everything up on a fresh Debian 12 machine and train the demo model
# (2 CPU ranks over Gloo on English fortunes; about three minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" xlaunch xtrain-worker
"$root/scripts/prepare-demo-data.sh"
cd "$root"
exec build/bin/xlaunch configs/demo.json "$@"
