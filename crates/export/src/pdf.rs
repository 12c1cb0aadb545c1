//! A PDF of A4 pages in the standard fonts (Helvetica and Courier, WinAnsiEncoding), which
//! every reader has, so nothing is embedded and the file stays small. Lines are measured
//! with the fonts' own widths and broken between words; a block that does not fit goes on
//! the next page (a table repeats its header there, a long code block or table row is
//! continued). Each page has its number in the footer; the document's title is in its Info
//! dictionary. Sources' addresses are links, and each citation `[n]` links to its source in
//! the list. Written with lopdf, already in the tree for reading PDFs.

mod winansi;

use std::collections::HashMap;

use lopdf::{Dictionary, Object, Stream, StringFormat, dictionary};

use crate::ExportError;
use crate::document::{Align, Block, Document, Inline, ListItem, Style};

const PAGE_WIDTH: f32 = 595.28;
const PAGE_HEIGHT: f32 = 841.89;
const MARGIN_X: f32 = 62.0;
const TOP: f32 = PAGE_HEIGHT - 64.0;
const BOTTOM: f32 = 72.0;
const FOOTER_BASELINE: f32 = 40.0;
const CONTENT_WIDTH: f32 = PAGE_WIDTH - 2.0 * MARGIN_X;

const BODY_SIZE: f32 = 10.5;
const LEADING: f32 = 1.42;
const CODE_SIZE: f32 = 8.8;
const CELL_PADDING: f32 = 4.0;
const LIST_INDENT: f32 = 18.0;
const QUOTE_INDENT: f32 = 14.0;

type Color = (f32, f32, f32);
const TEXT: Color = (0.1, 0.1, 0.1);
const LINK: Color = (0.04, 0.3, 0.72);
const MUTED: Color = (0.4, 0.4, 0.4);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Font {
    Regular,
    Bold,
    Italic,
    BoldItalic,
    Mono,
}

const FONTS: [Font; 5] = [
    Font::Regular,
    Font::Bold,
    Font::Italic,
    Font::BoldItalic,
    Font::Mono,
];

impl Font {
    fn resource(self) -> &'static str {
        match self {
            Font::Regular => "F1",
            Font::Bold => "F2",
            Font::Italic => "F3",
            Font::BoldItalic => "F4",
            Font::Mono => "F5",
        }
    }

    fn base_font(self) -> &'static str {
        match self {
            Font::Regular => "Helvetica",
            Font::Bold => "Helvetica-Bold",
            Font::Italic => "Helvetica-Oblique",
            Font::BoldItalic => "Helvetica-BoldOblique",
            Font::Mono => "Courier",
        }
    }

    fn of(style: Style, bold: bool) -> Font {
        match (style.code, style.bold || bold, style.italic) {
            (true, _, _) => Font::Mono,
            (false, false, false) => Font::Regular,
            (false, true, false) => Font::Bold,
            (false, false, true) => Font::Italic,
            (false, true, true) => Font::BoldItalic,
        }
    }

    /// The width of WinAnsi code `b` in thousandths of the font size.
    fn units(self, b: u8) -> u16 {
        let i = b.saturating_sub(32) as usize;
        match self {
            Font::Mono => winansi::COURIER_WIDTH,
            Font::Regular | Font::Italic => winansi::HELVETICA.get(i).copied().unwrap_or(0),
            Font::Bold | Font::BoldItalic => winansi::HELVETICA_BOLD.get(i).copied().unwrap_or(0),
        }
    }

    fn width(self, size: f32, bytes: &[u8]) -> f32 {
        let units: u32 = bytes.iter().map(|&b| u32::from(self.units(b))).sum();
        units as f32 * size / 1000.0
    }
}

/// Where a link leads.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    Uri(String),
    /// Source n of the sources list.
    Source(u32),
}

/// A piece of a line in one font, size, colour and link.
#[derive(Debug, Clone)]
struct Segment {
    font: Font,
    size: f32,
    color: Color,
    target: Option<Target>,
    text: Vec<u8>,
    width: f32,
}

#[derive(Debug, Clone, Default)]
struct Line {
    segments: Vec<Segment>,
    width: f32,
}

impl Line {
    fn push(&mut self, seg: &Segment, bytes: &[u8], width: f32) {
        self.width += width;
        if let Some(last) = self.segments.last_mut()
            && last.font == seg.font
            && last.size == seg.size
            && last.color == seg.color
            && last.target == seg.target
        {
            last.text.extend_from_slice(bytes);
            last.width += width;
            return;
        }
        self.segments.push(Segment {
            text: bytes.to_vec(),
            width,
            ..seg.clone()
        });
    }

    fn trim_end(&mut self) {
        while let Some(last) = self.segments.last_mut() {
            if last.text.last() == Some(&b' ') {
                last.text.pop();
                let w = last.font.width(last.size, b" ");
                last.width -= w;
                self.width -= w;
            }
            if last.text.is_empty() {
                self.segments.pop();
            } else {
                break;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn height(&self, size: f32) -> f32 {
        let tallest = self.segments.iter().map(|s| s.size).fold(size, f32::max);
        tallest * LEADING
    }
}

/// How a block's text is set.
#[derive(Debug, Clone, Copy)]
struct TextStyle {
    size: f32,
    bold: bool,
}

/// Breaks `inlines` into lines at most `max_width` wide: between words where it can, inside a
/// word wider than a line.
fn wrap(inlines: &[Inline], ts: TextStyle, max_width: f32) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut line = Line::default();
    for inline in inlines {
        let (seg, text) = match inline {
            Inline::Run(run) => {
                let font = Font::of(run.style, ts.bold);
                let size = if run.style.code {
                    ts.size * 0.92
                } else {
                    ts.size
                };
                // Of places inside the document, a PDF links only to the sources.
                let target = run.link.as_deref().and_then(|l| match l.strip_prefix('#') {
                    Some(place) => place
                        .strip_prefix("source-")
                        .and_then(|n| n.parse().ok())
                        .map(Target::Source),
                    None => Some(Target::Uri(l.to_string())),
                });
                let color = if target.is_some() { LINK } else { TEXT };
                (
                    Segment {
                        font,
                        size,
                        color,
                        target,
                        text: Vec::new(),
                        width: 0.0,
                    },
                    winansi::encode(&run.text),
                )
            }
            Inline::Citation(n) => (
                Segment {
                    font: if ts.bold { Font::Bold } else { Font::Regular },
                    size: ts.size,
                    color: LINK,
                    target: Some(Target::Source(*n)),
                    text: Vec::new(),
                    width: 0.0,
                },
                format!("[{n}]").into_bytes(),
            ),
            Inline::LineBreak => {
                line.trim_end();
                lines.push(std::mem::take(&mut line));
                continue;
            }
        };
        for word in split_words(&text) {
            let w = seg.font.width(seg.size, word);
            if word == b" " {
                if line.is_empty() {
                    continue;
                }
                if line.width + w > max_width {
                    line.trim_end();
                    lines.push(std::mem::take(&mut line));
                    continue;
                }
                line.push(&seg, word, w);
                continue;
            }
            if line.width + w > max_width && !line.is_empty() {
                line.trim_end();
                lines.push(std::mem::take(&mut line));
            }
            if w <= max_width {
                line.push(&seg, word, w);
                continue;
            }
            // A word wider than a line (a long address) is cut where the line is full.
            for i in 0..word.len() {
                let b = &word[i..i + 1];
                let bw = seg.font.width(seg.size, b);
                if line.width + bw > max_width && !line.is_empty() {
                    lines.push(std::mem::take(&mut line));
                }
                line.push(&seg, b, bw);
            }
        }
    }
    line.trim_end();
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Words and the single spaces between them.
fn split_words(text: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        if b == b' ' {
            if i > start {
                out.push(&text[start..i]);
            }
            out.push(&text[i..i + 1]);
            start = i + 1;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// A link area on a page.
struct Annotation {
    rect: [f32; 4],
    target: Target,
}

#[derive(Default)]
struct Page {
    content: String,
    annotations: Vec<Annotation>,
}

/// Places blocks on pages, top to bottom.
struct Layout {
    pages: Vec<Page>,
    /// The top of the free space on the last page.
    y: f32,
    /// A list item's marker, drawn beside the first line set after it.
    marker: Option<(Vec<u8>, f32)>,
    /// Where each source of the sources list starts: page index and height.
    anchors: HashMap<u32, (usize, f32)>,
}

impl Layout {
    fn new() -> Layout {
        Layout {
            pages: vec![Page::default()],
            y: TOP,
            marker: None,
            anchors: HashMap::new(),
        }
    }

    fn page(&mut self) -> &mut Page {
        if self.pages.is_empty() {
            self.pages.push(Page::default());
        }
        let last = self.pages.len() - 1;
        &mut self.pages[last]
    }

    fn at_top(&self) -> bool {
        self.y >= TOP - 0.5
    }

    fn new_page(&mut self) {
        self.pages.push(Page::default());
        self.y = TOP;
    }

    /// Starts a new page unless `height` fits on this one (or this one is still empty).
    fn make_room(&mut self, height: f32) {
        if self.y - height < BOTTOM && !self.at_top() {
            self.new_page();
        }
    }

    fn space(&mut self, points: f32) {
        if !self.at_top() {
            self.y -= points;
        }
    }

    fn text(&mut self, x: f32, baseline: f32, segments: &[Segment]) {
        let mut ops = String::from("BT\n");
        let mut cursor = x;
        let mut last: Option<(Font, f32)> = None;
        let mut last_color = None;
        ops.push_str(&format!("{} {} Td\n", num(x), num(baseline)));
        for seg in segments {
            if last != Some((seg.font, seg.size)) {
                ops.push_str(&format!("/{} {} Tf\n", seg.font.resource(), num(seg.size)));
                last = Some((seg.font, seg.size));
            }
            if last_color != Some(seg.color) {
                let (r, g, b) = seg.color;
                ops.push_str(&format!("{} {} {} rg\n", num(r), num(g), num(b)));
                last_color = Some(seg.color);
            }
            ops.push_str(&literal(&seg.text));
            ops.push_str(" Tj\n");
            if let Some(target) = &seg.target {
                let rect = [
                    cursor,
                    baseline - seg.size * 0.25,
                    cursor + seg.width,
                    baseline + seg.size * 0.85,
                ];
                self.page().annotations.push(Annotation {
                    rect,
                    target: target.clone(),
                });
            }
            cursor += seg.width;
        }
        ops.push_str("ET\n");
        self.page().content.push_str(&ops);
    }

    /// Sets `line` at `x` below the free space's top, on a new page if it does not fit.
    fn line(&mut self, line: &Line, x: f32, size: f32, align: Align, width: f32) {
        let height = line.height(size);
        self.make_room(height);
        let baseline = baseline_below(self.y, height / LEADING);
        if let Some((marker, mx)) = self.marker.take() {
            let seg = Segment {
                font: Font::Regular,
                size,
                color: TEXT,
                target: None,
                width: Font::Regular.width(size, &marker),
                text: marker,
            };
            self.text(mx, baseline, &[seg]);
        }
        let x = match align {
            Align::Center => x + (width - line.width).max(0.0) / 2.0,
            Align::Right => x + (width - line.width).max(0.0),
            Align::Left | Align::None => x,
        };
        self.text(x, baseline, &line.segments);
        self.y -= height;
    }

    fn graphics(&mut self, ops: &str) {
        self.page().content.push_str(ops);
    }

    fn blocks(&mut self, blocks: &[Block], x: f32, width: f32) {
        for (i, b) in blocks.iter().enumerate() {
            let next_is_body = blocks.get(i + 1).is_some();
            self.block(b, x, width, next_is_body);
        }
    }

    fn block(&mut self, block: &Block, x: f32, width: f32, more_follows: bool) {
        match block {
            Block::Heading { level, text } => {
                let size = match level {
                    1 => 20.0,
                    2 => 15.0,
                    3 => 12.5,
                    _ => 11.0,
                };
                let lines = wrap(text, TextStyle { size, bold: true }, width);
                let height: f32 = lines.iter().map(|l| l.height(size)).sum();
                self.space(if *level <= 2 { size * 0.9 } else { size * 0.7 });
                // A heading stays with the first lines of what it heads.
                let keep = if more_follows {
                    BODY_SIZE * LEADING * 3.0
                } else {
                    0.0
                };
                self.make_room(height + keep);
                for l in &lines {
                    self.line(l, x, size, Align::Left, width);
                }
                self.y -= size * 0.35;
            }
            Block::Paragraph(text) => {
                let ts = TextStyle {
                    size: BODY_SIZE,
                    bold: false,
                };
                for l in &wrap(text, ts, width) {
                    self.line(l, x, BODY_SIZE, Align::Left, width);
                }
                self.y -= BODY_SIZE * 0.6;
            }
            Block::List { start, items } => self.list(*start, items, x, width),
            Block::Table {
                align,
                header,
                rows,
            } => self.table(align, header, rows, x, width),
            Block::Code { text, .. } => self.code(text, x, width),
            Block::Quote(blocks) => {
                let first_page = self.pages.len() - 1;
                let start_y = self.y;
                self.blocks(blocks, x + QUOTE_INDENT, width - QUOTE_INDENT);
                let last_page = self.pages.len() - 1;
                for p in first_page..=last_page {
                    let top = if p == first_page { start_y } else { TOP };
                    let bottom = if p == last_page {
                        self.y + BODY_SIZE * 0.6
                    } else {
                        BOTTOM
                    };
                    if top > bottom {
                        let bar = format!(
                            "0.8 0.8 0.8 rg {} {} 2.5 {} re f\n",
                            num(x + 2.0),
                            num(bottom),
                            num(top - bottom)
                        );
                        self.pages[p].content.push_str(&bar);
                    }
                }
            }
            Block::Rule => {
                self.make_room(14.0);
                let y = self.y - 7.0;
                self.graphics(&format!(
                    "0.75 G 0.6 w {} {} m {} {} l S\n",
                    num(x),
                    num(y),
                    num(x + width),
                    num(y)
                ));
                self.y -= 14.0;
            }
        }
    }

    fn list(&mut self, start: Option<u64>, items: &[ListItem], x: f32, width: f32) {
        for (i, item) in items.iter().enumerate() {
            let marker = match start {
                Some(n) => format!("{}.", n.saturating_add(i as u64)).into_bytes(),
                None => vec![0x95], // WinAnsi's bullet
            };
            if let Some(n) = item
                .anchor
                .as_deref()
                .and_then(|a| a.strip_prefix("source-"))
                && let Ok(n) = n.parse()
            {
                self.make_room(BODY_SIZE * LEADING);
                self.anchors.insert(n, (self.pages.len() - 1, self.y));
            }
            // An outer item whose first block is this list shows its marker on the same line.
            self.marker_here(BODY_SIZE);
            let marker_width = Font::Regular.width(BODY_SIZE, &marker);
            let indent = LIST_INDENT.max(marker_width + 6.0);
            self.marker = Some((marker, x + indent - marker_width - 5.0));
            self.blocks(&item.blocks, x + indent, width - indent);
            // An item with no text still shows its marker.
            if self.marker.is_some() {
                self.line(&Line::default(), x, BODY_SIZE, Align::Left, width);
            }
        }
        self.y -= BODY_SIZE * 0.3;
    }

    /// Draws the pending list marker level with a block that sets no lines of its own.
    fn marker_here(&mut self, size: f32) {
        if let Some((marker, mx)) = self.marker.take() {
            let baseline = baseline_below(self.y, size);
            let seg = Segment {
                font: Font::Regular,
                size: BODY_SIZE,
                color: TEXT,
                target: None,
                width: 0.0,
                text: marker,
            };
            self.text(mx, baseline, &[seg]);
        }
    }

    fn code(&mut self, text: &str, x: f32, width: f32) {
        let size = CODE_SIZE;
        let leading = size * 1.3;
        let pad = 5.0;
        let per_line = (((width - 2.0 * pad) / (size * 0.6)).floor() as usize).max(1);
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for raw in text.split('\n') {
            let bytes = winansi::encode(&raw.replace('\t', "    "));
            if bytes.is_empty() {
                lines.push(Vec::new());
            }
            for chunk in bytes.chunks(per_line) {
                lines.push(chunk.to_vec());
            }
        }
        self.make_room(leading * lines.len().min(3) as f32 + 2.0 * pad);
        self.marker_here(BODY_SIZE);
        let mut rest = lines.as_slice();
        // Each pass sets at least one line (a fresh page holds many).
        while !rest.is_empty() {
            let fits = ((self.y - BOTTOM - 2.0 * pad) / leading).floor().max(0.0) as usize;
            if fits == 0 && !self.at_top() {
                self.new_page();
                continue;
            }
            let n = fits.clamp(1, rest.len());
            let height = n as f32 * leading + 2.0 * pad;
            self.graphics(&format!(
                "0.955 0.955 0.955 rg {} {} {} {} re f\n",
                num(x),
                num(self.y - height),
                num(width),
                num(height)
            ));
            let mut baseline = self.y - pad - size;
            for l in &rest[..n] {
                if !l.is_empty() {
                    let seg = Segment {
                        font: Font::Mono,
                        size,
                        color: TEXT,
                        target: None,
                        width: Font::Mono.width(size, l),
                        text: l.clone(),
                    };
                    self.text(x + pad, baseline, &[seg]);
                }
                baseline -= leading;
            }
            self.y -= height;
            rest = &rest[n..];
            if !rest.is_empty() {
                self.new_page();
            }
        }
        self.y -= BODY_SIZE * 0.7;
    }

    fn table(
        &mut self,
        align: &[Align],
        header: &[Vec<Inline>],
        rows: &[Vec<Vec<Inline>>],
        x: f32,
        width: f32,
    ) {
        let columns = rows
            .iter()
            .map(Vec::len)
            .chain([header.len()])
            .max()
            .unwrap_or(0);
        if columns == 0 {
            return;
        }
        let size = BODY_SIZE * 0.92;
        let widths = column_widths(header, rows, columns, size, width);
        let wrap_row = |cells: &[Vec<Inline>], bold: bool| -> Vec<Vec<Line>> {
            (0..columns)
                .map(|c| {
                    cells.get(c).map_or_else(Vec::new, |cell| {
                        wrap(
                            cell,
                            TextStyle { size, bold },
                            widths[c] - 2.0 * CELL_PADDING,
                        )
                    })
                })
                .collect()
        };
        let head = (!header.is_empty()).then(|| wrap_row(header, true));
        self.make_room(size * LEADING * 3.0 + 4.0 * CELL_PADDING);
        self.marker_here(BODY_SIZE);
        if let Some(head) = &head {
            self.row(head, &widths, align, x, size, true, None);
        }
        for r in rows {
            let cells = wrap_row(r, false);
            self.row(&cells, &widths, align, x, size, false, head.as_ref());
        }
        self.y -= BODY_SIZE * 0.8;
    }

    /// One table row; on a new page the header is set again first. A row taller than a page
    /// continues on the next.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        cells: &[Vec<Line>],
        widths: &[f32],
        align: &[Align],
        x: f32,
        size: f32,
        is_header: bool,
        header: Option<&Vec<Vec<Line>>>,
    ) {
        let leading = size * LEADING;
        let total = cells.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut done = 0;
        // Each pass sets at least one line of the row, or starts a page that holds one.
        while done < total {
            let fits = ((self.y - BOTTOM - 2.0 * CELL_PADDING) / leading)
                .floor()
                .max(0.0) as usize;
            let whole_row_fits_a_page = total as f32 * leading + 2.0 * CELL_PADDING <= TOP - BOTTOM;
            if !self.at_top() && (fits == 0 || (done == 0 && fits < total && whole_row_fits_a_page))
            {
                self.new_page();
                if let Some(h) = header {
                    self.row(h, widths, align, x, size, true, None);
                }
                continue;
            }
            let n = fits.clamp(1, total - done);
            let height = n as f32 * leading + 2.0 * CELL_PADDING;
            let mut cx = x;
            let mut ops = String::new();
            for &w in widths {
                if is_header {
                    ops.push_str(&format!(
                        "0.93 0.93 0.93 rg {} {} {} {} re f\n",
                        num(cx),
                        num(self.y - height),
                        num(w),
                        num(height)
                    ));
                }
                ops.push_str(&format!(
                    "0.7 G 0.5 w {} {} {} {} re S\n",
                    num(cx),
                    num(self.y - height),
                    num(w),
                    num(height)
                ));
                cx += w;
            }
            self.graphics(&ops);
            let top = self.y;
            let mut cx = x;
            for (c, lines) in cells.iter().enumerate() {
                let w = widths.get(c).copied().unwrap_or(0.0);
                let a = align.get(c).copied().unwrap_or(Align::None);
                let inner = w - 2.0 * CELL_PADDING;
                for (k, l) in lines.iter().skip(done).take(n).enumerate() {
                    let baseline = baseline_below(top - CELL_PADDING - k as f32 * leading, size);
                    let lx = match a {
                        Align::Center => cx + CELL_PADDING + (inner - l.width).max(0.0) / 2.0,
                        Align::Right => cx + CELL_PADDING + (inner - l.width).max(0.0),
                        Align::Left | Align::None => cx + CELL_PADDING,
                    };
                    self.text(lx, baseline, &l.segments);
                }
                cx += w;
            }
            self.y = top - height;
            done += n;
            if done < total {
                self.new_page();
                if let Some(h) = header {
                    self.row(h, widths, align, x, size, true, None);
                }
            }
        }
    }
}

/// Column widths filling `width`: each column's share follows the width its text wants on one
/// line, but no column gets less than its longest word (while the table can give it).
fn column_widths(
    header: &[Vec<Inline>],
    rows: &[Vec<Vec<Inline>>],
    columns: usize,
    size: f32,
    width: f32,
) -> Vec<f32> {
    let mut natural = vec![0.0f32; columns];
    let mut longest_word = vec![0.0f32; columns];
    let unbounded = TextStyle { size, bold: true };
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        for (c, cell) in row.iter().enumerate().take(columns) {
            for line in wrap(cell, unbounded, f32::INFINITY) {
                natural[c] = natural[c].max(line.width + 2.0 * CELL_PADDING);
            }
            for run in cell {
                if let Inline::Run(r) = run {
                    let font = Font::of(r.style, true);
                    for word in r.text.split_whitespace() {
                        let w = font.width(size, &winansi::encode(word));
                        longest_word[c] = longest_word[c].max(w + 2.0 * CELL_PADDING);
                    }
                }
            }
        }
    }
    let floor = 24.0f32;
    let total: f32 = natural.iter().map(|n| n.max(floor)).sum();
    let mut widths: Vec<f32> = natural
        .iter()
        .zip(&longest_word)
        .map(|(n, lw)| (width * n.max(floor) / total).max(lw.min(width / 2.0)))
        .collect();
    let sum: f32 = widths.iter().sum();
    if sum > 0.0 {
        for w in &mut widths {
            *w *= width / sum;
        }
    }
    widths
}

/// The baseline of a line of text `size` points high set below `top`, centred in its leading.
fn baseline_below(top: f32, size: f32) -> f32 {
    top - (LEADING - 1.0) * size / 2.0 - size * 0.8
}

/// A number as PDF content streams write it.
fn num(v: f32) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" || s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A PDF literal string of WinAnsi bytes.
fn literal(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('(');
    for &b in bytes {
        match b {
            b'(' | b')' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7E => out.push(b as char),
            // Outside ASCII, as an octal escape: content streams stay 7-bit.
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push(')');
    out
}

/// A PDF text string (Info, annotations): UTF-16BE with its byte order mark.
fn text_string(text: &str) -> Object {
    let mut bytes = vec![0xFE, 0xFF];
    for unit in text.encode_utf16() {
        bytes.extend_from_slice(&unit.to_be_bytes());
    }
    Object::String(bytes, StringFormat::Hexadecimal)
}

/// A URI as a PDF URI action takes it: 7-bit ASCII, anything else percent-encoded.
fn ascii_uri(uri: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(uri.len());
    for &b in uri.as_bytes() {
        if b.is_ascii_graphic() {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// The PDF of `doc`.
pub fn write(doc: &Document) -> Result<Vec<u8>, ExportError> {
    let mut layout = Layout::new();
    layout.blocks(&doc.blocks, MARGIN_X, CONTENT_WIDTH);
    let page_count = layout.pages.len();

    let mut pdf = lopdf::Document::with_version("1.7");
    let pages_id = pdf.new_object_id();
    let mut fonts = Dictionary::new();
    for font in FONTS {
        let mut dict = dictionary! {
            "Type" => "Font",
            "Subtype" => "Type1",
            "BaseFont" => font.base_font(),
            "Encoding" => "WinAnsiEncoding",
        };
        // The widths are the fonts' own, written out so every reader measures alike.
        dict.set("FirstChar", 32);
        dict.set("LastChar", 255);
        dict.set(
            "Widths",
            (32u8..=255)
                .map(|b| Object::Integer(i64::from(font.units(b))))
                .collect::<Vec<_>>(),
        );
        let id = pdf.add_object(dict);
        fonts.set(font.resource(), id);
    }
    let resources_id = pdf.add_object(dictionary! { "Font" => fonts });

    let page_ids: Vec<_> = (0..page_count).map(|_| pdf.new_object_id()).collect();
    for (i, page) in layout.pages.iter().enumerate() {
        let mut content = page.content.clone();
        let footer = format!("Page {} of {page_count}", i + 1);
        let footer_bytes = footer.as_bytes();
        let fw = Font::Regular.width(8.5, footer_bytes);
        content.push_str(&format!(
            "BT\n/F1 8.5 Tf\n{} {} {} rg\n{} {} Td\n{} Tj\nET\n",
            num(MUTED.0),
            num(MUTED.1),
            num(MUTED.2),
            num((PAGE_WIDTH - fw) / 2.0),
            num(FOOTER_BASELINE),
            literal(footer_bytes)
        ));
        let mut stream = Stream::new(Dictionary::new(), content.into_bytes());
        // Uncompressed is still a valid stream.
        let _ = stream.compress();
        let content_id = pdf.add_object(stream);
        let mut annots = Vec::new();
        for a in &page.annotations {
            let mut annot = dictionary! {
                "Type" => "Annot",
                "Subtype" => "Link",
                "Rect" => a.rect.iter().map(|v| Object::Real(*v)).collect::<Vec<_>>(),
                "Border" => vec![0.into(), 0.into(), 0.into()],
            };
            match &a.target {
                Target::Uri(uri) => annot.set(
                    "A",
                    dictionary! {
                        "S" => "URI",
                        "URI" => Object::String(ascii_uri(uri), StringFormat::Literal),
                    },
                ),
                Target::Source(n) => match layout.anchors.get(n) {
                    Some(&(p, y)) => annot.set(
                        "Dest",
                        vec![
                            Object::Reference(page_ids[p]),
                            "XYZ".into(),
                            Object::Real(MARGIN_X),
                            Object::Real(y),
                            Object::Null,
                        ],
                    ),
                    None => continue,
                },
            }
            annots.push(Object::Reference(pdf.add_object(annot)));
        }
        let mut page_dict = dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
            "Resources" => resources_id,
        };
        if !annots.is_empty() {
            page_dict.set("Annots", annots);
        }
        pdf.set_object(page_ids[i], page_dict);
    }
    pdf.set_object(
        pages_id,
        dictionary! {
            "Type" => "Pages",
            "Kids" => page_ids.iter().map(|id| Object::Reference(*id)).collect::<Vec<_>>(),
            "Count" => page_count as i64,
            "MediaBox" => vec![0.into(), 0.into(), Object::Real(PAGE_WIDTH), Object::Real(PAGE_HEIGHT)],
        },
    );
    let catalog_id = pdf.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
        "ViewerPreferences" => dictionary! { "DisplayDocTitle" => true },
    });
    let info_id = pdf.add_object(dictionary! {
        "Title" => text_string(&doc.title),
        "Producer" => text_string("Fathom"),
        "Creator" => text_string("Fathom"),
    });
    pdf.trailer.set("Root", catalog_id);
    pdf.trailer.set("Info", info_id);
    let mut out = Vec::new();
    pdf.save_to(&mut out).map_err(|e| ExportError::Write {
        what: "could not write the PDF".into(),
        source: e.into(),
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> Inline {
        Inline::Run(crate::document::Run {
            text: text.into(),
            style: Style::default(),
            link: None,
        })
    }

    #[test]
    fn lines_break_between_words_and_inside_words_too_long_for_a_line() {
        let ts = TextStyle {
            size: 10.0,
            bold: false,
        };
        let lines = wrap(
            &[run("aaa bbb ccc")],
            ts,
            Font::Regular.width(10.0, b"aaa bbb"),
        );
        let text: Vec<String> = lines
            .iter()
            .map(|l| {
                l.segments
                    .iter()
                    .map(|s| String::from_utf8_lossy(&s.text).to_string())
                    .collect()
            })
            .collect();
        assert_eq!(text, ["aaa bbb", "ccc"]);
        let long = "x".repeat(200);
        let lines = wrap(&[run(&long)], ts, 100.0);
        assert!(lines.len() > 3);
        assert!(lines.iter().all(|l| l.width <= 100.0 + 0.01));
        let total: usize = lines.iter().map(|l| l.segments[0].text.len()).sum();
        assert_eq!(total, 200);
    }

    #[test]
    fn widths_are_the_fonts_published_ones() {
        // Helvetica: "Wo" is 944 + 556 units; Helvetica-Bold: 944 + 611; Courier: 600 each.
        assert!((Font::Regular.width(1000.0, b"Wo") - 1500.0).abs() < 0.01);
        assert!((Font::Bold.width(1000.0, b"Wo") - 1555.0).abs() < 0.01);
        assert!((Font::Mono.width(10.0, b"abc") - 18.0).abs() < 0.01);
    }

    #[test]
    fn numbers_and_strings_are_written_as_pdf_wants_them() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(1.23456), "1.23");
        assert_eq!(num(-0.001), "0");
        assert_eq!(literal(b"a(b)\\c\x93"), "(a\\(b\\)\\\\c\\223)");
    }
}
