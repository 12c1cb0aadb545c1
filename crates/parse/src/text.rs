//! Text primitives shared by the index, the planner and the writer: terms, sentences, and
//! Markdown reduced to headed blocks of inline-safe text.

use std::borrow::Cow;

use pulldown_cmark::{Event as Md, HeadingLevel, Options, Parser, Tag, TagEnd};
use unicode_segmentation::UnicodeSegmentation;

const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "because", "been", "before", "being", "between", "both", "but", "by", "can",
    "could", "describe", "did", "do", "does", "doing", "down", "during", "each", "explain", "few",
    "for", "from", "further", "get", "had", "has", "have", "having", "he", "her", "here", "hers",
    "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "know",
    "let", "lets", "like", "make", "me", "more", "most", "my", "no", "nor", "not", "now", "of",
    "off", "on", "once", "one", "only", "or", "other", "our", "out", "over", "own", "please", "s",
    "same", "she", "should", "so", "some", "such", "t", "tell", "than", "that", "the", "their",
    "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "us", "use", "used", "using", "very", "want", "was", "way", "ways", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "work", "works", "would", "you", "your", "yours",
];

/// True for words that carry no topic on their own.
pub fn is_stopword(word: &str) -> bool {
    // Asked of every word of every sentence weighed: one hash, not a search of the list.
    static SET: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
        std::sync::OnceLock::new();
    SET.get_or_init(|| STOPWORDS.iter().copied().collect())
        .contains(word)
}

/// Lower-cased words of `text` (letters, digits, and inner `_`), in order. A Markdown escape
/// is not a break: `lru\_cache` in parsed text is the word `lru_cache` a question names.
pub fn words(text: &str) -> Vec<String> {
    word_pieces(text).map(Cow::into_owned).collect()
}

/// [`words`], each borrowed from `text` where it needs no change (most words hold no escape
/// and no capital), so a caller that drops some allocates none for them.
fn word_pieces(text: &str) -> impl Iterator<Item = Cow<'_, str>> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\\'))
        .filter_map(|w| {
            let w = if w.contains('\\') {
                Cow::Owned(w.replace('\\', ""))
            } else {
                Cow::Borrowed(w)
            };
            let trimmed = w.trim_matches('_');
            if trimmed.is_empty() {
                return None;
            }
            let lower = !trimmed.chars().all(lower_already);
            Some(match w {
                Cow::Borrowed(b) => {
                    let t = b.trim_matches('_');
                    if lower {
                        Cow::Owned(t.to_lowercase())
                    } else {
                        Cow::Borrowed(t)
                    }
                }
                Cow::Owned(o) => {
                    let t = o.trim_matches('_');
                    Cow::Owned(if lower {
                        t.to_lowercase()
                    } else {
                        t.to_string()
                    })
                }
            })
        })
}

/// Whether lower-casing leaves `c` as it is.
fn lower_already(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_uppercase();
    }
    let mut lower = c.to_lowercase();
    lower.next() == Some(c) && lower.next().is_none()
}

/// A light English stemmer: folds plurals and common verb endings so that "borrowing",
/// "borrowed" and "borrows" meet. Deterministic and cheap; not a linguistic analysis.
pub fn stem(word: &str) -> String {
    let w = word;
    let n = w.chars().count();
    let cut = |suffix: &str, min_len: usize, add: &str| -> Option<String> {
        if n >= min_len && w.ends_with(suffix) {
            Some(format!("{}{add}", &w[..w.len() - suffix.len()]))
        } else {
            None
        }
    };
    cut("ies", 5, "y")
        .or_else(|| cut("sses", 5, "ss"))
        .or_else(|| cut("ing", 6, ""))
        .or_else(|| cut("ed", 5, ""))
        .or_else(|| {
            if n >= 4 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") {
                cut("s", 4, "")
            } else {
                None
            }
        })
        .unwrap_or_else(|| w.to_string())
}

/// Content terms of `text`: stemmed words without stopwords or one-letter noise.
pub fn terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = word_pieces(text)
        .filter(|w| w.chars().count() > 1 && !is_stopword(w))
        .map(|w| stem(&w))
        .collect();
    out.extend(symbols(text));
    out
}

/// Operators that name something on their own in a programming manual ("the `/` in a
/// parameter list", "what does `**` mean"): a question about one must find the sentences
/// that show it. Longest first, so `**` is not read as `*`.
const SYMBOLS: &[&str] = &["**", "->", ":=", "//", "/", "*", "@", "%"];

/// Operators written before a name (`*args`, `**kwargs`, `@decorator`): the operator is what
/// a reader asks about, whatever the name.
const PREFIXES: &[&str] = &["**", "*", "@"];

fn prefixes_a_name(token: &str, op: &str) -> bool {
    token
        .strip_prefix(op)
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// The operators of [`SYMBOLS`] that stand alone in `text` (between spaces, perhaps in a
/// code span or brackets), as terms.
fn symbols(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split_whitespace().filter_map(|token| {
        let bare = token
            .trim_start_matches(['`', '(', '\\', '"', '\''])
            .trim_end_matches(['`', ')', ',', '.', ';', ':', '"', '\'']);
        SYMBOLS
            .iter()
            .find(|s| **s == bare)
            .or_else(|| PREFIXES.iter().find(|p| prefixes_a_name(bare, p)))
            .map(|s| s.to_string())
    })
}

const ABBREVIATIONS: &[&str] = &[
    "e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "prof.", "fig.", "no.", "cf.",
    "approx.", "st.", "jr.", "sr.", "inc.", "ltd.", "u.s.",
];

/// Splits text into sentences (UAX #29), re-joining breaks after common abbreviations.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut glue = false;
    for piece in text.split_sentence_bounds() {
        let trimmed = piece.trim();
        if trimmed.is_empty() {
            continue;
        }
        if glue && let Some(last) = out.last_mut() {
            last.push(' ');
            last.push_str(trimmed);
        } else {
            out.push(trimmed.to_string());
        }
        let last_word = out
            .last()
            .and_then(|s| s.split_whitespace().last())
            .unwrap_or("")
            .to_lowercase();
        glue = ABBREVIATIONS.contains(&last_word.as_str())
            || (last_word.len() == 2
                && last_word.ends_with('.')
                && last_word.starts_with(char::is_uppercase));
    }
    out
}

/// Escapes text so it stays literal inside a Markdown paragraph.
pub fn escape_inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '*' | '_' | '[' | ']' | '<' | '>' | '`' | '~' | '|' | '#'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An inline code span that survives any backticks inside it.
pub fn code_span(code: &str) -> String {
    let code = code.replace('\n', " ");
    let fence = if code.contains('`') { "``" } else { "`" };
    let pad = if code.starts_with('`') || code.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{code}{pad}{fence}")
}

/// A paragraph or list item of a document with the heading it sits under. `text` is inline
/// Markdown: literal text escaped, code kept as code spans, links reduced to their text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Block {
    pub heading: String,
    pub text: String,
    /// The page it is on (PDF), for citations that point at the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// An item of a list (a writer keeps a list's items together).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub item: bool,
}

/// The document title (first H1, if any) and its prose blocks. Code blocks, images and raw
/// HTML are dropped: they are not sentences a report can quote. A table gives one block per
/// row, its cells joined by `|`, so figures kept in tables stay readable and citable. A
/// footnote definition gives blocks under the heading "Notes", its first one starting with
/// its label (`[^1]: ...`), and a reference keeps its marker in the text.
pub fn markdown_blocks(markdown: &str) -> (Option<String>, Vec<Block>) {
    let mut title = None;
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut in_heading: Option<HeadingLevel> = None;
    let mut heading_buf = String::new();
    let mut buf = String::new();
    let mut skip_depth = 0usize;
    let mut text_depth = 0usize;
    // The table row being read, and the heading a footnote definition interrupts.
    let mut row: Option<Vec<String>> = None;
    let mut before_notes: Option<String> = None;
    let mut items = 0usize;
    let flush = |buf: &mut String, heading: &str, blocks: &mut Vec<Block>, item: bool| {
        let text = buf.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() {
            blocks.push(Block {
                heading: heading.to_string(),
                text,
                page: None,
                item,
            });
        }
        buf.clear();
    };
    let opts = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_FOOTNOTES;
    for ev in Parser::new_ext(markdown, opts) {
        match ev {
            Md::Start(Tag::CodeBlock(_) | Tag::Image { .. } | Tag::HtmlBlock) => skip_depth += 1,
            Md::End(TagEnd::CodeBlock | TagEnd::Image | TagEnd::HtmlBlock) => {
                skip_depth = skip_depth.saturating_sub(1)
            }
            _ if skip_depth > 0 => {}
            Md::Start(Tag::Table(_)) => flush(&mut buf, &heading, &mut blocks, items > 0),
            Md::Start(Tag::TableHead | Tag::TableRow) => row = Some(Vec::new()),
            Md::Start(Tag::TableCell) => buf.clear(),
            Md::End(TagEnd::TableCell) => {
                if let Some(cells) = row.as_mut() {
                    cells.push(buf.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                buf.clear();
            }
            Md::End(TagEnd::TableHead | TagEnd::TableRow) => {
                let cells = row.take().unwrap_or_default();
                if cells.iter().any(|c| !c.is_empty()) {
                    buf = cells.join(" \\| ");
                    flush(&mut buf, &heading, &mut blocks, items > 0);
                }
            }
            Md::Start(Tag::FootnoteDefinition(label)) => {
                flush(&mut buf, &heading, &mut blocks, items > 0);
                before_notes.get_or_insert_with(|| std::mem::replace(&mut heading, "Notes".into()));
                buf.push_str(&escape_inline(&format!("[^{label}]: ")));
            }
            Md::End(TagEnd::FootnoteDefinition) => {
                flush(&mut buf, &heading, &mut blocks, items > 0);
                if let Some(h) = before_notes.take() {
                    heading = h;
                }
            }
            Md::FootnoteReference(label) => {
                let marker = format!("[^{label}]");
                if in_heading.is_some() {
                    heading_buf.push_str(&marker);
                } else {
                    buf.push_str(&escape_inline(&marker));
                }
            }
            Md::Start(Tag::Heading { level, .. }) => {
                flush(&mut buf, &heading, &mut blocks, items > 0);
                in_heading = Some(level);
                heading_buf.clear();
            }
            Md::End(TagEnd::Heading(_)) => {
                // Documentation generators end headings with a permalink sign.
                let h = heading_buf
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .trim_end_matches(['¶', '🔗'])
                    .trim_end()
                    .trim_end_matches(" #")
                    .to_string();
                if in_heading == Some(HeadingLevel::H1) && title.is_none() {
                    title = Some(h.clone());
                }
                heading = h;
                in_heading = None;
            }
            Md::Start(tag @ (Tag::Paragraph | Tag::Item)) => {
                if text_depth > 0 {
                    flush(&mut buf, &heading, &mut blocks, items > 0);
                }
                text_depth += 1;
                if matches!(tag, Tag::Item) {
                    items += 1;
                }
            }
            Md::End(tag @ (TagEnd::Paragraph | TagEnd::Item)) => {
                text_depth = text_depth.saturating_sub(1);
                flush(&mut buf, &heading, &mut blocks, items > 0);
                if matches!(tag, TagEnd::Item) {
                    items = items.saturating_sub(1);
                }
            }
            Md::Text(t) => {
                if in_heading.is_some() {
                    heading_buf.push_str(&t);
                } else {
                    buf.push_str(&escape_inline(&t));
                }
            }
            Md::Code(c) => {
                if in_heading.is_some() {
                    heading_buf.push_str(&c);
                } else {
                    buf.push_str(&code_span(&c));
                }
            }
            Md::SoftBreak | Md::HardBreak => {
                if in_heading.is_some() {
                    heading_buf.push(' ');
                } else {
                    buf.push(' ');
                }
            }
            _ => {}
        }
    }
    flush(&mut buf, &heading, &mut blocks, items > 0);
    (title, join_interrupted(blocks))
}

/// Joins a sentence a dropped code block cut in two ("When you run a module with [code] the
/// code in the module will be executed ..."): a paragraph that starts in lower case goes on
/// from the one before it when that one did not end a sentence. The cut is marked "…", so
/// the text never reads as if nothing stood there.
fn join_interrupted(blocks: Vec<Block>) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::with_capacity(blocks.len());
    for block in blocks {
        if let Some(prev) = out.last_mut()
            && !prev.item
            && !block.item
            && prev.heading == block.heading
            && block.text.starts_with(|c: char| c.is_lowercase())
            && !prev.text.ends_with(['.', '!', '?'])
        {
            prev.text.push_str(" … ");
            prev.text.push_str(&block.text);
            continue;
        }
        out.push(block);
    }
    out
}

/// Plain-text blocks: paragraphs separated by blank lines, escaped for Markdown.
pub fn plain_blocks(text: &str) -> Vec<Block> {
    text.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .map(|p| Block {
            heading: String::new(),
            text: escape_inline(&p),
            page: None,
            item: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn words_are_lower_cased_unescaped_and_trimmed() {
        // Capitals, a Markdown escape, inner and outer underscores, a title-case letter (not
        // upper case, yet lower-cased), Greek and digits.
        assert_eq!(
            words("The lru\\_cache __init__ ǅemal ΣΟΦΊΑ x86_64 _ café"),
            vec![
                "the",
                "lru_cache",
                "init",
                "ǆemal",
                "σοφία",
                "x86_64",
                "café"
            ]
        );
    }

    #[test]
    fn terms_fold_word_forms() {
        assert_eq!(
            terms("How does borrowing work with borrowed references?"),
            vec!["borrow", "borrow", "reference"]
        );
    }

    #[test]
    fn sentences_keep_abbreviations_together() {
        let s = sentences("Use a crate, e.g. serde. It works. Dr. Smith agrees.");
        assert_eq!(
            s,
            vec!["Use a crate, e.g. serde.", "It works.", "Dr. Smith agrees."]
        );
    }

    #[test]
    fn markdown_blocks_drop_code_and_keep_inline_code() {
        let md = "# Title\n\nIntro with `Vec<T>` and [a link](http://x).\n\n## Part\n\n```\nfn main() {}\n```\n\n- item *one*\n";
        let (title, blocks) = markdown_blocks(md);
        assert_eq!(title.as_deref(), Some("Title"));
        assert_eq!(
            blocks,
            vec![
                Block {
                    heading: "Title".into(),
                    text: "Intro with `Vec<T>` and a link.".into(),
                    page: None,
                    item: false,
                },
                Block {
                    heading: "Part".into(),
                    text: "item one".into(),
                    page: None,
                    item: true,
                },
            ]
        );
    }

    #[test]
    fn a_sentence_cut_by_a_code_block_is_joined_with_the_cut_marked() {
        let md = "## Scripts\n\nWhen you run a module with\n\n```\npython fibo.py 50\n```\n\nthe code in the module runs.\n\nA new sentence.\n\n```\nx = 1\n```\n\nlower case after a full stop stays apart.\n";
        let (_, blocks) = markdown_blocks(md);
        let texts: Vec<&str> = blocks.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "When you run a module with … the code in the module runs.",
                "A new sentence.",
                "lower case after a full stop stays apart.",
            ]
        );
    }

    #[test]
    fn escaped_names_and_operators_are_terms_a_question_can_name() {
        // Parsed text escapes `_` and `*`; a question names them plainly.
        assert_eq!(
            terms("the lru\\_cache decorator"),
            terms("the lru_cache decorator")
        );
        assert!(terms("functools.lru_cache").contains(&"lru_cache".to_string()));
        let parsed = terms("Positional-only parameters are placed before a `/` (forward-slash).");
        assert!(parsed.contains(&"/".to_string()), "{parsed:?}");
        let question = terms("What do the / and * symbols mean?");
        assert!(question.contains(&"/".to_string()) && question.contains(&"*".to_string()));
        let splat = terms("What do *args and **kwargs mean?");
        assert!(
            splat.contains(&"*".to_string()) && splat.contains(&"**".to_string()),
            "{splat:?}"
        );
        assert!(
            terms("a parameter of the form `**name` receives a dictionary")
                .contains(&"**".to_string())
        );
        // A path or a fraction is not an operator term.
        assert!(!terms("see /usr/bin and 1/2").iter().any(|t| t == "/"));
    }

    #[test]
    fn markdown_tables_give_a_block_per_row_and_footnotes_keep_their_text() {
        let md = "## Rain\n\nSee the table[^src].\n\n| Station | mm |\n| --- | --- |\n| Oslo | 41 |\n| Bergen \\| west |  |\n\n## After\n\nLast words.\n\n[^src]: Measured by *observers*.\n";
        let (_, blocks) = markdown_blocks(md);
        let texts: Vec<(&str, &str)> = blocks
            .iter()
            .map(|b| (b.heading.as_str(), b.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                ("Rain", "See the table\\[^src\\]."),
                ("Rain", "Station \\| mm"),
                ("Rain", "Oslo \\| 41"),
                ("Rain", "Bergen \\| west \\|"),
                ("After", "Last words."),
                ("Notes", "\\[^src\\]: Measured by observers."),
            ]
        );
    }
}
