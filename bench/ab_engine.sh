#!/usr/bin/env bash
# Two tandem builds on the same machine in one run: `tandem bench engine` of A and B
# alternate ROUNDS times (A B A B …), so drift hits both alike, and every ratio B/A is
# taken within a round. For "did this change slow the CPU engine down?":
#
#   git worktree add /tmp/base HEAD~1 && (cd /tmp/base && BUILD_DIR=build scripts/build.sh tandem)
#   bench/ab_engine.sh /tmp/base/build/bin/tandem build/bin/tandem
#
# Prints, per metric, the median of each side and the median and range of the B/A
# ratios: pp512 and tg128 tokens/s, and S_TG (16 sequences of 128 + 128 tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: bench/ab_engine.sh OLD_TANDEM NEW_TANDEM}
B=${2:?usage: bench/ab_engine.sh OLD_TANDEM NEW_TANDEM}
MODEL=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-build/bench/ab_engine}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A
    [ "$side" = B ] && bin=$B
    "$bin" bench engine -m "$MODEL" -t "$THREADS" --json 2>/dev/null >"$OUT/$side.$r.json"
  done
  echo "ab_engine: round $r of $ROUNDS done" >&2
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda s, r: json.load(open(f"{out}/{s}.{r}.json"))
print(f"{'metric':<8} {'A median':>10} {'B median':>10} {'B/A median':>11} {'B/A range':>16}")
for key, name in [("pp_tokens_per_s", "pp512"), ("tg_tokens_per_s", "tg128"), ("batch_s_tg", "S_TG")]:
    a = [load("A", r)[key] for r in range(1, rounds + 1)]
    b = [load("B", r)[key] for r in range(1, rounds + 1)]
    ratios = [y / x for x, y in zip(a, b)]
    print(f"{name:<8} {statistics.median(a):>10.1f} {statistics.median(b):>10.1f} "
          f"{statistics.median(ratios):>11.3f} {min(ratios):>7.3f}–{max(ratios):.3f}")
PY
