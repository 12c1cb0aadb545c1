//! `fathom fetch URL`: one URL through the same safe fetcher and parser the research workflow
//! uses, printed as Markdown with its metadata (or as JSON).

use std::process::ExitCode;

use anyhow::anyhow;
use fathom_fetch::SafeFetcher;
use fathom_research::parse::{ParsedDoc, parse_content_as};
use fathom_research::web::kind_of;
use serde_json::json;

use crate::research::{Context, load_config};

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

/// The parsed document as Markdown: the title, then each block under its heading.
pub fn to_markdown(doc: &ParsedDoc) -> String {
    let mut out = format!("# {}\n", doc.title);
    let mut heading = "";
    for block in &doc.blocks {
        if !block.heading.is_empty() && block.heading != heading {
            heading = &block.heading;
            out.push_str(&format!("\n## {heading}\n"));
        }
        out.push_str(&format!("\n{}\n", block.text));
    }
    out
}

pub async fn fetch(ctx: &Context, args: FetchArgs) -> anyhow::Result<ExitCode> {
    let mut config = load_config(ctx)?.web.fetch;
    config.allow_private_networks |= args.allow_private_network;
    config.obey_robots &= !args.ignore_robots;
    let fetched = SafeFetcher::new(config).fetch(&args.url).await?;
    let kind = kind_of(&fetched).map_err(|e| anyhow!(e))?;
    let (url, bytes, charset) = (
        fetched.final_url.clone(),
        fetched.bytes.clone(),
        fetched.charset.clone(),
    );
    let doc = tokio::task::spawn_blocking(move || {
        parse_content_as(&url, kind, &bytes, charset.as_deref())
    })
    .await?
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
            "bytes": fetched.bytes.len(),
            "title": doc.title,
            "words": doc.words,
            "markdown": markdown,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        eprintln!(
            "{} ({}, {} bytes, {} words{})",
            fetched.final_url,
            fetched.content_type,
            fetched.bytes.len(),
            doc.words,
            if fetched.redirects.is_empty() {
                String::new()
            } else {
                format!(", {} redirects", fetched.redirects.len())
            }
        );
        print!("{markdown}");
    }
    Ok(ExitCode::SUCCESS)
}
