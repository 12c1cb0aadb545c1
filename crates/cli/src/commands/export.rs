//! `fathom export ID --format html|pdf|docx [-o FILE]`: a finished session's report as a
//! standalone HTML page, a PDF or a DOCX. Made once per report: the file is stored as an
//! artifact recorded in the session, and asked again (here or over HTTP) it is the stored one.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use fathom_data::CollectionScope;
use fathom_export::{Format, SessionExports};

use crate::app::App;

#[derive(clap::Args)]
pub struct ExportArgs {
    /// The session id `fathom research` printed.
    id: String,
    /// html, pdf or docx (default: the extension of --output).
    #[arg(long, short, value_parser = parse_format)]
    format: Option<Format>,
    /// Where to write it; `-` for standard output (default: .fathom/exports/<id>.<format>).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::parse(name).map_err(|e| e.to_string())
}

/// The format asked for, or the one the output file's extension names.
fn format_of(args: &ExportArgs) -> anyhow::Result<Format> {
    if let Some(f) = args.format {
        return Ok(f);
    }
    let from_extension = args
        .output
        .as_deref()
        .and_then(Path::extension)
        .and_then(|e| e.to_str())
        .and_then(|e| Format::parse(e).ok());
    match (from_extension, &args.output) {
        (Some(f), _) => Ok(f),
        (None, Some(path)) if path != Path::new("-") => bail!(
            "which format? '{}' does not end in one: pass --format (one of {})",
            path.display(),
            Format::names()
        ),
        (None, _) => bail!("--format is required: one of {}", Format::names()),
    }
}

pub async fn export(app: &App, args: ExportArgs) -> anyhow::Result<ExitCode> {
    let format = format_of(&args)?;
    let to_stdout = args.output.as_deref() == Some(Path::new("-"));
    if to_stdout && format != Format::Html && std::io::stdout().is_terminal() {
        bail!("a {format} file is binary: write it with -o FILE, or redirect standard output");
    }
    let store = app.connect().await?;
    let scope = CollectionScope {
        deployment_name: app.config.research.deployment_name.clone(),
        collection: app.config.research.research_collection.clone(),
    };
    let export = SessionExports::new(store.clone(), store, scope)
        .export(&args.id, format)
        .await?;
    let how = if export.reused {
        "stored earlier"
    } else {
        "made now"
    };
    if to_stdout {
        let mut out = std::io::stdout().lock();
        out.write_all(&export.bytes)
            .and_then(|()| out.flush())
            .context("cannot write to standard output")?;
        eprintln!(
            "exported {format} of {} ({} bytes, file_id {}, {how})",
            args.id,
            export.bytes.len(),
            export.file_id
        );
        return Ok(ExitCode::SUCCESS);
    }
    let path = args
        .output
        .unwrap_or_else(|| default_path(&args.id, format));
    write_file(&path, &export.bytes)?;
    println!(
        "exported {} ({format}, {} bytes, file_id {}, {how})",
        path.display(),
        export.bytes.len(),
        export.file_id
    );
    Ok(ExitCode::SUCCESS)
}

fn default_path(id: &str, format: Format) -> PathBuf {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    PathBuf::from(format!(".fathom/exports/{safe}.{}", format.extension()))
}

/// Writes `bytes` to `path` through a file beside it, renamed into place: an interrupted
/// export leaves what was there before.
fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, bytes)
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("cannot write {}", path.display()))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })
}
