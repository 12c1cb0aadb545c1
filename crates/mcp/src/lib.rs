//! # fathom-mcp: Fathom's research as Model Context Protocol tools
//!
//! An assistant or an IDE agent researches through these tools: `start_research` (returns the
//! plan, waiting for approval unless the settings say otherwise), `review_plan` (approve, edit
//! or reject with feedback), `get_progress`, `get_report` (the cited report and its sources)
//! and `search_sessions`. Served over stdio (`fathom mcp`) and over streamable HTTP at `/mcp`
//! on `fathom serve`, behind the same API key as the rest of the API. Runs started here are
//! ordinary runs: the web UI and the workflows API see them too. [`client`] goes the other way:
//! MCP servers' tools for the researchers.

pub mod client;
pub mod config;

pub use config::McpSection;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fathom_engine::store::{RunRecord, RunStatus};
use fathom_research::{ApproveEvent, Plan, Research};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// How long `start_research` and a rejection wait for the plan, at most.
const PLAN_WAIT: Duration = Duration::from_secs(120);
/// The longest a caller may ask `get_report` to wait.
const MAX_REPORT_WAIT: Duration = Duration::from_secs(600);
/// Stream events `get_progress` looks at, at most.
const PROGRESS_EVENTS: i64 = 2000;
/// Sessions `search_sessions` looks through, at most.
const SEARCHED_SESSIONS: i64 = 500;

/// The MCP server: one per connection, all on the same research service.
#[derive(Clone)]
pub struct FathomMcp {
    research: Arc<Research>,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct StartArgs {
    /// The question to research.
    pub question: String,
    /// Research settings (the research-metadata schema): for example
    /// {"require_approval": false} to run without stopping at the plan, {"language": "de"},
    /// {"sources": ["corpus"]}, {"depth": "light"}.
    #[serde(default)]
    pub settings: Option<Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReviewArgs {
    /// The research id start_research returned.
    pub research_id: String,
    /// true (default): run the plan (edited, if queries or outline are given); false: draft a
    /// new plan from the feedback.
    #[serde(default = "yes")]
    pub approve: bool,
    /// The search queries to run instead of the plan's (approve only).
    #[serde(default)]
    pub queries: Option<Vec<String>>,
    /// The report's sections instead of the plan's (approve only).
    #[serde(default)]
    pub outline: Option<Vec<String>>,
    /// What should change (for a rejection), or a note.
    #[serde(default)]
    pub feedback: Option<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunArgs {
    /// The research id start_research returned.
    pub research_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReportArgs {
    /// The research id start_research returned.
    pub research_id: String,
    /// Seconds to wait for the research to finish (at most 600; default 0: answer at once).
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// Words the session's question must contain (any case); empty: the latest sessions.
    #[serde(default)]
    pub text: Option<String>,
    /// Sessions returned, at most (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[tool_router]
impl FathomMcp {
    pub fn new(research: Arc<Research>) -> FathomMcp {
        FathomMcp {
            research,
            tool_router: Self::tool_router(),
        }
    }

    /// Starts a deep research run on a question. Returns its research_id and, unless the
    /// settings say require_approval: false, the plan (search queries and report outline)
    /// waiting for review_plan. Nothing is searched on the web before approval.
    #[tool]
    async fn start_research(
        &self,
        Parameters(args): Parameters<StartArgs>,
    ) -> Result<String, String> {
        let run = self
            .research
            .start(&args.question, args.settings)
            .await
            .map_err(|e| e.to_string())?;
        let run = self.wait_past_planning(&run.id, None).await?;
        self.describe(&run).await
    }

    /// Decides on a plan waiting for approval: approve it (optionally with edited queries or
    /// outline), or reject it with feedback to get a new plan (returned).
    #[tool]
    async fn review_plan(
        &self,
        Parameters(args): Parameters<ReviewArgs>,
    ) -> Result<String, String> {
        let id = args.research_id.trim().to_string();
        let run = self.run(&id).await?;
        if run.status != RunStatus::Waiting {
            return Err(format!(
                "research {id} is not waiting for a decision on its plan (status: {})",
                run.status.as_str()
            ));
        }
        let mut decision = ApproveEvent {
            approved: args.approve,
            feedback: args.feedback.filter(|f| !f.trim().is_empty()),
            ..Default::default()
        };
        if args.approve && (args.queries.is_some() || args.outline.is_some()) {
            let session = self.session(&id).await?;
            let mut plan: Plan = serde_json::from_value(session["plan"].clone())
                .map_err(|_| format!("research {id} has no plan to edit"))?;
            if let Some(q) = args.queries {
                plan.queries = q;
            }
            if let Some(o) = args.outline {
                plan.outline = o;
            }
            decision.plan = Some(plan);
        } else if !args.approve && decision.feedback.is_none() {
            return Err("say in feedback what should change, to get a new plan".into());
        }
        fathom_research::check_decision(&decision)?;
        let before = self.session(&id).await?["round"].as_u64();
        self.research
            .decide(&id, decision, None)
            .await
            .map_err(|e| e.to_string())?;
        if args.approve {
            return Ok(format!(
                "Approved: research {id} is running. Follow it with get_progress; get_report \
                 gives the report when it is done."
            ));
        }
        let run = self.wait_past_planning(&id, before).await?;
        self.describe(&run).await
    }

    /// What a research run is doing: its status, what it searched and read so far, and its
    /// latest steps.
    #[tool]
    async fn get_progress(&self, Parameters(args): Parameters<RunArgs>) -> Result<String, String> {
        let id = args.research_id.trim();
        let run = self.run(id).await?;
        let events = self
            .research
            .engine
            .store()
            .events_after(id, -1, PROGRESS_EVENTS)
            .await
            .map_err(|e| e.to_string())?;
        let mut searches = 0;
        let mut reads = 0;
        let mut failed = 0;
        let mut latest: Vec<String> = Vec::new();
        for ev in &events {
            let v = &ev.envelope.value;
            match ev.envelope.event_type.as_str() {
                "ToolCall" => {
                    let tool = v["tool_name"].as_str().unwrap_or("");
                    let what = v["tool_kwargs"]["query"]
                        .as_str()
                        .or(v["tool_kwargs"]["url"].as_str())
                        .or(v["tool_kwargs"]["section"].as_str())
                        .unwrap_or("");
                    match tool {
                        "web_search" | "search_local" => searches += 1,
                        "fetch_url" => reads += 1,
                        _ => {}
                    }
                    latest.push(format!("{tool} {what}").trim().to_string());
                }
                "ToolCallResult" if v["tool_output"]["is_error"] == true => failed += 1,
                _ => {}
            }
        }
        let tail: Vec<String> = latest.iter().rev().take(10).rev().cloned().collect();
        let session = self.session(id).await.unwrap_or(Value::Null);
        Ok(format!(
            "research {id}: {}{}\nsearches: {searches}, pages read: {reads}, failed calls: \
             {failed}, events: {}\nlatest:\n{}",
            run.status.as_str(),
            session["status"]
                .as_str()
                .map_or(String::new(), |s| format!(" ({s})")),
            events.len(),
            tail.iter()
                .map(|l| format!("  - {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    }

    /// The report of a research run, in Markdown with numbered citations, and its sources.
    /// With wait_seconds, waits that long at most for the research to finish.
    #[tool]
    async fn get_report(&self, Parameters(args): Parameters<ReportArgs>) -> Result<String, String> {
        let id = args.research_id.trim().to_string();
        let wait = Duration::from_secs(args.wait_seconds.unwrap_or(0)).min(MAX_REPORT_WAIT);
        let mut run = self.run(&id).await?;
        if !run.status.is_terminal() && !wait.is_zero() {
            let engine = self.research.engine.clone();
            if let Ok(done) = tokio::time::timeout(wait, engine.wait_terminal(&id)).await {
                run = done.map_err(|e| e.to_string())?;
            }
        }
        if !run.status.is_terminal() {
            return Ok(format!(
                "research {id} is {}: no report yet. Ask again with wait_seconds, or follow it \
                 with get_progress.",
                run.status.as_str()
            ));
        }
        let session = self.session(&id).await?;
        let report = session["report_markdown"].as_str().unwrap_or("");
        if report.trim().is_empty() {
            return Err(format!(
                "research {id} ended ({}) without a report{}",
                run.status.as_str(),
                run.error
                    .as_deref()
                    .map_or(String::new(), |e| format!(": {e}"))
            ));
        }
        let sources: Vec<String> = session["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                format!(
                    "- [{}] {} <{}>",
                    s["status"].as_str().unwrap_or(""),
                    s["title"].as_str().unwrap_or(""),
                    s["url"].as_str().unwrap_or("")
                )
            })
            .collect();
        Ok(format!(
            "{report}\n\n---\nresearch {id} ({}); sources considered:\n{}",
            run.status.as_str(),
            sources.join("\n")
        ))
    }

    /// Finds saved research sessions by the words of their question, newest first.
    #[tool]
    async fn search_sessions(
        &self,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<String, String> {
        let limit = args.limit.unwrap_or(20).clamp(1, 100) as usize;
        let words: Vec<String> = args
            .text
            .unwrap_or_default()
            .to_lowercase()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let sessions = self
            .research
            .sessions()
            .list(SEARCHED_SESSIONS)
            .await
            .map_err(|e| e.to_string())?;
        let found: Vec<String> = sessions
            .iter()
            .filter(|s| {
                let q = s["query"].as_str().unwrap_or("").to_lowercase();
                words.iter().all(|w| q.contains(w.as_str()))
            })
            .take(limit)
            .map(|s| {
                format!(
                    "- {} [{}] {}",
                    s["research_id"].as_str().unwrap_or(""),
                    s["status"].as_str().unwrap_or(""),
                    s["query"].as_str().unwrap_or("")
                )
            })
            .collect();
        if found.is_empty() {
            return Ok("No saved session matches.".into());
        }
        Ok(found.join("\n"))
    }
}

impl FathomMcp {
    async fn run(&self, id: &str) -> Result<RunRecord, String> {
        self.research
            .engine
            .store()
            .get_run(id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no research '{id}'"))
    }

    async fn session(&self, id: &str) -> Result<Value, String> {
        self.research
            .sessions()
            .get(id)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until run `id` is past planning: a plan (of a round after `round`) waits at the
    /// gate, or the run went on or ended. Bounded by [`PLAN_WAIT`].
    async fn wait_past_planning(&self, id: &str, round: Option<u64>) -> Result<RunRecord, String> {
        let engine = &self.research.engine;
        let mut watch = engine.watch(id);
        let deadline = Instant::now() + PLAN_WAIT;
        loop {
            watch.mark_seen();
            let run = self.run(id).await?;
            let session = self.session(id).await.ok();
            let drafted = session.as_ref().is_some_and(|s| s["plan"].is_object());
            let new_round = match round {
                Some(r) => session
                    .as_ref()
                    .and_then(|s| s["round"].as_u64())
                    .is_some_and(|now| now > r),
                None => true,
            };
            let planned = run.status == RunStatus::Waiting && drafted && new_round;
            let gone_on = run.status.is_terminal()
                || (run.status == RunStatus::Running
                    && session.as_ref().is_some_and(|s| s["status"] == "running"));
            if planned || gone_on {
                return Ok(run);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(run);
            }
            tokio::select! {
                () = watch.changed() => {}
                () = tokio::time::sleep(left.min(Duration::from_millis(500))) => {}
            }
        }
    }

    /// A run as a caller reads it: its id and status, and its plan when one waits.
    async fn describe(&self, run: &RunRecord) -> Result<String, String> {
        let session = self.session(&run.id).await.unwrap_or(Value::Null);
        let mut out = format!("research_id: {}\nstatus: {}\n", run.id, run.status.as_str());
        if let Ok(plan) = serde_json::from_value::<Plan>(session["plan"].clone()) {
            out.push('\n');
            out.push_str(&plan.to_text());
        }
        match run.status {
            RunStatus::Waiting => out.push_str(
                "\nThe plan waits for approval: call review_plan (approve, edit the queries or \
                 outline, or reject with feedback).",
            ),
            RunStatus::Running => out.push_str(
                "\nResearch is running: follow it with get_progress; get_report gives the \
                 report when it is done.",
            ),
            _ => out.push_str("\nThe research has ended: get_report gives what it wrote."),
        }
        Ok(out)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FathomMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("fathom", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Deep research over this server's corpus (and the web, when configured), with \
                 cited reports. Start with start_research; review the plan with review_plan; \
                 then get_report (with wait_seconds) or get_progress.",
            )
    }
}

/// Serves the tools over stdin and stdout until the client goes away.
pub async fn serve_stdio(research: Arc<Research>) -> Result<(), String> {
    let running = FathomMcp::new(research)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP over stdio did not start: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("MCP over stdio stopped: {e}"))?;
    Ok(())
}

/// The streamable HTTP endpoint, to be routed at `/mcp`. `loopback_only`: the server listens
/// on loopback, so requests naming another host (DNS rebinding) are refused; otherwise the
/// API key is what keeps strangers out.
pub fn http_service(
    research: Arc<Research>,
    loopback_only: bool,
) -> StreamableHttpService<FathomMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default();
    let config = if loopback_only {
        config
    } else {
        config.disable_allowed_hosts()
    };
    StreamableHttpService::new(
        move || Ok(FathomMcp::new(research.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
