#!/usr/bin/env bash
# Generates the Python gRPC stubs for tandem's public proto into
# clients/python/tandem_client/_gen/ (for working on the client from a checkout),
# installing the pinned generator and runtime (requirements.txt beside this script)
# into a virtual environment first. The generation itself is build_stubs.py, which
# the package build (pip install ./clients/python -> setup.py) runs as well.
#
#   TANDEM_PY_VENV   the virtual environment to use or create
#                    (default: <repo>/.venv-client)
#   PYTHON           the interpreter that creates it (default: python3)
#
# Idempotent and quiet: the venv is only (re)installed when requirements.txt has
# changed since the last install, and the stubs are regenerated into a scratch
# directory that replaces _gen/ only once protoc has succeeded. Prints nothing on
# success; exits non-zero (with a message on stderr) on failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${TANDEM_PY_VENV:-$repo/.venv-client}"
python="${PYTHON:-python3}"
requirements="$here/requirements.txt"
proto_root="$repo/proto"
out="$here/tandem_client/_gen"

die() {
  echo "generate_stubs.sh: $*" >&2
  exit 1
}

[[ -f "$proto_root/tandem/v1/generation.proto" ]] || die "missing $proto_root/tandem/v1/generation.proto"

# 1. The virtual environment.
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv" || die "could not create a venv at $venv with $python"
fi
vpy="$venv/bin/python"

# 2. The pinned packages, reinstalled only when requirements.txt changes.
stamp="$venv/.tandem-client-requirements"
if ! cmp -s "$requirements" "$stamp"; then
  log="$(mktemp)"
  if ! "$vpy" -m pip install --quiet --disable-pip-version-check -r "$requirements" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "pip install -r $requirements failed"
  fi
  rm -f "$log"
  cp "$requirements" "$stamp"
fi

# 3. The stubs (build_stubs.py writes them aside and swaps them in).
"$vpy" "$here/build_stubs.py" --out "$out" --proto-root "$proto_root" || die "stub generation failed"
