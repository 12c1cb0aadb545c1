#!/usr/bin/env bash
# Starts a throwaway Postgres cluster on a free loopback port and prints its URL.
# Postgres refuses to run as root, so as root the cluster runs as the `postgres` user.
# Installs the server with apt-get when its binaries are missing.
set -euo pipefail

find_bin() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$found" ] && echo "$found"
}

if [ -z "$(find_bin initdb)" ] || [ -z "$(find_bin pg_ctl)" ]; then
  echo "test-db: installing postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
INITDB=$(find_bin initdb)
PG_CTL=$(find_bin pg_ctl)

RUN_AS=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --create-home postgres
  RUN_AS=(runuser -u postgres --)
fi

DIR=${FATHOM_PG_DIR:-$(mktemp -d /tmp/fathom-pg.XXXXXX)}
mkdir -p "$DIR"
chmod 755 "$DIR"
[ "${#RUN_AS[@]}" -gt 0 ] && chown postgres "$DIR"

# Commits are acknowledged before their WAL is written, unless FATHOM_PG_SYNCHRONOUS_COMMIT=on:
# a cluster that is stopped with `-m immediate` (the chaos tests' outages) needs it on, or it
# loses commits it acknowledged in the last moments before the stop.
SYNC_COMMIT=${FATHOM_PG_SYNCHRONOUS_COMMIT:-off}

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${RUN_AS[@]}" "$INITDB" -D "$DIR/data" -A trust -U postgres --no-sync >/dev/null
"${RUN_AS[@]}" "$PG_CTL" -D "$DIR/data" -l "$DIR/log" -w -t 60 \
  -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=$SYNC_COMMIT -c max_connections=300" \
  start >/dev/null
echo "$DIR" > "$DIR/dir"
echo "postgres://postgres@127.0.0.1:$PORT/postgres"
