//! The report's Markdown read once into a small document model that the HTML, PDF and DOCX
//! writers share: headings, paragraphs of styled runs, lists, tables, code blocks, quotes.
//!
//! Two things a report means beyond plain Markdown are resolved here, so every format shows
//! them alike: the list under the closing `## Sources` heading (in any language the report
//! writes, `## Quellen` say) is the sources list (each
//! item anchored as `source-N`, its address, written as a code span, made a link), and a
//! `[n]` in the text that names a listed source is a citation.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// Lists and quotes nested deeper than this are laid out at this depth: their text is kept,
/// and the writers, which recurse, stay within a bounded stack.
pub const MAX_NESTING: usize = 8;

/// Text style of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    pub bold: bool,
    pub italic: bool,
    pub code: bool,
}

/// A piece of text in one style, maybe a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub text: String,
    pub style: Style,
    /// An `http(s)`, `mailto` or `file` address, or a `#fragment`; other schemes are dropped.
    pub link: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inline {
    Run(Run),
    /// `[n]`, naming source n of the sources list.
    Citation(u32),
    LineBreak,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListItem {
    /// `source-N` for an item of the sources list.
    pub anchor: Option<String>,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    None,
    Left,
    Center,
    Right,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    Heading {
        /// 1 to 6.
        level: u8,
        text: Vec<Inline>,
    },
    Paragraph(Vec<Inline>),
    List {
        /// The first number of an ordered list; `None` for bullets.
        start: Option<u64>,
        items: Vec<ListItem>,
    },
    Table {
        align: Vec<Align>,
        header: Vec<Vec<Inline>>,
        rows: Vec<Vec<Vec<Inline>>>,
    },
    Code {
        language: Option<String>,
        text: String,
    },
    Quote(Vec<Block>),
    Rule,
}

/// A report ready to be written out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The first H1's text, else "Report".
    pub title: String,
    pub blocks: Vec<Block>,
    /// The numbers of the sources list, in order.
    pub sources: Vec<u32>,
    /// The report's language (ISO 639-1), for the file's own language tag.
    pub language: String,
}

impl Document {
    /// Reads `markdown` (CommonMark with tables). Raw HTML is kept as text, never markup;
    /// images become their description.
    pub fn from_markdown(markdown: &str) -> Document {
        let mut events = Parser::new_ext(markdown, Options::ENABLE_TABLES).peekable();
        let mut blocks = read_blocks(&mut events, 0);
        let sources = mark_sources(&mut blocks);
        if !sources.is_empty() {
            for b in &mut blocks {
                mark_citations(b, &sources);
            }
        }
        let title = blocks
            .iter()
            .find_map(|b| match b {
                Block::Heading { level: 1, text } => {
                    Some(plain_text(text)).filter(|t| !t.trim().is_empty())
                }
                _ => None,
            })
            .unwrap_or_else(|| "Report".to_string());
        Document {
            title,
            blocks,
            sources,
            language: fathom_report::lang::DEFAULT.to_string(),
        }
    }

    /// The title [`Document::from_markdown`] finds, reading no further than the heading.
    pub fn title_of(markdown: &str) -> String {
        let mut events = Parser::new_ext(markdown, Options::ENABLE_TABLES).peekable();
        // Each pass consumes at least one event.
        while let Some(ev) = events.next() {
            if let Event::Start(Tag::Heading {
                level: HeadingLevel::H1,
                ..
            }) = ev
            {
                let title = plain_text(&read_inlines(&mut events));
                if !title.trim().is_empty() {
                    return title;
                }
            }
        }
        "Report".to_string()
    }
}

/// The text of `inlines` with no styling; citations as `[n]`.
pub fn plain_text(inlines: &[Inline]) -> String {
    let mut out = String::new();
    for i in inlines {
        match i {
            Inline::Run(r) => out.push_str(&r.text),
            Inline::Citation(n) => out.push_str(&format!("[{n}]")),
            Inline::LineBreak => out.push(' '),
        }
    }
    out
}

/// An address a reader may follow from an exported file: web and mail addresses, local files
/// (a corpus's sources) and places in the document. Anything else (`javascript:`, `data:`)
/// is not a link.
pub fn safe_link(url: &str) -> Option<String> {
    let url = url.trim();
    if url.starts_with('#') && url.len() > 1 {
        return Some(url.to_string());
    }
    let scheme = url.split_once(':')?.0.to_ascii_lowercase();
    matches!(scheme.as_str(), "http" | "https" | "mailto" | "file")
        .then(|| url.to_string())
        .filter(|u| !u.chars().any(char::is_whitespace))
}

type Events<'a> = std::iter::Peekable<Parser<'a>>;

/// Blocks until the end tag of the container they are in (or the end of input). Below
/// [`MAX_NESTING`] containers are not opened (no recursion): their blocks join this one's.
fn read_blocks(events: &mut Events, depth: usize) -> Vec<Block> {
    let mut out = Vec::new();
    let deep = depth >= MAX_NESTING;
    // Containers passed through at the depth bound, whose end tags are not this one's.
    let mut unopened = 0usize;
    // Each pass consumes at least one event, so this ends with the input.
    while let Some(ev) = events.peek() {
        match ev {
            Event::End(_) => {
                events.next();
                if unopened == 0 {
                    break;
                }
                unopened -= 1;
            }
            Event::Start(Tag::Paragraph) => {
                events.next();
                let text = read_inlines(events);
                if !text.is_empty() {
                    out.push(Block::Paragraph(text));
                }
            }
            Event::Start(Tag::Heading { level, .. }) => {
                let level = heading_level(*level);
                events.next();
                out.push(Block::Heading {
                    level,
                    text: read_inlines(events),
                });
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => info
                        .split_whitespace()
                        .next()
                        .map(str::to_string)
                        .filter(|l| !l.is_empty()),
                    CodeBlockKind::Indented => None,
                };
                events.next();
                let mut text = String::new();
                for ev in events.by_ref() {
                    match ev {
                        Event::Text(t) => text.push_str(&t),
                        Event::End(_) => break,
                        _ => {}
                    }
                }
                if text.ends_with('\n') {
                    text.pop();
                }
                out.push(Block::Code { language, text });
            }
            Event::Start(Tag::Table(align)) => {
                let align = align
                    .iter()
                    .map(|a| match a {
                        pulldown_cmark::Alignment::None => Align::None,
                        pulldown_cmark::Alignment::Left => Align::Left,
                        pulldown_cmark::Alignment::Center => Align::Center,
                        pulldown_cmark::Alignment::Right => Align::Right,
                    })
                    .collect();
                events.next();
                out.push(read_table(events, align));
            }
            Event::Start(Tag::HtmlBlock) => {
                events.next();
                let mut text = String::new();
                for ev in events.by_ref() {
                    match ev {
                        Event::Html(t) | Event::Text(t) => text.push_str(&t),
                        Event::End(_) => break,
                        _ => {}
                    }
                }
                let text = text.trim_end().to_string();
                if !text.is_empty() {
                    out.push(Block::Paragraph(vec![plain_run(text)]));
                }
            }
            Event::Rule => {
                events.next();
                out.push(Block::Rule);
            }
            Event::Start(tag) if !is_inline_tag(tag) && deep => {
                events.next();
                unopened += 1;
            }
            Event::Start(Tag::BlockQuote(_)) => {
                events.next();
                out.push(Block::Quote(read_blocks(events, depth + 1)));
            }
            Event::Start(Tag::List(start)) => {
                let start = *start;
                events.next();
                out.push(Block::List {
                    start,
                    items: read_items(events, depth + 1),
                });
            }
            Event::Start(tag) if !is_inline_tag(tag) => {
                // Containers this reader does not model (footnotes, definition lists): their
                // content is kept as blocks of the enclosing container.
                events.next();
                out.extend(read_blocks(events, depth + 1));
            }
            _ => {
                // Inline content outside a paragraph: a tight list item's text.
                let text = read_loose_inlines(events);
                if !text.is_empty() {
                    out.push(Block::Paragraph(text));
                }
            }
        }
    }
    out
}

fn read_items(events: &mut Events, depth: usize) -> Vec<ListItem> {
    let mut items = Vec::new();
    while let Some(ev) = events.next() {
        match ev {
            Event::Start(Tag::Item) => items.push(ListItem {
                anchor: None,
                blocks: read_blocks(events, depth),
            }),
            Event::End(_) => break,
            _ => {}
        }
    }
    items
}

fn read_table(events: &mut Events, align: Vec<Align>) -> Block {
    let mut header = Vec::new();
    let mut rows: Vec<Vec<Vec<Inline>>> = Vec::new();
    let mut in_head = false;
    while let Some(ev) = events.next() {
        match ev {
            Event::Start(Tag::TableHead) => in_head = true,
            Event::End(TagEnd::TableHead) => in_head = false,
            Event::Start(Tag::TableRow) => rows.push(Vec::new()),
            Event::Start(Tag::TableCell) => {
                let cell = read_inlines(events);
                if in_head {
                    header.push(cell);
                } else if let Some(row) = rows.last_mut() {
                    row.push(cell);
                }
            }
            Event::End(TagEnd::Table) => break,
            _ => {}
        }
    }
    Block::Table {
        align,
        header,
        rows,
    }
}

fn heading_level(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

fn plain_run(text: String) -> Inline {
    Inline::Run(Run {
        text,
        style: Style::default(),
        link: None,
    })
}

/// What styles and link the text being read is under.
#[derive(Default)]
struct InlineState {
    bold: usize,
    italic: usize,
    link: Option<Option<String>>,
    out: Vec<Inline>,
}

impl InlineState {
    fn push_text(&mut self, text: &str, code: bool) {
        if text.is_empty() {
            return;
        }
        let style = Style {
            bold: self.bold > 0,
            italic: self.italic > 0,
            code,
        };
        let link = self.link.clone().flatten();
        if let Some(Inline::Run(last)) = self.out.last_mut()
            && last.style == style
            && last.link == link
        {
            last.text.push_str(text);
            return;
        }
        self.out.push(Inline::Run(Run {
            text: text.to_string(),
            style,
            link,
        }));
    }

    /// Applies one inline event; false for an event that ends the inline content.
    fn apply(&mut self, ev: Event) -> bool {
        match ev {
            Event::Text(t) => self.push_text(&t, false),
            Event::Code(t) => self.push_text(&t, true),
            Event::InlineMath(t) | Event::DisplayMath(t) => self.push_text(&t, true),
            // Raw HTML is shown as written: an export never interprets it.
            Event::Html(t) | Event::InlineHtml(t) => self.push_text(&t, false),
            Event::FootnoteReference(label) => self.push_text(&format!("[^{label}]"), false),
            Event::SoftBreak => self.push_text(" ", false),
            Event::HardBreak => self.out.push(Inline::LineBreak),
            Event::TaskListMarker(done) => {
                self.push_text(if done { "[x] " } else { "[ ] " }, false)
            }
            Event::Start(Tag::Strong) => self.bold += 1,
            Event::End(TagEnd::Strong) => self.bold = self.bold.saturating_sub(1),
            Event::Start(Tag::Emphasis) => self.italic += 1,
            Event::End(TagEnd::Emphasis) => self.italic = self.italic.saturating_sub(1),
            Event::Start(Tag::Link { dest_url, .. }) => self.link = Some(safe_link(&dest_url)),
            Event::End(TagEnd::Link) => self.link = None,
            // An image's description stands in for it: exports load nothing from elsewhere.
            Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => {}
            Event::Start(Tag::Strikethrough | Tag::Superscript | Tag::Subscript)
            | Event::End(TagEnd::Strikethrough | TagEnd::Superscript | TagEnd::Subscript) => {}
            _ => return false,
        }
        true
    }
}

/// Inline content up to the end tag of its block (consumed).
fn read_inlines(events: &mut Events) -> Vec<Inline> {
    let mut state = InlineState::default();
    for ev in events.by_ref() {
        if matches!(ev, Event::End(_)) && !is_inline_end(&ev) {
            break;
        }
        state.apply(ev);
    }
    state.out
}

/// Inline content until the next block-level event (left unconsumed).
fn read_loose_inlines(events: &mut Events) -> Vec<Inline> {
    let mut state = InlineState::default();
    while let Some(ev) = events.peek() {
        let inline = match ev {
            Event::Start(tag) => is_inline_tag(tag),
            Event::End(_) => is_inline_end(ev),
            Event::Rule => false,
            _ => true,
        };
        if !inline {
            break;
        }
        if let Some(ev) = events.next() {
            state.apply(ev);
        }
    }
    state.out
}

fn is_inline_tag(tag: &Tag) -> bool {
    matches!(
        tag,
        Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript
            | Tag::Link { .. }
            | Tag::Image { .. }
    )
}

fn is_inline_end(ev: &Event) -> bool {
    matches!(
        ev,
        Event::End(
            TagEnd::Emphasis
                | TagEnd::Strong
                | TagEnd::Strikethrough
                | TagEnd::Superscript
                | TagEnd::Subscript
                | TagEnd::Link
                | TagEnd::Image
        )
    )
}

/// Finds the sources list (the list right under the last `Sources` heading), anchors its
/// items and links their addresses; returns their numbers.
fn mark_sources(blocks: &mut [Block]) -> Vec<u32> {
    let heading = blocks.iter().rposition(|b| {
        matches!(b, Block::Heading { text, .. } if fathom_report::lang::is_sources_heading(&plain_text(text)))
    });
    let Some(Block::List {
        start: Some(start),
        items,
    }) = heading.and_then(|h| blocks.get_mut(h + 1))
    else {
        return Vec::new();
    };
    let mut numbers = Vec::new();
    for (i, item) in items.iter_mut().enumerate() {
        let Ok(n) = u32::try_from(*start + i as u64) else {
            break;
        };
        item.anchor = Some(format!("source-{n}"));
        numbers.push(n);
        for block in &mut item.blocks {
            if let Block::Paragraph(inlines) = block {
                for inline in inlines {
                    if let Inline::Run(run) = inline
                        && run.style.code
                        && run.link.is_none()
                        && let Some(url) = safe_link(&run.text).filter(|u| !u.starts_with('#'))
                    {
                        run.style.code = false;
                        run.link = Some(url);
                    }
                }
            }
        }
    }
    numbers
}

/// Splits `[n]` markers naming a listed source out of plain text runs.
fn mark_citations(block: &mut Block, sources: &[u32]) {
    match block {
        Block::Heading { text, .. } | Block::Paragraph(text) => split_citations(text, sources),
        Block::List { items, .. } => {
            for item in items {
                for b in &mut item.blocks {
                    mark_citations(b, sources);
                }
            }
        }
        Block::Table { header, rows, .. } => {
            for cell in header.iter_mut().chain(rows.iter_mut().flatten()) {
                split_citations(cell, sources);
            }
        }
        Block::Quote(blocks) => {
            for b in blocks {
                mark_citations(b, sources);
            }
        }
        Block::Code { .. } | Block::Rule => {}
    }
}

fn split_citations(inlines: &mut Vec<Inline>, sources: &[u32]) {
    let mut out = Vec::with_capacity(inlines.len());
    for inline in inlines.drain(..) {
        match inline {
            Inline::Run(run) if !run.style.code && run.link.is_none() => {
                let mut rest = run.text.as_str();
                // Each pass consumes up to and past one marker, or the rest.
                while !rest.is_empty() {
                    match next_citation(rest, sources) {
                        Some((at, len, n)) => {
                            if at > 0 {
                                out.push(Inline::Run(Run {
                                    text: rest[..at].to_string(),
                                    ..run.clone()
                                }));
                            }
                            out.push(Inline::Citation(n));
                            rest = &rest[at + len..];
                        }
                        None => {
                            out.push(Inline::Run(Run {
                                text: rest.to_string(),
                                ..run.clone()
                            }));
                            rest = "";
                        }
                    }
                }
            }
            other => out.push(other),
        }
    }
    *inlines = out;
}

/// The first `[n]` in `text` with n a listed source: its byte offset, length and number.
fn next_citation(text: &str, sources: &[u32]) -> Option<(usize, usize, u32)> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find('[').map(|i| i + from) {
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0
            && digits < 10
            && bytes.get(i + 1 + digits) == Some(&b']')
            && let Ok(n) = text[i + 1..i + 1 + digits].parse::<u32>()
            && sources.contains(&n)
        {
            return Some((i, digits + 2, n));
        }
        from = i + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "# How does it work?\n\n_Cut short._\n\n## Overview\n\nOwners **drop** values [1]. See `Box` and [the book](https://doc.rust-lang.org/book/) [2] [9].\n\n- one\n- two\n  1. nested\n\n| Kind | Count |\n|:--|--:|\n| Box | 2 [1] |\n\n```rust\nfn main() {}\n```\n\n<script>alert(1)</script>\n\n[bad](javascript:alert(1))\n\n## Sources\n\n1. The book, p. 3 — `file:///corpus/book.pdf#page=3`\n2. Web page — `https://example.org/a`\n";

    #[test]
    fn a_report_becomes_blocks_with_sources_and_citations() {
        let doc = Document::from_markdown(REPORT);
        assert_eq!(doc.title, "How does it work?");
        assert_eq!(doc.sources, vec![1, 2]);
        let para = doc
            .blocks
            .iter()
            .find_map(|b| match b {
                Block::Paragraph(t) if plain_text(t).starts_with("Owners") => Some(t),
                _ => None,
            })
            .unwrap();
        assert!(para.contains(&Inline::Citation(1)));
        assert!(para.contains(&Inline::Citation(2)));
        // [9] names no source: it stays text.
        assert!(plain_text(para).contains("[9]"));
        assert!(
            para.iter()
                .any(|i| matches!(i, Inline::Run(r) if r.style.bold && r.text == "drop"))
        );
        assert!(
            para.iter()
                .any(|i| matches!(i, Inline::Run(r) if r.style.code && r.text == "Box"))
        );
        assert!(para.iter().any(|i| matches!(i, Inline::Run(r) if r.link.as_deref() == Some("https://doc.rust-lang.org/book/"))));
        let Some(Block::List { items, start: None }) = doc
            .blocks
            .iter()
            .find(|b| matches!(b, Block::List { start: None, .. }))
        else {
            panic!("no bullet list: {:?}", doc.blocks);
        };
        assert_eq!(items.len(), 2);
        assert!(matches!(
            items[1].blocks[1],
            Block::List { start: Some(1), .. }
        ));
        let Some(Block::Table {
            header,
            rows,
            align,
        }) = doc.blocks.iter().find(|b| matches!(b, Block::Table { .. }))
        else {
            panic!("no table");
        };
        assert_eq!(plain_text(&header[1]), "Count");
        assert_eq!(
            rows[0][1],
            vec![plain_run("2 ".into()), Inline::Citation(1)]
        );
        assert_eq!(align, &vec![Align::Left, Align::Right]);
        assert!(doc.blocks.contains(&Block::Code {
            language: Some("rust".into()),
            text: "fn main() {}".into()
        }));
        // Raw HTML is text; an unsafe link is not a link.
        assert!(doc.blocks.iter().any(
            |b| matches!(b, Block::Paragraph(t) if plain_text(t) == "<script>alert(1)</script>")
        ));
        assert!(
            doc.blocks
                .iter()
                .any(|b| matches!(b, Block::Paragraph(t) if t == &vec![plain_run("bad".into())]))
        );
        let Some(Block::List { items, .. }) = doc.blocks.last() else {
            panic!("sources list last");
        };
        assert_eq!(items[0].anchor.as_deref(), Some("source-1"));
        let Block::Paragraph(first) = &items[0].blocks[0] else {
            panic!()
        };
        assert!(first.iter().any(|i| matches!(i, Inline::Run(r) if r.link.as_deref() == Some("file:///corpus/book.pdf#page=3") && !r.style.code)));
    }

    #[test]
    fn deep_nesting_is_kept_as_text_within_the_bound() {
        let md: String = (0..40)
            .map(|d| format!("{}- level {d}\n", "  ".repeat(d)))
            .collect();
        let doc = Document::from_markdown(&md);
        fn depth(blocks: &[Block]) -> usize {
            blocks
                .iter()
                .map(|b| match b {
                    Block::List { items, .. } => {
                        1 + items.iter().map(|i| depth(&i.blocks)).max().unwrap_or(0)
                    }
                    Block::Quote(b) => 1 + depth(b),
                    _ => 0,
                })
                .max()
                .unwrap_or(0)
        }
        assert!(
            depth(&doc.blocks) <= MAX_NESTING + 1,
            "{}",
            depth(&doc.blocks)
        );
        let mut text = String::new();
        fn collect(blocks: &[Block], out: &mut String) {
            for b in blocks {
                match b {
                    Block::Paragraph(t) => out.push_str(&plain_text(t)),
                    Block::List { items, .. } => items.iter().for_each(|i| collect(&i.blocks, out)),
                    Block::Quote(b) => collect(b, out),
                    _ => {}
                }
            }
        }
        collect(&doc.blocks, &mut text);
        assert!(
            text.contains("level 0") && text.contains("level 39"),
            "{text}"
        );
    }

    #[test]
    fn only_safe_addresses_are_links() {
        assert_eq!(
            safe_link(" https://a.test/x "),
            Some("https://a.test/x".into())
        );
        assert_eq!(
            safe_link("FILE:///tmp/a.pdf"),
            Some("FILE:///tmp/a.pdf".into())
        );
        assert_eq!(safe_link("#source-2"), Some("#source-2".into()));
        assert_eq!(safe_link("javascript:alert(1)"), None);
        assert_eq!(safe_link("data:text/html,x"), None);
        assert_eq!(safe_link("relative/path"), None);
        assert_eq!(safe_link("https://a.test/x y"), None);
    }
}
