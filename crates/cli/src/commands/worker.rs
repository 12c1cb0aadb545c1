//! `fathom worker`: drives runs and serves no API, beside `fathom serve --no-worker`
//! processes on the same database. Its side port answers health probes and `/metrics`.

use std::future::IntoFuture as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context as _;
use fathom_server::{AppState, Deployment, MetricsExport, ServerConfig};

use super::serve::{Host, RunsArgs, Worker, host_name, shutdown_signal};
use crate::app::App;

#[derive(clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    runs: RunsArgs,
    /// Address of the side port that answers health probes (`/health`, `/livez`, `/readyz`)
    /// and serves `/metrics`.
    #[arg(long, env = "FATHOM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// The side port; 0 picks a free one (the address is printed).
    #[arg(long, env = "FATHOM_WORKER_PORT", default_value_t = 4502)]
    port: u16,
}

pub async fn worker(app: &App, args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("'{}' is not an IP address to listen on", args.host))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    let host = Host::open(
        app,
        &args.runs,
        format!("worker-{}-{}", host_name(), bound.port()),
    )
    .await?;
    // The health routes read the store through the same state the API uses.
    let state = AppState::new(
        host.engine().clone(),
        host.store.clone(),
        host.store.clone(),
        ServerConfig {
            metrics: app.metrics.clone().map(MetricsExport),
            ..ServerConfig::new(Deployment::load(None)?)
        },
    )?;
    let health = tokio::spawn(
        axum::serve(
            listener,
            fathom_server::health_router(state).into_make_service(),
        )
        .into_future(),
    );
    let worker = Worker::start(&host);
    host.trim_when_idle();
    let relay = host.store.relay_changes(host.engine().clone());
    println!(
        "fathom: worker '{}' driving runs ({} at once); health on http://{bound}/health and metrics on /metrics",
        host.engine().config().owner,
        host.engine().config().max_concurrent_runs
    );
    shutdown_signal().await;
    eprintln!("fathom: shutting down: claiming no new runs");
    worker.stop().await;
    health.abort();
    if let Some(t) = relay {
        t.abort();
    }
    eprintln!("fathom: stopped");
    Ok(ExitCode::SUCCESS)
}
