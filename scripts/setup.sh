#!/usr/bin/env bash
# Installs every Debian 12 package tandem's build, tests and scripts need.
# Idempotent: does nothing when everything is already installed. Run as root or
# with sudo available.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  python3 python3-pip python3-venv
  libabsl-dev libpcre2-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc grpc-proto
  libboost-dev libssl-dev prometheus-cpp-dev   # HTTP server (Beast/Asio, TLS), /metrics
  libcpp-httplib-dev   # HTTP client of the CLI
  prometheus openssl curl   # tests: promtool + a Prometheus server; test certificates; quickstart
  clang libclang-rt-14-dev   # fuzzers and the ASan/UBSan/TSan suites (scripts/fuzz.sh, sanitize.sh)
  iproute2 nftables   # tests/chaos/netfault.py: namespaces, veth, a bridge, tc; packet loss
  clang-format
  chromium   # tests/serving: the router's web page in a headless browser
)

# kubectl renders the Kubernetes manifests in tests (`kubectl kustomize`). Debian's is
# in kubernetes-client; a machine that already has a kubectl (another package owns
# /usr/bin/kubectl) keeps it.
command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
