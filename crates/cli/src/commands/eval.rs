//! `fathom eval`: research a set of questions over a corpus and measure each report's
//! citations in code: how many name no source read (fabricated: must be 0), citation
//! precision (cited sentences their cited document supports, claim by claim) and recall
//! (claim sentences with a supporting citation), the sources used, time and tokens. Runs the
//! agent when a model is configured, else the offline planner and extractive writer.
//!
//! With a key-fact set (`--questions` a `.json` file, see `fathom_report::eval::facts`),
//! it also measures what each report says: key-fact recall (facts stated over facts
//! expected) and whether a sentence stating a key fact cites one of the expected pages.
// Unsafe: getrusage(2), this process's CPU time as the kernel counted it.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};
use fathom_data::ArtifactStore;
use fathom_engine::store::{RunStatus, RunStore};
use fathom_parse::ParsedDoc;
use fathom_report::eval::{
    CitationCheck, FactCheck, FactTotals, KeyFactQuestion, check_citations, check_key_facts,
    parse_key_facts,
};
use fathom_research::ResearchState;
use serde_json::{Value, json};

use super::research::parse_settings;
use crate::app::App;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// The corpus folder to research in.
    #[arg(long)]
    corpus: PathBuf,
    /// A file of questions, one per line (blank lines and lines starting with # are skipped),
    /// or a key-fact set: a .json array of {"question", "pages", "facts"} (see
    /// tests/pydoc/README.md), which adds key-fact recall and the right-page rate.
    #[arg(long)]
    questions: PathBuf,
    /// One setting for every run, e.g. --set max_sources=4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

const MAX_QUESTIONS: usize = 1000;

struct Row {
    question: String,
    ok: Result<(), String>,
    check: CitationCheck,
    sources_cited: usize,
    sources_read: usize,
    elapsed_ms: u128,
    /// CPU the whole process spent (every thread) while the run was in flight; the checking
    /// done here afterwards is not in it.
    cpu_ms: f64,
    tokens: u64,
    /// The report's sources, as pages of the corpus where they are in it.
    cited: Vec<String>,
    /// The sources the run read, likewise.
    read: Vec<String>,
    /// Whether the run read a page its key facts stand on: research reached the answer,
    /// whatever the writer then quoted.
    expected_page_read: bool,
    facts: Option<FactCheck>,
    /// How the run was answered (`simple`, `web`, `deep`) and why.
    route: Option<(String, String)>,
    /// The report as written, for a reader of `--json`.
    report_markdown: String,
}

pub async fn eval(app: &App, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let (questions, key_facts) = read_questions(&args)?;
    let config = &app.config.research;
    let mode = if app.config.agent.is_some() {
        "agent"
    } else {
        "offline"
    };
    let mut settings = parse_settings(None, &args.set)?.unwrap_or_else(|| json!({}));
    settings["require_approval"] = json!(false);
    // Every question is checked before any runs.
    for q in &questions {
        fathom_research::check_start(config, q, Some(settings.clone()))?;
    }
    let store = app.connect().await?;
    let corpus = app.open_corpus(&args.corpus, true).await?;
    let engine = app.engine_config(format!("eval-{}", fathom_engine::new_id()));
    let research = app.research(store.clone(), corpus, engine)?;
    // Sources in the corpus are shown as its pages (`tutorial/venv.html`).
    let root = args
        .corpus
        .canonicalize()
        .with_context(|| format!("cannot open {}", args.corpus.display()))?;
    let root_url = format!("{}/", fathom_corpus::file_url(&root));
    let mut rows = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let expected = key_facts.as_ref().map(|set| &set[i]);
        rows.push(run_one(&research, &store, q, &settings, &root_url, expected).await?);
    }
    let totals = Totals::of(&rows);
    if args.json {
        print_json(mode, &rows, &totals, key_facts.as_deref())?;
    } else {
        print_text(mode, &rows, &totals, key_facts.as_deref());
    }
    // A fabricated citation or a failed run fails the evaluation.
    Ok(if totals.citations.fabricated == 0 && totals.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The questions to research, and the key-fact set they come from when `--questions` is one.
fn read_questions(args: &EvalArgs) -> anyhow::Result<(Vec<String>, Option<Vec<KeyFactQuestion>>)> {
    let text = std::fs::read_to_string(&args.questions)
        .with_context(|| format!("cannot read {}", args.questions.display()))?;
    let key_facts = if args
        .questions
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        let set = parse_key_facts(&text)
            .with_context(|| format!("{} is not a valid key-fact set", args.questions.display()))?;
        check_pages(&set, &args.corpus)?;
        Some(set)
    } else {
        None
    };
    let questions: Vec<String> = match &key_facts {
        Some(set) => set.iter().map(|q| q.question.clone()).collect(),
        None => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
    };
    if questions.is_empty() {
        bail!("{} has no question", args.questions.display());
    }
    if questions.len() > MAX_QUESTIONS {
        bail!(
            "{} has more than {MAX_QUESTIONS} questions",
            args.questions.display()
        );
    }
    Ok((questions, key_facts))
}

/// One question researched to its end and measured.
async fn run_one(
    research: &fathom_research::Research,
    store: &fathom_store::SqlStore,
    q: &str,
    settings: &Value,
    root_url: &str,
    expected: Option<&KeyFactQuestion>,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    let cpu_before = process_cpu_ms();
    let run = research.start(q, Some(settings.clone())).await?;
    let status = research.engine.drive_run(&run.id).await?;
    let elapsed_ms = started.elapsed().as_millis();
    let cpu_ms = process_cpu_ms() - cpu_before;
    let record = store
        .get_run(&run.id)
        .await?
        .ok_or_else(|| anyhow!("run {} vanished", run.id))?;
    let state: ResearchState = serde_json::from_value(record.state.clone())?;
    let mut docs: Vec<ParsedDoc> = Vec::new();
    for a in state.artifacts.iter().filter(|a| a.kind == "parsed") {
        if let Some(art) = store.get_artifact(&a.file_id).await? {
            docs.push(serde_json::from_slice(&art.bytes)?);
        }
    }
    let read: Vec<String> = state
        .sources
        .iter()
        .filter(|s| s.status == "read")
        .map(|s| s.url.strip_prefix(root_url).unwrap_or(&s.url).to_string())
        .collect();
    Ok(Row {
        question: q.to_string(),
        ok: match status {
            RunStatus::Completed => Ok(()),
            other => Err(format!(
                "{}: {}",
                other.as_str(),
                record.error.unwrap_or_default()
            )),
        },
        check: check_citations(&state.report, &docs),
        sources_cited: state.report.sources.len(),
        sources_read: state.sources.iter().filter(|s| s.status == "read").count(),
        elapsed_ms,
        cpu_ms,
        tokens: state.tokens_used,
        cited: state
            .report
            .sources
            .iter()
            .map(|s| s.url.strip_prefix(root_url).unwrap_or(&s.url).to_string())
            .collect(),
        expected_page_read: expected.is_some_and(|e| e.pages.iter().any(|p| read.contains(p))),
        read,
        facts: expected.map(|e| check_key_facts(&state.report, e)),
        route: state
            .route
            .as_ref()
            .map(|r| (r.mode.as_str().to_string(), r.reason.clone())),
        report_markdown: state.report_markdown.clone(),
    })
}

/// The figures over every run.
struct Totals {
    citations: CitationCheck,
    failed: usize,
    elapsed_ms: u128,
    cpu_ms: f64,
    tokens: u64,
    facts: FactTotals,
    /// Questions whose run read one of the pages their key facts stand on.
    pages_read: usize,
}

impl Totals {
    fn of(rows: &[Row]) -> Totals {
        let mut citations = CitationCheck::default();
        for r in rows {
            citations.add(r.check);
        }
        let mut facts = FactTotals::default();
        for f in rows.iter().filter_map(|r| r.facts.as_ref()) {
            facts.add(f);
        }
        Totals {
            citations,
            failed: rows.iter().filter(|r| r.ok.is_err()).count(),
            elapsed_ms: rows.iter().map(|r| r.elapsed_ms).sum(),
            cpu_ms: rows.iter().map(|r| r.cpu_ms).sum(),
            tokens: rows.iter().map(|r| r.tokens).sum(),
            facts,
            pages_read: rows.iter().filter(|r| r.expected_page_read).count(),
        }
    }
}

/// `--json`: every run's figures and report, and the totals.
fn print_json(
    mode: &str,
    rows: &[Row],
    t: &Totals,
    key_facts: Option<&[KeyFactQuestion]>,
) -> anyhow::Result<()> {
    let per: Vec<Value> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = json!({"question": r.question, "error": r.ok.as_ref().err(),
                   "citations": r.check.markers, "fabricated": r.check.fabricated,
                   "fabricated_rate": r.check.fabricated_rate(),
                   "cited_sentences": r.check.cited_sentences, "supported": r.check.supported,
                   "claim_sentences": r.check.claim_sentences,
                   "precision": r.check.precision(), "recall": r.check.recall(),
                   "sources_cited": r.sources_cited,
                   "sources_read": r.sources_read, "elapsed_ms": r.elapsed_ms,
                   "cpu_ms": r.cpu_ms, "tokens": r.tokens,
                   "route": r.route.as_ref().map(|(mode, why)| json!({"mode": mode, "reason": why})),
                   "report_markdown": r.report_markdown});
            if let (Some(f), Some(set)) = (&r.facts, key_facts) {
                row["key_facts"] = fact_json(f, &set[i]);
                row["key_facts"]["expected_page_read"] = json!(r.expected_page_read);
                row["pages_cited"] = json!(r.cited);
                row["pages_read"] = json!(r.read);
            }
            row
        })
        .collect();
    let c = &t.citations;
    let mut out = json!({"mode": mode, "questions": per, "overall": {
        "runs": rows.len(), "failed": t.failed, "citations": c.markers,
        "fabricated": c.fabricated, "fabricated_rate": c.fabricated_rate(),
        "cited_sentences": c.cited_sentences, "supported": c.supported,
        "claim_sentences": c.claim_sentences,
        "precision": c.precision(), "recall": c.recall(),
        "elapsed_ms": t.elapsed_ms, "cpu_ms": t.cpu_ms, "tokens": t.tokens}});
    if key_facts.is_some() {
        let f = &t.facts;
        out["overall"]["key_facts"] = json!({
            "questions": f.questions, "expected": f.expected,
            "stated": f.stated, "recall": f.recall(),
            "right_page": f.right_page, "expected_page_read": t.pages_read});
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// A paragraph per run, then the totals.
fn print_text(mode: &str, rows: &[Row], t: &Totals, key_facts: Option<&[KeyFactQuestion]>) {
    println!("mode: {mode}");
    for (i, r) in rows.iter().enumerate() {
        println!(
            "{}\n  {}citations {}, fabricated {} ({:.1}%), {}, sources {} cited of {} read, {:.1} s ({:.0} ms CPU), {} tokens",
            r.question,
            match &r.ok {
                Ok(()) => String::new(),
                Err(e) => format!("FAILED {e}; "),
            },
            r.check.markers,
            r.check.fabricated,
            100.0 * r.check.fabricated_rate(),
            precision_recall(&r.check),
            r.sources_cited,
            r.sources_read,
            r.elapsed_ms as f64 / 1000.0,
            r.cpu_ms,
            r.tokens
        );
        if let (Some(f), Some(set)) = (&r.facts, key_facts) {
            println!("  {}", fact_line(f, &set[i], &r.cited));
        }
    }
    let c = &t.citations;
    println!(
        "overall: {} runs ({} failed), citations {}, fabricated {} ({:.1}%), {}, {:.1} s ({:.0} ms CPU), {} tokens",
        rows.len(),
        t.failed,
        c.markers,
        c.fabricated,
        100.0 * c.fabricated_rate(),
        precision_recall(c),
        t.elapsed_ms as f64 / 1000.0,
        t.cpu_ms,
        t.tokens
    );
    if key_facts.is_some() {
        let f = &t.facts;
        println!(
            "key facts: {}/{} ({:.0}%), right page: {}/{} questions, expected page read: {}/{}",
            f.stated,
            f.expected,
            100.0 * f.recall(),
            f.right_page,
            f.questions,
            t.pages_read,
            f.questions
        );
    }
}

/// User + system CPU time of this process so far, every thread counted, in ms.
fn process_cpu_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: getrusage writes only into `u`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// "precision 4/9 (44%), recall 4/10 (40%)": the counts behind each ratio, so a reader sees
/// how many sentences it rests on.
fn precision_recall(c: &CitationCheck) -> String {
    format!(
        "precision {}/{} ({:.0}%), recall {}/{} ({:.0}%)",
        c.supported,
        c.cited_sentences,
        100.0 * c.precision(),
        c.supported,
        c.claim_sentences,
        100.0 * c.recall()
    )
}

/// Every expected page must be a file of the corpus, or the right page could never be cited.
fn check_pages(set: &[KeyFactQuestion], corpus: &Path) -> anyhow::Result<()> {
    for (i, q) in set.iter().enumerate() {
        if let Some(p) = q.pages.iter().find(|p| !corpus.join(p).is_file()) {
            bail!(
                "entry {} (question \"{}\"): page {p} is not a file of the corpus {}",
                i + 1,
                q.question,
                corpus.display()
            );
        }
    }
    Ok(())
}

/// "key facts 2/3 (67%), right page: yes; missed: [a | b]": the facts missed with their
/// phrases, and the pages cited when none of the expected ones is.
fn fact_line(f: &FactCheck, q: &KeyFactQuestion, cited: &[String]) -> String {
    let mut line = format!(
        "key facts {}/{} ({:.0}%), right page: {}",
        f.stated(),
        f.expected(),
        100.0 * f.recall(),
        if f.right_page { "yes" } else { "no" }
    );
    if !f.right_page {
        line.push_str(&format!(
            " (expected {}; cited {})",
            q.pages.join(", "),
            if cited.is_empty() {
                "nothing".to_string()
            } else {
                cited.join(", ")
            }
        ));
    }
    let missed: Vec<String> = f
        .missed()
        .into_iter()
        .map(|i| format!("[{}]", q.facts[i].join(" | ")))
        .collect();
    if !missed.is_empty() {
        line.push_str(&format!("; missed: {}", missed.join(" ")));
    }
    line
}

fn fact_json(f: &FactCheck, q: &KeyFactQuestion) -> Value {
    json!({
        "expected": f.expected(), "stated": f.stated(), "recall": f.recall(),
        "right_page": f.right_page, "pages": q.pages,
        "facts": q.facts.iter().zip(&f.found)
            .map(|(alts, found)| json!({"phrases": alts, "sentence": found}))
            .collect::<Vec<_>>(),
    })
}
