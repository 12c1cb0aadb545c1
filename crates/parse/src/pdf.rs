//! PDF text, page by page.
//!
//! PDF is where hostile input bites hardest: pdf-extract panics on purpose on what it does not
//! support, some files take minutes, and a small file can inflate to gigabytes. So the parsing
//! itself ([`extract`]) runs in a child process (the `fathom` binary's hidden `pdf-worker`
//! command, see [`worker_main`]) that caps its own memory and CPU time, and [`PdfSandbox`]
//! kills it at a wall-clock deadline. Only the worker's JSON answer crosses back.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The text of one page; `n` counts from 1, as PDF viewers and `#page=N` anchors do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdfPage {
    pub n: u32,
    pub text: String,
}

/// What the worker reads out of a PDF.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PdfText {
    /// The Info dictionary's Title, if any.
    pub title: Option<String>,
    /// The Info dictionary's Author, if any.
    pub author: Option<String>,
    /// The Info dictionary's CreationDate, as written (`D:YYYYMMDD...`).
    pub created: Option<String>,
    /// Pages in the document (more than `pages.len()` when cut at the page limit).
    pub page_count: u32,
    pub pages: Vec<PdfPage>,
}

/// The limits a PDF is read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdfLimits {
    /// Wall-clock time the worker may take; it is killed after.
    pub timeout: Duration,
    /// Heap the worker may use (its `RLIMIT_DATA`).
    pub memory_mib: u64,
    /// Pages read; the rest of a longer document is left out.
    pub max_pages: u32,
}

impl Default for PdfLimits {
    fn default() -> Self {
        PdfLimits {
            timeout: Duration::from_secs(30),
            memory_mib: 512,
            max_pages: 2000,
        }
    }
}

/// Reads the text of `bytes`, in this process. May panic, loop for long or allocate without
/// bound on hostile input: call it only inside the worker.
pub fn extract(bytes: &[u8], max_pages: u32) -> Result<PdfText, String> {
    use pdf_extract::{Document, Object, PlainTextOutput, output_doc_page};
    // The header may sit anywhere in the first KiB.
    if !bytes[..bytes.len().min(1024)]
        .windows(5)
        .any(|w| w == b"%PDF-")
    {
        return Err("not a PDF (no %PDF- header)".into());
    }
    let mut doc = Document::load_mem(bytes).map_err(|e| format!("unreadable PDF: {e}"))?;
    if doc.is_encrypted() {
        // Many PDFs are "encrypted" with an empty user password only to set permissions.
        doc.decrypt("")
            .map_err(|_| "the PDF is encrypted with a password".to_string())?;
    }
    let info = doc.trailer.get(b"Info").ok().and_then(|o| match o {
        Object::Reference(id) => doc.get_dictionary(*id).ok(),
        Object::Dictionary(d) => Some(d),
        _ => None,
    });
    let info_text = |key: &[u8]| {
        let s = info?.get(key).ok()?.as_str().ok()?;
        let text = pdf_string(s);
        Some(text.trim().to_string()).filter(|t| !t.is_empty())
    };
    let pages = doc.get_pages();
    // The page tree's own count: a hostile tree claims far more pages than the walk (bounded
    // by lopdf at one step per object) finds.
    let claimed = doc
        .catalog()
        .and_then(|c| c.get(b"Pages"))
        .and_then(Object::as_reference)
        .and_then(|id| doc.get_dictionary(id))
        .and_then(|p| p.get(b"Count"))
        .and_then(Object::as_i64)
        .map_or(0, |n| n.clamp(0, i64::from(u32::MAX)) as u32);
    let mut out = Vec::new();
    for &n in pages.keys().take(max_pages as usize) {
        let mut text = String::new();
        output_doc_page(&doc, &mut PlainTextOutput::new(&mut text), n)
            .map_err(|e| format!("unreadable PDF page {n}: {e}"))?;
        out.push(PdfPage { n, text });
    }
    Ok(PdfText {
        title: info_text(b"Title"),
        author: info_text(b"Author"),
        created: info_text(b"CreationDate"),
        page_count: (pages.len() as u32).max(claimed),
        pages: out,
    })
}

/// A PDF text string: UTF-16BE with a BOM, else PDFDocEncoding (Latin-1 is close enough for
/// the metadata we read).
fn pdf_string(bytes: &[u8]) -> String {
    if let Some(rest) = bytes.strip_prefix(&[0xFE, 0xFF]) {
        let units: Vec<u16> = rest
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        return String::from_utf16_lossy(&units);
    }
    bytes.iter().map(|&b| b as char).collect()
}

/// What the worker writes on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WorkerAnswer {
    Ok(PdfText),
    Error(String),
}

/// The worker process's body: caps its own heap and CPU time, reads a PDF from stdin (at most
/// `max_input` bytes), writes a [`WorkerAnswer`] as JSON to stdout. A panic is caught and
/// answered as an error; running out of memory or time kills the process, which the parent
/// reports.
pub fn worker_main(limits: PdfLimits, max_input: u64) -> std::process::ExitCode {
    if let Err(e) = cap_resources(limits) {
        eprintln!("pdf-worker: cannot set resource limits: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().take(max_input + 1).read_to_end(&mut bytes) {
        eprintln!("pdf-worker: cannot read stdin: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let answer = if bytes.len() as u64 > max_input {
        WorkerAnswer::Error(format!("larger than {max_input} bytes"))
    } else {
        // pdf-extract reports unsupported input by panicking; keep the message, not the
        // default hook's backtrace noise on stderr.
        std::panic::set_hook(Box::new(|_| {}));
        match std::panic::catch_unwind(|| extract(&bytes, limits.max_pages)) {
            Ok(Ok(text)) => WorkerAnswer::Ok(text),
            Ok(Err(e)) => WorkerAnswer::Error(e),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown cause".into());
                WorkerAnswer::Error(format!("the PDF parser gave up: {msg}"))
            }
        }
    };
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &answer).map_err(std::io::Error::from);
    match written.and_then(|()| stdout.flush()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

/// Caps this process's heap (`RLIMIT_DATA`: brk and private mappings, so thread stacks and
/// the binary's own pages do not count) and CPU seconds (a backstop to the parent's timer).
// Unsafe: setrlimit(2), the sandbox's caps on itself.
#[allow(unsafe_code)]
fn cap_resources(limits: PdfLimits) -> std::io::Result<()> {
    let set = |resource, value: u64| {
        let lim = libc::rlimit {
            rlim_cur: value as libc::rlim_t,
            rlim_max: value as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct we pass and touches no memory of ours.
        if unsafe { libc::setrlimit(resource, &lim) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::RLIMIT_DATA, limits.memory_mib * 1024 * 1024)?;
    set(libc::RLIMIT_CPU, limits.timeout.as_secs().max(1) + 1)
}

/// How to start the worker: a program and its arguments (the `fathom` binary and
/// `pdf-worker`). The limits are appended as flags.
#[derive(Debug, Clone)]
pub struct PdfSandbox {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub limits: PdfLimits,
}

/// Upper bound on the worker's answer: text is far smaller than the PDF it came from, and
/// the input is capped by the fetcher.
const MAX_ANSWER_BYTES: u64 = 256 * 1024 * 1024;

impl PdfSandbox {
    /// Runs the worker on `bytes` and returns its text, or why there is none.
    pub async fn read(&self, bytes: &[u8]) -> Result<PdfText, String> {
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .arg("--memory-mib")
            .arg(self.limits.memory_mib.to_string())
            .arg("--timeout-seconds")
            .arg(self.limits.timeout.as_secs().max(1).to_string())
            .arg("--max-pages")
            .arg(self.limits.max_pages.to_string())
            .arg("--max-input-bytes")
            .arg(bytes.len().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the PDF worker: {e}"))?;
        let (mut stdin, stdout, stderr) = (
            child.stdin.take().expect("piped"),
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        let talk = async {
            // A worker that dies early closes its stdin: the write error is not the story,
            // the exit status is.
            let feed = async {
                let _ = stdin.write_all(bytes).await;
                drop(stdin);
            };
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (mut stdout, mut stderr) = (stdout.take(MAX_ANSWER_BYTES), stderr.take(64 * 1024));
            let read_out = stdout.read_to_end(&mut out);
            let read_err = stderr.read_to_end(&mut err);
            let ((), _, _) = tokio::join!(feed, read_out, read_err);
            let status = child.wait().await;
            (status, out, err)
        };
        let (status, out, err) = match tokio::time::timeout(self.limits.timeout, talk).await {
            Ok(done) => done,
            Err(_) => {
                // kill_on_drop reaps it; say what happened.
                return Err(format!(
                    "the PDF took longer than {} s to read and was abandoned",
                    self.limits.timeout.as_secs_f64()
                ));
            }
        };
        let status = status.map_err(|e| format!("the PDF worker was lost: {e}"))?;
        if let Ok(answer) = serde_json::from_slice::<WorkerAnswer>(&out) {
            return match answer {
                WorkerAnswer::Ok(text) => Ok(text),
                WorkerAnswer::Error(e) => Err(e),
            };
        }
        Err(describe_death(status, &err, self.limits))
    }
}

/// Why a worker ended without an answer, in words.
fn describe_death(status: std::process::ExitStatus, stderr: &[u8], limits: PdfLimits) -> String {
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(stderr);
    let out_of_memory = stderr.contains("memory allocation") || stderr.contains("out of memory");
    // Rust's stack guard: the parser recursed without end (objects that refer to each other
    // in a loop) or as deep as the file's nesting.
    let stack = stderr.contains("has overflowed its stack");
    match status.signal() {
        _ if stack => "the PDF's objects refer to each other in a loop or nest too deep: the \
                       parser ran out of stack and was abandoned"
            .to_string(),
        _ if out_of_memory => format!(
            "the PDF needed more than {} MiB to read and was abandoned",
            limits.memory_mib
        ),
        Some(libc::SIGXCPU) | Some(libc::SIGKILL) => format!(
            "the PDF took more than {} s of CPU to read and was abandoned",
            limits.timeout.as_secs()
        ),
        Some(sig) => format!("the PDF parser crashed (signal {sig})"),
        None => {
            let last = stderr.lines().last().unwrap_or("").trim();
            format!(
                "the PDF parser failed ({status}){}",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(": {last}")
                }
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_worker_that_ran_out_of_stack_is_reported_as_a_loop() {
        let aborted = std::process::ExitStatus::from_raw(libc::SIGABRT);
        let stderr =
            b"\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow\n";
        let why = describe_death(aborted, stderr, PdfLimits::default());
        assert!(why.contains("refer to each other in a loop"), "{why}");
        // Another abort is a crash, with its signal.
        let why = describe_death(aborted, b"", PdfLimits::default());
        assert_eq!(
            why,
            format!("the PDF parser crashed (signal {})", libc::SIGABRT)
        );
    }
}
