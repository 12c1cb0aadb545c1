//! Before planning: `route_query`, the coordinator, decides how the question is answered, and
//! `investigate_background` takes a first look at the local corpus (never the web: nothing is
//! approved yet). A simple question is answered from what that look found, without a plan or
//! the gate; the others go on to `draft_plan` with the look's passages.

use std::sync::Arc;

use fathom_corpus::SearchHit;
use fathom_engine::{Either, StepError};
use serde_json::json;

use super::{COORDINATOR, ResearchDeps};
use crate::events::*;
use crate::rules::plan::Plan;
use crate::rules::route::{Route, RoutedBy, by_rules};
use crate::settings::{Depth, Mode};
use crate::state::{RunCtx, SessionStatus, SourceEntry, next_tool_id};
use crate::tools::Invocation;

/// Passages the first look keeps (for the planner, and shown with the plan).
const BACKGROUND_HITS: usize = 5;
/// Documents a simple answer reads.
const SIMPLE_SOURCES: usize = 3;
/// Sentences of a simple answer.
const SIMPLE_SENTENCES: usize = 4;
/// The `web` mode's deadline, at most.
const WEB_TIMEOUT_SECONDS: u64 = 180;
/// Documents the `web` mode reads, at most.
const WEB_SOURCES: usize = 4;

pub(super) async fn route_query(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: ResearchStart,
) -> Result<QueryRouted, StepError> {
    // Checked before the run was created; a stored start that no longer passes (the config
    // changed) will not pass on a retry either.
    let mut settings = deps
        .config
        .settings(ev.settings.as_ref())
        .map_err(StepError::permanent)?;
    let query = ev.query.split_whitespace().collect::<Vec<_>>().join(" ");
    if query.is_empty() {
        return Err(StepError::permanent("the question is empty"));
    }
    // The reader's language, fixed for the run: asked for, or the question's.
    if settings.language.is_empty() {
        settings.language = fathom_report::lang::detect(&query).to_string();
    }
    // Where it looks, fixed for the run: asked for, or all this server has.
    if settings.sources.is_empty() {
        settings.sources = deps.tools.available();
    }
    let run_id = ctx.run_id().to_string();
    ctx.edit_state(|s| {
        s.research_id = run_id;
        s.query = query.clone();
        s.settings = Some(settings.clone());
    });
    ctx.write_stream(&AgentInput {
        input: vec![ChatMessage::new("user", query.clone())],
        current_agent_name: COORDINATOR.into(),
    })?;
    let web = !deps.tools.search.is_local();
    if let Some(parent_id) = &ev.follow_up_of {
        let parent = super::follow::load_parent(&ctx, &deps, parent_id).await?;
        ctx.edit_state(|s| s.parent = Some(parent));
    }
    let parent = ctx.read_state(|s| {
        s.parent
            .as_ref()
            .map(|p| (p.research_id.clone(), p.query.clone()))
    });
    let chosen = match (settings.mode.forced(), &deps.models, parent) {
        // A follow-up is planned: its plan says which queries the parent's sources answer.
        // `web` keeps its quick look; anything else is researched in full.
        (forced, _, Some((id, question))) => Route {
            mode: if forced == Some(Mode::Web) {
                Mode::Web
            } else {
                Mode::Deep
            },
            reason: format!(
                "it follows up session {id} (\"{question}\"): that session's sources are read first, and only what they do not cover is searched"
            ),
            by: RoutedBy::Rules,
            kind: None,
        },
        (Some(mode), _, None) => Route {
            mode,
            reason: "the mode setting asks for it".into(),
            by: RoutedBy::Setting,
            kind: None,
        },
        (None, Some(models), None) => {
            crate::agent::coordinator::route(&ctx, models, &query, web).await?
        }
        (None, None, None) => by_rules(&query, web),
    };
    let mode = record(&ctx, json!({"query": query, "mode": settings.mode}), chosen).await?;
    settle(&ctx, mode);
    deps.save_step(&ctx).await?;
    Ok(QueryRouted { mode })
}

pub(super) async fn investigate_background(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: QueryRouted,
) -> Result<Either<Investigated, SourcesFound>, StepError> {
    let (query, parent) = ctx.read_state(|s| (s.query.clone(), s.parent.clone()));
    let hits: Vec<SearchHit> = match (&parent, &deps.tools.local) {
        // A follow-up looks in what its parent read, not in the corpus.
        (Some(parent), _) => {
            let id = next_tool_id(&ctx, "search_session");
            let kwargs = json!({"query": query, "session": parent.research_id, "max_results": BACKGROUND_HITS});
            let (q, deps) = (query.clone(), &deps);
            Invocation::new("search_session", id, kwargs)
                .call(
                    &ctx,
                    || async move {
                        let docs = super::follow::parent_docs(deps, parent).await;
                        Ok(super::follow::parent_hits(&docs, &q, BACKGROUND_HITS))
                    },
                    |hits: &Vec<SearchHit>| {
                        let mut text = format!(
                            "{} passages in the sources of the session followed up",
                            hits.len()
                        );
                        for h in hits {
                            text.push_str(&format!("\n- {}: {}", h.title, h.snippet));
                        }
                        text
                    },
                    |hits| json!({ "hits": hits }),
                )
                .await?
                .unwrap_or_default()
        }
        (None, Some(local)) => {
            let id = next_tool_id(&ctx, "search_local");
            let kwargs = json!({"query": query, "max_results": BACKGROUND_HITS});
            let (local, q) = (local.clone(), query.clone());
            Invocation::new("search_local", id, kwargs)
                .call(
                    &ctx,
                    || async move { local.search(&q, BACKGROUND_HITS).await },
                    |hits: &Vec<SearchHit>| {
                        let mut text = format!("{} passages in the local sources", hits.len());
                        for h in hits {
                            text.push_str(&format!(
                                "\n- {} ({}): {}",
                                h.title, h.heading, h.snippet
                            ));
                        }
                        text
                    },
                    |hits| json!({ "hits": hits }),
                )
                .await?
                // A local corpus that cannot be searched leaves the plan to the question alone.
                .unwrap_or_default()
        }
        (None, None) => Vec::new(),
    };
    let mut mode = ev.mode;
    let route = ctx.read_state(|s| s.route.clone());
    // A simple answer needs one passage that answers the question: one that covers its terms.
    // Without one, the question is researched instead, unless the person asked for a simple
    // answer (then the answer says what the sources hold, or that nothing covers it).
    let by_setting = route.as_ref().is_some_and(|r| r.by == RoutedBy::Setting);
    if mode == Mode::Simple && !by_setting {
        let why = match hits.first() {
            None if deps.tools.local.is_some() => {
                Some("nothing in the local sources matched the question".to_string())
            }
            None => Some("there is no local corpus to answer from".to_string()),
            Some(best) => {
                let missing = uncovered(&query, best);
                (!missing.is_empty()).then(|| {
                    format!(
                        "the best passage (\"{}\") does not cover {}",
                        if best.heading.is_empty() {
                            &best.title
                        } else {
                            &best.heading
                        },
                        missing
                            .iter()
                            .map(|t| format!("\"{t}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            }
        };
        if let Some(why) = why {
            mode = if deps.tools.search.is_local() {
                Mode::Deep
            } else {
                Mode::Web
            };
            let route = Route {
                mode,
                reason: format!("{why}, so it is researched ({})", mode.as_str()),
                by: RoutedBy::Rules,
                kind: route.and_then(|r| r.kind),
            };
            mode = record(&ctx, json!({"query": query, "mode": "auto"}), route).await?;
            settle(&ctx, mode);
        }
    }
    ctx.edit_state(|s| s.background = hits.clone());
    if mode != Mode::Simple {
        return Ok(Either::Left(Investigated { hits: hits.len() }));
    }
    // A direct answer: the question's own plan (one section), no gate, the best local
    // documents read next.
    let mut read: Vec<SearchHit> = Vec::new();
    for h in hits.iter().filter(|h| !h.url.is_empty()) {
        if read.len() == SIMPLE_SOURCES {
            break;
        }
        if !read.iter().any(|r| r.url == h.url) {
            read.push(h.clone());
        }
    }
    ctx.edit_state(|s| {
        s.plan = Some(Plan {
            question: s.query.clone(),
            queries: vec![s.query.clone()],
            outline: vec![
                fathom_report::lang::words(s.settings.as_ref().map_or("", |x| x.language.as_str()))
                    .answer
                    .into(),
            ],
            background: hits.clone(),
            ..Default::default()
        });
        if let Some(x) = s.settings.as_mut() {
            x.sentences_per_section = x.sentences_per_section.min(SIMPLE_SENTENCES);
        }
        s.status = SessionStatus::Running;
        s.sources = read.iter().map(SourceEntry::found).collect();
    });
    deps.save_step(&ctx).await?;
    Ok(Either::Right(SourcesFound { hits: read }))
}

/// The question's terms that the passage `hit` (its title, heading and text) does not hold:
/// all of them must be there for up to three, all but one beyond. The words that say what
/// kind of answer is wanted ("difference", "default", "how") are not what it is about.
fn uncovered(question: &str, hit: &SearchHit) -> Vec<String> {
    use fathom_parse::text::{terms, words};
    // The light stemmer keeps a silent "e" that an ending drops ("measure", "measured" →
    // "measur"): both forms meet without it.
    let fold = |t: &str| {
        t.strip_suffix('e')
            .filter(|s| s.len() >= 3)
            .unwrap_or(t)
            .to_string()
    };
    let held: std::collections::HashSet<String> =
        terms(&format!("{} {} {}", hit.title, hit.heading, hit.snippet))
            .iter()
            .map(|t| fold(t))
            .collect();
    let mut asked: Vec<(String, String)> = Vec::new();
    for w in words(question) {
        let t = terms(&w);
        if let [t] = t.as_slice()
            && !FORM_TERMS.contains(&w.as_str())
            && !asked.iter().any(|(_, s)| s == t)
        {
            asked.push((w, t.clone()));
        }
    }
    let missing: Vec<String> = asked
        .iter()
        .filter(|(_, t)| !held.contains(&fold(t)))
        .map(|(w, _)| w.clone())
        .collect();
    let allowed = usize::from(asked.len() > 3);
    if missing.len() > allowed {
        missing
    } else {
        Vec::new()
    }
}

/// Words of a question that say what kind of answer it wants, not what it is about.
const FORM_TERMS: &[&str] = &[
    "default",
    "mean",
    "means",
    "meaning",
    "use",
    "used",
    "using",
    "do",
    "does",
    "get",
    "make",
    "work",
    "works",
    "way",
    "find",
    "happen",
    "happens",
    "purpose",
    "return",
    "returns",
    "define",
    "definition",
    "example",
];

/// Fits the run's settings to its mode: a quick look is one light step with a short deadline
/// and a few sources.
fn settle(ctx: &RunCtx, mode: Mode) {
    if mode != Mode::Web {
        return;
    }
    ctx.edit_state(|s| {
        if let Some(x) = s.settings.as_mut() {
            x.depth = Depth::Light;
            x.timeout_seconds = x.timeout_seconds.min(WEB_TIMEOUT_SECONDS);
            x.max_sources = x.max_sources.min(WEB_SOURCES);
        }
    });
}

/// Puts the coordinator's choice on the stream (a `route_query` tool call, journaled) and in
/// the state; returns the mode.
async fn record(ctx: &RunCtx, kwargs: serde_json::Value, route: Route) -> Result<Mode, StepError> {
    let id = next_tool_id(ctx, "route_query");
    let route = Invocation::new("route_query", id, kwargs)
        .call(
            ctx,
            || async move { Ok(route) },
            |r: &Route| format!("Mode: {}, because {}", r.mode.as_str(), r.reason),
            |r| json!({"mode": r.mode, "reason": r.reason, "by": r.by}),
        )
        .await?
        .map_err(StepError::failed)?;
    let mode = route.mode;
    ctx.edit_state(|s| s.route = Some(route));
    Ok(mode)
}
