//! The hidden `fathom pdf-worker` command: PDFs are read in a child process of this same
//! binary (see `app::content_parser`), under the `parse` section's time and memory limits.

use std::process::ExitCode;
use std::time::Duration;

use fathom_parse::pdf::{PdfLimits, worker_main};

/// The command name the sandbox starts this binary with.
pub const COMMAND: &str = "pdf-worker";

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
