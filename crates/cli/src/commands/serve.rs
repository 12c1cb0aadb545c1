//! `fathom serve`: the HTTP API and a worker that drives runs, over one store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use fathom_data::CollectionScope;
use fathom_server::{AppState, Deployment, ServerConfig};
use tokio::sync::watch;

use crate::app::App;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Folder of documents the research workflow searches (set on the server, never by a
    /// request); default: `research.corpus` in the config.
    #[arg(long, env = "FATHOM_CORPUS")]
    corpus: Option<PathBuf>,
    #[arg(long, env = "FATHOM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on; 0 picks a free one (the address is printed).
    #[arg(long, env = "FATHOM_PORT", default_value_t = 4501)]
    port: u16,
    /// Deployment description with [tool.llamadeploy] (default:
    /// pyproject-compat/pyproject.toml if present, else the built-in one).
    #[arg(long, env = "FATHOM_PYPROJECT")]
    pyproject: Option<PathBuf>,
    /// Require `Authorization: Bearer <key>` on every route but health.
    #[arg(long, env = "FATHOM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Allowed CORS origin (repeatable); default: any origin, echoed, with credentials.
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
    /// Lease owner id of this process. Keep it stable across restarts so a restarted server
    /// takes its runs back at once (default: derived from host name and port).
    #[arg(long, env = "FATHOM_WORKER_ID")]
    worker_id: Option<String>,
    /// Runs driven at once by this process (default: `engine.max_concurrent_runs`).
    #[arg(long)]
    max_concurrent_runs: Option<usize>,
}

fn load_deployment(given: Option<&Path>) -> anyhow::Result<Deployment> {
    let default = Path::new("pyproject-compat/pyproject.toml");
    let path = given.or_else(|| default.is_file().then_some(default));
    Ok(Deployment::load(path)?)
}

fn host_name() -> String {
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
    let store = app.connect().await?;
    let corpus_dir = args
        .corpus
        .clone()
        .or_else(|| app.config.corpus.clone())
        .context(
            "no corpus to research in: pass --corpus DIR or set research.corpus in the config",
        )?;
    let corpus = app.open_corpus(&corpus_dir, false).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    let owner = args
        .worker_id
        .clone()
        .unwrap_or_else(|| format!("serve-{}-{}", host_name(), bound.port()));
    let mut engine_config = app.engine_config(owner);
    if let Some(n) = args.max_concurrent_runs {
        engine_config.max_concurrent_runs = n.max(1);
    }
    let research = app.research(store.clone(), corpus, engine_config)?;
    let server_config = ServerConfig {
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        cors_origins: args.cors_origins.clone(),
        body_limit: args.body_limit_kib.max(1) * 1024,
        heartbeat: Duration::from_secs(args.heartbeat_secs.max(1)),
        sessions: CollectionScope {
            deployment_name: app.config.research.deployment_name.clone(),
            collection: app.config.research.research_collection.clone(),
        },
        ..ServerConfig::new(deployment.clone())
    };
    let state = AppState::new(
        research.engine.clone(),
        store.clone(),
        store.clone(),
        server_config,
    )?;
    let app = fathom_server::router(state);

    let (stop_tx, stop_rx) = watch::channel(false);
    let worker = tokio::spawn(research.engine.clone().run_worker(stop_rx.clone()));
    // On Postgres, runs driven by other `fathom serve` processes reach this one's streams
    // as soon as they commit (LISTEN/NOTIFY), not at the next poll.
    let listener_task = store.relay_changes(research.engine.clone());
    println!(
        "fathom: serving deployment '{}' ({}) on http://{bound}{}",
        deployment.name,
        deployment
            .workflows
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        if args.api_key.is_some() {
            " (API key required)"
        } else {
            ""
        }
    );
    let mut shutdown = stop_rx.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = shutdown.changed() => {}
            }
        })
        .await
        .context("server failed")?;
    let _ = stop_tx.send(true);
    let _ = worker.await;
    if let Some(t) = listener_task {
        t.abort();
    }
    eprintln!("fathom: stopped");
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
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
