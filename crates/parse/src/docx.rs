//! DOCX to Markdown, from `word/document.xml`: paragraphs, headings (`Title`, `HeadingN`
//! styles), line breaks and tabs; tables whether or not they declare a `w:tblGrid`, with merged
//! cells kept in their columns and nested tables kept in their cell; numbered and bulleted
//! lists with their nesting (formats from `word/numbering.xml`, list styles from
//! `word/styles.xml`); footnotes and endnotes as Markdown footnotes; the title from
//! `docProps/core.xml`. Sizes are capped, so a zip bomb stops at the cap. A part that cannot be
//! read costs only its own text: what can be read is kept and [`DocxText::unread`] says what
//! was lost.

use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::text::escape_inline;

/// Largest part (`word/document.xml`, `word/footnotes.xml`, ...) read, uncompressed.
const MAX_XML_BYTES: u64 = 64 * 1024 * 1024;
/// Widest table written as columns: Word allows 63. A row's further cells join its last one,
/// so a forged `w:gridSpan` cannot blow a table up.
const MAX_COLUMNS: usize = 64;
/// Deepest list level: Word has nine, 0 to 8.
const MAX_LIST_LEVEL: usize = 8;

/// Why a DOCX file could not be read at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocxError {
    #[error("not a DOCX (zip) file: {0}")]
    NotZip(String),
    #[error("not a DOCX file: word/document.xml is missing")]
    NoDocument,
    #[error("{part}: {reason}")]
    Part { part: String, reason: String },
    #[error("word/document.xml is not valid XML: {0}")]
    InvalidXml(String),
}

/// A DOCX file read as Markdown.
#[derive(Debug, Clone, PartialEq)]
pub struct DocxText {
    /// The title `docProps/core.xml` names, if any.
    pub title: Option<String>,
    pub markdown: String,
    /// What could not be read, in words a person can act on; empty when all was read.
    pub unread: Vec<String>,
}

/// A DOCX file as Markdown, with its title if the file names one.
pub fn docx_to_markdown(bytes: &[u8]) -> Result<DocxText, DocxError> {
    let mut zip =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| DocxError::NotZip(e.to_string()))?;
    let document = read_entry(&mut zip, "word/document.xml")?.ok_or(DocxError::NoDocument)?;
    let title = read_entry(&mut zip, "docProps/core.xml")
        .ok()
        .flatten()
        .and_then(|core| element_text(&core, "title"));
    let mut unread = Vec::new();
    // Each optional part is read and parsed in turn, so one part's bytes are held at a time.
    let mut parts = Parts::default();
    if let Some(xml) = optional_part(&mut zip, "word/numbering.xml", &mut unread) {
        parts.numbering = read_numbering(&xml, &mut unread);
    }
    if let Some(xml) = optional_part(&mut zip, "word/styles.xml", &mut unread) {
        parts.list_styles = read_list_styles(&xml, &mut unread);
    }
    for kind in [NoteKind::Foot, NoteKind::End] {
        if let Some(xml) = optional_part(&mut zip, kind.part(), &mut unread) {
            parts.notes[kind as usize] = Some(read_notes(&xml, kind, &mut unread));
        }
    }
    let markdown = body_markdown(&document, &parts, &mut unread)?;
    Ok(DocxText {
        title,
        markdown,
        unread,
    })
}

/// A part the body can do without: one that is absent is normal, one that cannot be read is
/// recorded in `unread` with what its loss costs.
fn optional_part(
    zip: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
    unread: &mut Vec<String>,
) -> Option<Vec<u8>> {
    let loses = match name {
        "word/numbering.xml" => "list items are written as bullets",
        "word/styles.xml" => "paragraphs numbered by their style are written as plain paragraphs",
        "word/footnotes.xml" => "the footnotes' text is missing",
        _ => "the endnotes' text is missing",
    };
    read_entry(zip, name).unwrap_or_else(|e| {
        unread.push(format!("{e}; {loses}"));
        None
    })
}

fn read_entry(
    zip: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
) -> Result<Option<Vec<u8>>, DocxError> {
    let part = |reason: String| DocxError::Part {
        part: name.to_string(),
        reason,
    };
    let entry = match zip.by_name(name) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(part(e.to_string())),
    };
    let mut out = Vec::new();
    entry
        .take(MAX_XML_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| part(e.to_string()))?;
    if out.len() as u64 > MAX_XML_BYTES {
        return Err(part(format!("larger than {MAX_XML_BYTES} bytes")));
    }
    Ok(Some(out))
}

/// The text of the first element with local name `name`.
fn element_text(xml: &[u8], name: &str) -> Option<String> {
    let mut reader = Reader::from_reader(xml);
    let mut inside = false;
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).ok()? {
            Event::Start(e) if e.local_name().into_inner() == name => inside = true,
            // The reader splits text at each entity ("A &lt; b" is three pieces): all of them
            // up to the element's end are its text.
            Event::Text(t) if inside => text.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if inside => text.extend(entity(&r)),
            Event::End(e) if e.local_name().into_inner() == name => {
                let text = text.trim();
                return (!text.is_empty()).then(|| text.to_string());
            }
            Event::Eof => return None,
            _ => {}
        }
        buf.clear();
    }
}

/// The value of the attribute with local name `name` (`w:val`, `w:id`, ...).
fn attr(e: &BytesStart, name: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().into_inner() == name)
        .and_then(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

fn attr_number(e: &BytesStart, name: &str) -> Option<usize> {
    attr(e, name)?.trim().parse().ok()
}

/// The character an entity reference in text stands for.
fn entity(r: &quick_xml::events::BytesRef) -> Option<char> {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return Some(c);
    }
    match r.xml10_content().as_ref() {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

/// Elements whose content is skipped: `mc:Fallback` repeats its `mc:Choice` (a text box would
/// be read twice), and the `*Change` elements hold the properties before a tracked change.
fn skipped(name: &str) -> bool {
    matches!(
        name,
        "Fallback"
            | "pPrChange"
            | "rPrChange"
            | "tblPrChange"
            | "trPrChange"
            | "tcPrChange"
            | "sectPrChange"
            | "numberingChange"
    )
}

/// Property elements: inside them only properties are read, never text (a `w:tab` there is a
/// tab stop, not a tab).
fn is_properties(name: &str) -> bool {
    matches!(
        name,
        "pPr" | "rPr" | "tblPr" | "trPr" | "tcPr" | "sectPr" | "tblPrEx"
    )
}

/// How a list level is numbered.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Level {
    ordered: bool,
    start: u32,
}

/// `word/numbering.xml`: which numbering instance uses which abstract definition, and how each
/// level of a definition is numbered.
#[derive(Debug, Default)]
struct Numbering {
    nums: HashMap<String, String>,
    levels: HashMap<(String, usize), Level>,
    start_overrides: HashMap<(String, usize), u32>,
}

impl Numbering {
    /// Unknown instances and levels are bullets: the marker is lost, never the item.
    fn level(&self, num_id: &str, ilvl: usize) -> Level {
        let mut level = self
            .nums
            .get(num_id)
            .and_then(|abs| self.levels.get(&(abs.clone(), ilvl)))
            .copied()
            .unwrap_or(Level {
                ordered: false,
                start: 1,
            });
        if let Some(&start) = self.start_overrides.get(&(num_id.to_string(), ilvl)) {
            level.start = start;
        }
        level
    }
}

/// Reads an optional part with `on_event`; an XML error keeps what was read before it and is
/// recorded with what it costs.
fn read_part(
    xml: &[u8],
    part: &str,
    loses: &str,
    unread: &mut Vec<String>,
    mut on_event: impl FnMut(Event<'_>),
) {
    let mut reader = Reader::from_reader(xml);
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Eof) => break,
            Ok(event) => on_event(event),
            Err(e) => {
                unread.push(format!(
                    "{part} is not valid XML after byte {}: {e}; {loses}",
                    reader.error_position()
                ));
                break;
            }
        }
        buf.clear();
    }
}

fn read_numbering(xml: &[u8], unread: &mut Vec<String>) -> Numbering {
    let mut numbering = Numbering::default();
    let mut abstract_id: Option<String> = None;
    let mut level: Option<(usize, Level)> = None;
    let mut num_id: Option<String> = None;
    let mut override_level: Option<usize> = None;
    read_part(
        xml,
        "word/numbering.xml",
        "list items it leaves out are written as bullets",
        unread,
        |event| match event {
            Event::Start(e) | Event::Empty(e) => match e.local_name().into_inner() {
                "abstractNum" => abstract_id = attr(&e, "abstractNumId"),
                "lvl" if abstract_id.is_some() => {
                    level = attr_number(&e, "ilvl").map(|n| {
                        let level = Level {
                            ordered: false,
                            start: 1,
                        };
                        (n, level)
                    })
                }
                "numFmt" => {
                    if let Some((_, l)) = level.as_mut() {
                        let fmt = attr(&e, "val").unwrap_or_default();
                        l.ordered = !matches!(fmt.as_str(), "bullet" | "none" | "");
                    }
                }
                "start" => {
                    if let (Some((_, l)), Some(n)) = (level.as_mut(), attr_number(&e, "val")) {
                        l.start = u32::try_from(n).unwrap_or(1);
                    }
                }
                "num" => num_id = attr(&e, "numId"),
                "abstractNumId" => {
                    if let (Some(num), Some(abs)) = (num_id.clone(), attr(&e, "val")) {
                        numbering.nums.insert(num, abs);
                    }
                }
                "lvlOverride" => override_level = attr_number(&e, "ilvl"),
                "startOverride" => {
                    if let (Some(num), Some(ilvl), Some(n)) =
                        (num_id.clone(), override_level, attr_number(&e, "val"))
                    {
                        let n = u32::try_from(n).unwrap_or(1);
                        numbering.start_overrides.insert((num, ilvl), n);
                    }
                }
                _ => {}
            },
            Event::End(e) => match e.local_name().into_inner() {
                "lvl" => {
                    if let (Some(abs), Some((n, l))) = (abstract_id.clone(), level.take()) {
                        numbering.levels.insert((abs, n), l);
                    }
                }
                "abstractNum" => abstract_id = None,
                "num" => num_id = None,
                "lvlOverride" => override_level = None,
                _ => {}
            },
            _ => {}
        },
    );
    numbering
}

/// A paragraph's numbering: its numbering instance and level, each possibly absent.
#[derive(Debug, Clone, Default, PartialEq)]
struct NumRef {
    num_id: Option<String>,
    ilvl: Option<usize>,
}

/// `word/styles.xml`: the paragraph styles that number their paragraphs (`List Bullet`,
/// `List Number`, ... as python-docx and Word's list styles do).
fn read_list_styles(xml: &[u8], unread: &mut Vec<String>) -> HashMap<String, NumRef> {
    let mut styles = HashMap::new();
    let mut style: Option<(String, NumRef)> = None;
    let mut in_num_pr = false;
    read_part(
        xml,
        "word/styles.xml",
        "paragraphs numbered by the styles it leaves out are written as plain paragraphs",
        unread,
        |event| match event {
            Event::Start(e) | Event::Empty(e) => match e.local_name().into_inner() {
                "style" => style = attr(&e, "styleId").map(|id| (id, NumRef::default())),
                "numPr" => in_num_pr = true,
                "numId" if in_num_pr => {
                    if let Some((_, n)) = style.as_mut() {
                        n.num_id = attr(&e, "val");
                    }
                }
                "ilvl" if in_num_pr => {
                    if let Some((_, n)) = style.as_mut() {
                        n.ilvl = attr_number(&e, "val");
                    }
                }
                _ => {}
            },
            Event::End(e) => match e.local_name().into_inner() {
                "numPr" => in_num_pr = false,
                "style" => {
                    if let Some((id, n)) = style.take().filter(|(_, n)| n.num_id.is_some()) {
                        styles.insert(id, n);
                    }
                }
                _ => {}
            },
            _ => {}
        },
    );
    styles
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NoteKind {
    Foot = 0,
    End = 1,
}

impl NoteKind {
    fn part(self) -> &'static str {
        match self {
            NoteKind::Foot => "word/footnotes.xml",
            NoteKind::End => "word/endnotes.xml",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            NoteKind::Foot => "footnote",
            NoteKind::End => "endnote",
        }
    }

    /// The label of the `n`th note referenced (from 1): footnotes are numbered as Word shows
    /// them, by order of reference rather than by their ids (which start at 1 or 2 depending on
    /// the writer); endnotes get an `e` so the two series never collide.
    fn label(self, n: usize) -> String {
        match self {
            NoteKind::Foot => n.to_string(),
            NoteKind::End => format!("e{n}"),
        }
    }
}

/// The notes of one part, in file order, with their text on one line.
#[derive(Debug, Default)]
struct Notes {
    order: Vec<String>,
    text: HashMap<String, String>,
}

fn read_notes(xml: &[u8], kind: NoteKind, unread: &mut Vec<String>) -> Notes {
    let mut notes = Notes::default();
    let mut current: Option<(String, String)> = None;
    let (mut in_text, mut skip, mut props) = (false, 0usize, 0usize);
    let loses = format!("the {}s after it are missing", kind.noun());
    read_part(xml, kind.part(), &loses, unread, |event| {
        let Some((_, text)) = current.as_mut() else {
            if let Event::Start(e) = event {
                // Separators are drawing rules, not notes.
                let special = attr(&e, "type").is_some_and(|t| t != "normal");
                if e.local_name().into_inner() == kind.noun() && !special {
                    current = attr(&e, "id").map(|id| (id, String::new()));
                }
            }
            return;
        };
        match event {
            Event::Start(e) => {
                let name = e.local_name().into_inner();
                if skip > 0 || skipped(name) {
                    skip += 1;
                } else if is_properties(name) {
                    props += 1;
                } else if name == "t" && props == 0 {
                    in_text = true;
                }
            }
            Event::End(_) if skip > 0 => skip -= 1,
            Event::Empty(e) if skip == 0 && props == 0 => match e.local_name().into_inner() {
                "tab" | "br" | "cr" => text.push(' '),
                "noBreakHyphen" => text.push('-'),
                _ => {}
            },
            Event::Text(t) if in_text => text.push_str(&escape_inline(&t.xml10_content())),
            Event::GeneralRef(r) if in_text => {
                if let Some(c) = entity(&r) {
                    text.push_str(&escape_inline(&c.to_string()));
                }
            }
            Event::End(e) => match e.local_name().into_inner() {
                "t" => in_text = false,
                "p" | "tc" => text.push(' '),
                name if is_properties(name) => props = props.saturating_sub(1),
                name if name == kind.noun() => {
                    if let Some((id, text)) = current.take() {
                        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                        if !notes.text.contains_key(&id) {
                            notes.order.push(id.clone());
                        }
                        notes.text.insert(id, text);
                    }
                    (in_text, props) = (false, 0);
                }
                _ => {}
            },
            _ => {}
        }
    });
    notes
}

/// The parts besides the body that the body refers to.
#[derive(Debug, Default)]
struct Parts {
    numbering: Numbering,
    list_styles: HashMap<String, NumRef>,
    notes: [Option<Notes>; 2],
}

/// One paragraph being read: its text (already Markdown-escaped, with note markers) and the
/// properties that decide how it is written.
#[derive(Debug, Default)]
struct Para {
    text: String,
    style: Option<String>,
    num: NumRef,
}

#[derive(Debug)]
struct Cell {
    text: String,
    /// Grid columns the cell spans (`w:gridSpan`).
    span: usize,
}

#[derive(Debug, Default)]
struct Row {
    /// Grid columns left empty before the first cell (`w:gridBefore`).
    before: usize,
    cells: Vec<Cell>,
}

#[derive(Debug, Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    /// The cell being read; a cell outside any row or a paragraph outside any cell (which Word
    /// does not write) still gets one, so its text is kept.
    fn cell(&mut self) -> Option<&mut Cell> {
        if self.rows.is_empty() {
            self.rows.push(Row::default());
        }
        let row = self.rows.last_mut()?;
        if row.cells.is_empty() {
            row.cells.push(Cell::new());
        }
        row.cells.last_mut()
    }

    /// The table as a grid of text, one string per grid column. Columns come from the rows'
    /// cells and their spans, so a table without `w:tblGrid` reads like one with it. A
    /// spanning cell's text sits in its first column, the columns it covers stay empty. A
    /// vertically merged cell (`w:vMerge`) has its text in its first row: the cells that
    /// continue it below are cells of their own, usually empty, so they keep their column and
    /// the text is not repeated (any text they do hold stays where it is).
    fn grid(self) -> (Vec<Vec<String>>, bool) {
        let mut cut = false;
        let rows = self
            .rows
            .into_iter()
            .map(|row| {
                let mut cols = vec![String::new(); row.before.min(MAX_COLUMNS - 1)];
                for cell in row.cells {
                    if cols.len() >= MAX_COLUMNS {
                        cut = true;
                        if let Some(last) = cols.last_mut()
                            && !cell.text.is_empty()
                        {
                            join_text(last, &cell.text, " ");
                        }
                        continue;
                    }
                    cols.push(cell.text);
                    let room = MAX_COLUMNS - cols.len();
                    cut |= cell.span - 1 > room;
                    cols.extend(std::iter::repeat_n(
                        String::new(),
                        (cell.span - 1).min(room),
                    ));
                }
                cols
            })
            .collect();
        (rows, cut)
    }
}

impl Cell {
    fn new() -> Cell {
        Cell {
            text: String::new(),
            span: 1,
        }
    }
}

/// Appends `more` to `text`, with `sep` between when both have text.
fn join_text(text: &mut String, more: &str, sep: &str) {
    if more.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push_str(sep);
    }
    text.push_str(more);
}

/// A nested table written into its cell: rows joined by "; ", cells by " / ". A Markdown table
/// cell holds one line, so the inner table cannot keep its shape there; written as a table of
/// its own after the outer one, its text would sit apart from the row it belongs to. In the
/// cell it stays with its row, which is what a reader (and a citation of that row) needs.
fn flatten(grid: &[Vec<String>]) -> String {
    grid.iter()
        .map(|row| {
            row.iter()
                .filter(|c| !c.is_empty())
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .filter(|r| !r.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Escapes what would start a Markdown block at the start of a line of a paragraph (`-`, `+`,
/// `=`, `1.`), so a paragraph that begins "1. " or "- " stays a paragraph. Inline syntax is
/// escaped as the text is read.
fn escape_line_starts(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let body = line.trim_start();
        out.push_str(&line[..line.len() - body.len()]);
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        if body.starts_with(['-', '+', '=']) {
            out.push('\\');
            out.push_str(body);
        } else if (1..=9).contains(&digits) && body[digits..].starts_with(['.', ')']) {
            out.push_str(&body[..digits]);
            out.push('\\');
            out.push_str(&body[digits..]);
        } else {
            out.push_str(body);
        }
    }
    out
}

/// Reads `word/document.xml` into Markdown.
struct Body<'a> {
    parts: &'a Parts,
    out: String,
    /// Open paragraphs: a text box puts paragraphs inside a paragraph.
    paras: Vec<Para>,
    /// Open tables, the innermost last.
    tables: Vec<Table>,
    in_text: bool,
    in_num_pr: bool,
    /// Depth inside an element whose content is skipped, and inside property elements.
    skip: usize,
    props: usize,
    /// Open list levels, outermost first: (level, column its text starts at).
    list: Vec<(usize, usize)>,
    /// The last number given at each (numbering instance, level).
    counters: HashMap<(String, usize), u32>,
    /// Note references in order of first appearance, and the label each was given; notes
    /// labelled so far of each kind.
    note_refs: Vec<(NoteKind, String, String)>,
    note_count: [usize; 2],
    note_labels: HashMap<(NoteKind, String), String>,
    unread: Vec<String>,
    wide: bool,
}

impl<'a> Body<'a> {
    fn new(parts: &'a Parts) -> Body<'a> {
        Body {
            parts,
            out: String::new(),
            paras: Vec::new(),
            tables: Vec::new(),
            in_text: false,
            in_num_pr: false,
            skip: 0,
            props: 0,
            list: Vec::new(),
            counters: HashMap::new(),
            note_refs: Vec::new(),
            note_count: [0; 2],
            note_labels: HashMap::new(),
            unread: Vec::new(),
            wide: false,
        }
    }

    fn open(&mut self, e: &BytesStart, empty: bool) {
        let name = e.local_name().into_inner();
        if self.skip > 0 {
            self.skip += usize::from(!empty);
            return;
        }
        if skipped(name) {
            self.skip = usize::from(!empty);
            return;
        }
        if is_properties(name) {
            self.props += usize::from(!empty);
            return;
        }
        if self.props > 0 {
            self.property(name, e, empty);
            return;
        }
        match name {
            "p" => {
                self.paras.push(Para::default());
                if empty {
                    self.close("p");
                }
            }
            "t" => self.in_text = !empty,
            "tab" | "ptab" => self.push_text("\t"),
            "br" | "cr" => self.push_text("\n"),
            "noBreakHyphen" => self.push_text("-"),
            "footnoteReference" => self.note_ref(NoteKind::Foot, e),
            "endnoteReference" => self.note_ref(NoteKind::End, e),
            "tbl" => {
                self.tables.push(Table::default());
                if empty {
                    self.close("tbl");
                }
            }
            "tr" => {
                if let Some(t) = self.tables.last_mut() {
                    t.rows.push(Row::default());
                }
            }
            "tc" => {
                if let Some(t) = self.tables.last_mut() {
                    if t.rows.is_empty() {
                        t.rows.push(Row::default());
                    }
                    if let Some(row) = t.rows.last_mut() {
                        row.cells.push(Cell::new());
                    }
                }
            }
            _ => {}
        }
    }

    /// An element inside `w:pPr`, `w:tcPr`, ...: the properties the body uses.
    fn property(&mut self, name: &str, e: &BytesStart, empty: bool) {
        match name {
            "pStyle" => {
                if let Some(p) = self.paras.last_mut() {
                    p.style = attr(e, "val");
                }
            }
            "numPr" => self.in_num_pr = !empty,
            "numId" if self.in_num_pr => {
                if let Some(p) = self.paras.last_mut() {
                    p.num.num_id = attr(e, "val");
                }
            }
            "ilvl" if self.in_num_pr => {
                if let Some(p) = self.paras.last_mut() {
                    p.num.ilvl = attr_number(e, "val");
                }
            }
            "gridSpan" => {
                if let Some(cell) = self.tables.last_mut().and_then(Table::cell) {
                    cell.span = attr_number(e, "val").unwrap_or(1).clamp(1, MAX_COLUMNS);
                }
            }
            "gridBefore" => {
                if let Some(row) = self.tables.last_mut().and_then(|t| t.rows.last_mut()) {
                    row.before = attr_number(e, "val").unwrap_or(0).min(MAX_COLUMNS);
                }
            }
            _ => {}
        }
    }

    fn close(&mut self, name: &str) {
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        if is_properties(name) {
            self.props = self.props.saturating_sub(1);
            return;
        }
        match name {
            "t" => self.in_text = false,
            "numPr" => self.in_num_pr = false,
            "p" => {
                if let Some(p) = self.paras.pop() {
                    self.paragraph(p);
                }
            }
            "tbl" => {
                if let Some(table) = self.tables.pop() {
                    self.table(table);
                }
            }
            _ => {}
        }
    }

    fn push_text(&mut self, text: &str) {
        if let Some(p) = self.paras.last_mut() {
            p.text.push_str(text);
        }
    }

    fn note_ref(&mut self, kind: NoteKind, e: &BytesStart) {
        let Some(id) = attr(e, "id") else { return };
        let key = (kind, id);
        let label = match self.note_labels.get(&key) {
            Some(l) => l.clone(),
            None => {
                self.note_count[kind as usize] += 1;
                let label = kind.label(self.note_count[kind as usize]);
                self.note_refs.push((kind, key.1.clone(), label.clone()));
                self.note_labels.insert(key, label.clone());
                label
            }
        };
        self.push_text(&format!("[^{label}]"));
    }

    fn paragraph(&mut self, p: Para) {
        let text = escape_line_starts(p.text.trim());
        if text.is_empty() {
            return;
        }
        if let Some(table) = self.tables.last_mut() {
            if let Some(cell) = table.cell() {
                join_text(&mut cell.text, &text, " ");
            }
            return;
        }
        if let Some(n) = p.style.as_deref().and_then(heading_level) {
            self.end_list();
            let line = format!("{} {}\n\n", "#".repeat(n), text.replace('\n', " "));
            self.out.push_str(&line);
            return;
        }
        let style_num = p
            .style
            .as_deref()
            .and_then(|s| self.parts.list_styles.get(s));
        let num_id = p
            .num
            .num_id
            .or_else(|| style_num.and_then(|n| n.num_id.clone()));
        // numId 0 is how Word takes the numbering off a paragraph whose style has it.
        match num_id.filter(|id| id.trim() != "0") {
            Some(id) => {
                let ilvl = p.num.ilvl.or_else(|| style_num.and_then(|n| n.ilvl));
                self.list_item(&id, ilvl.unwrap_or(0).min(MAX_LIST_LEVEL), &text);
            }
            None => {
                self.end_list();
                self.out.push_str(&text);
                self.out.push_str("\n\n");
            }
        }
    }

    /// A list item, indented under the open item of a lower level so Markdown nests it, and
    /// numbered as Word numbers it (a level restarts when a lower one moves on).
    fn list_item(&mut self, num_id: &str, ilvl: usize, text: &str) {
        let level = self.parts.numbering.level(num_id, ilvl);
        for deeper in ilvl + 1..=MAX_LIST_LEVEL {
            self.counters.remove(&(num_id.to_string(), deeper));
        }
        let marker = if level.ordered {
            let n = self
                .counters
                .entry((num_id.to_string(), ilvl))
                .and_modify(|n| *n = n.saturating_add(1))
                .or_insert(level.start);
            format!("{n}. ")
        } else {
            "- ".to_string()
        };
        // A nested list that starts at a number other than 1 would read as the text of the
        // item above it, unless a blank line comes first.
        let deeper = self.list.last().is_some_and(|&(l, _)| l < ilvl);
        if deeper && marker != "1. " && marker != "- " {
            self.out.push('\n');
        }
        while self.list.last().is_some_and(|&(l, _)| l >= ilvl) {
            self.list.pop();
        }
        let indent = self.list.last().map_or(0, |&(_, col)| col);
        let column = indent + marker.len();
        self.list.push((ilvl, column));
        self.out.push_str(&" ".repeat(indent));
        self.out.push_str(&marker);
        self.out
            .push_str(&text.replace('\n', &format!("\n{}", " ".repeat(column))));
        self.out.push('\n');
    }

    fn end_list(&mut self) {
        if !self.list.is_empty() {
            self.list.clear();
            self.out.push('\n');
        }
    }

    fn table(&mut self, table: Table) {
        let (grid, cut) = table.grid();
        if cut && !self.wide {
            self.wide = true;
            self.unread.push(format!(
                "a table is wider than {MAX_COLUMNS} columns: the cells past that are joined \
                 into its last column"
            ));
        }
        if let Some(outer) = self.tables.last_mut() {
            if let Some(cell) = outer.cell() {
                join_text(&mut cell.text, &flatten(&grid), " ");
            }
        } else {
            self.end_list();
            self.out.push_str(&render_table(&grid));
        }
    }

    /// Closes what is still open (after an XML error) and writes the notes at the end.
    fn finish(mut self) -> (String, Vec<String>) {
        while let Some(p) = self.paras.pop() {
            self.paragraph(p);
        }
        while let Some(t) = self.tables.pop() {
            self.table(t);
        }
        self.end_list();
        let mut missing = [0usize; 2];
        for (kind, id, label) in &self.note_refs {
            let note = self.parts.notes[*kind as usize].as_ref();
            match note.and_then(|n| n.text.get(id)) {
                Some(text) if text.is_empty() => {}
                Some(text) => self.out.push_str(&format!("[^{label}]: {text}\n\n")),
                None => missing[*kind as usize] += 1,
            }
        }
        // Notes no reference points at (Word deletes them with their reference; other writers
        // may not) are kept too, after the others.
        for kind in [NoteKind::Foot, NoteKind::End] {
            let Some(notes) = self.parts.notes[kind as usize].as_ref() else {
                continue;
            };
            for id in &notes.order {
                let text = notes.text.get(id).map_or("", String::as_str);
                if text.is_empty() || self.note_labels.contains_key(&(kind, id.clone())) {
                    continue;
                }
                self.note_count[kind as usize] += 1;
                let label = kind.label(self.note_count[kind as usize]);
                self.out.push_str(&format!("[^{label}]: {text}\n\n"));
            }
            if missing[kind as usize] > 0 {
                self.unread.push(format!(
                    "{} {}(s) referenced in the text have no text in {}; their markers are kept",
                    missing[kind as usize],
                    kind.noun(),
                    kind.part()
                ));
            }
        }
        (self.out, self.unread)
    }
}

fn body_markdown(xml: &[u8], parts: &Parts, unread: &mut Vec<String>) -> Result<String, DocxError> {
    let mut reader = Reader::from_reader(xml);
    let mut body = Body::new(parts);
    let mut broken = None;
    let mut buf = Vec::new();
    loop {
        let event = match reader.read_event_into(&mut buf) {
            Ok(event) => event,
            Err(e) => {
                broken = Some((reader.error_position(), e.to_string()));
                break;
            }
        };
        match event {
            Event::Start(e) => body.open(&e, false),
            Event::Empty(e) => body.open(&e, true),
            Event::End(e) => body.close(e.local_name().into_inner()),
            Event::Text(t) if body.in_text && body.skip == 0 => {
                body.push_text(&escape_inline(&t.xml10_content()));
            }
            Event::GeneralRef(r) if body.in_text && body.skip == 0 => {
                if let Some(c) = entity(&r) {
                    body.push_text(&escape_inline(&c.to_string()));
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    let (markdown, body_unread) = body.finish();
    if let Some((at, e)) = broken {
        // Nothing readable before the error: the file is refused, as before.
        if markdown.trim().is_empty() {
            return Err(DocxError::InvalidXml(e));
        }
        unread.push(format!(
            "word/document.xml is not valid XML after byte {at}: {e}; the text before it is kept"
        ));
    }
    unread.extend(body_unread);
    Ok(markdown)
}

/// `Title` is level 1; `HeadingN` (or `heading N`) is level N+1, at most 6.
fn heading_level(style: &str) -> Option<usize> {
    let s = style.to_ascii_lowercase().replace(' ', "");
    if s == "title" {
        return Some(1);
    }
    let n: usize = s.strip_prefix("heading")?.parse().ok()?;
    Some((n + 1).clamp(2, 6))
}

/// A GFM table; its first row is the header. Cell text is already escaped, `|` included.
fn render_table(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = (0..width)
            .map(|k| row.get(k).map_or(String::new(), |c| c.replace('\n', " ")))
            .collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
        if i == 0 {
            out.push_str(&format!("|{}\n", " --- |".repeat(width)));
        }
    }
    out.push('\n');
    out
}
#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A DOCX as Word writes it: a zip with the document and its properties.
    pub(crate) fn sample_docx(title: &str, body_xml: &str) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default();
        zip.start_file("[Content_Types].xml", opts).unwrap();
        zip.write_all(b"<?xml version=\"1.0\"?><Types/>").unwrap();
        zip.start_file("docProps/core.xml", opts).unwrap();
        write!(zip, "<?xml version=\"1.0\"?><cp:coreProperties xmlns:cp=\"c\" xmlns:dc=\"d\"><dc:title>{title}</dc:title></cp:coreProperties>").unwrap();
        zip.start_file("word/document.xml", opts).unwrap();
        write!(zip, "<?xml version=\"1.0\"?><w:document xmlns:w=\"w\"><w:body>{body_xml}</w:body></w:document>").unwrap();
        zip.finish().unwrap().into_inner()
    }

    #[test]
    fn headings_paragraphs_tables_and_entities() {
        let body = r#"
            <w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Ownership</w:t></w:r></w:p>
            <w:p><w:r><w:t xml:space="preserve">Each value has </w:t></w:r><w:r><w:t>one owner &amp; one scope.</w:t></w:r></w:p>
            <w:tbl>
              <w:tr><w:tc><w:p><w:r><w:t>Type</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Copy?</w:t></w:r></w:p></w:tc></w:tr>
              <w:tr><w:tc><w:p><w:r><w:t>i32</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>yes | always</w:t></w:r></w:p></w:tc></w:tr>
            </w:tbl>
            <w:p><w:r><w:t>Line one</w:t><w:br/><w:t>line two</w:t></w:r></w:p>"#;
        let DocxText {
            title,
            markdown: md,
            unread,
        } = docx_to_markdown(&sample_docx("Rust notes", body)).unwrap();
        assert_eq!(title.as_deref(), Some("Rust notes"));
        assert!(unread.is_empty(), "{unread:?}");
        assert!(
            md.starts_with("## Ownership\n\nEach value has one owner & one scope.\n\n"),
            "{md}"
        );
        assert!(
            md.contains("| Type | Copy? |\n| --- | --- |\n| i32 | yes \\| always |\n"),
            "{md}"
        );
        assert!(md.contains("Line one\nline two"), "{md}");
    }

    #[test]
    fn a_title_with_escaped_characters_reads_whole() {
        let body = r#"<w:p><w:r><w:t>Text.</w:t></w:r></w:p>"#;
        let docx =
            docx_to_markdown(&sample_docx("Rc &lt;T&gt; &amp; Arc &#8212; notes", body)).unwrap();
        assert_eq!(docx.title.as_deref(), Some("Rc <T> & Arc \u{2014} notes"));
    }

    #[test]
    fn docx_files_parse_like_any_document() {
        use crate::document::{DocKind, parse_content};
        let body = r#"<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Borrowing</w:t></w:r></w:p>
            <w:p><w:r><w:t>A reference lets code use a value without taking ownership of it.</w:t></w:r></w:p>"#;
        let kind = DocKind::from_path("notes/borrowing.docx").unwrap();
        assert_eq!(kind, DocKind::Docx);
        let doc = parse_content(
            "file:///notes/borrowing.docx",
            kind,
            &sample_docx("Borrowing notes", body),
        )
        .unwrap();
        assert_eq!(doc.title, "Borrowing notes");
        assert_eq!(doc.blocks[0].heading, "Borrowing");
        assert!(
            doc.blocks[0]
                .text
                .starts_with("A reference lets code use a value")
        );
        let err = parse_content("file:///x.docx", kind, b"not a zip").unwrap_err();
        assert!(
            err.to_string().starts_with("unreadable DOCX: not a DOCX"),
            "{err}"
        );
    }

    #[test]
    fn broken_files_are_refused_with_a_reason() {
        let err = |bytes: &[u8]| docx_to_markdown(bytes).unwrap_err().to_string();
        assert!(err(b"PK\x03\x04 garbage").contains("not a DOCX"));
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        zip.start_file("other.xml", zip::write::SimpleFileOptions::default())
            .unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        assert!(err(&bytes).contains("word/document.xml is missing"));
        // Broken before any text: nothing to keep, so refused.
        let bad = sample_docx(
            "t",
            "<w:p><w:r></w:p><w:p><w:r><w:t>after</w:t></w:r></w:p>",
        );
        assert!(err(&bad).contains("not valid XML"), "{}", err(&bad));
    }

    #[test]
    fn a_body_that_breaks_off_keeps_the_text_before_the_break_and_says_so() {
        let body = "<w:p><w:r><w:t>Read before the break.</w:t></w:r></w:p>\
            <w:tbl><w:tr><w:tc><w:p><w:r><w:t>cell kept</w:t></w:r></w:p></w:tc></w:tr>\
            <w:tr><w:tc><w:p><w:r><w:t>also kept</w:t></w:r></w:p></w:tc><w:tc><w:p></w:tc>";
        let doc = docx_to_markdown(&sample_docx("t", body)).unwrap();
        assert!(
            doc.markdown.starts_with("Read before the break.\n\n"),
            "{}",
            doc.markdown
        );
        assert!(doc.markdown.contains("| cell kept |"), "{}", doc.markdown);
        assert!(doc.markdown.contains("| also kept |"), "{}", doc.markdown);
        assert_eq!(doc.unread.len(), 1, "{:?}", doc.unread);
        assert!(
            doc.unread[0].starts_with("word/document.xml is not valid XML after byte"),
            "{:?}",
            doc.unread
        );
    }
}
