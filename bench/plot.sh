#!/usr/bin/env bash
# Runs bench/plot.py in a venv ($TANDEM_PLOT_VENV, default build/plot-venv) with
# matplotlib from PyPI; arguments go to plot.py.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${TANDEM_PLOT_VENV:-$repo/build/plot-venv}"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/plot-requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/plot-requirements.txt"
  echo "$want" > "$stamp"
fi
exec "$venv/bin/python" "$here/plot.py" "$@"
