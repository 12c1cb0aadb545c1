//! A report's Markdown rendered by the export's document model: its body as HTML and its
//! sources as data, so a page (the web UI's) shows the report exactly as the exports do,
//! without a reader of its own.

use axum::Json;
use fathom_export::{ExportError, Fragment, ListedSource};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::extract::ApiJson;

/// The body of `POST /reports/render`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct RenderRequest {
    /// The report as a run writes it (`new_report_markdown`, `report_markdown`).
    pub markdown: String,
}

/// A report rendered for a page of its own.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RenderedReport {
    /// The first H1's text, else "Report".
    pub title: String,
    /// The report's body without its sources list, as the HTML export writes it: markup only
    /// (no scripts, styles or event handlers), all text escaped, headings at their Markdown
    /// level. Each citation is `<a class="cite" href="#source-N" data-n="N">[N]</a>`.
    pub html: String,
    /// The entries of the report's sources list, in order.
    pub sources: Vec<ReportSource>,
    /// The sources the body cites, each once, in the order first cited.
    pub citations: Vec<u32>,
}

/// An entry of a report's sources list: `n. Title — address`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReportSource {
    pub n: u32,
    /// The entry's text before its address.
    pub title: String,
    /// The address the entry ends with (a web page, or `file://` for a local document, with
    /// `#page=N` for one page of a PDF), if it ends with one.
    pub url: Option<String>,
}

impl From<ListedSource> for ReportSource {
    fn from(s: ListedSource) -> Self {
        ReportSource {
            n: s.n,
            title: s.title,
            url: s.url,
        }
    }
}

impl From<Fragment> for RenderedReport {
    fn from(f: Fragment) -> Self {
        RenderedReport {
            title: f.title,
            html: f.html,
            sources: f.sources.into_iter().map(ReportSource::from).collect(),
            citations: f.citations,
        }
    }
}

/// Renders a report's Markdown as the exports do. Nothing is stored.
#[utoipa::path(post, path = "/reports/render", tag = "reports",
    request_body = RenderRequest,
    responses((status = 200, description = "the report's body as HTML, and its sources", body = RenderedReport),
              (status = 422, description = "the report is larger than an export takes", body = crate::ErrorBody)))]
pub async fn render_report(
    ApiJson(req): ApiJson<RenderRequest>,
) -> ApiResult<Json<RenderedReport>> {
    // A long report takes a moment of CPU: off the async workers, as an export is.
    let fragment =
        tokio::task::spawn_blocking(move || fathom_export::render_fragment(&req.markdown))
            .await
            .map_err(|e| {
                ApiError::from(ExportError::Write {
                    what: "the renderer stopped".into(),
                    source: e.into(),
                })
            })??;
    Ok(Json(fragment.into()))
}
