#!/usr/bin/env bash
# Installs the Python SDK the way a user does (`pip install ./clients/python` from the
# repository root, into a virtual environment) and runs its tests against the
# installed package, from outside the source tree: test_unit.py (no server), then
# test_client.py (a live `tandem serve`). ctest's python_client_test runs this.
#
#   run_tests.sh [--venv DIR] [--tandem-bin PATH] [--model PATH] [test_client.py args...]
#
#   --venv DIR       the venv to use or create; $TANDEM_PY_VENV wins over it
#                    (default: <repo>/build/python-client-venv)
#   --tandem-bin     the tandem binary (default: <repo>/build/bin/tandem)
#   --model          a GGUF model (default: $TANDEM_MODEL, else
#                    <repo>/models/smollm2-135m-instruct-q4_1.gguf)
#   PYTHON           the interpreter that creates the venv (default: python3)
#
# The package is reinstalled only when what it is built from changed: a hash of
# clients/python (tests, examples and build leftovers excluded) and proto/ is kept in
# the venv as a stamp, so repeated runs need no network. Runtime dependencies are
# constrained to the pins in requirements.txt. Exits non-zero when the install or any
# test fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg="$(cd "$here/.." && pwd)"
repo="$(cd "$pkg/../.." && pwd)"
python="${PYTHON:-python3}"

venv_arg=""
tandem_bin="$repo/build/bin/tandem"
model="${TANDEM_MODEL:-$repo/models/smollm2-135m-instruct-q4_1.gguf}"
extra=()
while (($#)); do
  case "$1" in
    --venv) venv_arg="$2"; shift 2 ;;
    --tandem-bin) tandem_bin="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
venv="${TANDEM_PY_VENV:-${venv_arg:-$repo/build/python-client-venv}}"

die() {
  echo "run_tests.sh: $*" >&2
  exit 1
}

# 1. The virtual environment.
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv" || die "could not create a venv at $venv with $python"
fi
vpy="$venv/bin/python"

# 2. The package, installed from the checkout unless its inputs are unchanged.
inputs_hash="$("$vpy" - "$pkg" "$repo/proto" <<'EOF'
import hashlib, os, sys
pkg, proto = sys.argv[1], sys.argv[2]
skip_dirs = {"tests", "examples", "build", "dist", "_gen", "__pycache__", ".ruff_cache",
             ".mypy_cache", ".pytest_cache"}
h = hashlib.sha256(sys.version.encode())
for root in (pkg, proto):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs
                             and not d.endswith(".egg-info") and not d.startswith("._gen"))
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
print(h.hexdigest())
EOF
)"
stamp="$venv/.tandem-client-install"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$inputs_hash" ]]; then
  echo "run_tests.sh: pip install ./clients/python into $venv" >&2
  rm -f "$stamp"
  log="$(mktemp)"
  if ! (cd "$repo" && "$vpy" -m pip install --disable-pip-version-check --quiet \
          --upgrade --constraint clients/python/requirements.txt ./clients/python) >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "pip install ./clients/python failed"
  fi
  rm -f "$log"
  echo "$inputs_hash" >"$stamp"
fi

# 3. The tests, run from a scratch directory with nothing of the checkout on the path,
#    so that `import tandem_client` finds the installed package.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
unset PYTHONPATH
where="$("$vpy" -c 'import os, tandem_client; print(os.path.dirname(os.path.realpath(tandem_client.__file__)))')" ||
  die "the installed tandem_client does not import"
[[ "$where" != "$pkg/tandem_client" ]] || die "tandem_client resolves to the source tree ($where)"

status=0
"$vpy" "$here/test_unit.py" || status=1
"$vpy" "$here/test_client.py" --require-installed --tandem-bin "$tandem_bin" --model "$model" \
  ${extra[@]+"${extra[@]}"} || status=1
exit "$status"
