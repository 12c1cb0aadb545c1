//! `fathom serve`: the HTTP API and (unless `--no-worker`) a worker that drives runs, over
//! one store; and what `fathom worker` shares with it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use anyhow::Context as _;
use fathom_corpus::Corpus;
use fathom_data::CollectionScope;
use fathom_engine::{Engine, WorkerStopped};
use fathom_research::Research;
use fathom_server::{AppState, Deployment, MetricsExport, ServerConfig};
use fathom_store::SqlStore;
use tokio::sync::watch;

use crate::app::App;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    runs: RunsArgs,
    #[arg(long, env = "FATHOM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on; 0 picks a free one (the address is printed).
    #[arg(long, env = "FATHOM_PORT", default_value_t = 4501)]
    port: u16,
    /// Deployment description with [tool.llamadeploy] (default:
    /// pyproject-compat/pyproject.toml if present, else the built-in one).
    #[arg(long, env = "FATHOM_PYPROJECT")]
    pyproject: Option<PathBuf>,
    /// Require `Authorization: Bearer <key>` on every route but health. Needed to listen on
    /// an address other than loopback (or --keys-file), unless --insecure-no-auth. This key
    /// is an `admin` key named `default`.
    #[arg(long, env = "FATHOM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A JSON file listing keys with names and roles, `[{"name", "role", "sha256"}]` (role:
    /// read, run, approve or admin; an entry is made by `fathom keys hash`). Beside
    /// --api-key, or instead of it.
    #[arg(long, env = "FATHOM_KEYS_FILE")]
    keys_file: Option<PathBuf>,
    /// Listen on a non-loopback address without an API key: anyone who reaches the port can
    /// start runs and read every session. Only behind something else that checks access.
    #[arg(long, env = "FATHOM_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// A web origin (scheme://host:port) whose pages may call the API (repeatable; `*` for
    /// any); the server's own origin, where its UI is, is always allowed and no other is.
    #[arg(
        long = "cors-origin",
        env = "FATHOM_CORS_ORIGINS",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// Largest request body accepted, in KiB.
    #[arg(long, default_value_t = 1024)]
    body_limit_kib: usize,
    /// Seconds of silence after which an SSE stream gets a heartbeat comment.
    #[arg(long, default_value_t = 25)]
    heartbeat_secs: u64,
    /// Serve the API only and drive no runs: `fathom worker` processes on the same database
    /// drive them.
    #[arg(long, env = "FATHOM_NO_WORKER")]
    no_worker: bool,
}

/// How a process that drives runs does so (`fathom serve` and `fathom worker`).
#[derive(clap::Args)]
pub struct RunsArgs {
    /// Folder of documents the research workflow searches (set on the server, never by a
    /// request); default: `research.corpus` in the config.
    #[arg(long, env = "FATHOM_CORPUS")]
    corpus: Option<PathBuf>,
    /// Lease owner id of this process. Keep it stable across restarts so a restarted process
    /// takes its runs back at once, and distinct between processes (default: derived from
    /// the host name and port).
    #[arg(long, env = "FATHOM_WORKER_ID")]
    worker_id: Option<String>,
    /// Runs driven at once by this process (default: `engine.max_concurrent_runs`).
    #[arg(long)]
    max_concurrent_runs: Option<usize>,
    /// On SIGTERM or Ctrl-C, seconds a step in flight may take to finish before it is cut
    /// off; its run is then let go to another process at once (default:
    /// `engine.shutdown_grace_seconds`).
    #[arg(long, env = "FATHOM_SHUTDOWN_GRACE_SECS")]
    shutdown_grace_secs: Option<u64>,
}

/// The store, and research on it, as a process that serves or drives runs opens them.
pub struct Host {
    pub store: Arc<SqlStore>,
    pub research: Arc<Research>,
    /// The corpus research reads (also inside `research`'s tools, as a search provider).
    pub corpus: Arc<Corpus>,
}

impl Host {
    /// Connects, opens the corpus, and wires research with this process's engine settings;
    /// `default_owner` is the lease owner id unless `--worker-id` names one.
    pub async fn open(app: &App, args: &RunsArgs, default_owner: String) -> anyhow::Result<Host> {
        let store = app.connect().await?;
        let corpus_dir = args
            .corpus
            .clone()
            .or_else(|| app.config.corpus.clone())
            .context(
                "no corpus to research in: pass --corpus DIR or set research.corpus in the config",
            )?;
        let corpus = app.open_corpus(&corpus_dir, false).await?;
        let owner = args.worker_id.clone().unwrap_or(default_owner);
        let mut engine_config = app.engine_config(owner);
        if let Some(n) = args.max_concurrent_runs {
            engine_config.max_concurrent_runs = n.max(1);
        }
        if let Some(secs) = args.shutdown_grace_secs {
            engine_config.shutdown_grace = Duration::from_secs(secs);
        }
        let research = Arc::new(app.research(store.clone(), corpus.clone(), engine_config)?);
        Ok(Host {
            store,
            research,
            corpus,
        })
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.research.engine
    }

    /// Gives freed heap back whenever this process goes idle, for as long as it runs.
    pub fn trim_when_idle(&self) {
        tokio::spawn(crate::memory::trim_when_idle(
            self.engine().clone(),
            self.store.clone(),
            crate::memory::Kept {
                docs: self.research.deps.tools.docs.clone(),
                corpus: self.corpus.clone(),
            },
        ));
    }
}

fn load_deployment(given: Option<&Path>) -> anyhow::Result<Deployment> {
    let default = Path::new("pyproject-compat/pyproject.toml");
    let path = given.or_else(|| default.is_file().then_some(default));
    Ok(Deployment::load(path)?)
}

pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "local".into())
}

pub async fn serve(app: &App, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let deployment = load_deployment(args.pyproject.as_deref())?;
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("'{}' is not an IP address to listen on", args.host))?;
    let api_key = args.api_key.clone().filter(|k| !k.is_empty());
    let keys = match &args.keys_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the keys file {}", path.display()))?;
            let keys = fathom_server::parse_keys_file(&text)
                .map_err(|e| anyhow::anyhow!("keys file {}: {e}", path.display()))?;
            if keys.is_empty() && api_key.is_none() {
                anyhow::bail!(
                    "keys file {} lists no key: the API would be open; add one (fathom keys \
                     hash) or leave the file out",
                    path.display()
                );
            }
            keys
        }
        None => Vec::new(),
    };
    let auth = api_key.is_some() || !keys.is_empty();
    if !auth && !addr.ip().is_loopback() && !args.insecure_no_auth {
        anyhow::bail!(
            "refusing to listen on {} without an API key: pass --api-key (or FATHOM_API_KEY) \
             or --keys-file (FATHOM_KEYS_FILE), or --insecure-no-auth if something in front of \
             Fathom checks access",
            addr.ip()
        );
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    let host = Host::open(
        app,
        &args.runs,
        format!("serve-{}-{}", host_name(), bound.port()),
    )
    .await?;
    let server_config = ServerConfig {
        api_key: api_key.clone(),
        keys,
        cors_origins: args.cors_origins.clone(),
        body_limit: args.body_limit_kib.max(1) * 1024,
        heartbeat: Duration::from_secs(args.heartbeat_secs.max(1)),
        sessions: CollectionScope {
            deployment_name: app.config.research.deployment_name.clone(),
            collection: app.config.research.research_collection.clone(),
        },
        metrics: app.metrics.clone().map(MetricsExport),
        loopback_only: addr.ip().is_loopback(),
        ..ServerConfig::new(deployment.clone())
    };
    let state = AppState::new(
        host.engine().clone(),
        host.store.clone(),
        host.store.clone(),
        server_config,
    )?;
    // MCP over streamable HTTP at /mcp, behind the API key like the rest.
    let mcp = axum::Router::new().nest_service(
        "/mcp",
        fathom_mcp::http_service(host.research.clone(), addr.ip().is_loopback()),
    );
    let router = fathom_server::router_with(state.clone(), Some(mcp));
    let worker = (!args.no_worker).then(|| Worker::start(&host));
    host.trim_when_idle();
    // On Postgres, runs driven by other processes reach this one's streams as soon as they
    // commit, and work they make reaches this one's worker (LISTEN/NOTIFY).
    let relay = host.store.relay_changes(host.engine().clone());
    println!(
        "fathom: serving deployment '{}' ({}) on http://{bound}{}{}",
        deployment.name,
        deployment
            .workflows
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        if auth { " (API key required)" } else { "" },
        if worker.is_none() {
            " (no worker: runs are driven by `fathom worker` processes)"
        } else {
            ""
        }
    );
    let (closed_tx, mut closed_rx) = watch::channel(false);
    // One router for every connection (a clone shares it): axum's `with_state` on a clone for
    // each connection rebuilt every route, some 70 kB held per open connection with this API,
    // 700 MB for 10,000 event streams.
    let server = tokio::spawn(fathom_server::serve(listener, router, async move {
        let _ = closed_rx.wait_for(|c| *c).await;
    }));
    shutdown_signal().await;
    eprintln!("fathom: shutting down: new requests refused, open streams closed");
    // Streams end first so their clients reconnect to a server that stays; the worker
    // meanwhile finishes its steps in flight and lets their runs go.
    state.close_streams();
    let _ = closed_tx.send(true);
    if let Some(worker) = worker {
        worker.stop().await;
    }
    // Requests still running get a little time; the process does not wait on them forever.
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Err(e)) => eprintln!("fathom: server error while stopping: {e}"),
        Ok(Ok(())) => {}
        Err(_) => eprintln!("fathom: requests still open after 5s; stopping anyway"),
    }
    if let Some(t) = relay {
        t.abort();
    }
    eprintln!("fathom: stopped");
    Ok(ExitCode::SUCCESS)
}

/// A worker driving runs in this process, stopped with a drain.
pub struct Worker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<WorkerStopped>,
    grace: Duration,
}

impl Worker {
    pub fn start(host: &Host) -> Worker {
        let (stop, stop_rx) = watch::channel(false);
        let engine = host.engine().clone();
        let grace = engine.config().shutdown_grace;
        Worker {
            stop,
            task: tokio::spawn(engine.run_worker(stop_rx)),
            grace,
        }
    }

    /// Claims nothing more, lets steps in flight finish within the grace, and lets go of
    /// every run this process held, saying so on stderr.
    pub async fn stop(self) {
        eprintln!(
            "fathom: finishing steps in flight (up to {}s) before letting their runs go",
            self.grace.as_secs_f64()
        );
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(WorkerStopped { in_flight, cut_off }) => eprintln!(
                "fathom: worker stopped: {in_flight} run(s) were in flight, {cut_off} cut off \
                 mid-step; all let go"
            ),
            Err(e) => eprintln!("fathom: worker ended abnormally: {e}"),
        }
    }
}

/// SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}
