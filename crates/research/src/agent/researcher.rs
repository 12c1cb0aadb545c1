//! Phase B with a model: research steps. Each step runs up to `max_parallel_researchers`
//! researchers at once, each a tool-calling loop over `web_search` and `fetch_url` that ends
//! with fact-dense findings tied to the URLs they came from; then a reflection decides to
//! continue with the next tasks, adjust the remaining ones (completed work is kept), or
//! complete. The number of steps is bounded by the depth setting; the token budget and the
//! deadline stop research early, and the report then says it was cut short. Before the
//! first step, the question itself and the built-in planner's queries are searched beside
//! the model's, so the pages that hold the answer are read even when its queries miss them.

use fathom_engine::{Envelope, StepError};
use fathom_llm::{ChatRequest, Message, ResponseFormat, ToolSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::findings::{ReadDoc, findings_of, from_passages};
use super::{Models, ask, output_tokens, schema_of};
use crate::events::{AgentInput, ChatMessage};
use crate::parsed::ParsedRef;
use crate::rules::plan::Plan;
use crate::settings::Settings;
use crate::state::{Finding, Gathered, RunCtx};
use crate::tools::web::canonical_url;
use crate::tools::{ExternalTool, Found, Invocation, Tools};
use fathom_corpus::SearchHit;
use fathom_evidence::{best_passages, cut, opening};

#[derive(Debug, Deserialize, JsonSchema)]
struct WebSearchArgs {
    /// What to search for.
    #[schemars(length(max = 200))]
    query: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct FetchUrlArgs {
    /// The http(s) URL of a search result to read.
    #[schemars(length(max = 2000))]
    url: String,
}

/// The reflection after a research step.
#[derive(Debug, Deserialize, JsonSchema)]
struct Reflection {
    /// `continue` with the remaining tasks, `adjust` them, or `complete` research.
    #[schemars(regex(pattern = "^(continue|adjust|complete)$"))]
    decision: String,
    /// With `adjust`: the tasks still to research (replacing the remaining ones).
    #[schemars(length(max = 5), inner(length(max = 200)))]
    tasks: Vec<String>,
    /// Why, in one sentence.
    #[schemars(length(max = 300))]
    reason: String,
}

/// Turns one researcher may take before it must report.
const MAX_TURNS: usize = 6;
/// Tool calls of one turn that are run; more are answered with a refusal.
const MAX_CALLS_PER_TURN: usize = 4;
/// Search results a search reads itself, and the passages shown of each.
const READ_PER_SEARCH: usize = 3;
const HIT_PASSAGES: usize = 2;
/// Passages shown of a page the researcher reads for its task.
const TASK_PASSAGES: usize = 4;
/// Characters of one passage: prompts stay short (a small local model reads about 20
/// tokens a second).
const PASSAGE_CHARS: usize = 450;
/// Characters a tool result keeps when a conversation must be shortened.
const SHORT_RESULT: usize = 300;
/// Findings taken from the passages read when a researcher reported none.
const FALLBACK_FINDINGS: usize = 6;
/// Share of the token budget after which no new research starts.
const BUDGET_SHARE: f64 = 0.8;

const RESEARCHER: &str = "You are a researcher. You are shown what a search for your task \
found. Use the tools for more: `web_search` shows the best passages of its top results; \
`fetch_url` reads more of a result. State only what you read. When you have enough, answer \
without a tool call, with JSON only: {\"findings\": [{\"fact\": \
\"...\", \"url\": \"...\"}]}: up to 8 specific, self-contained facts (keep numbers, names and \
dates), each with the URL it was read at.";

const REFLECT: &str = "You review research in progress. Given the question, the tasks done \
and their findings, and the tasks left, decide: `continue` (the tasks left are right), \
`adjust` (give in `tasks` the tasks that should be researched next instead; completed work \
is kept), or `complete` (the findings answer the question well enough). Answer with JSON only.";

/// The tools a researcher is offered: its own, and those from elsewhere (MCP servers').
fn tool_specs(extra: &[ExternalTool]) -> Vec<ToolSpec> {
    let own = vec![
        ToolSpec {
            name: "web_search".into(),
            description: "Search; returns titles, URLs and the best passages of the top results."
                .into(),
            parameters: schema_of::<WebSearchArgs>(),
        },
        ToolSpec {
            name: "fetch_url".into(),
            description: "Read a document found by web_search; returns its passages on your task."
                .into(),
            parameters: schema_of::<FetchUrlArgs>(),
        },
    ];
    own.into_iter()
        .chain(extra.iter().map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        }))
        .collect()
}

/// Told to a researcher that has tools from elsewhere besides its own.
const EXTRA_TOOLS: &str = "Other tools are offered too (the team's own services): use one when it fits your task better than a web search. State only what a tool or a page told you.";

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

/// Queries searched besides the model's, at most: the question itself, then the built-in
/// planner's.
const REACH_QUERIES: usize = 3;
/// Findings taken from what those searches read.
const REACH_FINDINGS: usize = 6;

/// Runs the research steps for an approved plan. With `reach`, the question itself and the
/// built-in planner's queries for it are searched first, beside the model's (see
/// [`reach_the_pages`]).
pub async fn research(
    ctx: &RunCtx,
    tools: &Tools,
    models: &Models,
    plan: &Plan,
    settings: &Settings,
    reach: bool,
    wrap_up: impl Fn() -> bool,
) -> Result<Gathered, StepError> {
    let mut gathered = Gathered::default();
    // The tools of the configured MCP servers, asked for once the plan is approved; what
    // could not be offered is noted on the run, which goes on without it.
    let extra = match &tools.external {
        Some(external) => {
            let (offered, notes) = external.list().await;
            gathered.notes.extend(notes);
            offered
        }
        None => Vec::new(),
    };
    // Searched first (the deadline may stop the steps), kept after the researchers' work.
    let reached = if reach && !decided(ctx, "decide:late:reach", wrap_up()).await? {
        reach_the_pages(ctx, tools, plan, settings).await?
    } else {
        Gathered::default()
    };
    let mut pending: Vec<String> = plan.queries.clone();
    let parallel = settings.max_parallel_researchers.clamp(1, 8);
    for step in 1..=settings.depth.max_steps() {
        if pending.is_empty() {
            break;
        }
        let why = over_budget(ctx, settings)
            .or_else(|| wrap_up().then(|| "the time budget was nearly spent".to_string()));
        if let Some(why) = decided(ctx, &format!("decide:stop:s{step}"), why).await? {
            gathered.cut_short = Some(why);
            break;
        }
        // The bound on parallel researchers: one batch at a time, at most `parallel` in it.
        let batch: Vec<String> = pending.drain(..pending.len().min(parallel)).collect();
        let runs = batch.iter().enumerate().map(|(i, task)| {
            researcher(
                ctx,
                tools,
                &extra,
                models,
                plan,
                settings,
                step,
                i + 1,
                task,
                &wrap_up,
            )
        });
        for (task, outcome) in batch.iter().zip(futures_util::future::join_all(runs).await) {
            let ResearcherReport {
                findings,
                read,
                notes,
            } = outcome?;
            gathered.done.push(task.clone());
            gathered.findings.extend(findings);
            gathered.notes.extend(notes);
            for r in read {
                if !gathered.read.iter().any(|x| x.url == r.url) {
                    gathered.read.push(r);
                }
            }
        }
        if step == settings.depth.max_steps() {
            // The depth's steps are done: that is the research asked for, not research cut
            // short. What the plan held beyond them is noted on the run.
            if !pending.is_empty() {
                let depth = serde_json::to_value(settings.depth)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                gathered.notes.push(format!(
                    "{} planned tasks were left for a deeper run: {depth} depth allows {step} \
                     research steps",
                    pending.len(),
                ));
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
    gathered.findings.extend(reached.findings);
    for r in reached.read {
        if !gathered.read.iter().any(|x| x.url == r.url) {
            gathered.read.push(r);
        }
    }
    Ok(gathered)
}

/// The pages that hold the answer, reached even when the model's queries miss them: the
/// question itself and the queries the built-in planner makes of it (from the words of the
/// question and of the local sources' first look) that the plan does not ask already, at
/// most [`REACH_QUERIES`], each searched and its top results read like a researcher's
/// search, journaled under `web_search-reach{k}`. The best sentences read are findings
/// beside the researchers', and the pages read are sources after theirs.
async fn reach_the_pages(
    ctx: &RunCtx,
    tools: &Tools,
    plan: &Plan,
    settings: &Settings,
) -> Result<Gathered, StepError> {
    let offline = crate::rules::plan::decompose_query(
        &plan.question,
        &[],
        &[],
        &plan.background,
        &super::language(ctx),
    );
    // A query is asked already when it has the same words (case and punctuation aside).
    let key = |q: &str| fathom_parse::text::words(q).join(" ");
    let mut asked: Vec<String> = plan.queries.iter().map(|q| key(q)).collect();
    let mut queries: Vec<String> = Vec::new();
    for q in std::iter::once(plan.question.clone()).chain(offline.queries) {
        let q = q.split_whitespace().collect::<Vec<_>>().join(" ");
        let k = key(&q);
        if k.is_empty() || asked.contains(&k) {
            continue;
        }
        asked.push(k);
        queries.push(q);
        if queries.len() == REACH_QUERIES {
            break;
        }
    }
    let mut reader = Reader {
        ctx,
        tools,
        settings,
        plan,
        task: &plan.question,
        extra: &[],
        read: Vec::new(),
        searched: Vec::new(),
        tried: Vec::new(),
    };
    for (k, q) in queries.iter().enumerate() {
        reader
            .search(&format!("web_search-reach{}", k + 1), q)
            .await?;
    }
    if !queries.is_empty() {
        tracing::info!(queries = ?queries, read = reader.read.len(), "searched beside the model's queries");
    }
    Ok(Gathered {
        findings: from_passages(&reader.read, REACH_FINDINGS),
        read: reader
            .read
            .iter()
            .map(|d| ParsedRef {
                url: d.url.clone(),
                title: d.title.clone(),
                file_id: d.file_id.clone(),
            })
            .collect(),
        ..Default::default()
    })
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
    for f in gathered.findings.iter().take(30) {
        brief.push_str(&format!("- {}\n", cut(&f.fact, 200)));
    }
    brief.push_str("\nTasks left:\n");
    for t in pending {
        brief.push_str(&format!("- {t}\n"));
    }
    let request = ChatRequest {
        messages: vec![super::system(ctx, REFLECT), Message::user(brief)],
        response_format: Some(ResponseFormat {
            name: "reflection".into(),
            schema: schema_of::<Reflection>(),
        }),
        temperature: Some(0.0),
        max_tokens: Some(output_tokens::REFLECT),
        ..Default::default()
    };
    let key = format!("llm:reflect:{step}");
    let Ok(t) = ask(
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

/// What one researcher brings back.
struct ResearcherReport {
    findings: Vec<Finding>,
    read: Vec<ParsedRef>,
    notes: Vec<String>,
}

/// One researcher: a tool-calling loop on `task`, ending with its findings and the documents
/// it read. Its model calls and tool calls are journaled under keys of its own, so parallel
/// researchers replay exactly after a crash. Every search reads its top results itself and
/// shows the model their best passages; a researcher that read nothing has its task searched
/// and read for it, and one that reported nothing usable gets the best of what it read.
#[allow(clippy::too_many_arguments)]
async fn researcher(
    ctx: &RunCtx,
    tools: &Tools,
    extra: &[ExternalTool],
    models: &Models,
    plan: &Plan,
    settings: &Settings,
    step: usize,
    n: usize,
    task: &str,
    wrap_up: &impl Fn() -> bool,
) -> Result<ResearcherReport, StepError> {
    let name = format!("researcher-{n}");
    let ask_text = format!("Research question: {}\nYour task: {task}", plan.question);
    let mut reader = Reader {
        ctx,
        tools,
        settings,
        plan,
        task,
        extra,
        read: Vec::new(),
        searched: Vec::new(),
        tried: Vec::new(),
    };
    // The task is searched and its top results read before the model's first turn, as
    // GPT-Researcher does: a model that answers at once answers from what was read, and a
    // capable one starts from there.
    let mut first = ask_text.clone();
    let mut announce = vec![Envelope::of(&AgentInput {
        input: vec![ChatMessage::new("user", ask_text.clone())],
        current_agent_name: name.clone(),
    })?];
    if !decided(ctx, &format!("decide:late:s{step}r{n}t0"), wrap_up()).await? {
        let id = format!("web_search-s{step}r{n}t0");
        let found = reader
            .search_after(&id, task, std::mem::take(&mut announce))
            .await?;
        first.push_str(&format!("\n\nA search for your task found:\n{found}"));
    }
    let prompt = if extra.is_empty() {
        RESEARCHER.to_string()
    } else {
        format!("{RESEARCHER} {EXTRA_TOOLS}")
    };
    let mut messages = vec![super::system(ctx, &prompt), Message::user(first)];
    let mut notes: Vec<String> = Vec::new();
    let mut answer_text: Option<String> = None;
    let mut nudged = false;
    let mut shrunk = false;
    for turn_no in 1..=MAX_TURNS {
        let last = turn_no == MAX_TURNS || over_budget(ctx, settings).is_some() || wrap_up();
        let last = decided(ctx, &format!("decide:last:s{step}r{n}t{turn_no}"), last).await?;
        if last {
            messages.push(Message::user(
                "Stop researching now and give your findings as JSON.",
            ));
        }
        // Who starts on what, if the search before the first turn did not say it already.
        let before = std::mem::take(&mut announce);
        let request = ChatRequest {
            messages: messages.clone(),
            tools: if last { Vec::new() } else { tool_specs(extra) },
            temperature: Some(0.2),
            max_tokens: Some(output_tokens::RESEARCH),
            ..Default::default()
        };
        let key = format!("llm:research:{step}:{n}:{turn_no}");
        let mut outcome = ask(
            ctx,
            &key,
            &name,
            &models.researcher,
            request.clone(),
            before,
        )
        .await?;
        // Too long a conversation: the pages read so far are cut short, once.
        if let Err(e) = &outcome
            && e.overflow
            && !shrunk
        {
            shrunk = true;
            notes.push(format!("{name}: the conversation outgrew the model's context; the pages read were shortened"));
            shorten(&mut messages);
            let request = ChatRequest {
                messages: messages.clone(),
                ..request
            };
            outcome = ask(
                ctx,
                &format!("{key}:short"),
                &name,
                &models.researcher,
                request,
                Vec::new(),
            )
            .await?;
        }
        let answer = match outcome {
            Ok(t) => t.response,
            Err(e) => {
                tracing::warn!(researcher = %name, error = %e, "researcher stopped");
                notes.push(format!("{name} stopped: {e}"));
                break;
            }
        };
        if answer.tool_calls.is_empty() {
            // An answer before reading anything is from memory: asked once to use the tools.
            if reader.read.is_empty() && !nudged && !last {
                nudged = true;
                messages.push(Message::assistant(answer.content.clone(), Vec::new()));
                messages.push(Message::user(
                    "You have read nothing yet. Call web_search first; state only what you read.",
                ));
                continue;
            }
            answer_text = Some(answer.content);
            break;
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
                    Ok(args) => reader.call(&call.name, &tool_id, args).await?,
                }
            };
            messages.push(Message::tool(call.id.clone(), reply));
        }
    }
    // Nothing read (the top results could not be read, the model fetched invented URLs):
    // the further results of its searches are read here, then what a search for the research
    // question itself finds, so the writer has sources.
    if reader.read.is_empty()
        && !decided(ctx, &format!("decide:late:s{step}r{n}end"), wrap_up()).await?
    {
        let id = format!("s{step}r{n}-more");
        reader.read_further(&id).await?;
        if reader.read.is_empty() {
            reader
                .search(&format!("web_search-{id}"), &plan.question)
                .await?;
        }
        if !reader.read.is_empty() {
            notes.push(format!(
                "{name} read nothing itself; further search results were read for it"
            ));
        }
    }
    let (mut findings, found_notes) = match &answer_text {
        Some(text) => findings_of(text, &reader.read),
        None => (Vec::new(), Vec::new()),
    };
    notes.extend(found_notes.into_iter().map(|n| format!("{name}: {n}")));
    if findings.is_empty() && !reader.read.is_empty() {
        findings = from_passages(&reader.read, FALLBACK_FINDINGS);
        notes.push(format!(
            "{name} reported no usable findings; the best passages it read stand in"
        ));
    }
    for note in &notes {
        tracing::info!(researcher = %name, "{note}");
    }
    Ok(ResearcherReport {
        findings,
        read: reader
            .read
            .iter()
            .map(|d| ParsedRef {
                url: d.url.clone(),
                title: d.title.clone(),
                file_id: d.file_id.clone(),
            })
            .collect(),
        notes,
    })
}

/// A decision that depends on the clock or on the run's shared token count, journaled under
/// `key`: both move on, and a resumed run must decide what the uninterrupted one decided.
async fn decided<T>(ctx: &RunCtx, key: &str, now: T) -> Result<T, StepError>
where
    T: Serialize + serde::de::DeserializeOwned,
{
    ctx.run(key, || async move { Ok::<_, StepError>(now) })
        .await
}

/// Cuts every tool result but the last to its first lines: what was read stays named, the
/// bulk goes.
fn shorten(messages: &mut [Message]) {
    let tools: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == fathom_llm::Role::Tool)
        .map(|(i, _)| i)
        .collect();
    for &i in tools.iter().rev().skip(1) {
        messages[i].content = cut(&messages[i].content, SHORT_RESULT);
    }
    if let Some(&i) = tools.last() {
        messages[i].content = cut(&messages[i].content, 4 * SHORT_RESULT);
    }
}

/// A researcher's hands: runs its tool calls through the journal and remembers what it read.
struct Reader<'a> {
    ctx: &'a RunCtx,
    tools: &'a Tools,
    settings: &'a Settings,
    /// The plan, which says where the task's searches look.
    plan: &'a Plan,
    task: &'a str,
    /// Tools from elsewhere (MCP servers') offered besides web_search and fetch_url.
    extra: &'a [ExternalTool],
    read: Vec<ReadDoc>,
    /// Queries searched, with their results: a query asked again is answered from here
    /// (small models repeat themselves).
    searched: Vec<(String, Vec<SearchHit>)>,
    /// URLs a read was tried on, read or not.
    tried: Vec<String>,
}

impl Reader<'_> {
    /// Runs one tool call; returns what the model is told.
    async fn call(&mut self, name: &str, tool_id: &str, args: Value) -> Result<String, StepError> {
        match name {
            "web_search" => match serde_json::from_value::<WebSearchArgs>(args) {
                Ok(a) if !a.query.trim().is_empty() => self.search(tool_id, &a.query).await,
                _ => Ok("web_search needs {\"query\": \"...\"}".into()),
            },
            "fetch_url" => match serde_json::from_value::<FetchUrlArgs>(args) {
                Ok(a) => self.fetch(tool_id, &a.url).await,
                Err(_) => Ok("fetch_url needs {\"url\": \"...\"}".into()),
            },
            other if self.extra.iter().any(|t| t.name == other) => {
                self.external(tool_id, other, args).await
            }
            other => Ok(format!(
                "There is no tool named {other}. The tools are web_search and fetch_url{}.",
                self.extra
                    .iter()
                    .map(|t| format!(", {}", t.name))
                    .collect::<String>()
            )),
        }
    }

    /// A tool from elsewhere (an MCP server's), journaled like a search: a run resumed after
    /// it does not call again. Its bounds in time and size are the tool source's.
    async fn external(
        &mut self,
        tool_id: &str,
        name: &str,
        args: Value,
    ) -> Result<String, StepError> {
        // Nothing leaves for a tool of someone else's before the plan is approved.
        if self
            .ctx
            .read_state(|s| s.status == crate::state::SessionStatus::AwaitingApproval)
        {
            return Ok(format!("{name} is refused: the plan is not approved yet"));
        }
        let Some(external) = self.tools.external.clone() else {
            return Ok(format!("{name} is not available"));
        };
        let (tool, arguments) = (name.to_string(), args.clone());
        let out = Invocation::new(
            "mcp_tool",
            tool_id.to_string(),
            json!({"tool": name, "arguments": args}),
        )
        .call(
            self.ctx,
            || async move { external.call(&tool, arguments).await },
            |text: &String| cut(text, 300),
            |text| json!({ "text": text }),
        )
        .await?;
        Ok(match out {
            Ok(text) => text,
            Err(e) => format!("{name} failed: {e}"),
        })
    }

    /// `web_search`, then its top results read and shown by their best passages.
    async fn search(&mut self, tool_id: &str, query: &str) -> Result<String, StepError> {
        self.search_after(tool_id, query, Vec::new()).await
    }

    /// [`Reader::search`], with events to stream just before it.
    async fn search_after(
        &mut self,
        tool_id: &str,
        query: &str,
        before: Vec<Envelope>,
    ) -> Result<String, StepError> {
        let query = query.trim();
        if let Some((_, hits)) = self
            .searched
            .iter()
            .find(|(q, _)| q.eq_ignore_ascii_case(query))
        {
            return Ok(format!(
                "You searched this before; its results are above:\n{}Read one with fetch_url, search something else, or answer.",
                listing(hits)
            ));
        }
        // Every search of the task looks where the plan says the task's query looks.
        let search = self
            .tools
            .searcher_for(self.plan, self.task, &self.settings.sources);
        let k = self.settings.max_search_results_per_query;
        let q = query.to_string();
        let found = Invocation::new("web_search", tool_id.to_string(), json!({"query": query}))
            .preceded_by(before)
            .call(
                self.ctx,
                || async move {
                    match search {
                        Some(search) => search.search_all(&q, k).await,
                        None => Err("this server cannot search where the plan says".to_string()),
                    }
                },
                |found: &Found| match &found.missing {
                    Some(missing) => format!("{} results ({missing})", found.hits.len()),
                    None => format!("{} results", found.hits.len()),
                },
                |found| json!({ "hits": found.hits, "missing": found.missing }),
            )
            .await?;
        let (hits, missing) = match found {
            Ok(found) if found.hits.is_empty() => {
                return Ok(match found.missing {
                    Some(missing) => format!("No results; {missing}."),
                    None => "No results.".into(),
                });
            }
            Ok(found) => (found.hits, found.missing),
            Err(e) => return Ok(format!("Search failed: {e}")),
        };
        let mut out = String::new();
        if let Some(missing) = missing {
            out.push_str(&format!("Note: {missing}.\n"));
        }
        for (j, h) in hits.iter().enumerate() {
            out.push_str(&format!("{}. {} <{}>\n", j + 1, h.title, h.url));
            let doc = if j < READ_PER_SEARCH {
                let id = format!("fetch_url-{tool_id}h{j}");
                self.open(&id, &h.url, query, HIT_PASSAGES).await?.ok()
            } else {
                None
            };
            match doc {
                Some(d) if !d.passages.is_empty() => {
                    for p in &d.passages {
                        out.push_str(&format!("   > {}\n", p.text));
                    }
                }
                _ if !h.snippet.trim().is_empty() => {
                    out.push_str(&format!("   {}\n", cut(h.snippet.trim(), PASSAGE_CHARS)))
                }
                _ => {}
            }
        }
        self.searched.push((query.to_string(), hits));
        Ok(out)
    }

    /// Reads up to [`READ_PER_SEARCH`] results of the searches made that no read was tried
    /// on yet, in the order found.
    async fn read_further(&mut self, id: &str) -> Result<(), StepError> {
        let untried: Vec<(String, String)> = self
            .searched
            .iter()
            .flat_map(|(q, hits)| hits.iter().map(move |h| (q.clone(), h.url.clone())))
            .filter(|(_, url)| !self.tried.contains(url))
            .take(READ_PER_SEARCH)
            .collect();
        for (j, (query, url)) in untried.into_iter().enumerate() {
            let id = format!("fetch_url-{id}h{j}");
            if let Err(e) = self.open(&id, &url, &query, HIT_PASSAGES).await? {
                tracing::info!(%url, error = %e, "a further result could not be read either");
            }
        }
        Ok(())
    }

    /// `fetch_url`: the page's passages that bear on the task.
    async fn fetch(&mut self, tool_id: &str, url: &str) -> Result<String, StepError> {
        let task = self.task.to_string();
        Ok(match self.open(tool_id, url, &task, TASK_PASSAGES).await? {
            Ok(d) => {
                let mut text = format!("# {}\nURL: {}\n\n", d.title, d.url);
                for p in &d.passages {
                    text.push_str(&p.text);
                    text.push_str("\n\n");
                }
                text
            }
            Err(e) => {
                let known: Vec<&str> = self.read.iter().map(|d| d.url.as_str()).collect();
                if known.is_empty() {
                    format!("Could not read it: {e}. Use web_search to find pages to read.")
                } else {
                    format!(
                        "Could not read it: {e}. Pages read so far: {}",
                        known.join(", ")
                    )
                }
            }
        })
    }

    /// One journaled read of `url`, its `k` best passages chosen for `query`. A page read
    /// before is not fetched again: its stored parsed form is read back.
    async fn open(
        &mut self,
        tool_id: &str,
        url: &str,
        query: &str,
        k: usize,
    ) -> Result<Result<ReadDoc, String>, StepError> {
        if !self.tried.iter().any(|t| t == url) {
            self.tried.push(url.to_string());
        }
        let tools = self.tools.clone();
        let (url_owned, query_owned) = (url.to_string(), query.to_string());
        let known = self
            .read
            .iter()
            .find(|d| canonical_url(&d.url) == canonical_url(url))
            .cloned();
        let outcome = Invocation::new("fetch_url", tool_id.to_string(), json!({"url": url}))
            .call(
                self.ctx,
                || async move {
                    let doc = match known {
                        Some(d) => tools.read_doc(&d.file_id).await.map(|doc| (d, doc))?,
                        None => {
                            // Fetched and parsed in one call: the bytes in hand are parsed,
                            // not read back from storage.
                            let (raw, bytes) = tools.fetch_raw(&url_owned).await?;
                            let (summary, doc) = tools.parse_bytes(&raw, bytes).await?;
                            let d = ReadDoc {
                                url: raw.url,
                                title: summary.title,
                                file_id: summary.file_id,
                                passages: Vec::new(),
                            };
                            (d, doc)
                        }
                    };
                    let (mut d, doc) = doc;
                    d.passages = best_passages(&doc, &query_owned, k, PASSAGE_CHARS);
                    if d.passages.is_empty() {
                        d.passages.extend(opening(&doc, PASSAGE_CHARS));
                    }
                    Ok(d)
                },
                |d: &ReadDoc| format!("Read \"{}\" ({})", d.title, d.url),
                |d| {
                    json!({"url": d.url, "title": d.title, "file_id": d.file_id,
                           "passages": d.passages.len()})
                },
            )
            .await?;
        if let Ok(d) = &outcome {
            match self.read.iter_mut().find(|r| r.url == d.url) {
                Some(r) => {
                    for p in &d.passages {
                        if !r.passages.contains(p) {
                            r.passages.push(p.clone());
                        }
                    }
                }
                None => self.read.push(d.clone()),
            }
        }
        Ok(outcome)
    }
}

/// Search results as the model is reminded of them: number, title and URL.
fn listing(hits: &[SearchHit]) -> String {
    hits.iter()
        .enumerate()
        .map(|(j, h)| format!("{}. {} <{}>\n", j + 1, h.title, h.url))
        .collect()
}
