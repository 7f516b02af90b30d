#!/usr/bin/env bash
# Set-up (idempotent) and a release build of ./build/kvserve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
