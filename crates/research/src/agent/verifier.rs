//! The model's word on a claim the offline check could not confirm: does the passage the
//! sentence cites say what the sentence says? One journaled call per such claim.

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message, ResponseFormat};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Models, ask, output_tokens, schema_of};
use crate::state::RunCtx;

#[derive(Debug, Deserialize, JsonSchema)]
struct Judgement {
    /// True only when the passage alone supports every part of the claim.
    supported: bool,
    /// Why, in one short sentence.
    #[schemars(length(max = 200))]
    reason: String,
}

const VERIFIER: &str = "You check a report's citations. Given a passage and a claim, say \
whether the passage alone supports every part of the claim: numbers, names and negations \
must agree; a claim that adds anything the passage does not say is not supported. Answer \
with JSON only.";

/// The model's verdict and reason, or None when it gave no usable answer (the offline
/// verdict then stands).
pub async fn judge(
    ctx: &RunCtx,
    models: &Models,
    key: &str,
    claim: &str,
    passage: &str,
) -> Result<Option<(bool, String)>, StepError> {
    let request = ChatRequest {
        messages: vec![
            super::system(ctx, VERIFIER),
            Message::user(format!("Passage: {passage}\n\nClaim: {claim}")),
        ],
        response_format: Some(ResponseFormat {
            name: "judgement".into(),
            schema: schema_of::<Judgement>(),
        }),
        temperature: Some(0.0),
        max_tokens: Some(output_tokens::VERIFY),
        ..Default::default()
    };
    let Ok(t) = ask(ctx, key, "verifier", &models.writer, request, Vec::new()).await? else {
        return Ok(None);
    };
    Ok(t.response
        .json()
        .and_then(|v| serde_json::from_value::<Judgement>(v).ok())
        .map(|j| (j.supported, j.reason)))
}
