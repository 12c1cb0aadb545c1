//! Reading a document: `fetch_url` stores the fetched bytes content-addressed, and
//! `parse_content` stores the parsed form. Shared by the offline steps and the researchers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use fathom_evidence::DocSentences;
use fathom_parse::{DocKind, ParsedDoc};
use fathom_report::writer::Weighed;
use serde::{Deserialize, Serialize};

use super::{ToolResult, Tools, storage_said};

/// Words of documents the [`DocCache`] keeps at most (with what is worked out from them,
/// about 200 bytes a word): a few runs' worth of documents.
const CACHE_WORDS: usize = 120_000;
/// Parses remembered at most (each a few hundred bytes).
const CACHE_PARSES: usize = 4096;

/// A document read, parsed, with what the writer and the claim checker work out from it,
/// each the first time it is asked for.
pub struct CachedDoc {
    doc: ParsedDoc,
    /// Its blocks cut into sentences, once for both uses below (UAX #29 is most of their
    /// work).
    cut: OnceLock<Vec<Vec<String>>>,
    weighed: OnceLock<Arc<Weighed>>,
    sentences: OnceLock<Arc<DocSentences>>,
}

impl std::ops::Deref for CachedDoc {
    type Target = ParsedDoc;
    fn deref(&self) -> &ParsedDoc {
        &self.doc
    }
}

impl CachedDoc {
    fn new(doc: ParsedDoc) -> CachedDoc {
        CachedDoc {
            doc,
            cut: OnceLock::new(),
            weighed: OnceLock::new(),
            sentences: OnceLock::new(),
        }
    }

    fn cut(&self) -> &[Vec<String>] {
        self.cut.get_or_init(|| self.doc.block_sentences())
    }

    /// Its sentences as the extractive writer weighs them.
    pub fn weighed(&self) -> Arc<Weighed> {
        self.weighed
            .get_or_init(|| Arc::new(Weighed::of_cut(&self.doc, self.cut())))
            .clone()
    }

    /// Its sentences as the claim checker reads them (the whole document).
    pub fn sentences(&self) -> Arc<DocSentences> {
        self.sentences
            .get_or_init(|| Arc::new(DocSentences::of_cut(&self.doc, None, self.cut())))
            .clone()
    }
}

/// The documents this process read lately, by the file id of their parsed form, and the
/// parses it stored, by the file id of the bytes parsed. Runs over one corpus read many of
/// the same documents, and reading a stored document back (its JSON, then its sentences) is
/// most of an offline run's work. Stored artifacts never change (their id is their
/// content's hash), so what is kept here never goes stale; the least recently used goes
/// first when the bounds are reached.
#[derive(Clone, Default)]
pub struct DocCache(Arc<Mutex<CacheInner>>);

#[derive(Default)]
struct CacheInner {
    docs: HashMap<String, (u64, Arc<CachedDoc>)>,
    words: usize,
    parses: HashMap<String, (u64, ParsedSummary)>,
    tick: u64,
}

impl DocCache {
    /// Lets go of everything kept: for a process gone idle, whose next run is as likely to
    /// come in an hour as in a minute (reading a run's documents back costs it about 10 ms).
    pub fn forget(&self) {
        let mut c = self.lock();
        let kept = (std::mem::take(&mut c.docs), std::mem::take(&mut c.parses));
        c.words = 0;
        drop(c);
        // Freed after the lock is let go: a run reading meanwhile does not wait for it.
        drop(kept);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn doc(&self, file_id: &str) -> Option<Arc<CachedDoc>> {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        c.docs.get_mut(file_id).map(|(used, d)| {
            *used = tick;
            d.clone()
        })
    }

    fn keep_doc(&self, file_id: &str, doc: Arc<CachedDoc>) {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        let words = doc.words.max(1);
        if let Some((_, old)) = c.docs.insert(file_id.to_string(), (tick, doc)) {
            c.words -= old.words.max(1);
        }
        c.words += words;
        while c.words > CACHE_WORDS && c.docs.len() > 1 {
            let Some(oldest) = c
                .docs
                .iter()
                .filter(|(id, _)| id.as_str() != file_id)
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            if let Some((_, d)) = c.docs.remove(&oldest) {
                c.words -= d.words.max(1);
            }
        }
    }

    fn parse(&self, raw_file_id: &str) -> Option<ParsedSummary> {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        c.parses.get_mut(raw_file_id).map(|(used, p)| {
            *used = tick;
            p.clone()
        })
    }

    fn keep_parse(&self, raw_file_id: &str, summary: &ParsedSummary) {
        let mut c = self.lock();
        c.tick += 1;
        let tick = c.tick;
        if c.parses.len() >= CACHE_PARSES && !c.parses.contains_key(raw_file_id) {
            let oldest = c
                .parses
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                c.parses.remove(&oldest);
            }
        }
        c.parses
            .insert(raw_file_id.to_string(), (tick, summary.clone()));
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FetchedRef {
    pub(crate) url: String,
    pub(crate) kind: DocKind,
    pub(crate) size: usize,
    pub(crate) file_id: String,
    #[serde(default)]
    pub(crate) charset: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ParsedSummary {
    pub(crate) title: String,
    pub(crate) words: usize,
    pub(crate) blocks: usize,
    pub(crate) file_id: String,
    // What a citation shows besides the title; absent in journals from before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) byline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) published: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) canonical_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) site_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pages: Option<u32>,
    /// How the page's text was taken (main content, or the full page and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) extraction: Option<fathom_parse::Extraction>,
    /// Parts of the source that could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) unread: Vec<String>,
}

impl ParsedSummary {
    /// The `parse_content` result as a reader sees it: what was read, how, and what not.
    pub(crate) fn to_text(&self) -> String {
        let mut text = format!(
            "Parsed \"{}\": {} words in {} blocks",
            self.title, self.words, self.blocks
        );
        if let Some(x) = &self.extraction {
            text.push_str(&format!(" ({})", x.reason));
        }
        for u in &self.unread {
            text.push_str(&format!("\nNot read: {u}"));
        }
        text
    }
}

/// `fetch_url`: the document's bytes, stored content-addressed; the bytes are handed back
/// too, for a caller that parses them at once.
impl Tools {
    pub(crate) async fn fetch_raw(&self, url: &str) -> ToolResult<(FetchedRef, Vec<u8>)> {
        let f = self.fetcher.fetch(url).await?;
        let meta = self
            .artifacts
            .put_artifact(f.kind.content_type(), &f.bytes)
            .await
            .map_err(|e| format!("could not store {url}: {}", storage_said(e)))?;
        let raw = FetchedRef {
            url: f.url,
            kind: f.kind,
            size: f.bytes.len(),
            file_id: meta.file_id,
            charset: f.charset,
        };
        Ok((raw, f.bytes))
    }

    /// `parse_content` of a stored fetch (its bytes read back from storage: after a crash the
    /// fetch is journaled, its bytes are not in memory). A parse this process stored before
    /// is not done again.
    pub(crate) async fn parse_raw(&self, raw: &FetchedRef) -> ToolResult<ParsedSummary> {
        if let Some(summary) = self.docs.parse(&raw.file_id) {
            return Ok(summary);
        }
        // A document the corpus index parsed, unchanged since: its bytes are not needed.
        if let Some(doc) = self.fetcher.parsed(&raw.url, &raw.file_id).await {
            return self
                .store_parsed(raw, doc)
                .await
                .map(|(summary, _)| summary);
        }
        let bytes = self
            .artifacts
            .get_artifact(&raw.file_id)
            .await
            .map_err(storage_said)?
            .ok_or("fetched content is missing from storage")?
            .bytes;
        let doc = self.parse_fresh(raw, bytes).await?;
        self.store_parsed(raw, doc)
            .await
            .map(|(summary, _)| summary)
    }

    /// A parsed document stored by [`Tools::parse_bytes`], with what is worked out from it.
    pub(crate) async fn read_doc(&self, file_id: &str) -> ToolResult<Arc<CachedDoc>> {
        if let Some(doc) = self.docs.doc(file_id) {
            return Ok(doc);
        }
        let art = self
            .artifacts
            .get_artifact(file_id)
            .await
            .map_err(|e| {
                format!(
                    "could not read parsed document {file_id}: {}",
                    storage_said(e)
                )
            })?
            .ok_or_else(|| format!("parsed document {file_id} is missing from storage"))?;
        let doc: ParsedDoc = serde_json::from_slice(&art.bytes)
            .map_err(|e| format!("parsed document {file_id} is unreadable: {e}"))?;
        let doc = Arc::new(CachedDoc::new(doc));
        self.docs.keep_doc(file_id, doc.clone());
        Ok(doc)
    }

    /// A parsed document stored by [`Tools::parse_bytes`].
    pub(crate) async fn parsed_doc(&self, file_id: &str) -> ToolResult<ParsedDoc> {
        self.read_doc(file_id).await.map(|d| d.doc.clone())
    }

    /// Parses a fetched document and stores the parsed form as an artifact.
    pub(crate) async fn parse_bytes(
        &self,
        raw: &FetchedRef,
        bytes: Vec<u8>,
    ) -> ToolResult<(ParsedSummary, Arc<CachedDoc>)> {
        let doc = match self.fetcher.parsed(&raw.url, &raw.file_id).await {
            Some(doc) => doc,
            None => self.parse_fresh(raw, bytes).await?,
        };
        self.store_parsed(raw, doc).await
    }

    /// Parses `raw`'s bytes (the corpus index, which may hold its parse, was asked first).
    async fn parse_fresh(&self, raw: &FetchedRef, bytes: Vec<u8>) -> ToolResult<ParsedDoc> {
        self.parser
            .parse(&raw.url, raw.kind, bytes, raw.charset.clone())
            .await
            .map_err(|e| format!("{}: {e}", raw.url))
    }

    /// Stores the parsed form of `raw` as an artifact and remembers it.
    async fn store_parsed(
        &self,
        raw: &FetchedRef,
        doc: ParsedDoc,
    ) -> ToolResult<(ParsedSummary, Arc<CachedDoc>)> {
        let json = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
        let meta = self
            .artifacts
            .put_artifact("application/vnd.fathom.parsed+json", &json)
            .await
            .map_err(storage_said)?;
        let summary = ParsedSummary {
            title: doc.title.clone(),
            words: doc.words,
            blocks: doc.blocks.len(),
            file_id: meta.file_id,
            byline: doc.byline.clone(),
            published: doc.published.clone(),
            canonical_url: doc.canonical_url.clone(),
            site_name: doc.site_name.clone(),
            pages: doc.pages,
            extraction: doc.extraction.clone(),
            unread: doc.unread.clone(),
        };
        let doc = Arc::new(CachedDoc::new(doc));
        self.docs.keep_parse(&raw.file_id, &summary);
        self.docs.keep_doc(&summary.file_id, doc.clone());
        Ok((summary, doc))
    }
}
