//! A standalone HTML page: one file with its styles inline, nothing loaded from elsewhere (a
//! Content-Security-Policy says so to the browser too), each citation a link to its entry in
//! the sources list, and each source's address a link. The same markup, without the page and
//! the sources list, is the fragment a page of its own shows (the web UI's). Every attribute
//! is a class, an address or a number, so a page whose policy forbids inline styles shows it
//! whole. The model bounds nesting, so the recursion here is bounded too.

use crate::document::{Align, Block, Document, Inline, ListItem};

const STYLE: &str = "
:root { color-scheme: light; }
body { margin: 0; background: #fff; color: #1b1b1b; font: 16px/1.6 system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; }
main { max-width: 46rem; margin: 0 auto; padding: 2.5rem 1.25rem 4rem; }
h1, h2, h3, h4, h5, h6 { line-height: 1.25; margin: 1.8em 0 0.5em; }
h1 { font-size: 2rem; margin-top: 0; }
h2 { font-size: 1.45rem; border-bottom: 1px solid #d6d6d6; padding-bottom: 0.2em; }
h3 { font-size: 1.2rem; }
p, ul, ol, table, pre, blockquote { margin: 0 0 1em; }
a { color: #0b57d0; }
a.cite { text-decoration: none; font-size: 0.85em; white-space: nowrap; }
code, pre { font-family: ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace; font-size: 0.9em; }
code { background: #f1f1f1; padding: 0.1em 0.3em; border-radius: 3px; }
pre { background: #f4f4f4; padding: 0.8em 1em; overflow-x: auto; border-radius: 4px; white-space: pre-wrap; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #c8c8c8; padding: 0.35em 0.6em; vertical-align: top; }
th { background: #f0f0f0; text-align: left; }
.align-center { text-align: center; }
.align-right { text-align: right; }
blockquote { border-left: 4px solid #d0d0d0; margin-left: 0; padding-left: 1em; color: #444; }
hr { border: 0; border-top: 1px solid #d0d0d0; margin: 2em 0; }
li[id]:target { background: #fff3c4; }
ol.sources li { overflow-wrap: anywhere; }
@media print { main { max-width: none; padding: 0; } a { color: inherit; } }
";

/// The page for `doc`, as UTF-8 bytes.
pub fn write(doc: &Document) -> Vec<u8> {
    let mut out = String::with_capacity(16 * 1024);
    out.push_str(&format!(
        "<!DOCTYPE html>\n<html lang=\"{}\">\n<head>\n<meta charset=\"utf-8\" />\n",
        escape(&doc.language)
    ));
    out.push_str(
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\" />\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\" />\n\
         <meta name=\"generator\" content=\"Fathom\" />\n",
    );
    out.push_str(&format!("<title>{}</title>\n", escape(&doc.title)));
    out.push_str("<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<main>\n");
    let sources_list = doc.sources_list();
    for (i, b) in doc.blocks.iter().enumerate() {
        block(&mut out, b, Some(i) == sources_list);
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out.into_bytes()
}

/// The report's body (without its sources list) as the page writes it, for a page of its own.
pub fn fragment(doc: &Document) -> String {
    let mut out = String::with_capacity(16 * 1024);
    for b in doc.body() {
        block(&mut out, b, false);
    }
    out
}

fn block(out: &mut String, b: &Block, is_sources: bool) {
    match b {
        Block::Heading { level, text } => {
            let level = (*level).clamp(1, 6);
            out.push_str(&format!("<h{level}>"));
            inlines(out, text);
            out.push_str(&format!("</h{level}>\n"));
        }
        Block::Paragraph(text) => {
            out.push_str("<p>");
            inlines(out, text);
            out.push_str("</p>\n");
        }
        Block::List { start, items } => list(out, *start, items, is_sources),
        Block::Table {
            align,
            header,
            rows,
        } => {
            out.push_str("<table>\n");
            if !header.is_empty() {
                out.push_str("<thead><tr>");
                for (i, cell) in header.iter().enumerate() {
                    out.push_str(&format!("<th{}>", align_attr(align.get(i))));
                    inlines(out, cell);
                    out.push_str("</th>");
                }
                out.push_str("</tr></thead>\n");
            }
            out.push_str("<tbody>\n");
            for row in rows {
                out.push_str("<tr>");
                for (i, cell) in row.iter().enumerate() {
                    out.push_str(&format!("<td{}>", align_attr(align.get(i))));
                    inlines(out, cell);
                    out.push_str("</td>");
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody>\n</table>\n");
        }
        Block::Code { language, text } => {
            out.push_str("<pre><code");
            if let Some(lang) = language {
                out.push_str(&format!(" class=\"language-{}\"", escape(lang)));
            }
            out.push('>');
            out.push_str(&escape(text));
            out.push_str("</code></pre>\n");
        }
        Block::Quote(blocks) => {
            out.push_str("<blockquote>\n");
            for b in blocks.iter() {
                block(out, b, false);
            }
            out.push_str("</blockquote>\n");
        }
        Block::Rule => out.push_str("<hr />\n"),
    }
}

fn list(out: &mut String, start: Option<u64>, items: &[ListItem], sources: bool) {
    let class = if sources { " class=\"sources\"" } else { "" };
    match start {
        Some(1) => out.push_str(&format!("<ol{class}>\n")),
        Some(n) => out.push_str(&format!("<ol{class} start=\"{n}\">\n")),
        None => out.push_str("<ul>\n"),
    }
    for item in items {
        match &item.anchor {
            Some(id) => out.push_str(&format!("<li id=\"{}\">", escape(id))),
            None => out.push_str("<li>"),
        }
        // A one-paragraph item is written without its <p>, as Markdown's tight lists are.
        match item.blocks.as_slice() {
            [Block::Paragraph(text)] => inlines(out, text),
            blocks => {
                for b in blocks {
                    block(out, b, false);
                }
            }
        }
        out.push_str("</li>\n");
    }
    out.push_str(if start.is_some() {
        "</ol>\n"
    } else {
        "</ul>\n"
    });
}

fn align_attr(align: Option<&Align>) -> &'static str {
    match align {
        Some(Align::Center) => " class=\"align-center\"",
        Some(Align::Right) => " class=\"align-right\"",
        _ => "",
    }
}

fn inlines(out: &mut String, text: &[Inline]) {
    for inline in text {
        match inline {
            Inline::Run(run) => {
                let mut open = Vec::new();
                if let Some(href) = &run.link {
                    let external = !href.starts_with('#');
                    out.push_str(&format!(
                        "<a href=\"{}\"{}>",
                        escape(href),
                        if external {
                            " rel=\"noopener noreferrer\""
                        } else {
                            ""
                        }
                    ));
                    open.push("</a>");
                }
                for (on, tag, close) in [
                    (run.style.bold, "<strong>", "</strong>"),
                    (run.style.italic, "<em>", "</em>"),
                    (run.style.code, "<code>", "</code>"),
                ] {
                    if on {
                        out.push_str(tag);
                        open.push(close);
                    }
                }
                out.push_str(&escape(&run.text));
                for close in open.iter().rev() {
                    out.push_str(close);
                }
            }
            Inline::Citation(n) => out.push_str(&format!(
                "<a class=\"cite\" href=\"#source-{n}\" data-n=\"{n}\" aria-label=\"Source {n}\">[{n}]</a>"
            )),
            Inline::LineBreak => out.push_str("<br />"),
        }
    }
}

/// Text and attribute values made literal. Control characters HTML forbids are dropped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_citations_link_to_their_source() {
        let doc = Document::from_markdown(
            "# A <b> & \"c\"\n\nSaid so [1].\n\n## Sources\n\n1. Page — `https://a.test/?q=1&r=2`\n",
        );
        let html = String::from_utf8(write(&doc)).unwrap();
        assert!(
            html.contains("<title>A &lt;b&gt; &amp; &quot;c&quot;</title>"),
            "{html}"
        );
        assert!(
            html.contains("<a class=\"cite\" href=\"#source-1\""),
            "{html}"
        );
        assert!(html.contains("<li id=\"source-1\">"), "{html}");
        assert!(
            html.contains("href=\"https://a.test/?q=1&amp;r=2\""),
            "{html}"
        );
    }

    #[test]
    fn the_fragment_is_the_body_as_the_page_writes_it() {
        let doc = Document::from_markdown(
            "# T\n\n| a | b | c |\n|:-:|--:|:--|\n| <i> | \\[1\\] | [1] |\n\n## Sources\n\n1. S — `https://a.test/`\n",
        );
        let fragment = fragment(&doc);
        let page = String::from_utf8(write(&doc)).unwrap();
        assert!(page.contains(&fragment), "{fragment}\n{page}");
        assert!(
            !fragment.contains("id=\"source-1\""),
            "no sources list: {fragment}"
        );
        assert!(!fragment.contains("style="), "{fragment}");
        assert!(
            fragment.contains(
                "<th class=\"align-center\">a</th><th class=\"align-right\">b</th><th>c</th>"
            ),
            "{fragment}"
        );
        assert!(
            fragment.contains("<td class=\"align-center\">&lt;i&gt;</td><td class=\"align-right\">[1]</td><td>\
                 <a class=\"cite\" href=\"#source-1\" data-n=\"1\" aria-label=\"Source 1\">[1]</a></td>"),
            "{fragment}"
        );
    }
}
