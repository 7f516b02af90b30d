#!/usr/bin/env bash
# Fetch llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*.gguf with their .inp/.out cases)
# and its real chat templates (models/templates/*.jinja) from the llama-cpp-python 0.3.36 source
# distribution on PyPI, which vendors llama.cpp. The vocabularies add what ../shared/models/vocab lacks
# (Gemma 4, Qwen3.5, Llama-3 BPE, Qwen2, Command-R) and a newer llama.cpp's cases for the others;
# tests/test_tokenizer.cpp runs every one it finds. tests/test_chat_template.cpp detects and renders
# each template against llama.cpp's output for it (tests/golden/chat_templates/).
#
# Destination: ${KVSERVE_MODELS:-$HOME/.cache/kvserve/models}/llama.cpp-vocab-0.3.36/
# Idempotent: nothing is downloaded when the folder is complete (its .complete-2 marker exists).
# Prints the folder on stdout; progress goes to stderr.
set -euo pipefail

PKG="llama-cpp-python"
VERSION="0.3.36"
SDIST="llama_cpp_python-${VERSION}.tar.gz"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX="llama_cpp_python-${VERSION}/vendor/llama.cpp"

log() { echo "[fetch_llama_cpp_vocab] $*" >&2; }

MODELS_DIR="${KVSERVE_MODELS:-${HOME:-/root}/.cache/kvserve/models}"
DEST="$MODELS_DIR/llama.cpp-vocab-${VERSION}"
PYTHON="${PYTHON:-python3}"

if [[ -f "$DEST/.complete-2" ]]; then
  log "already present: $DEST"
  echo "$DEST"
  exit 0
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/kvserve-vocab.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "pip download --no-deps --no-binary :all: ${PKG}==${VERSION} -d $TMP"
if ! "$PYTHON" -m pip download --no-deps --no-binary :all: --disable-pip-version-check -q \
      "${PKG}==${VERSION}" -d "$TMP" >&2; then
  log "error: could not download ${PKG}==${VERSION} from PyPI"; exit 1
fi
if [[ ! -f "$TMP/$SDIST" ]]; then
  log "error: $SDIST not found after pip download"; exit 1
fi
got="$(sha256sum "$TMP/$SDIST" | cut -d' ' -f1)"
if [[ "$got" != "$SDIST_SHA256" ]]; then
  log "error: sha256 of $SDIST is $got, expected $SDIST_SHA256"; exit 1
fi

log "extracting $PREFIX/models/ggml-vocab-* and models/templates/*.jinja -> $DEST"
tar -xzf "$TMP/$SDIST" -C "$TMP" --wildcards "$PREFIX/models/ggml-vocab-*" "$PREFIX/models/templates/*.jinja" \
  "$PREFIX/LICENSE"
mkdir -p "$DEST/templates"
cp "$TMP/$PREFIX"/models/ggml-vocab-* "$DEST"/
cp "$TMP/$PREFIX"/models/templates/*.jinja "$DEST/templates/"
cp "$TMP/$PREFIX/LICENSE" "$DEST/LICENSE.llama.cpp"
touch "$DEST/.complete-2"
log "ok: $(ls "$DEST" | grep -c '\.gguf$') vocabularies, $(ls "$DEST/templates" | wc -l) templates in $DEST"
echo "$DEST"
