//! Every sentence checked against the passage it cites before it reaches the report:
//! offline by an entailment-style check (numbers, negation and names must agree), and, with
//! a model, a sentence the offline check could not confirm by a journaled verifier call. A
//! sentence still unsupported is rewritten from the passage (its closest sentence, verbatim)
//! or removed. A claim written without a citation is cited to the source read that supports
//! it, or rewritten from the closest passage read on the section's subject, or removed. A
//! sentence that states nothing (a heading, a transition) is no claim: it is not rewritten.
//! The session keeps what became of each.

use fathom_engine::StepError;
use std::sync::Arc;

use crate::agent::Models;
use crate::state::RunCtx;
use crate::state::{CheckedBy, ClaimRecord, Outcome};
use crate::tools::read::CachedDoc;
use fathom_evidence::{
    DocSentences, Span, Verdict, closest_sentence, cut, is_claim, plain_text, shared_terms,
};
use fathom_parse::text::terms;
use fathom_report::report::Quote;
use std::collections::{HashMap, HashSet};

/// Characters of a passage put to the verifier (a PDF page without punctuation can be one
/// long "sentence").
const VERIFIER_PASSAGE: usize = 1500;

/// Checks the quotes of `sections` in place, returning a record per sentence: every claim
/// ([`is_claim`]) stands on a passage it cites, is rewritten from one, or is removed; a
/// sentence that states nothing stays only if its cited source carries it. `docs` are the
/// documents read, in the order read (an uncited sentence goes to the first that supports
/// it); `question` says what a rewrite must bear on besides the section's title; `pass`
/// tells one check of the report from another in the verifier's journal keys.
pub(super) async fn check_sections(
    ctx: &RunCtx,
    models: Option<&Models>,
    question: &str,
    sections: &mut [(String, Vec<Quote>)],
    docs: &[Arc<CachedDoc>],
    pass: &str,
) -> Result<Vec<ClaimRecord>, StepError> {
    let mut records = Vec::new();
    // Each document (or page) is read into sentences once for all the claims checked on it.
    let mut read = Reading::default();
    for (si, (title, quotes)) in sections.iter_mut().enumerate() {
        let mut kept: Vec<Quote> = Vec::with_capacity(quotes.len());
        for (qi, quote) in std::mem::take(quotes).into_iter().enumerate() {
            let claim = is_claim(&quote.text);
            // A sentence written without a citation (small models rarely cite) is cited to
            // the first source read that supports it by the same check, else rewritten from
            // the closest passage read, else removed. One that states nothing (a heading, a
            // question, a transition) is not a claim to support: it goes, as it cites nothing.
            let Some(doc) = read_at(docs, &quote.source_url) else {
                let (record, quote) = if claim {
                    uncited(quote, title, question, docs, &mut read, &kept)
                } else {
                    (not_a_claim(title, &quote, "it cites nothing"), None)
                };
                records.push(record);
                kept.extend(quote);
                continue;
            };
            let mut check = read.check(&quote.text, doc, quote.page);
            // The first source failing, a further source the sentence cites may carry it.
            let mut quote = quote;
            if check.verdict == Verdict::Unsupported
                && let Some((i, c)) = quote.also.iter().enumerate().find_map(|(i, a)| {
                    let c = read.check(&quote.text, read_at(docs, &a.url)?, None);
                    (c.verdict == Verdict::Supported).then_some((i, c))
                })
            {
                let first = quote.also.remove(i);
                quote.source_url = first.url;
                quote.source_title = first.title;
                quote.page = None;
                check = c;
            }
            if !claim && check.verdict == Verdict::Unsupported {
                records.push(not_a_claim(
                    title,
                    &quote,
                    &format!("its source does not carry it ({})", check.reason),
                ));
                continue;
            }
            let (mut verdict, mut reason, mut by) =
                (check.verdict, check.reason, CheckedBy::Offline);
            if verdict == Verdict::Unsupported
                && let (Some(models), Some(span)) = (models, &check.span)
            {
                let key = format!("llm:verify:{pass}:{}:{}", si + 1, qi + 1);
                let passage = cut(&span.text, VERIFIER_PASSAGE);
                let judged =
                    crate::agent::verifier::judge(ctx, models, &key, &quote.text, &passage).await?;
                if let Some((supported, why)) = judged {
                    by = CheckedBy::Model;
                    reason = why;
                    if supported {
                        verdict = Verdict::Supported;
                    }
                }
            }
            let rewrite = (verdict == Verdict::Unsupported)
                .then(|| {
                    check
                        .span
                        .as_ref()
                        .and_then(|s| closest_sentence(&quote.text, s))
                })
                .flatten()
                .filter(|s| !kept.iter().any(|q| &q.text == s));
            let outcome = match (&verdict, &rewrite) {
                (Verdict::Supported, _) => Outcome::Kept,
                (_, Some(_)) => Outcome::Rewritten,
                (_, None) => Outcome::Removed,
            };
            records.push(ClaimRecord {
                section: title.clone(),
                sentence: quote.text.clone(),
                source_url: quote.source_url.clone(),
                span: check.span.clone(),
                verdict,
                outcome,
                rewritten: rewrite.clone(),
                checked_by: by,
                reason,
            });
            match outcome {
                Outcome::Kept | Outcome::Attributed => kept.push(Quote {
                    // A PDF sentence cites the page its passage is on.
                    page: quote.page.or(check.span.as_ref().and_then(|s| s.page)),
                    ..quote
                }),
                Outcome::Rewritten => kept.push(Quote {
                    text: rewrite.unwrap_or_default(),
                    page: check.span.as_ref().and_then(|s| s.page).or(quote.page),
                    // The passage is the first source's; the others did not say it.
                    also: Vec::new(),
                    ..quote
                }),
                Outcome::Removed => {}
            }
        }
        *quotes = kept;
    }
    Ok(records)
}

/// The record of a sentence that states nothing ([`is_claim`]), left out because `why`.
fn not_a_claim(section: &str, quote: &Quote, why: &str) -> ClaimRecord {
    ClaimRecord {
        section: section.to_string(),
        sentence: quote.text.clone(),
        source_url: quote.source_url.clone(),
        span: None,
        verdict: Verdict::Unsupported,
        outcome: Outcome::Removed,
        rewritten: None,
        checked_by: CheckedBy::Offline,
        reason: format!("not a claim (a heading, a question or a transition), and {why}"),
    }
}

/// What becomes of a claim written without a citation: cited to the first document read that
/// supports it; else rewritten from the sentence of the documents read that restates it best
/// ([`closest_sentence`] of each document's best passage), when that sentence bears on the
/// section ([`on_topic`]) and is not in it already; else removed.
fn uncited(
    quote: Quote,
    section: &str,
    question: &str,
    docs: &[Arc<CachedDoc>],
    read: &mut Reading,
    kept: &[Quote],
) -> (ClaimRecord, Option<Quote>) {
    if let Some((doc, span)) = attribute(&quote.text, docs, read) {
        let record = ClaimRecord {
            section: section.to_string(),
            sentence: quote.text.clone(),
            source_url: doc.url.clone(),
            span: Some(span.clone()),
            verdict: Verdict::Supported,
            outcome: Outcome::Attributed,
            rewritten: None,
            checked_by: CheckedBy::Offline,
            reason: "written without a citation; this source supports it".into(),
        };
        let quote = Quote {
            source_url: doc.url.clone(),
            source_title: doc.title.clone(),
            page: span.page,
            also: Vec::new(),
            ..quote
        };
        return (record, Some(quote));
    }
    // (shared terms, document, its passage, the sentence)
    let mut best: Option<(usize, &CachedDoc, Span, String)> = None;
    for doc in docs {
        let Some(span) = doc.sentences().best_span(&quote.text) else {
            continue;
        };
        let Some(sentence) = closest_sentence(&quote.text, &span) else {
            continue;
        };
        if !on_topic(&sentence, section, question) || kept.iter().any(|q| q.text == sentence) {
            continue;
        }
        let shared = shared_terms(&quote.text, &sentence);
        if best.as_ref().is_none_or(|(n, ..)| shared > *n) {
            best = Some((shared, &**doc, span, sentence));
        }
    }
    let Some((_, doc, span, sentence)) = best else {
        let why = docs
            .first()
            .map(|d| read.check(&quote.text, d, None).reason)
            .unwrap_or_else(|| "nothing was read".into());
        let record = ClaimRecord {
            section: section.to_string(),
            sentence: quote.text.clone(),
            source_url: String::new(),
            span: None,
            verdict: Verdict::Unsupported,
            outcome: Outcome::Removed,
            rewritten: None,
            checked_by: CheckedBy::Offline,
            reason: format!(
                "written without a citation; no source read supports it (first source: {why}), \
                 and no sentence read restates it on this section's subject"
            ),
        };
        return (record, None);
    };
    let record = ClaimRecord {
        section: section.to_string(),
        sentence: quote.text.clone(),
        source_url: doc.url.clone(),
        span: Some(span.clone()),
        verdict: Verdict::Unsupported,
        outcome: Outcome::Rewritten,
        rewritten: Some(sentence.clone()),
        checked_by: CheckedBy::Offline,
        reason: format!(
            "written without a citation; no source read supports it ({}); rewritten from the \
             closest passage read",
            read.check(&quote.text, doc, None).reason
        ),
    };
    let quote = Quote {
        text: sentence,
        source_url: doc.url.clone(),
        source_title: doc.title.clone(),
        page: span.page,
        also: Vec::new(),
    };
    (record, Some(quote))
}

/// Whether a sentence of a source bears on a section: it shares a content term with the
/// section's title, or two with the question (a title like "Overview" names no subject).
fn on_topic(sentence: &str, section: &str, question: &str) -> bool {
    let have: HashSet<String> = terms(&plain_text(sentence)).into_iter().collect();
    let shares = |text: &str| {
        terms(text)
            .into_iter()
            .collect::<HashSet<_>>()
            .iter()
            .filter(|t| have.contains(*t))
            .count()
    };
    shares(section) >= 1 || shares(question) >= 2
}

/// The document read at `url`.
fn read_at<'a>(docs: &'a [Arc<CachedDoc>], url: &str) -> Option<&'a CachedDoc> {
    docs.iter().find(|d| d.url == url).map(|d| &**d)
}

/// The first document read whose passage supports `sentence`, with that passage.
fn attribute<'a>(
    sentence: &str,
    docs: &'a [Arc<CachedDoc>],
    read: &mut Reading,
) -> Option<(&'a CachedDoc, Span)> {
    docs.iter().find_map(|doc| {
        let check = read.check(sentence, doc, None);
        (check.verdict == Verdict::Supported)
            .then_some(check.span)
            .flatten()
            .map(|span| (&**doc, span))
    })
}

/// The documents' sentences as read for checking, by URL and page: a whole document's are
/// kept with the document (see [`CachedDoc`]), a page's are read here once.
#[derive(Default)]
struct Reading(HashMap<(String, u32), DocSentences>);

impl Reading {
    fn check(&mut self, claim: &str, doc: &CachedDoc, page: Option<u32>) -> fathom_evidence::Check {
        match page {
            None => doc.sentences().check(claim, None),
            Some(p) => self
                .0
                .entry((doc.url.clone(), p))
                .or_insert_with(|| DocSentences::of(doc, page))
                .check(claim, page),
        }
    }
}
