# Fathom: `fathom serve` (API and, unless --no-worker, the work) or `fathom worker`.
#   docker build -t fathom .
#   docker run -p 127.0.0.1:4501:4501 -e FATHOM_API_KEY=secret -v "$PWD/corpus:/data/corpus:ro" fathom
# It listens on 0.0.0.0 inside the container, which `fathom serve` refuses without an API key
# (FATHOM_API_KEY) unless told FATHOM_INSECURE_NO_AUTH=true.
# docker-compose.yml runs it with Postgres, SearxNG and (profile llm) Ollama.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p fathom-cli \
 && install -m 0755 target/release/fathom /usr/local/bin/fathom

FROM debian:bookworm-slim
# ca-certificates: web search and fetching over HTTPS; curl: the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin fathom \
 && mkdir -p /app /data/corpus /data/index \
 && chown -R fathom:fathom /app /data
COPY --from=build /usr/local/bin/fathom /usr/local/bin/fathom
# Read from the working directory at start: the config and the deployment's workflow names.
COPY configs /app/configs
COPY pyproject-compat/pyproject.toml /app/pyproject-compat/pyproject.toml
WORKDIR /app
USER fathom
ENV FATHOM_HOST=0.0.0.0 \
    FATHOM_PORT=4501 \
    FATHOM_CORPUS=/data/corpus \
    FATHOM_INDEX_DIR=/data/index \
    DATABASE_URL=sqlite:///data/fathom.db
EXPOSE 4501
# /livez: the process answers (a worker's side port is 4502: compose sets its own check).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${FATHOM_PORT}/livez" || exit 1
ENTRYPOINT ["fathom"]
CMD ["serve"]
