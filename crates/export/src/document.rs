//! The report's Markdown read once into a small document model that the HTML, PDF and DOCX
//! writers share: headings, paragraphs of styled runs, lists, tables, code blocks, quotes.
//!
//! Two things a report means beyond plain Markdown are resolved here, so every format shows
//! them alike: the list under the closing `## Sources` heading (in any language the report
//! writes, `## Quellen` say) is the sources list (each
//! item anchored as `source-N`, its address, written as a code span, made a link), and a
//! `[n]` in the text that names a listed source is a citation. Brackets written escaped
//! (`\[2\]`) or as entities are text: that is how a writer says a `[2]` is not a citation.

use std::ops::Range;

use pulldown_cmark::{
    CodeBlockKind, Event, HeadingLevel, OffsetIter, Options, Parser, Tag, TagEnd,
};

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

/// An entry of the sources list, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSource {
    pub n: u32,
    /// The entry's text before its address: the source's title (with its kind, local file or
    /// web page, in a report that cites both).
    pub title: String,
    /// The address the entry ends with, if it ends with one.
    pub url: Option<String>,
}

impl Document {
    /// Reads `markdown` (CommonMark with tables). Raw HTML is kept as text, never markup;
    /// images become their description.
    pub fn from_markdown(markdown: &str) -> Document {
        let mut blocks = read_blocks(&mut Events::new(markdown, &[]), 0);
        let mut sources = mark_sources(&mut blocks);
        // Which `[n]` are citations is known once the sources list, which closes the report,
        // is found: the report is read again to split them out where the brackets are markup.
        if !sources.is_empty() {
            blocks = read_blocks(&mut Events::new(markdown, &sources), 0);
            sources = mark_sources(&mut blocks);
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
        let mut events = Events::new(markdown, &[]);
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

    /// Which top-level block is the sources list; its heading is the block before it.
    pub fn sources_list(&self) -> Option<usize> {
        self.blocks.iter().rposition(|b| {
            matches!(b, Block::List { items, .. } if items.first().is_some_and(|i| i.anchor.is_some()))
        })
    }

    /// The report without its sources list and the list's heading.
    pub fn body(&self) -> impl Iterator<Item = &Block> {
        let skip = self
            .sources_list()
            .map_or(0..0, |at| at.saturating_sub(1)..at + 1);
        self.blocks
            .iter()
            .enumerate()
            .filter(move |(i, _)| !skip.contains(i))
            .map(|(_, b)| b)
    }

    /// The entries of the sources list: `n. Title — address`.
    pub fn listed_sources(&self) -> Vec<ListedSource> {
        let Some(Block::List { items, .. }) = self.sources_list().map(|at| &self.blocks[at]) else {
            return Vec::new();
        };
        items
            .iter()
            .zip(&self.sources)
            .map(|(item, &n)| {
                let text = match item.blocks.first() {
                    Some(Block::Paragraph(text)) => text.as_slice(),
                    _ => &[],
                };
                // The address is the last link or code span (an address no reader may follow
                // stays code); the title is what comes before it, without the dash.
                let address = text
                    .iter()
                    .rposition(|i| matches!(i, Inline::Run(r) if r.link.is_some() || r.style.code));
                match address.map(|at| (at, &text[at])) {
                    Some((at, Inline::Run(run))) => ListedSource {
                        n,
                        title: plain_text(&text[..at])
                            .trim_end()
                            .trim_end_matches('—')
                            .trim()
                            .to_string(),
                        url: Some(run.link.clone().unwrap_or_else(|| run.text.clone())),
                    },
                    _ => ListedSource {
                        n,
                        title: plain_text(text).trim().to_string(),
                        url: None,
                    },
                }
            })
            .collect()
    }

    /// The sources the body cites, each once, in the order they are first cited.
    pub fn citations(&self) -> Vec<u32> {
        fn inlines(text: &[Inline], out: &mut Vec<u32>) {
            for i in text {
                if let Inline::Citation(n) = i
                    && !out.contains(n)
                {
                    out.push(*n);
                }
            }
        }
        // Bounded by the model's nesting.
        fn blocks<'a>(list: impl IntoIterator<Item = &'a Block>, out: &mut Vec<u32>) {
            for b in list {
                match b {
                    Block::Heading { text, .. } | Block::Paragraph(text) => inlines(text, out),
                    Block::Table { header, rows, .. } => {
                        for cell in header.iter().chain(rows.iter().flatten()) {
                            inlines(cell, out);
                        }
                    }
                    Block::List { items, .. } => {
                        for item in items {
                            blocks(&item.blocks, out);
                        }
                    }
                    Block::Quote(quoted) => blocks(quoted, out),
                    Block::Code { .. } | Block::Rule => {}
                }
            }
        }
        let mut out = Vec::new();
        blocks(self.body(), &mut out);
        out
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

/// The parser's events, read knowing where each came from in the Markdown: a bracket written
/// escaped (`\[`) or as an entity (`&#91;`) is told apart from one written as markup.
struct Events<'a> {
    inner: std::iter::Peekable<OffsetIter<'a>>,
    source: &'a str,
    /// Where the last event that is not a tag ended: a backslash after it is an escape's.
    leaf_end: usize,
    /// The text event last read starts with a character written escaped or as an entity.
    literal_start: bool,
    /// The sources a `[n]` may name: none on a first read, before the list is found.
    sources: &'a [u32],
}

impl<'a> Events<'a> {
    fn new(markdown: &'a str, sources: &'a [u32]) -> Events<'a> {
        Events {
            inner: Parser::new_ext(markdown, Options::ENABLE_TABLES)
                .into_offset_iter()
                .peekable(),
            source: markdown,
            leaf_end: 0,
            literal_start: false,
            sources,
        }
    }

    fn peek(&mut self) -> Option<&Event<'a>> {
        self.inner.peek().map(|(ev, _)| ev)
    }

    /// Whether `text`, read from `range`, starts with a character the Markdown escaped or wrote
    /// as an entity. The parser drops an escape's backslash and starts a new text event after
    /// it, so the backslash sits just before the event, past the previous one.
    fn starts_literal(&self, text: &str, range: &Range<usize>) -> bool {
        let escaped = range.start > self.leaf_end
            && self
                .source
                .get(..range.start)
                .is_some_and(|s| s.ends_with('\\'));
        let first = text.chars().next();
        let as_written = self
            .source
            .get(range.start..)
            .is_some_and(|s| s.chars().next() == first);
        escaped || !as_written
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let (ev, range) = self.inner.next()?;
        self.literal_start = match &ev {
            Event::Text(text) => self.starts_literal(text, &range),
            _ => false,
        };
        if !matches!(ev, Event::Start(_) | Event::End(_)) {
            self.leaf_end = range.end;
        }
        Some(ev)
    }
}

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
    /// Brackets written escaped or as entities: the run in `out`, the byte offset in its text.
    literal: Vec<(usize, usize)>,
}

impl InlineState {
    fn push_text(&mut self, text: &str, code: bool) {
        self.push(text, code, false);
    }

    /// Adds `text`; `literal_start`: its first character was escaped or an entity.
    fn push(&mut self, text: &str, code: bool, literal_start: bool) {
        if text.is_empty() {
            return;
        }
        let style = Style {
            bold: self.bold > 0,
            italic: self.italic > 0,
            code,
        };
        let link = self.link.clone().flatten();
        let at = match self.out.last_mut() {
            Some(Inline::Run(last)) if last.style == style && last.link == link => {
                let at = last.text.len();
                last.text.push_str(text);
                at
            }
            _ => {
                self.out.push(Inline::Run(Run {
                    text: text.to_string(),
                    style,
                    link,
                }));
                0
            }
        };
        if literal_start && text.starts_with(['[', ']']) {
            self.literal.push((self.out.len() - 1, at));
        }
    }

    /// The inlines read, with each `[n]` naming one of `sources` split out as a citation
    /// (not in code or a link's text, nor with a bracket written as text).
    fn finish(self, sources: &[u32]) -> Vec<Inline> {
        if sources.is_empty() {
            return self.out;
        }
        let mut out = Vec::with_capacity(self.out.len());
        for (i, inline) in self.out.into_iter().enumerate() {
            match inline {
                Inline::Run(run) if !run.style.code && run.link.is_none() => {
                    let literal: Vec<usize> = self
                        .literal
                        .iter()
                        .filter(|(r, _)| *r == i)
                        .map(|&(_, at)| at)
                        .collect();
                    split_citations(run, sources, &literal, &mut out);
                }
                other => out.push(other),
            }
        }
        out
    }

    /// Applies one inline event; false for an event that ends the inline content.
    /// `literal_start`: a text event's first character was escaped or an entity.
    fn apply(&mut self, ev: Event, literal_start: bool) -> bool {
        match ev {
            Event::Text(t) => self.push(&t, false, literal_start),
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
    while let Some(ev) = events.next() {
        if matches!(ev, Event::End(_)) && !is_inline_end(&ev) {
            break;
        }
        state.apply(ev, events.literal_start);
    }
    state.finish(events.sources)
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
            state.apply(ev, events.literal_start);
        }
    }
    state.finish(events.sources)
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

/// Splits the `[n]` markers naming one of `sources` out of `run` into `out`; a bracket at a
/// byte offset in `literal` is text.
fn split_citations(run: Run, sources: &[u32], literal: &[usize], out: &mut Vec<Inline>) {
    let mut from = 0;
    // Each pass consumes up to and past one marker, or the rest.
    while from < run.text.len() {
        match next_citation(&run.text, from, sources, literal) {
            Some((at, len, n)) => {
                if at > from {
                    out.push(Inline::Run(Run {
                        text: run.text[from..at].to_string(),
                        ..run.clone()
                    }));
                }
                out.push(Inline::Citation(n));
                from = at + len;
            }
            None => {
                out.push(Inline::Run(Run {
                    text: run.text[from..].to_string(),
                    ..run.clone()
                }));
                from = run.text.len();
            }
        }
    }
}

/// The first `[n]` in `text` from byte `from` with n one of `sources` and neither bracket at a
/// byte offset in `literal`: its byte offset, length and number.
fn next_citation(
    text: &str,
    mut from: usize,
    sources: &[u32],
    literal: &[usize],
) -> Option<(usize, usize, u32)> {
    let bytes = text.as_bytes();
    while let Some(i) = text[from..].find('[').map(|i| i + from) {
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let close = i + 1 + digits;
        if digits > 0
            && digits < 10
            && bytes.get(close) == Some(&b']')
            && !literal.contains(&i)
            && !literal.contains(&close)
            && let Ok(n) = text[i + 1..close].parse::<u32>()
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
    fn escaped_brackets_and_entities_are_text_not_citations() {
        let md = "# T\n\nSaid [1], not \\[2\\], &#91;1&#93; nor [2\\] but \\\\[1].\n\n\
                  **Bold [1] and [9]**\n\n## Sources\n\n1. A — `https://a.test/`\n2. B — `https://b.test/`\n";
        let doc = Document::from_markdown(md);
        let run = |text: &str, bold| {
            Inline::Run(Run {
                text: text.into(),
                style: Style {
                    bold,
                    ..Style::default()
                },
                link: None,
            })
        };
        assert_eq!(
            doc.blocks[1],
            Block::Paragraph(vec![
                run("Said ", false),
                Inline::Citation(1),
                run(", not [2], [1] nor [2] but \\", false),
                Inline::Citation(1),
                run(".", false),
            ])
        );
        // A citation in bold text leaves the text around it bold.
        assert_eq!(
            doc.blocks[2],
            Block::Paragraph(vec![
                run("Bold ", true),
                Inline::Citation(1),
                run(" and [9]", true),
            ])
        );
        assert_eq!(doc.citations(), vec![1]);
    }

    #[test]
    fn the_sources_list_is_data_and_the_body_is_the_rest() {
        let md = "# T\n\nText [2] and [1].\n\n## Sources\n\n\
                  1. The book, p. 3 (local file) — `file:///c/book.pdf#page=3`\n\
                  2. A *page* — `https://a.test/x`\n3. Odd — `ftp://o.test/`\n4. No address\n";
        let doc = Document::from_markdown(md);
        let listed = doc.listed_sources();
        let entry = |n, title: &str, url: Option<&str>| ListedSource {
            n,
            title: title.into(),
            url: url.map(String::from),
        };
        assert_eq!(
            listed,
            vec![
                entry(
                    1,
                    "The book, p. 3 (local file)",
                    Some("file:///c/book.pdf#page=3")
                ),
                entry(2, "A page", Some("https://a.test/x")),
                entry(3, "Odd", Some("ftp://o.test/")),
                entry(4, "No address", None),
            ]
        );
        assert_eq!(doc.citations(), vec![2, 1]);
        let body: Vec<&Block> = doc.body().collect();
        assert_eq!(body.len(), 2, "{body:?}");
        assert!(matches!(body[0], Block::Heading { level: 1, .. }));
        // Without a sources list, the body is the whole report.
        let plain = Document::from_markdown("# T\n\nText [1].\n");
        assert_eq!(plain.body().count(), 2);
        assert!(plain.listed_sources().is_empty() && plain.citations().is_empty());
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
