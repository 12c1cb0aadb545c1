//! Phase A: `draft_plan` (no handle on search or fetch) and `await_approval`, the gate.

use std::sync::Arc;

use fathom_data::format_timestamp_ms;
use fathom_engine::store::now_ms;
use fathom_engine::{Either, StepError};
use serde_json::{Value, json};

use super::{PLANNER, RESEARCHER, ResearchDeps};
use crate::events::*;
use crate::rules::plan::{Plan, decompose_query, one_step};
use crate::settings::Mode;
use crate::state::{Decision, SessionStatus};
use crate::state::{RunCtx, next_tool_id};
use crate::tools::Invocation;

/// One planning round: the agent's or the built-in planner's plan, recorded as the result of
/// `decompose_query`.
async fn plan_round(
    ctx: RunCtx,
    deps: &ResearchDeps,
    feedback: Option<String>,
    answers: Vec<String>,
) -> Result<PlanDrafted, StepError> {
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
    // the web); `decompose_query` then records it, as it records the built-in planner's. A
    // quick look (`web` mode) is planned in one step, by rule: the question is the query.
    // (Feedback or answers on a quick plan go to the full planner: they ask for more.)
    let quick = state.route.as_ref().is_some_and(|r| r.mode == Mode::Web)
        && state.feedback.is_empty()
        && state.answers.is_empty();
    let drafted = match &deps.models {
        Some(_) if quick => None,
        Some(models) => Some(
            crate::agent::planner::plan(
                &ctx,
                models,
                state.round,
                &state.query,
                &state.feedback,
                &state.answers,
                &state.background,
            )
            .await?,
        ),
        None => None,
    };
    let id = next_tool_id(&ctx, "decompose_query");
    let kwargs =
        json!({"query": state.query, "feedback": state.feedback, "answers": state.answers});
    let (q, f, a, b) = (
        state.query.clone(),
        state.feedback.clone(),
        state.answers.clone(),
        state.background.clone(),
    );
    let language = state.settings()?.language.clone();
    let sources = state.settings()?.sources.clone();
    let note = drafted.as_ref().and_then(|(_, n)| n.clone());
    // A follow-up's plan says which queries its parent's sources answer (its documents are
    // read from storage only when the plan is made, not when it is read back).
    let parent = state.parent.clone();
    let plan = Invocation::new("decompose_query", id, kwargs)
        .call(
            &ctx,
            || async move {
                let plan = match drafted {
                    Some((plan, _)) => plan,
                    None if quick => Plan {
                        background: b,
                        ..one_step(&q, &language)
                    },
                    None => decompose_query(&q, &f, &a, &b, &language),
                };
                let plan = plan.with_sources(&sources);
                Ok(match &parent {
                    Some(p) => {
                        let docs = super::follow::parent_docs(deps, p).await;
                        super::follow::with_coverage(plan, p, &docs)
                    }
                    None => plan,
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
    deps.save_step(&ctx).await?;
    Ok(PlanDrafted { round })
}

/// The first plan, once the question is routed to research and the local sources looked at.
pub(super) async fn draft_plan(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    _ev: Investigated,
) -> Result<PlanDrafted, StepError> {
    let query = ctx.read_state(|s| s.query.clone());
    ctx.write_stream(&AgentInput {
        input: vec![ChatMessage::new("user", query)],
        current_agent_name: PLANNER.into(),
    })?;
    plan_round(ctx, &deps, None, Vec::new()).await
}

/// `draft_plan` again, after a rejection: the feedback and answers shape the next plan.
pub(super) async fn replan(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: Replan,
) -> Result<PlanDrafted, StepError> {
    plan_round(ctx, &deps, ev.feedback, ev.answers).await
}

/// Keeps who decided on plan `round`, and when, in the state (the session shows it) and on
/// the stream: an `AgentInput` to the planner whose message says it, the record under
/// `additional_kwargs.decision`.
fn record_decision(ctx: &RunCtx, decision: &ApproveEvent, round: u32) -> Result<(), StepError> {
    let record = Decision {
        action: if decision.approved {
            "approved"
        } else {
            "rejected"
        }
        .into(),
        by: decision.by.clone(),
        at: decision
            .at
            .clone()
            .unwrap_or_else(|| format_timestamp_ms(now_ms())),
        approved: decision.approved,
        feedback: decision.feedback.clone().filter(|f| !f.trim().is_empty()),
        plan_round: round,
        edited: decision.approved && decision.plan.is_some(),
    };
    ctx.edit_state(|s| s.decisions.push(record.clone()));
    let mut message = ChatMessage::new("user", record.describe());
    message.additional_kwargs.insert(
        "decision".into(),
        serde_json::to_value(&record).unwrap_or(Value::Null),
    );
    ctx.write_stream(&AgentInput {
        input: vec![message],
        current_agent_name: PLANNER.into(),
    })
}

pub(super) async fn await_approval(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    _ev: PlanDrafted,
) -> Result<Either<PlanApproved, Replan>, StepError> {
    let state = ctx.state();
    let proposed = state
        .plan
        .clone()
        .ok_or_else(|| StepError::failed("no plan to approve"))?;
    let decision = if state.settings()?.require_approval {
        let decision = ctx.wait_for::<ApproveEvent>().await?;
        record_decision(&ctx, &decision, state.round)?;
        decision
    } else {
        ApproveEvent {
            approved: true,
            ..Default::default()
        }
    };
    if !decision.approved {
        deps.save_step(&ctx).await?;
        return Ok(Either::Right(Replan {
            feedback: decision.feedback,
            answers: decision.answers.unwrap_or_default(),
        }));
    }
    let available = deps.tools.available();
    let runnable = |p: &Plan| {
        p.validate()?;
        match p
            .query_sources
            .values()
            .flatten()
            .find(|k| !available.contains(k))
        {
            Some(k) => Err(format!(
                "this server cannot search {} (it has: {})",
                k.as_str(),
                available
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            None => Ok(()),
        }
    };
    let plan = match decision.plan.map(Plan::cleaned) {
        Some(edited) => match runnable(&edited) {
            // What the local sources said stays with the plan, whatever the edit sent.
            Ok(()) => Plan {
                background: proposed.background.clone(),
                ..edited
            },
            // Validated when sent; an edit that slips through is sent back to planning.
            Err(e) => {
                return Ok(Either::Right(Replan {
                    feedback: Some(format!("the edited plan was not usable: {e}")),
                    answers: Vec::new(),
                }));
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
    deps.save_step(&ctx).await?;
    Ok(Either::Left(PlanApproved { plan }))
}
