#!/usr/bin/env bash
# Makes the README's screenshots of the web UI again (docs/screenshots/*.png): the browser
# tests drive headless chromium through a real `fathom serve` and, with FATHOM_SCREENSHOTS set,
# save the start form, the plan review, the live run, the finished report, the plan review at
# 390 px and a report's markup (a table, nested lists, code).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/browser.sh
OUT=${1:-docs/screenshots}
mkdir -p "$OUT"
FATHOM_SCREENSHOTS=$(cd "$OUT" && pwd) cargo test -p fathom-cli --test ui --locked -- \
  --test-threads=1 start_edit_approve_watch_cite_and_reopen narrow_keyboard_clarify_reject_with_feedback_and_cancel \
  report_markup_unknown_fields_and_a_failed_run_in_the_browser
ls -l "$OUT"
