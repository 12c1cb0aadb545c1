//! The run state of `deep-research` (also the body of each session snapshot) and the context
//! its steps and agents run in.

use fathom_engine::store::now_ms;
use fathom_engine::{Ctx, StepError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::parsed::ParsedRef;
use crate::rules::plan::Plan;
use crate::rules::route::Route;
use crate::settings::Settings;
use fathom_corpus::SearchHit;
use fathom_evidence::{Span, Verdict};
use fathom_report::report::Report;

/// The context every step and agent of `deep-research` runs in.
pub type RunCtx = Ctx<ResearchState>;

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
    Cancelled,
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
    /// Parts of a source read only in part, and why (pages past the limit, a page nested
    /// past the depth cap, a DOCX part too large).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
    /// The session this source was read in, when a follow-up took it from its parent
    /// (read again from storage, not fetched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_session: Option<String>,
}

impl SourceEntry {
    /// A search result, not yet read.
    pub(crate) fn found(hit: &SearchHit) -> SourceEntry {
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
            unread: Vec::new(),
            from_session: None,
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
    /// How the question is answered (simple, web or deep) and why; set by `route_query`.
    #[serde(default)]
    pub route: Option<Route>,
    /// What the first look at the local corpus found, before planning.
    #[serde(default)]
    pub background: Vec<SearchHit>,
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
    pub gathered: Option<Gathered>,
    /// Each cited sentence checked against its passage, and what became of it.
    #[serde(default)]
    pub claims: Vec<ClaimRecord>,
    /// The session this run follows up, as loaded when it started.
    #[serde(default)]
    pub parent: Option<crate::follow_up::Parent>,
    /// What became of the deliveries the run asked for (webhook, email).
    #[serde(default)]
    pub delivery: Option<crate::delivery::DeliveryRecord>,
    /// What a reader should know of how the report was made, when no agent gathered for it
    /// (the agent's notes are in `gathered`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Every decision taken on the run, in order: each approval or rejection of a plan, and
    /// a cancel.
    #[serde(default)]
    pub decisions: Vec<Decision>,
}

/// What a person decided on a run: who (the API key's name; None without keys), when, and
/// on which plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `approved`, `rejected` or `cancelled`.
    pub action: String,
    pub by: Option<String>,
    /// ISO 8601, UTC.
    pub at: String,
    pub approved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The plan decided on: the state's `round` when the decision was taken (0: none yet).
    pub plan_round: u32,
    /// An approval that sent an edited plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
}

impl Decision {
    /// One line for people: `plan round 2 approved by alice at 2026-...`.
    pub fn describe(&self) -> String {
        let who = self.by.as_deref().unwrap_or("anonymous");
        let what = if self.action == "cancelled" {
            "run cancelled".to_string()
        } else {
            format!(
                "plan round {} {}{}",
                self.plan_round,
                if self.edited { "edited and " } else { "" },
                self.action
            )
        };
        let mut line = format!("{what} by {who} at {}", self.at);
        if let Some(f) = &self.feedback {
            line.push_str(&format!(": {f}"));
        }
        line
    }
}

impl ResearchState {
    pub(crate) fn settings(&self) -> Result<&Settings, StepError> {
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
            "mode": self.route.as_ref().map(|r| r.mode),
            "route": self.route,
            "sources": self.sources,
            "artifacts": self.artifacts,
            "report_markdown": self.report_markdown,
            "cited_sources": self.report.sources,
            "tokens_used": self.tokens_used,
            "findings": self.gathered.as_ref().map(|g| &g.findings),
            "cut_short": self.gathered.as_ref().and_then(|g| g.cut_short.as_ref()),
            "notes": self.gathered.as_ref().map_or(&self.notes, |g| &g.notes),
            "claims": self.claims,
            "parent_id": self.parent.as_ref().map(|p| &p.research_id),
            "parent_query": self.parent.as_ref().map(|p| &p.query),
            "delivery": self.delivery,
            "decisions": self.decisions,
            "updated_at_ms": now_ms(),
        })
    }
}

/// What became of a cited sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Kept,
    Rewritten,
    Removed,
    /// Written without a citation, and cited to the source read that supports it.
    Attributed,
}

/// Who gave a claim its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckedBy {
    /// The entailment-style check of `fathom_evidence`.
    Offline,
    /// The verifier model, on a claim the offline check could not confirm.
    Model,
}

/// What became of one cited sentence of the report; the session keeps one per claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub section: String,
    /// The sentence as written (before any rewrite).
    pub sentence: String,
    pub source_url: String,
    pub span: Option<Span>,
    /// The verdict on the sentence as written.
    pub verdict: Verdict,
    pub outcome: Outcome,
    /// The replacement sentence, when rewritten.
    pub rewritten: Option<String>,
    pub checked_by: CheckedBy,
    pub reason: String,
}

/// A fact a researcher found, with the URL it was read at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// One self-contained, specific statement (numbers, names, dates kept).
    pub fact: String,
    /// The URL of the source it was read in (one the researcher fetched).
    pub url: String,
}

/// What the researchers gathered, kept apart from the writing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gathered {
    pub findings: Vec<Finding>,
    /// Documents read, in the order first read.
    pub read: Vec<ParsedRef>,
    /// Research tasks done, in order.
    pub done: Vec<String>,
    /// Why research stopped before the plan's end, if it did.
    pub cut_short: Option<String>,
    /// What had to be worked around: findings matched to the passage they came from or
    /// dropped, researchers that read nothing themselves, calls given up on.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The next tool call id of the run (`tool-n`): unique in the run, stable across re-runs.
pub(crate) fn next_tool_id(ctx: &RunCtx, tool: &str) -> String {
    ctx.edit_state(|s| {
        s.tool_calls += 1;
        format!("{tool}-{}", s.tool_calls)
    })
}

impl ResearchState {
    /// When research should stop gathering and write up what it has: a tenth of the budget
    /// (at least 3 s) before the deadline is kept for reading and writing.
    pub(crate) fn wrap_up_at(&self) -> Option<i64> {
        let deadline = self.research_deadline_ms?;
        let budget_ms = self
            .settings
            .as_ref()
            .map_or(0, |x| x.timeout_seconds as i64 * 1000);
        Some(deadline - (budget_ms / 10).max(3000))
    }
}

/// Whether the time `at` (ms since the epoch) has come.
pub(crate) fn past(at: Option<i64>) -> bool {
    at.is_some_and(|t| now_ms() >= t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fathom_evidence::Verdict;

    #[test]
    fn records_serialise_in_lowercase() {
        let r = ClaimRecord {
            section: "S".into(),
            sentence: "s".into(),
            source_url: "u".into(),
            span: None,
            verdict: Verdict::Unsupported,
            outcome: Outcome::Rewritten,
            rewritten: Some("r".into()),
            checked_by: CheckedBy::Offline,
            reason: "why".into(),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["verdict"], "unsupported");
        assert_eq!(v["outcome"], "rewritten");
        assert_eq!(serde_json::from_value::<ClaimRecord>(v).unwrap(), r);
    }
}
