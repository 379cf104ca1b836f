#!/usr/bin/env bash
# The test command: installs what is missing, checks formatting, fetches the default
# model, builds, runs every CTest test, runs the quickstart demo once (a real cluster
# answering through `tandem client`), then the hardening suites: every fuzzer for 30 s
# under ASan+UBSan, the unit and in-process integration tests under ASan+UBSan and the
# concurrent ones under TSan (scripts/sanitize.sh), and the faults between hosts in
# network namespaces (tests/chaos/netfault.py; reported as not run without root).
# Works on a fresh Debian 12 machine; CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/format.sh --check
scripts/fetch-model.sh
scripts/build.sh
(cd build && ctest --output-on-failure --no-tests=error -j "$(nproc)")
TANDEM_PORT=${TANDEM_QUICKSTART_PORT:-50151} TANDEM_HTTP_PORT=0 scripts/quickstart.sh --once
scripts/fuzz.sh
scripts/sanitize.sh
rc=0
python3 tests/chaos/netfault.py || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then exit "$rc"; fi
