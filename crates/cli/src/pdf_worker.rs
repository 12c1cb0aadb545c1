//! The hidden `fathom pdf-worker` command, and the parser that runs it: PDFs are read in a
//! child process of this same binary, under the `parse` section's time and memory limits.

use std::process::ExitCode;
use std::time::Duration;

use fathom_research::ResearchConfig;
use fathom_research::parse::ContentParser;
use fathom_research::pdf::{PdfLimits, PdfSandbox, worker_main};

/// The command name the sandbox starts this binary with.
const COMMAND: &str = "pdf-worker";

#[derive(clap::Args)]
pub struct PdfWorkerArgs {
    #[arg(long)]
    memory_mib: u64,
    #[arg(long)]
    timeout_seconds: u64,
    #[arg(long)]
    max_pages: u32,
    #[arg(long)]
    max_input_bytes: u64,
}

/// Reads one PDF from stdin and answers with its text as JSON on stdout. Runs before any
/// async runtime exists, so the process is no bigger than the parse needs.
pub fn run(args: PdfWorkerArgs) -> ExitCode {
    worker_main(
        PdfLimits {
            timeout: Duration::from_secs(args.timeout_seconds),
            memory_mib: args.memory_mib,
            max_pages: args.max_pages,
        },
        args.max_input_bytes,
    )
}

/// The parser every command uses: PDFs through this binary's worker. One per process, so
/// the corpus index and the runs share its bound on concurrent workers. Without a path to
/// this binary (which Linux always gives), PDFs are refused with that reason.
pub fn content_parser(config: &ResearchConfig) -> ContentParser {
    static PARSER: std::sync::OnceLock<ContentParser> = std::sync::OnceLock::new();
    PARSER
        .get_or_init(|| match std::env::current_exe() {
            Ok(program) => ContentParser::new(Some(PdfSandbox {
                program,
                args: vec![COMMAND.to_string()],
                limits: config.pdf,
            })),
            Err(e) => {
                tracing::warn!(error = %e, "cannot locate this program; PDFs will not be read");
                ContentParser::default()
            }
        })
        .clone()
}
