//! `fathom fetch URL`: one URL through the same safe fetcher and parser the research workflow
//! uses, printed as Markdown with its metadata (or as JSON).

use std::process::ExitCode;

use anyhow::anyhow;
use fathom_fetch::SafeFetcher;
use fathom_parse::ParsedDoc;
use fathom_research::tools::web::kind_of;
use serde_json::json;

use crate::app::{App, content_parser};

#[derive(clap::Args)]
pub struct FetchArgs {
    /// The http(s) URL to fetch.
    url: String,
    /// Allow private, loopback and link-local addresses for this call.
    #[arg(long)]
    allow_private_network: bool,
    /// Ignore robots.txt for this call.
    #[arg(long)]
    ignore_robots: bool,
    /// Print the document and its metadata as JSON.
    #[arg(long)]
    json: bool,
}

/// The parsed document as Markdown: the title, then each block under its heading (a PDF's
/// under "Page N").
pub fn to_markdown(doc: &ParsedDoc) -> String {
    let mut out = format!("# {}\n", doc.title);
    let mut heading = String::new();
    for block in &doc.blocks {
        let this = match block.page {
            Some(p) => format!("Page {p}"),
            None => block.heading.clone(),
        };
        if !this.is_empty() && this != heading {
            out.push_str(&format!("\n## {this}\n"));
            heading = this;
        }
        out.push_str(&format!("\n{}\n", block.text));
    }
    out
}

pub async fn fetch(app: &App, args: FetchArgs) -> anyhow::Result<ExitCode> {
    let parser = content_parser(app.config.pdf);
    let mut config = app.config.web.fetch.clone();
    config.allow_private_networks |= args.allow_private_network;
    config.obey_robots &= !args.ignore_robots;
    let mut fetched = SafeFetcher::new(config).fetch(&args.url).await?;
    let kind = kind_of(&fetched).map_err(|e| anyhow!(e))?;
    // The body goes to the parser; only its size is printed.
    let size = fetched.bytes.len();
    let body = std::mem::take(&mut fetched.bytes);
    let doc = parser
        .parse(&fetched.final_url, kind, body, fetched.charset.clone())
        .await
        .map_err(|e| anyhow!("{}: {e}", fetched.final_url))?;
    let markdown = to_markdown(&doc);
    if args.json {
        let out = json!({
            "url": fetched.url,
            "final_url": fetched.final_url,
            "redirects": fetched.redirects,
            "status": fetched.status,
            "content_type": fetched.content_type,
            "charset": fetched.charset,
            "bytes": size,
            "title": doc.title,
            "byline": doc.byline,
            "published": doc.published,
            "canonical_url": doc.canonical_url,
            "site_name": doc.site_name,
            "pages": doc.pages,
            "words": doc.words,
            "markdown": markdown,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        eprintln!(
            "{} ({}, {} bytes, {} words{})",
            fetched.final_url,
            fetched.content_type,
            size,
            doc.words,
            if fetched.redirects.is_empty() {
                String::new()
            } else {
                format!(", {} redirects", fetched.redirects.len())
            }
        );
        for (label, value) in [
            ("by", &doc.byline),
            ("published", &doc.published),
            ("canonical", &doc.canonical_url),
            ("site", &doc.site_name),
        ] {
            if let Some(v) = value {
                eprintln!("  {label}: {v}");
            }
        }
        if let Some(pages) = doc.pages {
            eprintln!("  pages: {pages}");
        }
        print!("{markdown}");
    }
    Ok(ExitCode::SUCCESS)
}
