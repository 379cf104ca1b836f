#!/usr/bin/env bash
# Runs the serving-surface test (test_serving.py) in a virtual environment with the
# official `openai` package from PyPI.
#
#   run.sh --tandem-bin build/bin/tandem [--model M] [--venv DIR] [TestClass ...]
#          [--exclude TestClass]
#   run.sh --venv DIR --setup-only     only make the venv (CTest's fixture)
#
# The venv ($TANDEM_SERVING_VENV, else build/serving-venv) is reinstalled only when
# requirements.txt changes. Needs promtool and prometheus (Debian package
# `prometheus`) and openssl on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${TANDEM_SERVING_VENV:-$repo/build/serving-venv}"
args=()
setup_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --setup-only) setup_only=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  echo "$want" > "$stamp"
fi
[ "$setup_only" = 1 ] && exit 0
exec "$venv/bin/python" "$here/test_serving.py" "${args[@]}"
