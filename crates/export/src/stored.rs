//! Exports of saved research sessions, made once: each export is stored as a content-addressed
//! artifact and recorded in the session under `exports.<format>` with the hash of the report
//! it was made from. Asked again for the same report, the stored file is returned; a changed
//! report (or a newer writer, [`RENDERER_VERSION`]) makes a new one.
//!
//! An export's entry is written into the record in one write of that field alone
//! ([`CollectionStore::set_field`]), so exports of one session at the same moment each keep
//! their entry, and the workflow's own saves of the record keep them too: the session field
//! [`EXPORTS_FIELD`] is the record's, not the snapshot's ([`CollectionStore::replace_where`]'s
//! `carry`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fathom_data::{
    ArtifactStore, CollectionScope, CollectionStore, Filter, Item, SearchQuery, format_timestamp_ms,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{Document, ExportError, Format, MAX_REPORT_BYTES, render};

/// The session record's field that holds its exports, by format name. It belongs to the
/// record: a snapshot of the session saved by the workflow carries it over as it is.
pub const EXPORTS_FIELD: &str = "exports";

/// Bumped when a writer's output changes, so exports made by an older one are made again.
/// 2: an escaped `\[n\]` is text, not a citation; table alignment is a class.
pub const RENDERER_VERSION: u32 = 2;

/// An export of a session's report, as stored.
#[derive(Debug, Clone)]
pub struct StoredExport {
    pub format: Format,
    /// The artifact: lower-case hex sha256 of the bytes.
    pub file_id: String,
    pub bytes: Vec<u8>,
    /// When this export was first made (RFC 3339).
    pub created_at: String,
    /// True when the export had been made before and was returned as stored.
    pub reused: bool,
    /// A file name for it: the report's title, made safe, with the format's extension.
    pub file_name: String,
}

/// Exports of the research sessions saved in one Agent Data collection.
pub struct SessionExports {
    collections: Arc<dyn CollectionStore>,
    artifacts: Arc<dyn ArtifactStore>,
    scope: CollectionScope,
}

impl SessionExports {
    /// Exports of the sessions in `scope` (the research collection), stored in `artifacts`.
    pub fn new(
        collections: Arc<dyn CollectionStore>,
        artifacts: Arc<dyn ArtifactStore>,
        scope: CollectionScope,
    ) -> SessionExports {
        SessionExports {
            collections,
            artifacts,
            scope,
        }
    }

    /// The export of session `research_id`'s report as `format`: the stored one if this
    /// report was exported so before, else made now, stored and recorded in the session.
    pub async fn export(
        &self,
        research_id: &str,
        format: Format,
    ) -> Result<StoredExport, ExportError> {
        let item = self
            .find(research_id)
            .await?
            .ok_or_else(|| ExportError::UnknownSession(research_id.to_string()))?;
        let status = item.data["status"].as_str().unwrap_or("unknown");
        if status != "completed" {
            return Err(ExportError::NotFinished {
                id: research_id.to_string(),
                status: status.to_string(),
            });
        }
        let markdown = item.data["report_markdown"].as_str().unwrap_or("");
        if markdown.trim().is_empty() {
            return Err(ExportError::NoReport(research_id.to_string()));
        }
        if markdown.len() > MAX_REPORT_BYTES {
            return Err(ExportError::TooLarge {
                size: markdown.len(),
                limit: MAX_REPORT_BYTES,
            });
        }
        let report_sha256 = hex::encode(Sha256::digest(markdown.as_bytes()));
        let file_name = file_name(markdown, research_id, format);

        if let Some(done) = self
            .stored(&item.data, format, &report_sha256, &file_name)
            .await?
        {
            return Ok(done);
        }

        // Writing a long report takes a moment of CPU: off the async workers.
        let md = markdown.to_string();
        let language = item.data["settings"]["language"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let bytes = tokio::task::spawn_blocking(move || render(&md, format, &language))
            .await
            .map_err(|e| ExportError::Write {
                what: format!("the {format} writer stopped"),
                source: e.into(),
            })??;
        let meta = self
            .artifacts
            .put_artifact(format.content_type(), &bytes)
            .await?;
        let created_at = format_timestamp_ms(now_ms());
        let entry = json!({
            "file_id": meta.file_id,
            "sha256": meta.file_id,
            "bytes": bytes.len(),
            "content_type": format.content_type(),
            "created_at": created_at,
            "report_sha256": report_sha256,
            "renderer": RENDERER_VERSION,
        });
        self.record(research_id, item, format, entry).await?;
        Ok(StoredExport {
            format,
            file_id: meta.file_id,
            bytes,
            created_at,
            reused: false,
            file_name,
        })
    }

    /// The export recorded in `session` for this report and writer, if its artifact is there.
    async fn stored(
        &self,
        session: &Value,
        format: Format,
        report_sha256: &str,
        file_name: &str,
    ) -> Result<Option<StoredExport>, ExportError> {
        let entry = &session[EXPORTS_FIELD][format.name()];
        let same_report = entry["report_sha256"].as_str() == Some(report_sha256)
            && entry["renderer"].as_u64() == Some(u64::from(RENDERER_VERSION));
        let Some(file_id) = entry["file_id"].as_str().filter(|_| same_report) else {
            return Ok(None);
        };
        let Some(artifact) = self.artifacts.get_artifact(file_id).await? else {
            return Ok(None);
        };
        Ok(Some(StoredExport {
            format,
            file_id: artifact.meta.file_id,
            bytes: artifact.bytes,
            created_at: entry["created_at"].as_str().unwrap_or_default().to_string(),
            reused: true,
            file_name: file_name.to_string(),
        }))
    }

    /// Writes `entry` into the session's exports, in one write of that entry alone.
    async fn record(
        &self,
        research_id: &str,
        read: Item,
        format: Format,
        entry: Value,
    ) -> Result<(), ExportError> {
        let field = format!("{EXPORTS_FIELD}.{}", format.name());
        let mut item = read;
        // Gone when a save of the workflow's replaced the record by a new item (it found two
        // to replace): look it up once more and try again, at most once.
        for _ in 0..2 {
            if self
                .collections
                .set_field(&item.id, &field, entry.clone())
                .await?
                .is_some()
            {
                return Ok(());
            }
            match self.find(research_id).await? {
                Some(again) => item = again,
                // The session was deleted meanwhile: there is nothing to record the export
                // in, and it is stored and returned all the same.
                None => break,
            }
        }
        Ok(())
    }

    async fn find(&self, research_id: &str) -> Result<Option<Item>, ExportError> {
        let page = self
            .collections
            .search(&SearchQuery {
                scope: self.scope.clone(),
                filter: Filter::data_eq("research_id", research_id),
                order_by: Vec::new(),
                offset: 0,
                page_size: 1,
                include_total: false,
            })
            .await?;
        Ok(page.items.into_iter().next())
    }
}

/// `how-does-ownership-work.pdf`: the report's title in lower-case ASCII words (at most 60
/// characters), else `report-<id>`.
fn file_name(markdown: &str, research_id: &str, format: Format) -> String {
    let title = Some(Document::title_of(markdown)).filter(|t| t != "Report");
    let mut slug = String::new();
    for c in title.unwrap_or_default().chars() {
        if c.is_ascii_alphanumeric() {
            if slug.len() >= 60 {
                break;
            }
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        let id: String = research_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        format!("report-{id}.{}", format.extension())
    } else {
        format!("{slug}.{}", format.extension())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_come_from_the_title() {
        assert_eq!(
            file_name("# How does *ownership* work?\n", "abc", Format::Pdf),
            "how-does-ownership-work.pdf"
        );
        assert_eq!(
            file_name("no title\n", "a/b c", Format::Docx),
            "report-abc.docx"
        );
        assert_eq!(file_name("# 日本\n", "x1", Format::Html), "report-x1.html");
    }
}
