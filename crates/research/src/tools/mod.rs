//! The research tools and how a step calls one: every call is journaled (its result, error
//! included, is stored under its tool id and never recomputed after a crash) and shows on the
//! stream as a `ToolCall` followed by its `ToolCallResult`, committed with the result.

pub mod read;

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use fathom_engine::{Ctx, Envelope, StepError, WorkflowState};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use fathom_data::ArtifactStore;
use fathom_parse::ContentParser;

use crate::events::{TextBlock, ToolCall, ToolCallResult, ToolOutput};
use crate::settings::SourceKind;

// Where sources come from is fathom-search's; named here as the tools always were.
pub use fathom_search::{Fetcher, Found, SearchProvider, blended, web};

/// What the research tools reach: where `web_search` looks, how `fetch_url` reads, how
/// documents are parsed, and where what was read is stored. The one handle agents get.
#[derive(Clone)]
pub struct Tools {
    pub search: Arc<dyn SearchProvider>,
    /// The local corpus, when there is one: searched before the gate (the background look and
    /// simple answers), when nothing may reach the web.
    pub local: Option<Arc<dyn SearchProvider>>,
    pub fetcher: Arc<dyn Fetcher>,
    /// How fetched documents are read (PDFs in an isolated worker).
    pub parser: ContentParser,
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Documents read lately, kept parsed (see [`read::DocCache`]).
    pub docs: read::DocCache,
    /// Tools from elsewhere offered to the researchers (MCP servers' tools), if configured.
    pub external: Option<Arc<dyn ExternalTools>>,
}

/// A tool a researcher may call besides web_search and fetch_url: one of an MCP server's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExternalTool {
    /// The name the model calls it by (unique among the tools offered).
    pub name: String,
    pub description: String,
    /// Its arguments' JSON Schema.
    pub parameters: Value,
}

/// Tools from elsewhere (MCP servers): what they offer and how to call them. Calls are
/// bounded in time and size by the implementation; the researcher journals each one.
#[async_trait]
pub trait ExternalTools: Send + Sync {
    /// The tools offered, and a note for each server or tool that could not be offered (an
    /// unreachable server, a tool whose schema is not valid).
    async fn list(&self) -> (Vec<ExternalTool>, Vec<String>);
    /// Calls tool `name` (as listed) with `arguments`: its text, or why it failed.
    async fn call(&self, name: &str, arguments: Value) -> Result<String, String>;
}

/// The kinds of source a server with this web config and a local corpus can search.
pub fn kinds(config: &web::WebConfig) -> Vec<SourceKind> {
    if config.reaches_web() {
        vec![SourceKind::Corpus, SourceKind::Web]
    } else {
        vec![SourceKind::Corpus]
    }
}

impl Tools {
    /// What searches `kinds`: the corpus, the web provider, or both ranked together. None when
    /// none of them is here (a web search asked of a server with none).
    pub fn searcher(&self, kinds: &[SourceKind]) -> Option<Arc<dyn SearchProvider>> {
        let corpus = match &self.local {
            Some(local) => Some(local.clone()),
            None => self.search.is_local().then(|| self.search.clone()),
        };
        let local = kinds
            .contains(&SourceKind::Corpus)
            .then_some(corpus)
            .flatten();
        let web = (kinds.contains(&SourceKind::Web) && !self.search.is_local())
            .then(|| self.search.clone());
        match (local, web) {
            (Some(local), Some(web)) => Some(blended(local, web)),
            (Some(one), None) | (None, Some(one)) => Some(one),
            (None, None) => None,
        }
    }

    /// What searches `query` of `plan` in a run that may search `run` (empty: a run stored
    /// before sources could be chosen, which searches where `search` looks, as it did).
    pub fn searcher_for(
        &self,
        plan: &crate::rules::plan::Plan,
        query: &str,
        run: &[SourceKind],
    ) -> Option<Arc<dyn SearchProvider>> {
        if run.is_empty() {
            return Some(self.search.clone());
        }
        self.searcher(&plan.sources_of(query, run))
    }

    /// The kinds of source this server can search: its corpus, and the web when a web
    /// search provider is configured.
    pub fn available(&self) -> Vec<SourceKind> {
        let mut kinds = Vec::new();
        if self.local.is_some() || self.search.is_local() {
            kinds.push(SourceKind::Corpus);
        }
        if !self.search.is_local() {
            kinds.push(SourceKind::Web);
        }
        kinds
    }
}

/// A tool's outcome as journaled: a value, or a message a person can act on.
pub type ToolResult<T> = Result<T, String>;

/// A storage failure under a tool, as the tool's message says it: the store's own message,
/// which is safe to show (it never carries SQL text). What failed underneath, which the
/// message leaves out, goes to the log.
pub(crate) fn storage_said(e: fathom_data::StoreError) -> String {
    tracing::warn!(error = %fathom_engine::ErrorChain(&e), "a tool's storage call failed");
    e.to_string()
}

/// One tool invocation: its name, id (unique in the run, stable across re-runs) and
/// arguments.
pub struct Invocation {
    pub tool_name: &'static str,
    pub tool_id: String,
    pub kwargs: Value,
    /// Events that go on the stream just before the call (who is calling, say).
    pub before: Vec<Envelope>,
}

impl Invocation {
    pub fn new(tool_name: &'static str, tool_id: String, kwargs: Value) -> Self {
        Invocation {
            tool_name,
            tool_id,
            kwargs,
            before: Vec::new(),
        }
    }

    pub fn preceded_by(mut self, events: Vec<Envelope>) -> Self {
        self.before = events;
        self
    }

    /// Runs the tool through the journal; the call and its result reach the stream together
    /// with the journaled result, so a reader sees each tool call as soon as it is done, and
    /// once. `summary` turns a success into the text a reader sees; `raw` into the structured
    /// output.
    pub async fn call<S, T, F, Fut>(
        self,
        ctx: &Ctx<S>,
        f: F,
        summary: impl FnOnce(&T) -> String,
        raw: impl FnOnce(&T) -> Value,
    ) -> Result<ToolResult<T>, StepError>
    where
        S: WorkflowState,
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = ToolResult<T>>,
    {
        let call = self.call_event()?;
        let (tool_name, tool_id, kwargs) = (self.tool_name, self.tool_id.clone(), self.kwargs);
        let mut before = self.before;
        before.push(call);
        ctx.run_streamed(
            &self.tool_id,
            before,
            || async move { Ok::<_, std::convert::Infallible>(f().await) },
            move |result: &ToolResult<T>| {
                Ok(vec![result_event(
                    tool_name, tool_id, kwargs, result, summary, raw,
                )?])
            },
        )
        .await
    }

    /// Puts a tool call whose result the step works out from its own state (applying a
    /// patch to the report, say) on the stream, with its result, committed with the step:
    /// nothing to journal, as running the step again works out the same. (A call journaled
    /// by an earlier version, which journaled these too, has its events on the stream
    /// already.)
    pub async fn record<S, T>(
        self,
        ctx: &Ctx<S>,
        result: ToolResult<T>,
        summary: impl FnOnce(&T) -> String,
        raw: impl FnOnce(&T) -> Value,
    ) -> Result<ToolResult<T>, StepError>
    where
        S: WorkflowState,
    {
        if ctx.is_journaled(&self.tool_id).await? {
            return Ok(result);
        }
        let call = self.call_event()?;
        for env in self.before {
            ctx.write_envelope(env)?;
        }
        ctx.write_envelope(call)?;
        let done = result_event(
            self.tool_name,
            self.tool_id,
            self.kwargs,
            &result,
            summary,
            raw,
        )?;
        ctx.write_envelope(done)?;
        Ok(result)
    }

    fn call_event(&self) -> Result<Envelope, StepError> {
        Ok(Envelope::of(&ToolCall {
            tool_name: self.tool_name.into(),
            tool_kwargs: self.kwargs.clone(),
            tool_id: self.tool_id.clone(),
        })?)
    }
}

/// The `ToolCallResult` of a call: `summary` turns a success into the text a reader sees,
/// `raw` into the structured output.
fn result_event<T>(
    tool_name: &'static str,
    tool_id: String,
    kwargs: Value,
    result: &ToolResult<T>,
    summary: impl FnOnce(&T) -> String,
    raw: impl FnOnce(&T) -> Value,
) -> Result<Envelope, StepError> {
    let (text, raw_output, is_error) = match result {
        Ok(v) => (summary(v), raw(v), false),
        Err(e) => (e.clone(), Value::Null, true),
    };
    Ok(Envelope::of(&ToolCallResult {
        tool_name: tool_name.into(),
        tool_kwargs: kwargs.clone(),
        tool_id,
        tool_output: ToolOutput {
            blocks: vec![TextBlock::new(text)],
            tool_name: tool_name.into(),
            raw_input: kwargs,
            raw_output,
            is_error,
        },
        return_direct: false,
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search journaled by an earlier version (its hits alone) reads back when a run
    /// stored then is resumed now; what is journaled now keeps what part failed.
    #[test]
    fn searches_journaled_before_and_now_read_back() {
        let hit = json_hit();
        let old: Found = serde_json::from_value(serde_json::json!([hit])).unwrap();
        assert_eq!(old.hits.len(), 1);
        assert_eq!(old.missing, None);
        let now = Found {
            hits: old.hits.clone(),
            missing: Some("the web search failed (HTTP 401)".into()),
        };
        let again: Found = serde_json::from_value(serde_json::to_value(&now).unwrap()).unwrap();
        assert_eq!(again, now);
    }

    fn json_hit() -> Value {
        serde_json::json!({"url": "file:///a.md", "title": "A", "heading": "", "snippet": "s",
                           "score": 1.0})
    }
}
