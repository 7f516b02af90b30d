#!/usr/bin/env bash
# Set-up (idempotent), a build with warnings as errors, and every test. This is the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci
