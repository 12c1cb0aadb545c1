//! Phase B, writing: `synthesize_and_patch` grows the report through bounded `update_report`
//! patches; `persist_session` stores it and ends the run.

use std::sync::Arc;

use fathom_engine::{Either, StepError, Stop};
use serde_json::json;

use fathom_parse::ParsedDoc;

use super::claims::check_sections;
use super::{ResearchDeps, WRITER};
use crate::agent::findings::{ReadDoc, from_passages};
use crate::events::*;
use crate::parsed::ParsedRef;
use crate::settings::Mode;
use crate::state::{ArtifactRef, Gathered, SessionStatus};
use crate::state::{ClaimRecord, Outcome};
use crate::state::{RunCtx, next_tool_id};
use crate::tools::Invocation;
use crate::tools::read::CachedDoc;
use fathom_evidence::best_passages;
use fathom_report::report::{Patch, Quote, Report};
use fathom_report::writer::{Weighed, draft_answer, draft_weighed, drop_repeats, pack_patches};

pub(super) async fn synthesize_and_patch(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    ev: SourcesParsed,
) -> Result<ReportWritten, StepError> {
    let state = ctx.state();
    let settings = state.settings()?.clone();
    let plan = state
        .plan
        .clone()
        .ok_or_else(|| StepError::failed("no approved plan"))?;
    let per_section = settings.sentences_per_section;
    let words = fathom_report::lang::words(&settings.language);
    let mut report = Report::new(&plan.question).in_language(&settings.language);
    // Every document read, parsed: the extractive writer draws on them and each cited
    // sentence is checked against them.
    let read = state.gathered.as_ref().map_or(&ev.docs, |g| &g.read);
    let mut docs: Vec<Arc<CachedDoc>> = Vec::with_capacity(read.len());
    for d in read {
        docs.push(
            deps.tools
                .read_doc(&d.file_id)
                .await
                .map_err(StepError::failed)?,
        );
    }
    let mut notes = Vec::new();
    // What the model wrote about neither its section nor the question, left out.
    let mut off_topic = Vec::new();
    let simple = state.route.as_ref().is_some_and(|r| r.mode == Mode::Simple);
    // A simple answer with a model: its findings are the best sentences of the documents read
    // for the question, and the writer answers from them as from a researcher's.
    let direct = (simple && deps.models.is_some() && state.gathered.is_none())
        .then(|| direct_findings(&plan.question, read, &docs));
    let mut sections = match (&deps.models, state.gathered.as_ref().or(direct.as_ref())) {
        (Some(models), Some(gathered)) => {
            let (sections, removed, off) =
                crate::agent::writer::draft(&ctx, models, &plan, gathered, per_section).await?;
            off_topic = off;
            if removed > 0 {
                tracing::warn!(removed, "citations naming no source read were removed");
                notes.push(format!(
                    "{removed} citations naming no source read were removed"
                ));
            }
            report.notice = gathered.cut_short.as_ref().map(|why| words.cut_short(why));
            sections
        }
        // A simple answer offline: the passage that answers best, in its own order.
        _ if simple => extractive(&plan.question, &plan.outline, &docs, per_section, true).await?,
        _ => extractive(&plan.question, &plan.outline, &docs, per_section, false).await?,
    };
    let models = deps.models.as_ref();
    // Repeats go first (no check is spent on them), and again after the checks: a sentence
    // rewritten from its passage may say what another already says.
    let mut repeats = drop_repeats(&mut sections).len();
    let mut claims = off_topic;
    claims.extend(check_sections(&ctx, models, &plan.question, &mut sections, &docs, "1").await?);
    repeats += left_out(&mut claims, drop_repeats(&mut sections));
    // A section left without a cited sentence (the model could not write it, or nothing it
    // wrote held up) is written by the extractive writer from the same documents.
    let empty: Vec<String> = sections
        .iter()
        .filter(|(_, q)| !q.iter().any(|q| docs.iter().any(|d| d.url == q.source_url)))
        .map(|(t, _)| t.clone())
        .collect();
    if !empty.is_empty() && !docs.is_empty() {
        let mut filled = extractive(&plan.question, &empty, &docs, per_section, false).await?;
        claims.extend(check_sections(&ctx, models, &plan.question, &mut filled, &docs, "2").await?);
        for (title, quotes) in filled {
            if deps.models.is_some() {
                notes.push(if quotes.is_empty() {
                    format!("section \"{title}\": nothing the model wrote for it held up, and no other sentence of the sources covers it")
                } else {
                    format!("section \"{title}\" was written from the sources' own sentences")
                });
            }
            if let Some((_, q)) = sections.iter_mut().find(|(t, _)| *t == title) {
                // Prose citing nothing read is not a research finding: the sources' own
                // sentences stand instead, or the section says nothing covered it.
                *q = quotes;
            }
        }
        repeats += left_out(&mut claims, drop_repeats(&mut sections));
    }
    if !simple {
        summarize(&mut sections, words.summary);
    }
    if repeats > 0 {
        notes.push(format!(
            "{repeats} sentences that said again what the report already said were left out"
        ));
    }
    if deps.models.is_none() && !fathom_report::lang::has_words(&settings.language) {
        notes.push(format!(
            "the report's own words are in English: without a model, Fathom writes them in \
             en, de, fr, es and zh, not '{}'",
            settings.language
        ));
    }
    for note in &notes {
        tracing::info!("{note}");
    }
    ctx.edit_state(|s| {
        s.claims = claims;
        match &mut s.gathered {
            Some(g) => g.notes.extend(notes),
            None => s.notes.extend(notes),
        }
    });
    let patches = pack_patches(&report, &sections, settings.max_report_update_size);
    let mut streamed = String::new();
    for patch in patches {
        let id = next_tool_id(&ctx, "update_report");
        let text = patch_text(&patch);
        let kwargs = json!({"section": patch.section, "text": text});
        let limit = settings.max_report_update_size;
        // Worked out from the report as the step has it: a step run again applies the same.
        let applied = report
            .apply(&patch, limit)
            .map(|md| (patch, md))
            .map_err(|e| e.to_string());
        let outcome = Invocation::new("update_report", id, kwargs)
            .record(
                &ctx,
                applied,
                |(p, _): &(Patch, String)| format!("Updated section \"{}\"", p.section),
                |(_, md)| json!({"new_report_markdown": md}),
            )
            .await?;
        let Ok((_, md)) = outcome else { continue };
        ctx.edit_state(|s| {
            s.report = report.clone();
            s.report_markdown = md.clone();
        });
        streamed.push_str(&text);
        streamed.push('\n');
        ctx.write_stream(&AgentStream {
            delta: format!("{text}\n"),
            response: streamed.clone(),
            current_agent_name: WRITER.into(),
            tool_calls: Vec::new(),
            thinking_delta: None,
        })?;
    }
    let md = report.render();
    ctx.edit_state(|s| {
        s.report = report.clone();
        s.report_markdown = md.clone();
    });
    ctx.write_stream(&AgentOutput {
        response: ChatMessage::new("assistant", md),
        structured_response: None,
        current_agent_name: WRITER.into(),
        tool_calls: Vec::new(),
        retry_messages: Vec::new(),
    })?;
    deps.save_step(&ctx).await?;
    Ok(ReportWritten {})
}

/// Sentences at most in the summary at the top.
const SUMMARY_SENTENCES: usize = 3;
/// Puts a summary first: the opening sentence of each section (the writers put the one that
/// best answers the section first), at most [`SUMMARY_SENTENCES`], when at least three
/// sections have something more to say (a shorter report is its own summary). Each keeps its
/// citation and moves up rather than being said twice: no sentence stands twice in a report,
/// and a section left with one sentence keeps it.
fn summarize(sections: &mut Vec<(String, Vec<Quote>)>, title: &str) {
    // An outline with a summary of its own (a person's edit, a model's plan) keeps it.
    if sections.iter().any(|(t, _)| t.eq_ignore_ascii_case(title)) {
        return;
    }
    let from: Vec<usize> = (0..sections.len())
        .filter(|&i| sections[i].1.len() >= 2)
        .take(SUMMARY_SENTENCES)
        .collect();
    if from.len() < SUMMARY_SENTENCES {
        return;
    }
    let openers: Vec<Quote> = from.iter().map(|&i| sections[i].1.remove(0)).collect();
    sections.insert(0, (title.to_string(), openers));
}

/// Findings for a simple answer: from each document read, its best sentences for the
/// question (from the passages that match it best).
fn direct_findings(question: &str, read: &[ParsedRef], docs: &[Arc<CachedDoc>]) -> Gathered {
    let read_docs: Vec<ReadDoc> = read
        .iter()
        .zip(docs)
        .map(|(r, d)| ReadDoc {
            url: r.url.clone(),
            title: r.title.clone(),
            file_id: r.file_id.clone(),
            passages: best_passages(d, question, 3, 600),
        })
        .collect();
    Gathered {
        findings: from_passages(&read_docs, 8),
        read: read.to_vec(),
        ..Default::default()
    }
}

/// Marks the claims of sentences left out as repeats; returns how many went.
fn left_out(claims: &mut [ClaimRecord], dropped: Vec<(String, String)>) -> usize {
    for (section, text) in &dropped {
        if let Some(c) = claims.iter_mut().find(|c| {
            &c.section == section
                && c.outcome != Outcome::Removed
                && c.rewritten.as_ref().unwrap_or(&c.sentence) == text
        }) {
            c.outcome = Outcome::Removed;
            c.reason = format!("{}; left out: an earlier sentence says the same", c.reason);
        }
    }
    dropped.len()
}

/// The extractive writer's sections, off the async threads (it scores every sentence).
/// `direct`: a one-section answer from the passage that answers best ([`draft_answer`]).
async fn extractive(
    question: &str,
    outline: &[String],
    docs: &[Arc<CachedDoc>],
    per_section: usize,
    direct: bool,
) -> Result<Vec<(String, Vec<Quote>)>, StepError> {
    let (question, outline, docs) = (question.to_string(), outline.to_vec(), docs.to_vec());
    tokio::task::spawn_blocking(move || {
        let weighed: Vec<_> = docs.iter().map(|d| d.weighed()).collect();
        let read: Vec<(&ParsedDoc, &Weighed)> = docs
            .iter()
            .map(|d| &***d)
            .zip(weighed.iter().map(|w| &**w))
            .collect();
        match (direct, outline.as_slice()) {
            (true, [title]) => vec![(title.clone(), draft_answer(&question, &read, per_section))],
            _ => draft_weighed(&question, &outline, &read, per_section),
        }
    })
    .await
    .map_err(|e| StepError::failed_because("writer crashed", e))
}

/// The Markdown a patch adds, as a reader sees it streamed (citation numbers aside).
fn patch_text(p: &Patch) -> String {
    let mut text = String::new();
    for q in &p.quotes {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(q.text.trim());
    }
    if text.is_empty() {
        text = p.note.clone().unwrap_or_default();
    }
    format!("## {}\n\n{text}\n", p.section)
}

/// Stores the report and saves the session as completed; ends the run, or, when the run asked
/// for its report to be delivered, hands the result to `deliver_report` (the research is
/// complete either way: a delivery does not decide it).
pub(super) async fn persist_session(
    ctx: RunCtx,
    deps: Arc<ResearchDeps>,
    _ev: ReportWritten,
) -> Result<Either<Stop<ResearchResult>, DeliverReport>, StepError> {
    let md = ctx.read_state(|s| s.report_markdown.clone());
    let artifacts = deps.tools.artifacts.clone();
    let report_id = ctx
        .run("store_report", || async move {
            artifacts
                .put_artifact("text/markdown", md.as_bytes())
                .await
                .map(|m| m.file_id)
                .map_err(|e| StepError::failed_because("could not store the report", e))
        })
        .await?;
    let state = ctx.edit_state(|s| {
        s.status = SessionStatus::Completed;
        s.artifacts.push(ArtifactRef {
            file_id: report_id.clone(),
            kind: "report".into(),
            url: None,
        });
        s.clone()
    });
    let result = ResearchResult {
        research_id: state.research_id.clone(),
        status: "completed".into(),
        query: state.query.clone(),
        plan: state.plan.clone(),
        report_markdown: state.report_markdown.clone(),
        sources: state.report.sources.clone(),
        report_file_id: Some(report_id),
        parent_id: state.parent.as_ref().map(|p| p.research_id.clone()),
    };
    let settings = state.settings()?;
    if !settings.wants_delivery() {
        deps.save_step(&ctx).await?;
        return Ok(Either::Left(Stop(result)));
    }
    // Recorded as pending with the session's completion, so a reader sees the report is
    // done and on its way.
    let delivery = super::deliver::pending(&ctx, &deps, settings)?;
    ctx.edit_state(|s| s.delivery = Some(delivery));
    deps.save_step(&ctx).await?;
    Ok(Either::Right(DeliverReport { result }))
}
