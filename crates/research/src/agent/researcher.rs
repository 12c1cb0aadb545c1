//! Phase B with a model: research steps. Each step runs up to `max_parallel_researchers`
//! researchers at once, each a tool-calling loop over `web_search` and `fetch_url` that ends
//! with fact-dense findings tied to the URLs they came from; then a reflection decides to
//! continue with the next tasks, adjust the remaining ones (completed work is kept), or
//! complete. The number of steps is bounded by the depth setting; the token budget and the
//! deadline stop research early, and the report then says it was cut short.

use fathom_engine::{Envelope, StepError};
use fathom_llm::{ChatRequest, Message, ResponseFormat, ToolSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Models, schema_of, turn};
use crate::events::{AgentInput, ChatMessage, ParsedRef};
use crate::planner::Plan;
use crate::settings::Settings;
use crate::state::{Finding, Gathered, RunCtx};
use crate::tools::Invocation;
use crate::tools::Tools;

#[derive(Debug, Deserialize, JsonSchema)]
struct WebSearchArgs {
    /// What to search for.
    query: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct FetchUrlArgs {
    /// The http(s) URL of a search result to read.
    url: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Findings {
    findings: Vec<Finding>,
}

/// The reflection after a research step.
#[derive(Debug, Deserialize, JsonSchema)]
struct Reflection {
    /// `continue` with the remaining tasks, `adjust` them, or `complete` research.
    decision: String,
    /// With `adjust`: the tasks still to research (replacing the remaining ones).
    tasks: Vec<String>,
    /// Why, in one sentence.
    reason: String,
}

/// Turns one researcher may take before it must report.
const MAX_TURNS: usize = 6;
/// Tool calls of one turn that are run; more are answered with a refusal.
const MAX_CALLS_PER_TURN: usize = 4;
/// Text of a fetched document handed to the model.
const EXCERPT_CHARS: usize = 6000;
/// Share of the token budget after which no new research starts.
const BUDGET_SHARE: f64 = 0.8;

const RESEARCHER: &str = "You are a researcher. Research the task you are given with the \
tools: search with `web_search`, then read the most promising results with `fetch_url`. Read \
at least one source before answering and never state what you did not read. When you have \
enough, answer without calling a tool, with JSON only: {\"findings\": [{\"fact\": \"...\", \
\"url\": \"...\"}]}: specific, self-contained facts (keep numbers, names and dates), each with \
the URL of the document you read it in.";

const REFLECT: &str = "You review research in progress. Given the question, the tasks done \
and their findings, and the tasks left, decide: `continue` (the tasks left are right), \
`adjust` (give in `tasks` the tasks that should be researched next instead; completed work \
is kept), or `complete` (the findings answer the question well enough). Answer with JSON only.";

fn tool_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "web_search".into(),
            description: "Search the web; returns titles, URLs and snippets.".into(),
            parameters: schema_of::<WebSearchArgs>(),
        },
        ToolSpec {
            name: "fetch_url".into(),
            description: "Read a document found by web_search; returns its main text.".into(),
            parameters: schema_of::<FetchUrlArgs>(),
        },
    ]
}

fn over_budget(ctx: &RunCtx, settings: &Settings) -> Option<String> {
    let used = ctx.read_state(|s| s.tokens_used);
    let limit = (settings.token_budget as f64 * BUDGET_SHARE) as u64;
    (used >= limit).then(|| {
        format!(
            "the token budget was nearly spent ({used} of {} tokens)",
            settings.token_budget
        )
    })
}

/// Runs the research steps for an approved plan.
pub async fn research(
    ctx: &RunCtx,
    tools: &Tools,
    models: &Models,
    plan: &Plan,
    settings: &Settings,
    wrap_up: impl Fn() -> bool,
) -> Result<Gathered, StepError> {
    let mut gathered = Gathered::default();
    let mut pending: Vec<String> = plan.queries.clone();
    let parallel = settings.max_parallel_researchers.clamp(1, 8);
    for step in 1..=settings.depth.max_steps() {
        if pending.is_empty() {
            break;
        }
        if let Some(why) = over_budget(ctx, settings) {
            gathered.cut_short = Some(why);
            break;
        }
        if wrap_up() {
            gathered.cut_short = Some("the time budget was nearly spent".into());
            break;
        }
        // The bound on parallel researchers: one batch at a time, at most `parallel` in it.
        let batch: Vec<String> = pending.drain(..pending.len().min(parallel)).collect();
        let runs = batch
            .iter()
            .enumerate()
            .map(|(i, task)| researcher(ctx, tools, models, plan, settings, step, i + 1, task));
        for (task, outcome) in batch.iter().zip(futures_util::future::join_all(runs).await) {
            let (findings, read) = outcome?;
            gathered.done.push(task.clone());
            gathered.findings.extend(findings);
            for r in read {
                if !gathered.read.iter().any(|x| x.url == r.url) {
                    gathered.read.push(r);
                }
            }
        }
        if step == settings.depth.max_steps() {
            if !pending.is_empty() {
                gathered.cut_short =
                    Some(format!("the depth setting allows {step} research steps"));
            }
            break;
        }
        match reflect(ctx, models, plan, &gathered, &pending, step).await? {
            Some(r) if r.decision == "complete" => break,
            Some(r) if r.decision == "adjust" => {
                pending = r
                    .tasks
                    .into_iter()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty() && !gathered.done.contains(t))
                    .take(20)
                    .collect();
            }
            // `continue`, or a reflection that failed: go on with the plan.
            _ => {}
        }
    }
    Ok(gathered)
}

async fn reflect(
    ctx: &RunCtx,
    models: &Models,
    plan: &Plan,
    gathered: &Gathered,
    pending: &[String],
    step: usize,
) -> Result<Option<Reflection>, StepError> {
    let mut brief = format!("Question: {}\n\nTasks done:\n", plan.question);
    for t in &gathered.done {
        brief.push_str(&format!("- {t}\n"));
    }
    brief.push_str("\nFindings:\n");
    for f in gathered.findings.iter().take(60) {
        brief.push_str(&format!("- {} ({})\n", f.fact, f.url));
    }
    brief.push_str("\nTasks left:\n");
    for t in pending {
        brief.push_str(&format!("- {t}\n"));
    }
    let request = ChatRequest {
        messages: vec![Message::system(REFLECT), Message::user(brief)],
        response_format: Some(ResponseFormat {
            name: "reflection".into(),
            schema: schema_of::<Reflection>(),
        }),
        temperature: Some(0.0),
        ..Default::default()
    };
    let key = format!("llm:reflect:{step}");
    let Ok(t) = turn(
        ctx,
        &key,
        "reflection",
        &models.researcher,
        request,
        Vec::new(),
    )
    .await?
    else {
        return Ok(None);
    };
    Ok(t.response
        .json()
        .and_then(|v| serde_json::from_value::<Reflection>(v).ok())
        .filter(|r| matches!(r.decision.as_str(), "continue" | "adjust" | "complete"))
        .inspect(|r| tracing::info!(decision = %r.decision, reason = %r.reason, "reflection")))
}

/// One researcher: a tool-calling loop on `task`, ending with its findings and the documents
/// it read. Its model calls and tool calls are journaled under keys of its own, so parallel
/// researchers replay exactly after a crash.
#[allow(clippy::too_many_arguments)]
async fn researcher(
    ctx: &RunCtx,
    tools: &Tools,
    models: &Models,
    plan: &Plan,
    settings: &Settings,
    step: usize,
    n: usize,
    task: &str,
) -> Result<(Vec<Finding>, Vec<ParsedRef>), StepError> {
    let name = format!("researcher-{n}");
    let ask = format!("Research question: {}\nYour task: {task}", plan.question);
    let mut messages = vec![Message::system(RESEARCHER), Message::user(ask.clone())];
    let mut read: Vec<ParsedRef> = Vec::new();
    for turn_no in 1..=MAX_TURNS {
        let last = turn_no == MAX_TURNS || over_budget(ctx, settings).is_some();
        if last {
            messages.push(Message::user(
                "Stop researching now and give your findings as JSON.",
            ));
        }
        let before = if turn_no == 1 {
            vec![Envelope::of(&AgentInput {
                input: vec![ChatMessage::new("user", ask.clone())],
                current_agent_name: name.clone(),
            })?]
        } else {
            Vec::new()
        };
        let request = ChatRequest {
            messages: messages.clone(),
            tools: if last { Vec::new() } else { tool_specs() },
            temperature: Some(0.2),
            ..Default::default()
        };
        let key = format!("llm:research:{step}:{n}:{turn_no}");
        let answer = match turn(ctx, &key, &name, &models.researcher, request, before).await? {
            Ok(t) => t.response,
            Err(e) => {
                tracing::warn!(researcher = %name, error = %e, "researcher stopped");
                return Ok((Vec::new(), read));
            }
        };
        if answer.tool_calls.is_empty() {
            return Ok((findings_of(&answer.content, &read), read));
        }
        messages.push(Message::assistant(
            answer.content.clone(),
            answer.tool_calls.clone(),
        ));
        for (k, call) in answer.tool_calls.iter().enumerate() {
            let tool_id = format!("{}-s{step}r{n}t{turn_no}c{k}", call.name);
            let reply = if k >= MAX_CALLS_PER_TURN {
                format!("Not run: at most {MAX_CALLS_PER_TURN} tool calls per turn.")
            } else {
                match call.kwargs() {
                    Err(e) => e,
                    Ok(args) => {
                        run_tool(ctx, tools, settings, &call.name, tool_id, args, &mut read).await?
                    }
                }
            };
            messages.push(Message::tool(call.id.clone(), reply));
        }
    }
    Ok((Vec::new(), read))
}

/// Runs one tool call through the journal; returns what the model is told.
async fn run_tool(
    ctx: &RunCtx,
    tools: &Tools,
    settings: &Settings,
    name: &str,
    tool_id: String,
    args: Value,
    read: &mut Vec<ParsedRef>,
) -> Result<String, StepError> {
    match name {
        "web_search" => {
            let Ok(a) = serde_json::from_value::<WebSearchArgs>(args.clone()) else {
                return Ok("web_search needs {\"query\": \"...\"}".into());
            };
            let (search, k) = (tools.search.clone(), settings.max_search_results_per_query);
            let hits = Invocation::new("web_search", tool_id, json!({"query": a.query}))
                .call(
                    ctx,
                    || async move { search.search(&a.query, k).await },
                    |hits: &Vec<fathom_corpus::SearchHit>| format!("{} results", hits.len()),
                    |hits| json!({ "hits": hits }),
                )
                .await?;
            Ok(match hits {
                Ok(hits) if hits.is_empty() => "No results.".into(),
                Ok(hits) => hits
                    .iter()
                    .map(|h| format!("- {} <{}>\n  {}", h.title, h.url, h.snippet))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => format!("Search failed: {e}"),
            })
        }
        "fetch_url" => {
            let Ok(a) = serde_json::from_value::<FetchUrlArgs>(args) else {
                return Ok("fetch_url needs {\"url\": \"...\"}".into());
            };
            let tools = tools.clone();
            let url = a.url.clone();
            let outcome = Invocation::new("fetch_url", tool_id, json!({"url": a.url}))
                .call(
                    ctx,
                    || async move {
                        // Fetched and parsed in one call: the bytes in hand are parsed,
                        // not read back from storage.
                        let (raw, bytes) = tools.fetch_raw(&url).await?;
                        let (summary, doc) = tools.parse_bytes(&raw, bytes).await?;
                        Ok(ReadDoc {
                            url: raw.url,
                            title: summary.title,
                            file_id: summary.file_id,
                            excerpt: excerpt(&doc),
                        })
                    },
                    |d: &ReadDoc| format!("Read \"{}\" ({})", d.title, d.url),
                    |d| json!({"url": d.url, "title": d.title, "file_id": d.file_id}),
                )
                .await?;
            Ok(match outcome {
                Ok(d) => {
                    if !read.iter().any(|r| r.url == d.url) {
                        read.push(ParsedRef {
                            url: d.url.clone(),
                            title: d.title.clone(),
                            file_id: d.file_id.clone(),
                        });
                    }
                    format!("# {}\nURL: {}\n\n{}", d.title, d.url, d.excerpt)
                }
                Err(e) => format!("Could not read it: {e}"),
            })
        }
        other => Ok(format!("There is no tool named {other}.")),
    }
}

/// A document as the researcher reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ReadDoc {
    url: String,
    title: String,
    /// The parsed document's artifact.
    file_id: String,
    excerpt: String,
}

fn excerpt(doc: &fathom_parse::ParsedDoc) -> String {
    let mut out = String::new();
    for b in &doc.blocks {
        if out.len() + b.text.len() > EXCERPT_CHARS {
            break;
        }
        out.push_str(&b.text);
        out.push_str("\n\n");
    }
    out
}

/// The findings in a researcher's final answer, keeping only those tied to a document it
/// read (a URL it never fetched cannot be cited).
fn findings_of(content: &str, read: &[ParsedRef]) -> Vec<Finding> {
    let parsed = fathom_llm::parse_loose_json(content)
        .and_then(|v| serde_json::from_value::<Findings>(v).ok())
        .map(|f| f.findings)
        .unwrap_or_default();
    parsed
        .into_iter()
        .filter(|f| !f.fact.trim().is_empty())
        .filter_map(|mut f| {
            let matched = read.iter().find(|r| {
                crate::tools::web::canonical_url(&r.url) == crate::tools::web::canonical_url(&f.url)
            })?;
            f.url = matched.url.clone();
            Some(f)
        })
        .take(50)
        .collect()
}
