//! `fathom`: the command-line tool.

mod app;
mod commands;
mod config;
mod memory;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use commands::{eval, export, fetch, index, pdf_worker, research, serve, sessions, worker};
use fathom_data::format_timestamp_ms;
use fathom_engine::store::{RunFilter, RunStatus, RunStore};
use fathom_telemetry as telemetry;

#[derive(Parser)]
#[command(
    name = "fathom",
    version,
    about = "Durable workflows with an approval gate; deep research over a local corpus",
    after_help = ENVIRONMENT
)]
struct Cli {
    /// SQLite file path or `sqlite:` URL, or a postgres:// URL (default:
    /// `storage.database_url` in the config, else .fathom/fathom.db).
    #[arg(long, env = "DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Config file (default: configs/config.json if present, else the built-in one).
    #[arg(long, env = "FATHOM_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Where corpus indexes are kept.
    #[arg(
        long,
        env = "FATHOM_INDEX_DIR",
        default_value = ".fathom/index",
        global = true
    )]
    index_dir: PathBuf,
    /// Print elapsed time and peak memory on stderr when done.
    #[arg(long, global = true)]
    stats: bool,
    /// How log lines on stderr look: text, or one JSON object per line (with the run id and
    /// step of the step they come from). Which lines: `RUST_LOG` (default: errors only).
    #[arg(long, env = "FATHOM_LOG_FORMAT", value_enum, default_value_t = LogFormatArg::Text, global = true)]
    log_format: LogFormatArg,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Researches a question over a local corpus and writes a cited report.
    Research(research::ResearchArgs),
    /// Serves the workflows API (llama-compatible), SSE streams, the approval gate and the
    /// Agent Data API over HTTP, and drives runs (unless --no-worker).
    Serve(serve::ServeArgs),
    /// Drives runs without serving the API, beside `fathom serve --no-worker` processes on
    /// the same database (health probes on a side port).
    Worker(worker::WorkerArgs),
    /// Serves the research as Model Context Protocol tools over stdin and stdout (for an
    /// assistant that starts Fathom as a child process); `fathom serve` offers the same tools
    /// over streamable HTTP at /mcp.
    Mcp(commands::mcp::McpArgs),
    /// Carries on with a session: approves a waiting plan, or finishes interrupted work.
    Resume(research::ResumeArgs),
    /// Saved research sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Researches a set of questions and measures the reports' citations: fabricated rate
    /// (must be 0), support, sources used, time and tokens; with a key-fact set (.json), also
    /// key-fact recall and whether the right page is cited.
    Eval(eval::EvalArgs),
    /// Routes a labelled set of questions (by the model when one is configured, else by the
    /// rules) and prints the agreement with the labels and the confusion matrix.
    Routes(commands::routes::RoutesArgs),
    /// Writes a finished session's report as a standalone HTML page, a PDF or a DOCX file
    /// (made once per report and kept with the session).
    Export(export::ExportArgs),
    /// Fetches one URL safely and prints it as Markdown with its metadata.
    Fetch(fetch::FetchArgs),
    /// Indexes (or brings up to date) a corpus folder.
    Index {
        /// The corpus folder.
        dir: PathBuf,
    },
    /// Creates the database if needed and applies migrations.
    Migrate,
    /// API keys for `fathom serve` (the keys file).
    Keys {
        #[command(subcommand)]
        command: commands::keys::KeysCommand,
    },
    /// Writes a consistent copy of the database while it serves (SQLite online; Postgres
    /// through pg_dump), and says what it holds and how to restore it.
    Backup(commands::backup::BackupArgs),
    /// Reads one PDF from stdin in an isolated process (started by Fathom itself).
    #[command(name = "pdf-worker", hide = true)]
    PdfWorker(pdf_worker::PdfWorkerArgs),
    /// Lists runs, newest first.
    Runs {
        /// Only runs with this status (running, waiting, completed, failed, cancelled).
        #[arg(long)]
        status: Vec<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

/// What the config and the process read from the environment, besides the `[env: ...]` of
/// each option.
const ENVIRONMENT: &str = "\
Environment (besides each option's [env: ...]):
  OPENAI_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY
        the model, when the config's llm section names none (OPENAI_API_KEY: the default of
        llm.api_key_env; empty OPENAI_MODEL: no model)
  TAVILY_API_KEY, BRAVE_API_KEY
        the web search key of those providers (or the variable search.api_key_env names)
  FATHOM_WEBHOOK_SECRET, FATHOM_SMTP_URL, FATHOM_SMTP_FROM
        report delivery by signed webhook and by email
  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
  OTEL_SERVICE_NAME
        traces over OTLP/HTTP, one per run
  RUST_LOG
        which log lines (default: errors)";

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// Lists sessions, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Shows one session: status, plan, sources, and the report.
    Show { id: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::PdfWorker(args) => return pdf_worker::run(args),
        Command::Keys { command } => return commands::keys::run(command),
        _ => {}
    }
    memory::settle_allocator();
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(async_main(cli)),
        Err(e) => {
            eprintln!("fathom: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    // Every HTTP client of the process (the trace exporter's among them) needs it first.
    fathom_fetch::install_tls();
    // Metrics are collected by the processes that serve them; traces go wherever the OTLP
    // variables say, from any command.
    let options = telemetry::Options {
        log_format: match cli.log_format {
            LogFormatArg::Text => telemetry::LogFormat::Text,
            LogFormatArg::Json => telemetry::LogFormat::Json,
        },
        metrics: matches!(cli.command, Command::Serve(_) | Command::Worker(_)),
        ..Default::default()
    };
    let telemetry = match telemetry::Telemetry::init(&options) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fathom: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stats = cli.stats;
    let started = std::time::Instant::now();
    let code = match run(cli, &telemetry).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fathom: {e:#}");
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown().await;
    if stats {
        eprintln!(
            "stats: elapsed_ms={} peak_rss_kib={}",
            started.elapsed().as_millis(),
            peak_rss_kib().map_or("unknown".to_string(), |k| k.to_string())
        );
    }
    code
}

/// The process's peak resident memory (Linux `VmHWM`).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn run(cli: Cli, telemetry: &telemetry::Telemetry) -> anyhow::Result<ExitCode> {
    // Loaded and checked once, for every command.
    let mut app = app::App::load(cli.database_url, cli.config.as_deref(), cli.index_dir)?;
    app.metrics = telemetry.metrics();
    app.tracer = telemetry.run_tracer();
    let code = command(&app, cli.command).await;
    app.close().await;
    code
}

async fn command(app: &app::App, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Research(args) => return research::research(app, args).await,
        Command::Serve(args) => return serve::serve(app, args).await,
        Command::Worker(args) => return worker::worker(app, args).await,
        Command::Mcp(args) => return commands::mcp::mcp(app, args).await,
        Command::Fetch(args) => return fetch::fetch(app, args).await,
        Command::Eval(args) => return eval::eval(app, args).await,
        Command::Routes(args) => return commands::routes::routes(app, args).await,
        Command::Export(args) => return export::export(app, args).await,
        Command::Backup(args) => return commands::backup::backup(app, args).await,
        Command::Resume(args) => return research::resume(app, args).await,
        Command::Sessions { command } => match command {
            SessionsCommand::List { limit } => sessions::list(app, limit).await?,
            SessionsCommand::Show { id } => sessions::show(app, &id).await?,
        },
        Command::Index { dir } => index::index(app, &dir).await?,
        Command::PdfWorker(_) | Command::Keys { .. } => {
            unreachable!("handled before the runtime starts")
        }
        Command::Migrate => {
            let store = app.connect().await?;
            println!("database ready ({:?})", store.dialect());
        }
        Command::Runs { status, limit } => {
            let store = app.connect().await?;
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
    Ok(ExitCode::SUCCESS)
}
