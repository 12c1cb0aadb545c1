//! Phase B, gathering: `run_web_research` (searches, or the agent's researchers) and
//! `fetch_parse_sources` (reads what was found).

use std::sync::Arc;
use std::time::Duration;

use fathom_engine::StepError;
use serde_json::{Value, json};

use fathom_corpus::SearchHit;

use super::ResearchDeps;
use crate::agent::findings::{ReadDoc, from_passages};
use crate::events::*;
use crate::follow_up::FollowUp;
use crate::parsed::ParsedRef;
use crate::rules::plan::{Plan, sources_tag};
use crate::settings::Mode;
use crate::state::{ArtifactRef, Gathered, SourceEntry, past};
use crate::state::{RunCtx, next_tool_id};
use crate::tools::read::{FetchedRef, ParsedSummary};
use crate::tools::web::canonical_url;
use crate::tools::{Found, Invocation};

pub(super) async fn run_web_research(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: PlanApproved,
) -> Result<SourcesFound, StepError> {
    let state = ctx.state();
    let settings = state.settings()?.clone();
    let wrap_up = state.wrap_up_at();
    // A follow-up: the approved plan's queries split again (an edit may have changed them)
    // into those the parent's documents answer, which are not searched, and the rest.
    let follow = match &state.parent {
        Some(parent) => {
            let docs = super::follow::parent_docs(&deps, parent).await;
            let plan = super::follow::with_coverage(ev.plan.clone(), parent, &docs);
            let split = plan.follow_up.clone().unwrap_or_default();
            ctx.edit_state(|s| {
                s.plan = Some(plan);
                s.artifacts
                    .extend(super::follow::parent_artifacts(parent, &docs));
            });
            Some((parent.clone(), docs, split))
        }
        None => None,
    };
    let to_search: Vec<String> = match &follow {
        Some((_, _, split)) => split.search.clone(),
        None => ev.plan.queries.clone(),
    };
    let mut sources: Vec<SourceEntry> = match &follow {
        Some((parent, docs, _)) => super::follow::parent_sources(parent, docs),
        None => Vec::new(),
    };
    if let Some(models) = &deps.models {
        let mut gathered = if to_search.is_empty() {
            Gathered::default()
        } else {
            let plan = Plan {
                queries: to_search.clone(),
                ..ev.plan.clone()
            };
            // A follow-up searches only what its parent's sources do not answer, and a quick
            // look only the question.
            let quick = state.route.as_ref().is_some_and(|r| r.mode == Mode::Web);
            let reach = follow.is_none() && !quick;
            crate::agent::researcher::research(
                &ctx,
                &deps.tools,
                models,
                &plan,
                &settings,
                reach,
                || past(wrap_up),
            )
            .await?
        };
        if let Some((_, docs, split)) = &follow {
            from_parent(&mut gathered, &ev.plan.question, docs, split);
        }
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
        // The parent's documents are already listed (and stored); the rest were read now.
        let fresh: Vec<(&SearchHit, &ParsedRef)> = hits
            .iter()
            .zip(&gathered.read)
            .filter(|(h, _)| !sources.iter().any(|s| s.url == h.url))
            .collect();
        sources.extend(fresh.iter().map(|(h, r)| SourceEntry {
            status: "read".into(),
            file_id: Some(r.file_id.clone()),
            ..SourceEntry::found(h)
        }));
        let artifacts: Vec<ArtifactRef> = fresh
            .iter()
            .map(|(_, r)| ArtifactRef {
                file_id: r.file_id.clone(),
                kind: "parsed".into(),
                url: Some(r.url.clone()),
            })
            .collect();
        ctx.edit_state(|s| {
            s.sources = sources;
            s.artifacts.extend(artifacts);
            s.gathered = Some(gathered);
        });
        deps.save_step(&ctx).await?;
        return Ok(SourcesFound { hits });
    }
    let mut per_query: Vec<Vec<SearchHit>> = Vec::new();
    for query in to_search.iter().take(50) {
        let id = next_tool_id(&ctx, "web_search");
        if late(&ctx, wrap_up, &id).await? {
            break;
        }
        let mut kwargs =
            json!({"query": query, "max_results": settings.max_search_results_per_query});
        // Where it looks, when the run has a choice.
        let kinds = ev.plan.sources_of(query, &settings.sources);
        if settings.sources.len() > 1 {
            kwargs["sources"] = json!(kinds);
        }
        let search = deps.tools.searcher_for(&ev.plan, query, &settings.sources);
        let (q, k) = (query.clone(), settings.max_search_results_per_query);
        let found = Invocation::new("web_search", id, kwargs)
            .call(
                &ctx,
                || async move {
                    match search {
                        Some(search) => search.search_all(&q, k).await,
                        None => Err(format!("this server cannot search {}", sources_tag(&kinds))),
                    }
                },
                |found: &Found| {
                    let mut text = format!("{} results", found.hits.len());
                    if let Some(missing) = &found.missing {
                        text.push_str(&format!(" ({missing})"));
                    }
                    for h in &found.hits {
                        text.push_str(&format!("\n- {} ({})", h.title, h.url));
                    }
                    text
                },
                |found| json!({ "hits": found.hits, "missing": found.missing }),
            )
            .await?;
        let found = found.unwrap_or_else(|_| Found {
            hits: Vec::new(),
            missing: None,
        });
        if let Some(missing) = found.missing {
            // Once per run: every query meets the same failure.
            ctx.edit_state(|s| {
                if !s.notes.contains(&missing) {
                    s.notes.push(missing);
                }
            });
        }
        per_query.push(found.hits);
    }
    // Round-robin over the queries, so every query contributes before any contributes twice.
    let mut chosen: Vec<SearchHit> = Vec::new();
    let depth = per_query.iter().map(Vec::len).max().unwrap_or(0);
    'fill: for rank in 0..depth {
        for hits in &per_query {
            // A document the parent read is not read again.
            if let Some(h) = hits.get(rank)
                && !chosen
                    .iter()
                    .any(|c| canonical_url(&c.url) == canonical_url(&h.url))
                && !sources
                    .iter()
                    .any(|s| canonical_url(&s.url) == canonical_url(&h.url))
            {
                if chosen.len() == settings.max_sources {
                    break 'fill;
                }
                chosen.push(h.clone());
            }
        }
    }
    sources.extend(chosen.iter().map(SourceEntry::found));
    ctx.edit_state(|s| s.sources = sources);
    deps.save_step(&ctx).await?;
    Ok(SourcesFound { hits: chosen })
}

pub(super) async fn fetch_parse_sources(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: SourcesFound,
) -> Result<SourcesParsed, StepError> {
    let state = ctx.state();
    // The agent's researchers read their sources as they went.
    if let Some(g) = &state.gathered {
        return Ok(SourcesParsed {
            docs: g.read.clone(),
        });
    }
    let delay = Duration::from_millis(state.settings()?.fetch_delay_ms);
    let wrap_up = state.wrap_up_at();
    // A follow-up's parent's documents are read already (stored, parsed): they come first.
    let mut docs: Vec<ParsedRef> = match &state.parent {
        Some(p) => p
            .docs
            .iter()
            .filter(|d| {
                state
                    .sources
                    .iter()
                    .any(|s| s.url == d.url && s.from_session.is_some())
            })
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    for (i, hit) in ev.hits.iter().enumerate() {
        let id = next_tool_id(&ctx, "fetch_url");
        if late(&ctx, wrap_up, &id).await? {
            break;
        }
        let (tools, url) = (deps.tools.clone(), hit.url.clone());
        let fetched = Invocation::new("fetch_url", id, json!({"url": hit.url}))
            .call(
                &ctx,
                || async move {
                    if i > 0 {
                        tokio::time::sleep(delay).await;
                    }
                    tools.fetch_raw(&url).await.map(|(raw, _)| raw)
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
        let (tools, raw) = (deps.tools.clone(), fetched.clone());
        let parsed = Invocation::new(
            "parse_content",
            id,
            json!({"url": fetched.url, "file_id": fetched.file_id}),
        )
        .call(
            &ctx,
            || async move { tools.parse_raw(&raw).await },
            ParsedSummary::to_text,
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
    deps.save_step(&ctx).await?;
    Ok(SourcesParsed { docs })
}

/// Whether to stop before the call `id`: the time for gathering is over, and the call was not
/// made by an earlier execution of this step (what was read before a crash is kept, even when
/// the run is resumed after its deadline).
async fn late(ctx: &RunCtx, wrap_up: Option<i64>, id: &str) -> Result<bool, StepError> {
    Ok(past(wrap_up) && !ctx.is_journaled(id).await?)
}

fn mark_source(ctx: &RunCtx, url: &str, outcome: Result<(&String, &ParsedSummary), String>) {
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
                    src.unread = p.unread.clone();
                }
                Err(e) => {
                    src.status = "failed".into();
                    src.error = Some(e);
                }
            }
        }
    });
}

/// A follow-up with the agent: the parent's documents count as read, and their best sentences
/// for the question and the queries they answer as findings, before what the researchers
/// found for the rest.
fn from_parent(
    gathered: &mut Gathered,
    question: &str,
    docs: &[(ParsedRef, fathom_parse::ParsedDoc)],
    split: &FollowUp,
) {
    let asked = std::iter::once(question)
        .chain(split.covered.iter().map(|c| c.query.as_str()))
        .collect::<Vec<_>>()
        .join(" ");
    let read: Vec<ReadDoc> = docs
        .iter()
        .map(|(r, d)| ReadDoc {
            url: r.url.clone(),
            title: r.title.clone(),
            file_id: r.file_id.clone(),
            passages: fathom_evidence::best_passages(d, &asked, 3, 600),
        })
        .collect();
    let mut findings = from_passages(&read, 8);
    findings.append(&mut gathered.findings);
    gathered.findings = findings;
    let mut all: Vec<ParsedRef> = docs.iter().map(|(r, _)| r.clone()).collect();
    for r in gathered.read.drain(..) {
        if !all.iter().any(|x| x.url == r.url) {
            all.push(r);
        }
    }
    gathered.read = all;
    gathered
        .done
        .extend(split.covered.iter().map(|c| c.query.clone()));
}
