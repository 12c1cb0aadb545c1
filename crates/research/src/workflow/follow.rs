//! What the steps of a follow-up run share: the parent session loaded once (journaled), its
//! documents read back from storage, and its first look and plan made over them.

use fathom_corpus::SearchHit;
use fathom_engine::StepError;
use fathom_evidence::best_passages;
use fathom_parse::ParsedDoc;
use fathom_parse::text::terms;

use super::ResearchDeps;
use crate::checks::check_parent;
use crate::error::ResearchError;
use crate::follow_up::{FollowUp, Parent, coverage};
use crate::parsed::ParsedRef;
use crate::rules::plan::Plan;
use crate::sessions::Sessions;
use crate::state::{ArtifactRef, RunCtx, SourceEntry};

/// Loads the parent session `id` once: journaled, so a resumed run follows up the parent as
/// it was when the run started.
pub(super) async fn load_parent(
    ctx: &RunCtx,
    deps: &ResearchDeps,
    id: &str,
) -> Result<Parent, StepError> {
    let sessions = Sessions::new(deps.sessions.clone(), &deps.config);
    let id = id.to_string();
    ctx.run("load_parent", || async move {
        match check_parent(&sessions, &id).await {
            Ok(record) => Ok(Parent::from_record(&record)),
            // Checked when the run was started; gone or reopened since, no retry helps.
            Err(
                e @ (ResearchError::UnknownParent(_) | ResearchError::ParentNotFinished { .. }),
            ) => Err(StepError::permanent(e)),
            Err(e) => Err(StepError::failed(e)),
        }
    })
    .await
}

/// The parent's documents, parsed, read back from storage. A document whose stored copy is
/// gone or unreadable is left out (and logged): the others still answer what they can.
pub(super) async fn parent_docs(
    deps: &ResearchDeps,
    parent: &Parent,
) -> Vec<(ParsedRef, ParsedDoc)> {
    let mut out = Vec::with_capacity(parent.docs.len());
    for r in &parent.docs {
        match deps.tools.parsed_doc(&r.file_id).await {
            Ok(doc) => out.push((r.clone(), doc)),
            Err(e) => tracing::warn!(url = %r.url, error = %e, "a parent's document is unreadable"),
        }
    }
    out
}

/// The first look of a follow-up: the parent's documents' best passages for the question,
/// best first, at most `k`.
pub(super) fn parent_hits(
    docs: &[(ParsedRef, ParsedDoc)],
    query: &str,
    k: usize,
) -> Vec<SearchHit> {
    let wanted = terms(query);
    let mut hits: Vec<SearchHit> = docs
        .iter()
        .filter_map(|(r, d)| {
            let p = best_passages(d, query, 1, 400).into_iter().next()?;
            let held = terms(&p.text);
            let score = wanted.iter().filter(|t| held.contains(t)).count() as f64;
            Some(SearchHit {
                url: r.url.clone(),
                title: r.title.clone(),
                heading: String::new(),
                snippet: p.text,
                score,
            })
        })
        .collect();
    // Best first; ties keep the parent's reading order.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    hits
}

/// `plan` with its queries split into those the parent's documents answer and those to
/// search.
pub(super) fn with_coverage(plan: Plan, parent: &Parent, docs: &[(ParsedRef, ParsedDoc)]) -> Plan {
    let follow_up: FollowUp = coverage(&parent.research_id, &plan.queries, docs);
    Plan {
        follow_up: Some(follow_up),
        ..plan
    }
}

/// The parent's documents as sources of this run: read (in the parent, kept in storage).
pub(super) fn parent_sources(parent: &Parent, docs: &[(ParsedRef, ParsedDoc)]) -> Vec<SourceEntry> {
    docs.iter()
        .map(|(r, d)| SourceEntry {
            url: r.url.clone(),
            title: r.title.clone(),
            snippet: String::new(),
            status: "read".into(),
            error: None,
            file_id: Some(parent.stored_copy(r)),
            byline: d.byline.clone(),
            published: d.published.clone(),
            site_name: d.site_name.clone(),
            canonical_url: d.canonical_url.clone(),
            pages: d.pages,
            unread: d.unread.clone(),
            from_session: Some(parent.research_id.clone()),
        })
        .collect()
}

/// The parent's documents as this run's artifacts (so a follow-up of this run finds them).
pub(super) fn parent_artifacts(
    parent: &Parent,
    docs: &[(ParsedRef, ParsedDoc)],
) -> Vec<ArtifactRef> {
    let mut out = Vec::new();
    for (r, _) in docs {
        let raw = parent.stored_copy(r);
        if raw != r.file_id {
            out.push(ArtifactRef {
                file_id: raw,
                kind: "raw".into(),
                url: Some(r.url.clone()),
            });
        }
        out.push(ArtifactRef {
            file_id: r.file_id.clone(),
            kind: "parsed".into(),
            url: Some(r.url.clone()),
        });
    }
    out
}
