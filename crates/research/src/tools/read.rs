//! Reading a document: `fetch_url` stores the fetched bytes content-addressed, and
//! `parse_content` stores the parsed form. Shared by the offline steps and the researchers.

use fathom_parse::{DocKind, ParsedDoc};
use serde::{Deserialize, Serialize};

use super::{ToolResult, Tools};

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
            .map_err(|e| format!("could not store {url}: {e}"))?;
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
    /// fetch is journaled, its bytes are not in memory).
    pub(crate) async fn parse_raw(
        &self,
        raw: &FetchedRef,
    ) -> ToolResult<(ParsedSummary, ParsedDoc)> {
        let bytes = self
            .artifacts
            .get_artifact(&raw.file_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("fetched content is missing from storage")?
            .bytes;
        self.parse_bytes(raw, bytes).await
    }

    /// A parsed document stored by [`Tools::parse_bytes`].
    pub(crate) async fn parsed_doc(&self, file_id: &str) -> ToolResult<ParsedDoc> {
        let art = self
            .artifacts
            .get_artifact(file_id)
            .await
            .map_err(|e| format!("could not read parsed document {file_id}: {e}"))?
            .ok_or_else(|| format!("parsed document {file_id} is missing from storage"))?;
        serde_json::from_slice(&art.bytes)
            .map_err(|e| format!("parsed document {file_id} is unreadable: {e}"))
    }

    /// Parses a fetched document and stores the parsed form as an artifact.
    pub(crate) async fn parse_bytes(
        &self,
        raw: &FetchedRef,
        bytes: Vec<u8>,
    ) -> ToolResult<(ParsedSummary, ParsedDoc)> {
        let doc = match self.fetcher.parsed(&raw.url, &raw.file_id).await {
            Some(doc) => doc,
            None => self
                .parser
                .parse(&raw.url, raw.kind, bytes, raw.charset.clone())
                .await
                .map_err(|e| format!("{}: {e}", raw.url))?,
        };
        let json = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
        let meta = self
            .artifacts
            .put_artifact("application/vnd.fathom.parsed+json", &json)
            .await
            .map_err(|e| e.to_string())?;
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
        Ok((summary, doc))
    }
}
