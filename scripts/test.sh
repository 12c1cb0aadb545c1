#!/usr/bin/env bash
# The whole test suite, on SQLite and on a throwaway Postgres cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

export FATHOM_PG_DIR=$(mktemp -d /tmp/fathom-pg.XXXXXX)
stop_pg() {
  local ctl
  ctl=$(command -v pg_ctl || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1)
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$ctl" -D "$FATHOM_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  else
    "$ctl" -D "$FATHOM_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$FATHOM_PG_DIR"
}
trap stop_pg EXIT
DATABASE_URL=$(scripts/test-db.sh)
export DATABASE_URL
echo "test: postgres at $DATABASE_URL"

# The real clients the compatibility tests drive: Python (llama-agents-client, llama-cloud)
# and npm (@llamaindex/workflows-client), at the versions pinned beside them.
CLIENTS=pyproject-compat/clients
[ -x "$CLIENTS/.venv/bin/python" ] || python3 -m venv "$CLIENTS/.venv"
"$CLIENTS/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$CLIENTS/requirements.txt"
(cd "$CLIENTS" && npm ci --silent --no-audit --no-fund)

# The browser tests drive Debian's headless chromium through chromedriver; nothing is
# downloaded at test time. Installed here when missing (as root); without them those tests fail
# and say why.
scripts/browser.sh || echo "test: the browser tests will fail: no chromium" >&2

# The export tests read the PDFs they write back with poppler's pdftotext. Installed here when
# missing (as root); without it those tests fail and say why.
if ! command -v pdftotext >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test: installing poppler-utils" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq poppler-utils >&2 ||
    { apt-get update -qq >&2 && apt-get install -y -qq poppler-utils >&2; } || true
fi
command -v pdftotext >/dev/null 2>&1 ||
  echo "test: the export tests will fail: no pdftotext (apt-get install -y poppler-utils)" >&2

# A cold build needs about 2 GB in target/suite (the `suite` profile in Cargo.toml), and the
# tests a few hundred MB in /tmp; say so up front rather than through a compiler's "No space
# left on device". (target/debug, from `cargo build` or `cargo test`, can go when space is short.)
target_dir=${CARGO_TARGET_DIR:-target}
if [ ! -d "$target_dir/suite" ]; then
  mkdir -p "$target_dir"
  free_mb=$(df -Pm "$target_dir" 2>/dev/null | awk 'NR == 2 { print $4 }' || true)
  if [ -n "$free_mb" ] && [ "$free_mb" -lt 2500 ]; then
    echo "test: only ${free_mb} MB free beside $target_dir; a cold build needs about 2,000 MB and the tests some room besides" >&2
  fi
fi

# Format, module cycles and lints first: a change that fails them does not land, whatever the tests say.
# Clippy shares the suite profile's settings (no debug info, no incremental cache).
# rustfmt and clippy come with the toolchain's default profile; added here when missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  echo "test: adding the rustfmt and clippy components" >&2
  rustup component add rustfmt clippy >&2
fi
cargo fmt --all --check
scripts/modcycles.py
cargo clippy --workspace --all-targets --locked --profile suite -- -D warnings

cargo build --workspace --all-targets --locked --profile suite
cargo test --workspace --locked --profile suite --no-fail-fast -- --test-threads="${FATHOM_TEST_THREADS:-2}"
