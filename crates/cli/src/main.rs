//! `fathom`: the command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fathom_engine::store::{RunFilter, RunStatus, RunStore, format_timestamp_ms};
use fathom_store::SqlStore;

#[derive(Parser)]
#[command(
    name = "fathom",
    version,
    about = "Durable workflows with an approval gate"
)]
struct Cli {
    /// SQLite file path or postgres:// URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = ".fathom/fathom.db",
        global = true
    )]
    database_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates the database if needed and applies migrations.
    Migrate,
    /// Lists runs, newest first.
    Runs {
        /// Only runs with this status (running, waiting, completed, failed, cancelled).
        #[arg(long)]
        status: Vec<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fathom: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let store = SqlStore::connect(&cli.database_url).await?;
    match cli.command {
        Command::Migrate => println!("database ready ({:?})", store.dialect()),
        Command::Runs { status, limit } => {
            let statuses = status
                .iter()
                .map(|s| RunStatus::parse(s).ok_or_else(|| anyhow::anyhow!("unknown status '{s}'")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let runs = store
                .list_runs(&RunFilter {
                    statuses,
                    limit: Some(limit),
                    ..Default::default()
                })
                .await?;
            for r in runs {
                println!(
                    "{}  {:<10} {:<20} {}",
                    r.id,
                    r.status.as_str(),
                    r.workflow,
                    format_timestamp_ms(r.created_at)
                );
            }
        }
    }
    Ok(())
}
