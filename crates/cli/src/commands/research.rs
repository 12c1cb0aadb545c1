//! `fathom research` and `fathom resume`: research runs driven in this process, with the plan
//! shown at the gate and the report written to a file.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use fathom_corpus::Corpus;
use fathom_data::CollectionScope;
use fathom_engine::new_id;
use fathom_engine::store::{RunStatus, RunStore};
use fathom_research::checks::{check_delivery, check_parent};
use fathom_research::{
    ApproveEvent, Plan, Research, ResearchResult, Sessions, check_sources, check_start,
};
use fathom_store::SqlStore;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::app::App;
use crate::progress::{follow, say};

struct Opened {
    research: Research,
    store: Arc<SqlStore>,
}

#[derive(clap::Args)]
pub struct ResearchArgs {
    /// The question to research.
    question: String,
    /// Folder of HTML, Markdown, text, DOCX and PDF files to research in (for a follow-up,
    /// the session's own by default).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Ask the question as a follow-up of a completed session: its sources are read first,
    /// and only what they do not cover is searched.
    #[arg(long, value_name = "ID")]
    follow_up: Option<String>,
    /// Approve the plan without asking.
    #[arg(long, short)]
    yes: bool,
    /// Print the event stream as JSON lines on stdout.
    #[arg(long)]
    events: bool,
    /// Settings as a JSON object, e.g. '{"max_sources": 4}'.
    #[arg(long)]
    settings: Option<String>,
    /// One setting, e.g. --set max_sources=4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Where to write the report (default: .fathom/reports/<session>.md).
    #[arg(long, short)]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ResumeArgs {
    /// The session id `fathom research` printed.
    id: String,
    /// Corpus folder, if not the one the session started with.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Approve a waiting plan without asking.
    #[arg(long, short, conflicts_with = "reject")]
    yes: bool,
    /// Reject a waiting plan with this feedback, which re-plans.
    #[arg(long)]
    reject: Option<String>,
    #[arg(long)]
    events: bool,
    #[arg(long, short)]
    output: Option<PathBuf>,
}

/// Where the CLI remembers which corpus and report path a session uses, for `resume`.
fn cli_scope() -> CollectionScope {
    CollectionScope {
        deployment_name: "_fathom".into(),
        collection: "cli-sessions".into(),
    }
}

pub(crate) fn parse_settings(
    json_text: Option<&str>,
    pairs: &[String],
) -> anyhow::Result<Option<Value>> {
    let mut obj = match json_text {
        None => serde_json::Map::new(),
        Some(t) => match serde_json::from_str::<Value>(t) {
            Ok(Value::Object(o)) => o,
            Ok(other) => bail!("--settings must be a JSON object, not {other}"),
            Err(e) => bail!("--settings is not valid JSON: {e}"),
        },
    };
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("--set expects KEY=VALUE, got '{pair}'"))?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        obj.insert(k.trim().to_string(), value);
    }
    Ok((!obj.is_empty()).then_some(Value::Object(obj)))
}

fn build(
    app: &App,
    store: Arc<SqlStore>,
    corpus: Arc<Corpus>,
    run_id: &str,
) -> anyhow::Result<Opened> {
    // One owner id per session: a resumed session takes its run back from a dead process at
    // once instead of waiting for the lease to expire.
    let engine = app.engine_config(format!("cli-{run_id}"));
    Ok(Opened {
        research: app.research(store.clone(), corpus, engine)?,
        store,
    })
}

pub async fn research(app: &App, args: ResearchArgs) -> anyhow::Result<ExitCode> {
    let settings = parse_settings(args.settings.as_deref(), &args.set)?;
    // Checked before anything is opened or stored.
    let mut start = check_start(&app.config.research, &args.question, settings)?;
    start.follow_up_of = args.follow_up.clone();
    check_delivery(&app.config.research, &app.config.delivery, &start)?;
    check_sources(
        &app.config.research,
        &fathom_research::tools::kinds(&app.config.web),
        &start,
    )?;
    let store = app.connect().await?;
    let corpus_dir = match (&args.corpus, &args.follow_up) {
        (Some(dir), _) => dir.clone(),
        (None, Some(parent)) => recall(&store, parent)
            .await?
            .get("corpus")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| {
                anyhow!("session '{parent}' has no recorded corpus; pass --corpus DIR")
            })?,
        (None, None) => bail!("--corpus DIR is needed: the folder to research in"),
    };
    if let Some(parent) = &args.follow_up {
        check_parent(&Sessions::new(store.clone(), &app.config.research), parent).await?;
    }
    let corpus = app.open_corpus(&corpus_dir, args.events).await?;
    let run_id = new_id();
    let opened = build(app, store.clone(), corpus.clone(), &run_id)?;
    let run = opened
        .research
        .engine
        .start(
            fathom_research::DEEP_RESEARCH,
            serde_json::to_value(&start)?,
            fathom_engine::StartOptions {
                run_id: Some(run_id.clone()),
                timeout: None,
            },
        )
        .await?;
    remember(&store, &run.id, corpus.root(), args.output.as_deref()).await?;
    say(args.events, &format!("session {}", run.id));
    if args.yes {
        // Sent now, kept in the run's mailbox until the gate: the plan is approved as drafted.
        opened
            .research
            .decide(
                &run.id,
                ApproveEvent {
                    approved: true,
                    ..Default::default()
                },
                Some("cli-yes".into()),
            )
            .await?;
    }
    drive(
        &opened,
        &run.id,
        args.yes,
        args.events,
        output_path(args.output, &run.id),
    )
    .await
}

pub async fn resume(app: &App, args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let store = app.connect().await?;
    let run = store
        .get_run(&args.id)
        .await?
        .ok_or_else(|| anyhow!("no research session '{}'", args.id))?;
    if run.workflow != fathom_research::DEEP_RESEARCH {
        bail!(
            "'{}' is a {} run, not a research session",
            args.id,
            run.workflow
        );
    }
    let remembered = recall(&store, &args.id).await?;
    let corpus_dir = args
        .corpus
        .clone()
        .or_else(|| {
            remembered
                .get("corpus")
                .and_then(Value::as_str)
                .map(PathBuf::from)
        })
        .ok_or_else(|| {
            anyhow!(
                "session '{}' has no recorded corpus; pass --corpus DIR",
                args.id
            )
        })?;
    let output = args.output.clone().or_else(|| {
        remembered
            .get("output")
            .and_then(Value::as_str)
            .map(PathBuf::from)
    });
    let corpus = app.open_corpus(&corpus_dir, args.events).await?;
    let opened = build(app, store.clone(), corpus, &args.id)?;
    if run.status == RunStatus::Waiting {
        if args.yes {
            let d = ApproveEvent {
                approved: true,
                ..Default::default()
            };
            opened.research.decide(&args.id, d, None).await?;
        } else if let Some(feedback) = args.reject.clone() {
            let d = ApproveEvent {
                approved: false,
                feedback: Some(feedback),
                ..Default::default()
            };
            opened.research.decide(&args.id, d, None).await?;
        }
    }
    say(args.events, &format!("session {}", args.id));
    drive(
        &opened,
        &args.id,
        false,
        args.events,
        output_path(output, &args.id),
    )
    .await
}

fn output_path(given: Option<PathBuf>, id: &str) -> PathBuf {
    given.unwrap_or_else(|| PathBuf::from(format!(".fathom/reports/{id}.md")))
}

fn cli_records(store: &Arc<SqlStore>) -> Sessions {
    Sessions::in_scope(store.clone(), cli_scope())
}

async fn remember(
    store: &Arc<SqlStore>,
    id: &str,
    corpus: &Path,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let output = output.map(|p| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    });
    let record =
        json!({"research_id": id, "corpus": corpus.display().to_string(), "output": output});
    Ok(cli_records(store).put(id, record).await?)
}

async fn recall(store: &Arc<SqlStore>, id: &str) -> anyhow::Result<Value> {
    Ok(cli_records(store).find(id).await?.unwrap_or(Value::Null))
}

/// Drives the run here until it completes, fails, or waits for a decision nobody can give.
async fn drive(
    opened: &Opened,
    id: &str,
    auto_approve: bool,
    events: bool,
    output: PathBuf,
) -> anyhow::Result<ExitCode> {
    let stop = Arc::new(Notify::new());
    let follower = tokio::spawn(follow(
        opened.research.engine.clone(),
        id.to_string(),
        events,
        stop.clone(),
    ));
    let interactive = std::io::stdin().is_terminal() && !events;
    let outcome: anyhow::Result<(ExitCode, Option<String>)> = async {
        // Bounded by the decisions a person makes; each pass drives the run to its next stop.
        loop {
            let status = opened.research.engine.drive_run(id).await?;
            match status {
                RunStatus::Waiting => {
                    let decision = if auto_approve {
                        Some(ApproveEvent { approved: true, ..Default::default() })
                    } else if interactive {
                        ask(&opened.research, id).await?
                    } else {
                        None
                    };
                    match decision {
                        Some(d) => {
                            opened.research.decide(id, d, None).await?;
                        }
                        None => {
                            let plan = current_plan(&opened.research, id).await?;
                            eprint!("{}", render_plan(&plan));
                            let line = format!("waiting for approval: fathom resume {id} --yes (or --reject \"feedback\")");
                            return Ok((ExitCode::SUCCESS, Some(line)));
                        }
                    }
                }
                RunStatus::Completed => {
                    let run = opened.store.get_run(id).await?.ok_or_else(|| anyhow!("run vanished"))?;
                    let result: ResearchResult = run
                        .result
                        .as_ref()
                        .ok_or_else(|| anyhow!("completed run has no result"))?
                        .decode()?;
                    write_report(&output, &result.report_markdown)?;
                    let session = opened.research.sessions().get(id).await.ok();
                    let claims = session.as_ref().map_or(String::new(), |s| claims_summary(&s["claims"]));
                    let mut line = format!(
                        "report {} ({} sources cited{claims})",
                        output.display(),
                        result.sources.len()
                    );
                    if let Some(s) = &session {
                        line.push_str(&delivery_summary(&s["delivery"]));
                    }
                    return Ok((ExitCode::SUCCESS, Some(line)));
                }
                RunStatus::Failed | RunStatus::Cancelled => {
                    let run = opened.store.get_run(id).await?;
                    let why = run.and_then(|r| r.error).unwrap_or_else(|| status.as_str().to_string());
                    eprintln!("fathom: research {id} {}: {why}", status.as_str());
                    return Ok((ExitCode::FAILURE, None));
                }
                RunStatus::Running => {
                    // Leased by another live process: look again when it changes.
                    opened.research.engine.changed(id).await;
                }
            }
        }
    }
    .await;
    stop.notify_one();
    let _ = follower.await;
    let (code, line) = outcome?;
    if let Some(line) = line {
        say(events, &line);
    }
    Ok(code)
}

/// One line per delivery the run asked for: delivered, or failed and why (a failed delivery
/// does not fail the research).
fn delivery_summary(delivery: &Value) -> String {
    let mut out = String::new();
    for (channel, d) in delivery.as_object().into_iter().flatten() {
        let attempts = d["attempts"].as_u64().unwrap_or(0);
        let tries = if attempts == 1 { "attempt" } else { "attempts" };
        out.push_str(&format!(
            "\ndelivery {channel}: {} after {attempts} {tries}{}",
            d["status"].as_str().unwrap_or("?"),
            d["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(": {r}"))
        ));
    }
    out
}

/// What became of the cited sentences checked against their sources, for the last line.
fn claims_summary(claims: &serde_json::Value) -> String {
    let Some(claims) = claims.as_array().filter(|c| !c.is_empty()) else {
        return String::new();
    };
    let count = |o: &str| claims.iter().filter(|c| c["outcome"] == o).count();
    format!(
        "; {} sentences checked: {} held, {} cited to the source that supports them, {} rewritten from their source, {} removed",
        claims.len(),
        count("kept"),
        count("attributed"),
        count("rewritten"),
        count("removed")
    )
}

fn write_report(path: &Path, markdown: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, markdown)
        .with_context(|| format!("cannot write report {}", path.display()))
}

async fn current_plan(research: &Research, id: &str) -> anyhow::Result<Plan> {
    let session = research.sessions().get(id).await?;
    Ok(serde_json::from_value(session["plan"].clone())?)
}

pub(crate) fn render_plan(plan: &Plan) -> String {
    format!("\n{}\n", plan.to_text())
}

fn prompt(text: &str) -> anyhow::Result<Option<String>> {
    eprint!("{text}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    let n = std::io::stdin().lock().read_line(&mut line)?;
    Ok((n > 0).then(|| line.trim().to_string()))
}

/// Shows the plan and asks for a decision; None leaves the session waiting.
async fn ask(research: &Research, id: &str) -> anyhow::Result<Option<ApproveEvent>> {
    let plan = current_plan(research, id).await?;
    eprint!("{}", render_plan(&plan));
    for _ in 0..20 {
        let Some(choice) =
            prompt("[a]pprove, [e]dit, [r]eject with feedback, [q]uit and decide later: ")?
        else {
            return Ok(None);
        };
        match choice.to_lowercase().as_str() {
            "a" | "approve" | "y" | "yes" => {
                return Ok(Some(ApproveEvent {
                    approved: true,
                    ..Default::default()
                }));
            }
            "e" | "edit" => match edit_plan(&plan) {
                Ok(edited) => {
                    return Ok(Some(ApproveEvent {
                        approved: true,
                        plan: Some(edited),
                        ..Default::default()
                    }));
                }
                Err(e) => eprintln!("fathom: {e:#}"),
            },
            "r" | "reject" => {
                let feedback = prompt("Feedback for the next plan: ")?.filter(|s| !s.is_empty());
                let mut answers = Vec::new();
                for q in &plan.clarifying_questions {
                    if let Some(a) = prompt(&format!("{q} "))?.filter(|s| !s.is_empty()) {
                        answers.push(a);
                    }
                }
                return Ok(Some(ApproveEvent {
                    approved: false,
                    feedback,
                    answers: Some(answers),
                    ..Default::default()
                }));
            }
            "q" | "quit" => return Ok(None),
            _ => eprintln!("please answer a, e, r or q"),
        }
    }
    Ok(None)
}

/// Opens the plan in $EDITOR as two lists and reads it back.
fn edit_plan(plan: &Plan) -> anyhow::Result<Plan> {
    let mut text = String::from(
        "# Edit the plan, save and close. Lines starting with '- ' are entries; '#' lines are ignored.\n",
    );
    if !plan.query_sources.is_empty() {
        text.push_str(
            "# A query's [corpus, web] says where it searches: the local corpus, the web, or both.\n",
        );
    }
    text.push_str("Queries:\n");
    for q in &plan.queries {
        text.push_str(&format!("- {}\n", plan.query_line(q)));
    }
    text.push_str("Outline:\n");
    for o in &plan.outline {
        text.push_str(&format!("- {o}\n"));
    }
    let file = std::env::temp_dir().join(format!("fathom-plan-{}.txt", new_id()));
    std::fs::write(&file, text)?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&file)
        .status()
        .with_context(|| format!("cannot start editor '{editor}'"))?;
    let edited = std::fs::read_to_string(&file);
    let _ = std::fs::remove_file(&file);
    if !status.success() {
        bail!("editor '{editor}' exited with {status}");
    }
    let mut out = Plan {
        question: plan.question.clone(),
        ..Default::default()
    };
    let mut section = "";
    for line in edited?.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.eq_ignore_ascii_case("queries:") || line.eq_ignore_ascii_case("outline:") {
            section = if line.to_lowercase().starts_with('q') {
                "q"
            } else {
                "o"
            };
        } else if let Some(item) = line.strip_prefix("- ") {
            match section {
                "q" => {
                    let (query, kinds) =
                        Plan::parse_query_line(item).map_err(|e| anyhow!("edited plan: {e}"))?;
                    if let Some(kinds) = kinds {
                        out.query_sources.insert(query.clone(), kinds);
                    }
                    out.queries.push(query);
                }
                "o" => out.outline.push(item.trim().to_string()),
                _ => {}
            }
        }
    }
    out.validate().map_err(|e| anyhow!("edited plan: {e}"))?;
    Ok(out)
}
