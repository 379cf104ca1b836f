#!/usr/bin/env bash
# Runs the deployment checks: the static Grafana dashboard check and
# tests/deploy/test_manifests.py (Kubernetes overlays, Dockerfiles), in a virtual
# environment with the pinned packages of requirements.txt beside this script.
#
#   TANDEM_DEPLOY_VENV  the virtual environment to use or create
#                       (default: <repo>/.venv-deploy)
#   PYTHON              the interpreter that creates it (default: python3)
#   TANDEM_KUBECTL      the kubectl to render with (default: kubectl on PATH)
#
# Extra arguments go to test_manifests.py (e.g. --bin-dir build/bin, -v).
# Exit status: 0 passed; 1 failed; 77 kubectl is missing, so the overlay checks were
# skipped (everything else passed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
repo="$(cd "$here/../.." && pwd)"
venv="${TANDEM_DEPLOY_VENV:-$repo/.venv-deploy}"
python="${PYTHON:-python3}"
requirements="$here/requirements.txt"

die() {
  echo "run.sh: $*" >&2
  exit 1
}

# 1. The virtual environment, its packages reinstalled only when requirements.txt changes.
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv" || die "could not create a venv at $venv with $python"
fi
vpy="$venv/bin/python"
stamp="$venv/.tandem-deploy-requirements"
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

# 2. The dashboard queries only exported metrics (the static list; the lead also runs
#    check_dashboard.py against live /metrics scrapes).
"$vpy" "$repo/deploy/grafana/check_dashboard.py" "$repo/deploy/grafana/tandem.json" \
  --names-file "$here/exported_metrics.txt"

# 3. Manifests, Dockerfiles, dashboard structure.
exec "$vpy" "$here/test_manifests.py" "$@"
