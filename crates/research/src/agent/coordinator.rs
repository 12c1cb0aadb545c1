//! The coordinator with a model: how a question is answered (directly, with a quick web look,
//! or with full research) and why. The rules route a question whose form they read by a
//! phrase or its shape; the model is asked, in one structured call, about the rest. Like the
//! planner, it has no tools.

use schemars::JsonSchema;
use serde::Deserialize;

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message, ResponseFormat};

use super::{Models, ask, output_tokens, schema_of};
use crate::rules::route::{Kind, Route, RoutedBy, by_rules, by_rules_when_sure};
use crate::state::RunCtx;

/// The coordinator's answer as the model writes it: the kind of answer the question asks
/// for (the mode follows from it by [`Kind::mode`], as it does for the rules).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RouteDraft {
    /// definition, fact, how-to, explanation, trade-off, comparison, list, new or brief.
    pub kind: Kind,
    /// Why, in one short sentence.
    #[schemars(length(max = 200))]
    pub reason: String,
}

const SYSTEM: &str = "You route questions for a research assistant by the kind of answer they \
ask for. Answer with JSON matching the schema: `kind` and a one-sentence `reason`. Kinds:
- definition: what one thing is (\"What is a named tuple?\", \"Was ist ein Trait?\");
- fact: one fact, a default, a name, a number, yes or no (\"What is the default opt-level of \
the release profile?\", \"Which file holds Cargo's configuration?\");
- how-to: how to do one thing, in a step or two (\"How do I install a binary crate?\");
- explanation: how or why something works or happens (\"How does Rust prevent data races?\", \
\"Why is a mutable default argument a problem?\", \"What happens when a thread panics?\");
- trade-off: costs and benefits, when to choose what (\"What are the costs of trait objects \
instead of generics?\", \"Should I use panic=abort?\");
- comparison: two or more things set against each other (\"Cargo.toml vs Cargo.lock\", \
\"What is the difference between a list and a tuple?\");
- list: several items gathered from several places (\"What kinds of smart pointers are \
there?\", \"What are the ways to share data between threads?\");
- new: what is new, latest or recent, which only the web knows (\"What's in Rust 1.95?\");
- brief: several questions at once, or a long open request.
A question that opens like a fact but asks about costs, reasons or differences is not a fact. \
The question may be in any language. Answer with the JSON object only.";

/// The request that asks the model for a question's kind.
pub fn route_request(system: Message, question: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![system, Message::user(format!("Question: {question}"))],
        response_format: Some(ResponseFormat {
            name: "route".into(),
            schema: schema_of::<RouteDraft>(),
        }),
        temperature: Some(0.0),
        max_tokens: Some(output_tokens::ROUTE),
        ..Default::default()
    }
}

/// The route the model's answer gives, or why it cannot be used.
pub fn read_route(answer: Option<serde_json::Value>, web: bool) -> Result<Route, String> {
    let draft = answer
        .ok_or_else(|| "the answer held no JSON".to_string())
        .and_then(|v| {
            serde_json::from_value::<RouteDraft>(v).map_err(|e| format!("the JSON {e}"))
        })?;
    let why = draft.reason.trim();
    if why.is_empty() {
        return Err("the answer gave no reason".into());
    }
    Ok(Route {
        mode: draft.kind.mode(web),
        reason: why.chars().take(300).collect(),
        by: RoutedBy::Model,
        kind: Some(draft.kind),
    })
}

/// The system prompt of the model router, for a run in the language `code`.
pub fn route_system(code: &str) -> Message {
    super::system_in(SYSTEM, code)
}

/// The rules' route where they read the question's form for sure, else the model's, or the
/// rules' guess when the model's answer cannot be used (with why).
pub async fn route(
    ctx: &RunCtx,
    models: &Models,
    question: &str,
    web: bool,
) -> Result<Route, StepError> {
    if let Some(route) = by_rules_when_sure(question, web) {
        return Ok(route);
    }
    let request = route_request(route_system(&super::language(ctx)), question);
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
        Ok(t) => match read_route(t.response.json(), web) {
            Ok(route) => return Ok(route),
            Err(e) => e,
        },
        Err(e) => e.message,
    };
    Ok(rules_instead(question, web, &problem))
}

/// The rules' route when the model's answer cannot be used, saying why.
pub fn rules_instead(question: &str, web: bool, problem: &str) -> Route {
    let rules = by_rules(question, web);
    Route {
        reason: format!(
            "{} (the model's choice could not be used: {problem})",
            rules.reason
        ),
        ..rules
    }
}
