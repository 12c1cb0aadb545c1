//! `fathom mcp`: Fathom's research as MCP tools over stdin and stdout, for an assistant or an
//! IDE agent that starts it as a child process. It drives its runs itself (unless
//! `--no-worker`: `fathom worker` processes on the same database do). Nothing but the protocol
//! goes to stdout.

use std::process::ExitCode;

use super::serve::{Host, RunsArgs, Worker, host_name};
use crate::app::App;

#[derive(clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    runs: RunsArgs,
    /// Drive no runs here: `fathom worker` processes on the same database do.
    #[arg(long)]
    no_worker: bool,
}

pub async fn mcp(app: &App, args: McpArgs) -> anyhow::Result<ExitCode> {
    let host = Host::open(
        app,
        &args.runs,
        format!("mcp-{}-{}", host_name(), std::process::id()),
    )
    .await?;
    let worker = (!args.no_worker).then(|| Worker::start(&host));
    let relay = host.store.relay_changes(host.engine().clone());
    eprintln!("fathom: research tools served over MCP on stdin and stdout");
    let served = fathom_mcp::serve_stdio(host.research.clone()).await;
    // The client went away: runs in flight are let go for another process (or the next
    // start) to finish.
    if let Some(worker) = worker {
        worker.stop().await;
    }
    if let Some(t) = relay {
        t.abort();
    }
    served.map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}
