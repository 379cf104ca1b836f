#!/usr/bin/env bash
# Generates the Python gRPC stubs for tandem's protos into
# clients/python/tandem_client/_gen/, installing the pinned generator and runtime
# (requirements.txt beside this script) into a virtual environment first.
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
protos=(tandem/v1/generation.proto tandem/v1/worker.proto tandem/v1/kv_transfer.proto)

die() {
  echo "generate_stubs.sh: $*" >&2
  exit 1
}

for p in "${protos[@]}"; do
  [[ -f "$proto_root/$p" ]] || die "missing $proto_root/$p"
done

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

# 3. The stubs, generated aside and swapped in.
tmp="$(mktemp -d "$here/tandem_client/._gen.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$vpy" -m grpc_tools.protoc -I "$proto_root" \
  --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
  "${protos[@]}" || die "protoc failed"
# Regular packages (not namespace ones), so that ours win over any other `tandem`.
touch "$tmp/tandem/__init__.py" "$tmp/tandem/v1/__init__.py"
chmod 755 "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
