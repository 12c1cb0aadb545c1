//! Phase A with a model: clarifying questions, search queries and the report's outline. The
//! planner is given no tools, and this module has no handle on search or fetch: nothing
//! reaches the web before the plan is approved.

use schemars::JsonSchema;
use serde::Deserialize;

use fathom_engine::StepError;
use fathom_llm::{ChatRequest, Message, ResponseFormat};

use super::{Models, ask, output_tokens, schema_of};
use crate::rules::plan::Plan;
use crate::state::RunCtx;
use fathom_corpus::SearchHit;
use fathom_evidence::cut;

/// The plan as the model writes it.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PlanDraft {
    /// Questions for the person, only when the question is too vague to research well.
    #[schemars(length(max = 3), inner(length(max = 200)))]
    pub clarifying_questions: Vec<String>,
    /// Web search queries that together cover the question.
    #[schemars(length(max = 8), inner(length(max = 150)))]
    pub queries: Vec<String>,
    /// Section titles of the report, in order.
    #[schemars(length(max = 7), inner(length(max = 80)))]
    pub outline: Vec<String>,
}

const SYSTEM: &str = "You are the planner of a research assistant. You cannot search or \
browse; you only plan. Given a question, answer with JSON matching the schema: \
`clarifying_questions` (at most 3, and only when the question is too vague to research well; \
otherwise an empty list), `queries` (3 to 8 web search queries that together cover the \
question, each specific enough for a search engine), and `outline` (3 to 7 short section \
titles for the report, in reading order). Follow the reviewer's feedback and use their \
answers when given. Answer with the JSON object only.";

/// How long the model has for its plan, both attempts together: the planning step's bound
/// with a model (300 s) less room for the built-in planner and the session's save. A small
/// model on a CPU needs 60-70 s for one plan.
const PLAN_TIME: std::time::Duration = std::time::Duration::from_secs(240);
/// Characters of each background snippet shown (a small local model reads slowly).
const BACKGROUND_CHARS: usize = 200;

/// The plan, or why the model's could not be used (then the built-in planner's plan is
/// returned with that note).
pub async fn plan(
    ctx: &RunCtx,
    models: &Models,
    round: u32,
    question: &str,
    feedback: &[String],
    answers: &[String],
    background: &[SearchHit],
) -> Result<(Plan, Option<String>), StepError> {
    let mut prompt = format!("Question: {question}");
    if !background.is_empty() {
        // The first look at the local sources: their words make better queries and sections.
        prompt.push_str("\nWhat a first look at the local sources found:");
        for b in background {
            prompt.push_str(&format!(
                "\n- {} ({}): {}",
                b.title,
                b.heading,
                cut(&b.snippet, BACKGROUND_CHARS)
            ));
        }
    }
    for f in feedback {
        prompt.push_str(&format!("\nReviewer feedback on the previous plan: {f}"));
    }
    for a in answers {
        prompt.push_str(&format!("\nAnswer to a clarifying question: {a}"));
    }
    let mut messages = vec![super::system(ctx, SYSTEM), Message::user(prompt)];
    let mut problem = String::new();
    let deadline = tokio::time::Instant::now() + PLAN_TIME;
    // A second attempt is told what was wrong with the first.
    for attempt in 1..=2 {
        let request = ChatRequest {
            messages: messages.clone(),
            response_format: Some(ResponseFormat {
                name: "research_plan".into(),
                schema: schema_of::<PlanDraft>(),
            }),
            temperature: Some(0.2),
            max_tokens: Some(output_tokens::PLAN),
            ..Default::default()
        };
        let key = format!("llm:planner:{round}:{attempt}");
        // The planning step is bounded (a minute, see `workflow`): a model too slow to plan
        // in time leaves the plan to the built-in planner, and the run goes on.
        let asked = ask(ctx, &key, "planner", &models.planner, request, Vec::new());
        let Ok(asked) = tokio::time::timeout_at(deadline, asked).await else {
            problem = format!("no answer within {} s", PLAN_TIME.as_secs());
            break;
        };
        let answer = match asked? {
            Ok(t) => t.response,
            Err(e) => {
                problem = e.message;
                break;
            }
        };
        let draft = answer
            .json()
            .ok_or_else(|| "the answer held no JSON".to_string())
            .and_then(|v| {
                serde_json::from_value::<PlanDraft>(v).map_err(|e| format!("the JSON {e}"))
            });
        let candidate = draft.map(|d| {
            Plan {
                question: question.to_string(),
                clarifying_questions: d.clarifying_questions,
                queries: d.queries,
                outline: d.outline,
                background: background.to_vec(),
                ..Default::default()
            }
            .cleaned()
        });
        match candidate.and_then(|p| p.validate().map(|()| p)) {
            Ok(p) => return Ok((p, None)),
            Err(e) => {
                problem = e;
                messages.push(Message::assistant(answer.content, Vec::new()));
                messages.push(Message::user(format!(
                    "That plan cannot be used: {problem}. Answer again with the JSON object only."
                )));
            }
        }
    }
    let language = super::language(ctx);
    let fallback =
        crate::rules::plan::decompose_query(question, feedback, answers, background, &language);
    Ok((
        fallback,
        Some(format!(
            "the model's plan could not be used ({problem}); this is the built-in planner's"
        )),
    ))
}
