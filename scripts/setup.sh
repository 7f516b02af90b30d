#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian 12 machine for kvserve development.
#  1. installs the build dependencies with apt-get (only the missing ones;
#     `apt-get update` only when something has to be installed and the package
#     lists are missing or older than a day),
#  2. pip-installs the server test packages (scripts/requirements-test.txt),
#  3. fetches the default model (scripts/fetch_default_model.sh) and llama.cpp's
#     tokenizer test vocabularies (scripts/fetch_llama_cpp_vocab.sh) into
#     ${KVSERVE_MODELS:-$HOME/.cache/kvserve/models}/.
#
# Run as root (no sudo needed then) or as a user with sudo.
# Options:
#   --no-model     skip the model and vocabulary downloads
#   --dev-python   also `pip install -r scripts/requirements-dev.txt`
#                  (llama-cpp-python builds llama.cpp from source: slow)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WITH_MODEL=1
WITH_DEV_PY=0
for arg in "$@"; do
  case "$arg" in
    --no-model) WITH_MODEL=0 ;;
    --dev-python) WITH_DEV_PY=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "[setup] $*"; }

if [[ "$(id -u)" == 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "[setup] error: not root and sudo is not available" >&2; exit 1
fi

export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
  cmake ninja-build g++ clang
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev
  libfmt-dev libspdlog-dev libpcre2-dev libxxhash-dev
  libvalijson-dev json-schema-test-suite
  python3 python3-pip
  chromium chromium-driver
)

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

MISSING=()
for p in "${PACKAGES[@]}"; do
  if is_installed "$p"; then
    log "present: $p"
  else
    MISSING+=("$p")
  fi
done

if ((${#MISSING[@]})); then
  log "missing: ${MISSING[*]}"
  # Update the package lists only if they are absent or older than a day.
  lists_fresh=0
  if compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
    if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -mmin +1440 -print -quit)" ]]; then
      lists_fresh=1
    fi
  fi
  if [[ $lists_fresh == 0 ]]; then
    log "running: apt-get update"
    "${SUDO[@]}" apt-get update
  else
    log "apt package lists are recent, skipping apt-get update"
  fi
  log "running: apt-get install -y --no-install-recommends ${MISSING[*]}"
  if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${MISSING[@]}"; then
    # The lists may be stale even if recent-looking: update once and retry.
    log "install failed; running apt-get update and retrying"
    "${SUDO[@]}" apt-get update
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${MISSING[@]}"
  fi
else
  log "all build dependencies are installed"
fi

# The server's end-to-end tests (OpenAI SDK, pytest, selenium): small pure-python wheels.
if python3 -c 'import openai, pydantic, pytest, selenium' 2>/dev/null; then
  log "python test packages present"
else
  log "running: python3 -m pip install -r $SCRIPT_DIR/requirements-test.txt"
  # Debian's python marks itself externally managed (PEP 668).
  python3 -m pip install --break-system-packages -r "$SCRIPT_DIR/requirements-test.txt" \
    || python3 -m pip install -r "$SCRIPT_DIR/requirements-test.txt"
fi

if [[ $WITH_DEV_PY == 1 ]]; then
  log "running: python3 -m pip install -r $SCRIPT_DIR/requirements-dev.txt"
  # Debian's python marks itself externally managed (PEP 668).
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    python3 -m pip install --break-system-packages -r "$SCRIPT_DIR/requirements-dev.txt" \
    || CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
       python3 -m pip install -r "$SCRIPT_DIR/requirements-dev.txt"
fi

if [[ $WITH_MODEL == 1 ]]; then
  log "fetching the default model"
  MODEL_PATH="$(bash "$SCRIPT_DIR/fetch_default_model.sh")"
  log "default model: $MODEL_PATH"
  log "fetching llama.cpp's vocabulary tests"
  VOCAB_DIR="$(bash "$SCRIPT_DIR/fetch_llama_cpp_vocab.sh")"
  log "llama.cpp vocabulary tests: $VOCAB_DIR"
else
  log "skipping the model (--no-model)"
fi
log "done"
