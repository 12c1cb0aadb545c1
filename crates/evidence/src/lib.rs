//! What a document says about a query or a claim, in rules rather than a model, so the same
//! input gives the same answer in every process (a resumed run decides exactly as an
//! uninterrupted one):
//! - [`best_passages`]: the passages of a document that bear on a query, what a researcher
//!   is shown of each page it reads;
//! - [`check_claim`]: whether the best-matching passage of a document supports a sentence
//!   (numbers, names and negation must agree, most content terms must be there);
//! - [`is_claim`]: whether a sentence states something at all (headings, questions and
//!   transitions do not).
//!
//! Both look at windows of consecutive sentences within a block, from [`sentence_blocks`].

mod claim;
mod passages;
mod statement;

pub use claim::{
    Check, DocSentences, Span, Verdict, best_span, check_claim, closest_sentence, entails,
    plain_text, shared_terms,
};
pub use passages::{Passage, best_passages, cut, opening};
pub use statement::is_claim;

use fathom_parse::ParsedDoc;
use fathom_parse::text::sentences;

/// Sentences of one document considered (a book-length page is cut here).
const MAX_SENTENCES: usize = 5000;

/// One block's sentences, where they stand in the document.
pub(crate) struct SentenceBlock {
    pub(crate) sentences: Vec<String>,
    pub(crate) page: Option<u32>,
    /// Index of its first sentence in document order.
    pub(crate) first: usize,
}

/// The document's blocks (on `page` only, when given) as sentences, at most
/// [`MAX_SENTENCES`] in all; cut here, or taken from `cut` ([`ParsedDoc::block_sentences`]).
pub(crate) fn sentence_blocks(
    doc: &ParsedDoc,
    page: Option<u32>,
    cut: Option<&[Vec<String>]>,
) -> Vec<SentenceBlock> {
    let mut out = Vec::new();
    let mut index = 0;
    for (i, block) in doc
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| page.is_none() || b.page == page)
    {
        if index >= MAX_SENTENCES {
            break;
        }
        let mut sents = match cut.and_then(|c| c.get(i)) {
            Some(cut) => cut[..cut.len().min(MAX_SENTENCES - index)].to_vec(),
            None => sentences(&block.text),
        };
        sents.truncate(MAX_SENTENCES - index);
        let n = sents.len();
        out.push(SentenceBlock {
            sentences: sents,
            page: block.page,
            first: index,
        });
        index += n;
    }
    out
}
