#!/usr/bin/env bash
# tests/data/kld_corpus.txt, the text `tandem bench kld` scores by default: six license
# texts as Debian 12 ships them in /usr/share/common-licenses (each may be copied
# verbatim), one blank line after each; 130,816 bytes, about 28,600 SmolLM2 tokens.
# Plain English prose of several registers, the same on every Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in GPL-3 GPL-2 LGPL-2.1 Apache-2.0 MPL-2.0 GFDL-1.3; do
  cat "/usr/share/common-licenses/$f"
  echo
done >tests/data/kld_corpus.txt
