//! The coordinator with a model: one structured call that says how a question is answered
//! (directly, with a quick web look, or with full research) and why. Like the planner, it has
//! no tools.

use schemars::JsonSchema;
use serde::Deserialize;

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message, ResponseFormat};

use super::{Models, ask, output_tokens, schema_of};
use crate::rules::route::{Route, RoutedBy, by_rules};
use crate::settings::Mode;
use crate::state::RunCtx;

/// The coordinator's answer as the model writes it.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RouteDraft {
    /// `simple`, `web` or `deep`.
    pub mode: Mode,
    /// Why, in one short sentence.
    #[schemars(length(max = 200))]
    pub reason: String,
}

const SYSTEM: &str = "You route questions for a research assistant. Answer with JSON \
matching the schema: `mode` and a one-sentence `reason`. Modes: `simple` for a short factual \
question one passage of documentation can answer (a definition, a default, what a function \
returns, one how-to step); `web` for a question about something recent or changing (news, \
latest versions, prices) that a quick web search answers; `deep` for questions that need \
explanation, comparison, several sources or a structured report. Answer with the JSON \
object only.";

/// The model's route, or the rules' when the model's answer cannot be used (with why).
pub async fn route(
    ctx: &RunCtx,
    models: &Models,
    question: &str,
    web: bool,
) -> Result<Route, StepError> {
    let request = ChatRequest {
        messages: vec![
            super::system(ctx, SYSTEM),
            Message::user(format!("Question: {question}")),
        ],
        response_format: Some(ResponseFormat {
            name: "route".into(),
            schema: schema_of::<RouteDraft>(),
        }),
        temperature: Some(0.0),
        max_tokens: Some(output_tokens::ROUTE),
        ..Default::default()
    };
    let problem = match ask(
        ctx,
        "llm:route",
        "coordinator",
        &models.planner,
        request,
        Vec::new(),
    )
    .await?
    {
        Ok(t) => match t
            .response
            .json()
            .ok_or_else(|| "the answer held no JSON".to_string())
            .and_then(|v| {
                serde_json::from_value::<RouteDraft>(v).map_err(|e| format!("the JSON {e}"))
            }) {
            Ok(d) if !d.reason.trim().is_empty() => {
                return Ok(Route {
                    mode: d.mode,
                    reason: d.reason.trim().chars().take(300).collect(),
                    by: RoutedBy::Model,
                });
            }
            Ok(_) => "the answer gave no reason".to_string(),
            Err(e) => e,
        },
        Err(e) => e.message,
    };
    let (mode, reason) = by_rules(question, web);
    Ok(Route {
        mode,
        reason: format!("{reason} (the model's choice could not be used: {problem})"),
        by: RoutedBy::Rules,
    })
}
