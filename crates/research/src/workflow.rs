//! The `deep-research` workflow (`draft_plan` → `await_approval` → `run_web_research` →
//! `fetch_parse_sources` → `synthesize_and_patch` → `persist_session`) and `research-metadata`.
//!
//! Phase A (`draft_plan`) has no handle on search or fetch: the tools that reach outside are
//! only called from the steps after the gate.

use std::sync::Arc;
use std::time::Duration;

use fathom_engine::store::{ArtifactStore, CollectionStore, now_ms};
use fathom_engine::{Ctx, ErasedWorkflow, RetryPolicy, StepError, StepOptions, Workflow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::corpus::SearchHit;
use crate::events::*;
use crate::parse::{ContentParser, DocKind, ParsedDoc};
use crate::planner::{Plan, decompose_query};
use crate::report::{Patch, Report};
use crate::service::{Sessions, check_decision, check_start};
use crate::settings::{ResearchConfig, Settings};
use crate::tools::{Fetcher, Invocation, SearchProvider, ToolResult};
use crate::web::canonical_url;
use crate::writer::{draft_sections, pack_patches};

pub const DEEP_RESEARCH: &str = "deep-research";
pub const RESEARCH_METADATA: &str = "research-metadata";
const PLANNER: &str = "planner";
const WRITER: &str = "writer";
const RESEARCHER: &str = "researcher";

/// A session's status, as saved in the `research-sessions` collection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    #[default]
    Planning,
    AwaitingApproval,
    Running,
    Completed,
    Failed,
}

/// A source found by search, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceEntry {
    pub url: String,
    pub title: String,
    pub snippet: String,
    /// `found`, `read` or `failed`.
    pub status: String,
    #[serde(default)]
    pub error: Option<String>,
    /// The fetched bytes' artifact (sha256), once read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_url: Option<String>,
    /// Pages in the document (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u32>,
}

impl SourceEntry {
    /// A search result, not yet read.
    fn found(hit: &SearchHit) -> SourceEntry {
        SourceEntry {
            url: hit.url.clone(),
            title: hit.title.clone(),
            snippet: hit.snippet.clone(),
            status: "found".into(),
            error: None,
            file_id: None,
            byline: None,
            published: None,
            site_name: None,
            canonical_url: None,
            pages: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub file_id: String,
    pub kind: String,
    pub url: Option<String>,
}

/// The run state of `deep-research`; also the body of the session snapshot.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ResearchState {
    pub research_id: String,
    pub query: String,
    pub settings: Option<Settings>,
    pub status: SessionStatus,
    pub round: u32,
    pub plan: Option<Plan>,
    pub feedback: Vec<String>,
    pub answers: Vec<String>,
    pub sources: Vec<SourceEntry>,
    pub artifacts: Vec<ArtifactRef>,
    pub report: Report,
    pub report_markdown: String,
    /// When research must wrap up (set at approval: waiting at the gate is not research).
    pub research_deadline_ms: Option<i64>,
    pub tool_calls: u32,
    /// Tokens the agent's model calls used (prompt and completion).
    #[serde(default)]
    pub tokens_used: u64,
    /// What the agent's researchers gathered, kept apart from the report.
    #[serde(default)]
    pub gathered: Option<crate::agent::researcher::Gathered>,
}

impl ResearchState {
    fn settings(&self) -> Result<&Settings, StepError> {
        self.settings
            .as_ref()
            .ok_or_else(|| StepError::failed("run state has no settings"))
    }

    /// The session record written to the research collection.
    pub fn snapshot(&self) -> Value {
        json!({
            "research_id": self.research_id,
            "query": self.query,
            "status": self.status,
            "round": self.round,
            "plan": self.plan,
            "settings": self.settings,
            "sources": self.sources,
            "artifacts": self.artifacts,
            "report_markdown": self.report_markdown,
            "cited_sources": self.report.sources,
            "tokens_used": self.tokens_used,
            "findings": self.gathered.as_ref().map(|g| &g.findings),
            "cut_short": self.gathered.as_ref().and_then(|g| g.cut_short.as_ref()),
            "updated_at_ms": now_ms(),
        })
    }
}

/// What the research workflows need from outside: where to search and read, where to save
/// sessions and artifacts, and the config.
#[derive(Clone)]
pub struct ResearchDeps {
    pub config: ResearchConfig,
    pub search: Arc<dyn SearchProvider>,
    pub fetcher: Arc<dyn Fetcher>,
    /// How fetched documents are read (PDFs in an isolated worker).
    pub parser: ContentParser,
    /// The agent's models; None runs the offline planner and extractive writer.
    pub models: Option<crate::agent::Models>,
    pub sessions: Arc<dyn CollectionStore>,
    pub artifacts: Arc<dyn ArtifactStore>,
}

impl ResearchDeps {
    /// Writes the session record: delete by `research_id` plus insert, in one transaction.
    async fn save_session(&self, state: &ResearchState) -> Result<(), StepError> {
        Sessions::new(self.sessions.clone(), &self.config)
            .put(&state.research_id, state.snapshot())
            .await?;
        Ok(())
    }
}

pub(crate) type C = Ctx<ResearchState>;

fn next_tool_id(ctx: &C, tool: &str) -> String {
    ctx.edit_state(|s| {
        s.tool_calls += 1;
        format!("{tool}-{}", s.tool_calls)
    })
}

impl ResearchState {
    /// When research should stop gathering and write up what it has: a tenth of the budget
    /// (at least 3 s) before the deadline is kept for reading and writing.
    fn wrap_up_at(&self) -> Option<i64> {
        let deadline = self.research_deadline_ms?;
        let budget_ms = self
            .settings
            .as_ref()
            .map_or(0, |x| x.timeout_seconds as i64 * 1000);
        Some(deadline - (budget_ms / 10).max(3000))
    }
}

fn past(at: Option<i64>) -> bool {
    at.is_some_and(|t| now_ms() >= t)
}

async fn plan_round(
    ctx: C,
    deps: &ResearchDeps,
    feedback: Option<String>,
    answers: Vec<String>,
) -> Result<(), StepError> {
    let state = ctx.edit_state(|s| {
        if let Some(f) = feedback.filter(|f| !f.trim().is_empty()) {
            s.feedback.push(f);
        }
        s.answers
            .extend(answers.into_iter().filter(|a| !a.trim().is_empty()));
        s.round += 1;
        s.status = SessionStatus::Planning;
        s.clone()
    });
    // With a model, the planner agent drafts the plan (it has no tools: phase A cannot reach
    // the web); `decompose_query` then records it, as it records the built-in planner's.
    let drafted = match &deps.models {
        Some(models) => Some(
            crate::agent::planner::plan(
                &ctx,
                models,
                state.round,
                &state.query,
                &state.feedback,
                &state.answers,
            )
            .await?,
        ),
        None => None,
    };
    let id = next_tool_id(&ctx, "decompose_query");
    let kwargs =
        json!({"query": state.query, "feedback": state.feedback, "answers": state.answers});
    let (q, f, a) = (
        state.query.clone(),
        state.feedback.clone(),
        state.answers.clone(),
    );
    let note = drafted.as_ref().and_then(|(_, n)| n.clone());
    let plan = Invocation::new("decompose_query", id, kwargs)
        .call(
            &ctx,
            || async move {
                Ok(match drafted {
                    Some((plan, _)) => plan,
                    None => decompose_query(&q, &f, &a),
                })
            },
            move |p: &Plan| match note {
                Some(n) => format!("{}\n(Note: {n}.)", p.to_text()),
                None => p.to_text(),
            },
            |p| serde_json::to_value(p).unwrap_or(Value::Null),
        )
        .await?
        .map_err(StepError::failed)?;
    let round = ctx.edit_state(|s| {
        s.plan = Some(plan);
        s.status = if s.settings.as_ref().is_some_and(|x| x.require_approval) {
            SessionStatus::AwaitingApproval
        } else {
            SessionStatus::Running
        };
        s.round
    });
    deps.save_session(&ctx.state()).await?;
    ctx.send(PlanDrafted { round })
}

async fn draft_plan(ctx: C, deps: Arc<ResearchDeps>, ev: ResearchStart) -> Result<(), StepError> {
    let settings = deps
        .config
        .settings(ev.settings.as_ref())
        .map_err(StepError::failed)?;
    let query = ev.query.split_whitespace().collect::<Vec<_>>().join(" ");
    if query.is_empty() {
        return Err(StepError::failed("the question is empty"));
    }
    let run_id = ctx.run_id().to_string();
    ctx.edit_state(|s| {
        s.research_id = run_id;
        s.query = query.clone();
        s.settings = Some(settings);
    });
    ctx.write_stream(&AgentInput {
        input: vec![ChatMessage::new("user", query)],
        current_agent_name: PLANNER.into(),
    })?;
    plan_round(ctx, &deps, None, Vec::new()).await
}

async fn await_approval(
    ctx: C,
    deps: Arc<ResearchDeps>,
    _ev: PlanDrafted,
) -> Result<(), StepError> {
    let state = ctx.state();
    let proposed = state
        .plan
        .clone()
        .ok_or_else(|| StepError::failed("no plan to approve"))?;
    let decision = if state.settings()?.require_approval {
        ctx.wait_for::<ApproveEvent>().await?
    } else {
        ApproveEvent {
            approved: true,
            ..Default::default()
        }
    };
    if !decision.approved {
        return ctx.send(Replan {
            feedback: decision.feedback,
            answers: decision.answers.unwrap_or_default(),
        });
    }
    let plan = match decision.plan.map(Plan::cleaned) {
        Some(edited) => match edited.validate() {
            Ok(()) => edited,
            // Validated when sent; an edit that slips through is sent back to planning.
            Err(e) => {
                return ctx.send(Replan {
                    feedback: Some(format!("the edited plan was not usable: {e}")),
                    answers: Vec::new(),
                });
            }
        },
        None => proposed,
    };
    let budget = state.settings()?.timeout_seconds as i64 * 1000;
    ctx.edit_state(|s| {
        s.plan = Some(plan.clone());
        s.status = SessionStatus::Running;
        s.research_deadline_ms = Some(now_ms() + budget);
    });
    // Committed with the decision: a client sees at once that the plan was taken up.
    ctx.write_stream(&AgentInput {
        input: vec![ChatMessage::new("user", plan.to_text())],
        current_agent_name: RESEARCHER.into(),
    })?;
    deps.save_session(&ctx.state()).await?;
    ctx.send(PlanApproved { plan })
}

async fn run_web_research(
    ctx: C,
    deps: Arc<ResearchDeps>,
    ev: PlanApproved,
) -> Result<(), StepError> {
    let state = ctx.state();
    let settings = state.settings()?.clone();
    let wrap_up = state.wrap_up_at();
    if let Some(models) = &deps.models {
        let gathered =
            crate::agent::researcher::research(&ctx, &deps, models, &ev.plan, &settings, || {
                past(wrap_up)
            })
            .await?;
        let hits: Vec<SearchHit> = gathered
            .read
            .iter()
            .map(|r| SearchHit {
                url: r.url.clone(),
                title: r.title.clone(),
                heading: String::new(),
                snippet: String::new(),
                score: 0.0,
            })
            .collect();
        ctx.edit_state(|s| {
            s.sources = hits
                .iter()
                .zip(&gathered.read)
                .map(|(h, r)| SourceEntry {
                    status: "read".into(),
                    file_id: Some(r.file_id.clone()),
                    ..SourceEntry::found(h)
                })
                .collect();
            s.artifacts
                .extend(gathered.read.iter().map(|r| ArtifactRef {
                    file_id: r.file_id.clone(),
                    kind: "parsed".into(),
                    url: Some(r.url.clone()),
                }));
            s.gathered = Some(gathered);
        });
        deps.save_session(&ctx.state()).await?;
        return ctx.send(SourcesFound { hits });
    }
    let mut per_query: Vec<Vec<SearchHit>> = Vec::new();
    for query in ev.plan.queries.iter().take(50) {
        if past(wrap_up) {
            break;
        }
        let id = next_tool_id(&ctx, "web_search");
        let kwargs = json!({"query": query, "max_results": settings.max_search_results_per_query});
        let search = deps.search.clone();
        let (q, k) = (query.clone(), settings.max_search_results_per_query);
        let hits = Invocation::new("web_search", id, kwargs)
            .call(
                &ctx,
                || async move { search.search(&q, k).await },
                |hits: &Vec<SearchHit>| {
                    let mut text = format!("{} results", hits.len());
                    for h in hits {
                        text.push_str(&format!("\n- {} ({})", h.title, h.url));
                    }
                    text
                },
                |hits| json!({ "hits": hits }),
            )
            .await?;
        per_query.push(hits.unwrap_or_default());
    }
    // Round-robin over the queries, so every query contributes before any contributes twice.
    let mut chosen: Vec<SearchHit> = Vec::new();
    let depth = per_query.iter().map(Vec::len).max().unwrap_or(0);
    'fill: for rank in 0..depth {
        for hits in &per_query {
            if let Some(h) = hits.get(rank)
                && !chosen
                    .iter()
                    .any(|c| canonical_url(&c.url) == canonical_url(&h.url))
            {
                if chosen.len() == settings.max_sources {
                    break 'fill;
                }
                chosen.push(h.clone());
            }
        }
    }
    ctx.edit_state(|s| {
        s.sources = chosen.iter().map(SourceEntry::found).collect();
    });
    deps.save_session(&ctx.state()).await?;
    ctx.send(SourcesFound { hits: chosen })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FetchedRef {
    pub(crate) url: String,
    pub(crate) kind: DocKind,
    pub(crate) size: usize,
    pub(crate) file_id: String,
    #[serde(default)]
    pub(crate) charset: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ParsedSummary {
    pub(crate) title: String,
    pub(crate) words: usize,
    pub(crate) blocks: usize,
    pub(crate) file_id: String,
    // What a citation shows besides the title; absent in journals from before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) byline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) published: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) canonical_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) site_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pages: Option<u32>,
}

/// `fetch_url`: the document's bytes, stored content-addressed; the bytes are handed back
/// too, for a caller that parses them at once.
pub(crate) async fn fetch_raw(
    fetcher: &dyn Fetcher,
    artifacts: &dyn ArtifactStore,
    url: &str,
) -> ToolResult<(FetchedRef, Vec<u8>)> {
    let f = fetcher.fetch(url).await?;
    let meta = artifacts
        .put_artifact(f.kind.content_type(), &f.bytes)
        .await
        .map_err(|e| format!("could not store {url}: {e}"))?;
    let raw = FetchedRef {
        url: f.url,
        kind: f.kind,
        size: f.bytes.len(),
        file_id: meta.file_id,
        charset: f.charset,
    };
    Ok((raw, f.bytes))
}

/// `parse_content` of a stored fetch (its bytes read back from storage: after a crash the
/// fetch is journaled, its bytes are not in memory).
pub(crate) async fn parse_raw(
    parser: &ContentParser,
    artifacts: &dyn ArtifactStore,
    raw: &FetchedRef,
) -> ToolResult<(ParsedSummary, ParsedDoc)> {
    let bytes = artifacts
        .get_artifact(&raw.file_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("fetched content is missing from storage")?
        .bytes;
    parse_bytes(parser, artifacts, raw, bytes).await
}

/// Parses a fetched document and stores the parsed form as an artifact.
pub(crate) async fn parse_bytes(
    parser: &ContentParser,
    artifacts: &dyn ArtifactStore,
    raw: &FetchedRef,
    bytes: Vec<u8>,
) -> ToolResult<(ParsedSummary, ParsedDoc)> {
    let doc = parser
        .parse(&raw.url, raw.kind, bytes, raw.charset.clone())
        .await
        .map_err(|e| format!("{}: {e}", raw.url))?;
    let json = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    let meta = artifacts
        .put_artifact("application/vnd.fathom.parsed+json", &json)
        .await
        .map_err(|e| e.to_string())?;
    let summary = ParsedSummary {
        title: doc.title.clone(),
        words: doc.words,
        blocks: doc.blocks.len(),
        file_id: meta.file_id,
        byline: doc.byline.clone(),
        published: doc.published.clone(),
        canonical_url: doc.canonical_url.clone(),
        site_name: doc.site_name.clone(),
        pages: doc.pages,
    };
    Ok((summary, doc))
}

async fn fetch_parse_sources(
    ctx: C,
    deps: Arc<ResearchDeps>,
    ev: SourcesFound,
) -> Result<(), StepError> {
    let state = ctx.state();
    // The agent's researchers read their sources as they went.
    if let Some(g) = &state.gathered {
        return ctx.send(SourcesParsed {
            docs: g.read.clone(),
        });
    }
    let delay = Duration::from_millis(state.settings()?.fetch_delay_ms);
    let wrap_up = state.wrap_up_at();
    let mut docs = Vec::new();
    for (i, hit) in ev.hits.iter().enumerate() {
        if past(wrap_up) {
            break;
        }
        let id = next_tool_id(&ctx, "fetch_url");
        let (fetcher, artifacts, url) = (
            deps.fetcher.clone(),
            deps.artifacts.clone(),
            hit.url.clone(),
        );
        let fetched = Invocation::new("fetch_url", id, json!({"url": hit.url}))
            .call(
                &ctx,
                || async move {
                    if i > 0 {
                        tokio::time::sleep(delay).await;
                    }
                    fetch_raw(fetcher.as_ref(), artifacts.as_ref(), &url)
                        .await
                        .map(|(raw, _)| raw)
                },
                |f: &FetchedRef| format!("Fetched {} ({} bytes, {})", f.url, f.size, f.kind.content_type()),
                |f| json!({"url": f.url, "content_type": f.kind.content_type(), "size": f.size, "file_id": f.file_id}),
            )
            .await?;
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                mark_source(&ctx, &hit.url, Err(e));
                continue;
            }
        };
        let id = next_tool_id(&ctx, "parse_content");
        let (artifacts, parser) = (deps.artifacts.clone(), deps.parser.clone());
        let raw = fetched.clone();
        let parsed = Invocation::new(
            "parse_content",
            id,
            json!({"url": fetched.url, "file_id": fetched.file_id}),
        )
        .call(
            &ctx,
            || async move {
                parse_raw(&parser, artifacts.as_ref(), &raw)
                    .await
                    .map(|(summary, _)| summary)
            },
            |p: &ParsedSummary| {
                format!(
                    "Parsed \"{}\": {} words in {} blocks",
                    p.title, p.words, p.blocks
                )
            },
            |p| serde_json::to_value(p).unwrap_or(Value::Null),
        )
        .await?;
        match parsed {
            Ok(p) => {
                ctx.edit_state(|s| {
                    s.artifacts.push(ArtifactRef {
                        file_id: fetched.file_id.clone(),
                        kind: "raw".into(),
                        url: Some(hit.url.clone()),
                    });
                    s.artifacts.push(ArtifactRef {
                        file_id: p.file_id.clone(),
                        kind: "parsed".into(),
                        url: Some(hit.url.clone()),
                    });
                });
                mark_source(&ctx, &hit.url, Ok((&fetched.file_id, &p)));
                docs.push(ParsedRef {
                    url: hit.url.clone(),
                    title: p.title,
                    file_id: p.file_id,
                });
            }
            Err(e) => mark_source(&ctx, &hit.url, Err(e)),
        }
    }
    deps.save_session(&ctx.state()).await?;
    ctx.send(SourcesParsed { docs })
}

fn mark_source(ctx: &C, url: &str, outcome: Result<(&String, &ParsedSummary), String>) {
    ctx.edit_state(|s| {
        if let Some(src) = s.sources.iter_mut().find(|x| x.url == url) {
            match outcome {
                Ok((file_id, p)) => {
                    src.status = "read".into();
                    src.title = p.title.clone();
                    src.file_id = Some(file_id.clone());
                    src.byline = p.byline.clone();
                    src.published = p.published.clone();
                    src.site_name = p.site_name.clone();
                    src.canonical_url = p.canonical_url.clone();
                    src.pages = p.pages;
                }
                Err(e) => {
                    src.status = "failed".into();
                    src.error = Some(e);
                }
            }
        }
    });
}

async fn synthesize_and_patch(
    ctx: C,
    deps: Arc<ResearchDeps>,
    ev: SourcesParsed,
) -> Result<(), StepError> {
    let state = ctx.state();
    let settings = state.settings()?.clone();
    let plan = state
        .plan
        .clone()
        .ok_or_else(|| StepError::failed("no approved plan"))?;
    let per_section = settings.sentences_per_section;
    let mut report = Report::new(&plan.question);
    let sections = match (&deps.models, &state.gathered) {
        (Some(models), Some(gathered)) => {
            let (sections, removed) =
                crate::agent::writer::draft(&ctx, models, &plan, gathered, per_section).await?;
            if removed > 0 {
                tracing::warn!(removed, "citations naming no source read were removed");
            }
            report.notice = gathered.cut_short.as_ref().map(|why| {
                format!(
                    "Research was cut short: {why}. This report is written from what was gathered until then."
                )
            });
            sections
        }
        _ => {
            let mut docs: Vec<ParsedDoc> = Vec::new();
            for d in &ev.docs {
                let art = deps
                    .artifacts
                    .get_artifact(&d.file_id)
                    .await?
                    .ok_or_else(|| {
                        StepError::failed(format!("parsed {} is missing from storage", d.url))
                    })?;
                docs.push(serde_json::from_slice(&art.bytes)?);
            }
            let outline = plan.outline.clone();
            let question = plan.question.clone();
            tokio::task::spawn_blocking(move || {
                draft_sections(&question, &outline, &docs, per_section)
            })
            .await
            .map_err(|e| StepError::failed(format!("writer crashed: {e}")))?
        }
    };
    let patches = pack_patches(&report, &sections, settings.max_report_update_size);
    let mut streamed = String::new();
    for patch in patches {
        let id = next_tool_id(&ctx, "update_report");
        let text = patch_text(&patch);
        let kwargs = json!({"section": patch.section, "text": text});
        let limit = settings.max_report_update_size;
        let mut trial = report.clone();
        let outcome = Invocation::new("update_report", id, kwargs)
            .call(
                &ctx,
                || async move {
                    trial
                        .apply(&patch, limit)
                        .map(|md| (patch, md))
                        .map_err(|e| e.to_string())
                },
                |(p, _): &(Patch, String)| format!("Updated section \"{}\"", p.section),
                |(_, md)| json!({"new_report_markdown": md}),
            )
            .await?;
        let Ok((patch, _)) = outcome else { continue };
        let md = report
            .apply(&patch, limit)
            .map_err(|e| StepError::failed(format!("journaled patch no longer applies: {e}")))?;
        ctx.edit_state(|s| {
            s.report = report.clone();
            s.report_markdown = md.clone();
        });
        streamed.push_str(&text);
        streamed.push('\n');
        ctx.write_stream(&AgentStream {
            delta: format!("{text}\n"),
            response: streamed.clone(),
            current_agent_name: WRITER.into(),
            tool_calls: Vec::new(),
            thinking_delta: None,
        })?;
    }
    let md = report.render();
    ctx.edit_state(|s| {
        s.report = report.clone();
        s.report_markdown = md.clone();
    });
    ctx.write_stream(&AgentOutput {
        response: ChatMessage::new("assistant", md),
        structured_response: None,
        current_agent_name: WRITER.into(),
        tool_calls: Vec::new(),
        retry_messages: Vec::new(),
    })?;
    deps.save_session(&ctx.state()).await?;
    ctx.send(ReportWritten {})
}

/// The Markdown a patch adds, as a reader sees it streamed (citation numbers aside).
fn patch_text(p: &Patch) -> String {
    let mut text = String::new();
    for q in &p.quotes {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(q.text.trim());
    }
    if text.is_empty() {
        text = p.note.clone().unwrap_or_default();
    }
    format!("## {}\n\n{text}\n", p.section)
}

async fn persist_session(
    ctx: C,
    deps: Arc<ResearchDeps>,
    _ev: ReportWritten,
) -> Result<(), StepError> {
    let md = ctx.read_state(|s| s.report_markdown.clone());
    let artifacts = deps.artifacts.clone();
    let report_id = ctx
        .run("store_report", || async move {
            artifacts
                .put_artifact("text/markdown", md.as_bytes())
                .await
                .map(|m| m.file_id)
        })
        .await?;
    let state = ctx.edit_state(|s| {
        s.status = SessionStatus::Completed;
        s.artifacts.push(ArtifactRef {
            file_id: report_id.clone(),
            kind: "report".into(),
            url: None,
        });
        s.clone()
    });
    deps.save_session(&state).await?;
    ctx.stop(&ResearchResult {
        research_id: state.research_id,
        status: "completed".into(),
        query: state.query,
        plan: state.plan,
        report_markdown: state.report_markdown,
        sources: state.report.sources.clone(),
        report_file_id: Some(report_id),
    })
}

/// Builds `deep-research`.
pub fn deep_research(deps: Arc<ResearchDeps>) -> Arc<dyn ErasedWorkflow> {
    let quick = StepOptions {
        timeout: Duration::from_secs(60),
        retry: RetryPolicy::attempts(3),
    };
    // Search and reading take as long as their sources do; the research deadline bounds them.
    let long = StepOptions {
        timeout: Duration::from_secs(24 * 3600),
        retry: RetryPolicy::attempts(3),
    };
    let d = |deps: &Arc<ResearchDeps>| deps.clone();
    let (d1, d2, d3, d4, d5, d6, d7) = (
        d(&deps),
        d(&deps),
        d(&deps),
        d(&deps),
        d(&deps),
        d(&deps),
        d(&deps),
    );
    let config = deps.config.clone();
    Workflow::<ResearchState>::new::<ResearchStart>(DEEP_RESEARCH)
        .check_start(move |ev: &ResearchStart| {
            check_start(&config, &ev.query, ev.settings.clone())
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .step_with("draft_plan", quick, move |ctx, ev: ResearchStart| {
            draft_plan(ctx, d1.clone(), ev)
        })
        .step_with("draft_plan", quick, move |ctx, ev: Replan| {
            let deps = d2.clone();
            async move { plan_round(ctx, &deps, ev.feedback, ev.answers).await }
        })
        .step_with("await_approval", quick, move |ctx, ev: PlanDrafted| {
            await_approval(ctx, d3.clone(), ev)
        })
        .step_with("run_web_research", long, move |ctx, ev: PlanApproved| {
            run_web_research(ctx, d4.clone(), ev)
        })
        .step_with("fetch_parse_sources", long, move |ctx, ev: SourcesFound| {
            fetch_parse_sources(ctx, d5.clone(), ev)
        })
        .step_with(
            "synthesize_and_patch",
            long,
            move |ctx, ev: SourcesParsed| synthesize_and_patch(ctx, d6.clone(), ev),
        )
        .step_with("persist_session", quick, move |ctx, ev: ReportWritten| {
            persist_session(ctx, d7.clone(), ev)
        })
        .accepts_external_checked::<ApproveEvent>(check_decision)
        .emits::<PlanDrafted>("draft_plan")
        .emits::<PlanApproved>("await_approval")
        .emits::<Replan>("await_approval")
        .emits::<SourcesFound>("run_web_research")
        .emits::<SourcesParsed>("fetch_parse_sources")
        .emits::<ReportWritten>("synthesize_and_patch")
        .emits::<ResearchResult>("persist_session")
        .streams::<AgentInput>()
        .streams::<AgentStream>()
        .streams::<ToolCall>()
        .streams::<ToolCallResult>()
        .streams::<AgentOutput>()
        .stops_with::<ResearchResult>()
        .build()
}

/// Builds `research-metadata`: the research collection and the settings schema, `$ref`s
/// resolved.
pub fn research_metadata(config: ResearchConfig) -> Arc<dyn ErasedWorkflow> {
    Workflow::<()>::new::<StartEvent>(RESEARCH_METADATA)
        .step("metadata", move |ctx: Ctx<()>, _ev: StartEvent| {
            let config = config.clone();
            async move {
                ctx.stop(&MetadataResponse {
                    json_schema: config.resolved_schema.clone(),
                    extracted_data_collection: config.research_collection.clone(),
                    research_collection: config.research_collection.clone(),
                    deployment_name: config.deployment_name.clone(),
                    settings_defaults: config.defaults.clone(),
                })
            }
        })
        .emits::<MetadataResponse>("metadata")
        .stops_with::<MetadataResponse>()
        .build()
}
