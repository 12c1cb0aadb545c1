#!/usr/bin/env bash
# Every key-fact set, at default settings (mode auto) and with mode=deep, offline: one line per
# set and mode, and the JSON of each run under $OUT (default /tmp/fathom-keyfacts).
#
#   scripts/keyfacts.sh [FATHOM_BINARY] [SET ...]     # sets: pydoc cargo rustc nomicon
#
# The binary defaults to target/release/fathom (build it with
# `cargo build --release -p fathom-cli`). `pydoc` is the tuning set; the others are held out
# (see tests/README.md): a change that raises one and lowers another is not kept.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/fathom}
shift || true
SETS=("$@")
[ ${#SETS[@]} -gt 0 ] || SETS=(pydoc cargo rustc nomicon)
OUT=${OUT:-/tmp/fathom-keyfacts}
mkdir -p "$OUT"
for set in "${SETS[@]}"; do
  for mode in auto deep; do
    work=$(mktemp -d)
    # The index is built once per set and kept: only the reports differ between modes.
    "$BIN" --database-url "$work/eval.db" --index-dir "$OUT/$set-index" \
      eval --corpus "tests/$set/corpus" --questions "tests/$set/questions.json" \
      --set mode="$mode" --json >"$OUT/$set-$mode.json" 2>"$OUT/$set-$mode.log" || true
    rm -rf "$work"
    python3 - "$OUT/$set-$mode.json" "$set" "$mode" <<'PY'
import json, sys
path, name, mode = sys.argv[1:4]
try:
    d = json.load(open(path))
except Exception as e:
    print(f"{name:8} {mode:5} FAILED: {e} (see {path[:-5]}.log)")
    sys.exit(0)
k = d["overall"].get("key_facts", {})
o = d["overall"]
print(f"{name:8} {mode:5} key facts {k.get('stated')}/{k.get('expected')} "
      f"({100 * (k.get('recall') or 0):.0f}%), right page {k.get('right_page')}/{k.get('questions')}, "
      f"expected page read {k.get('expected_page_read')}/{k.get('questions')}, "
      f"precision {100 * (o.get('precision') or 0):.0f}%, fabricated {o.get('fabricated')}, "
      f"failed {o.get('failed')}, {o.get('elapsed_ms', 0) / 1000:.0f} s")
PY
  done
done
