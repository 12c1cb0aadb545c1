//! A cap on how deep an HTML page nests, applied before the page is parsed.
//!
//! html5ever and the Readability port both take time quadratic in the depth of the element
//! tree (10,000 nested `div`s take seconds, 100,000 take hours), so a hostile page nested
//! 100,000 deep would hold a parsing thread for good. Browsers cap the depth (Chromium at
//! 512) by attaching deeper elements to the element at the cap; [`flatten`] does the same on
//! the source: a linear scan keeps an approximate stack of open elements (with the HTML
//! rules that matter for depth: void elements, raw-text elements, implied ends, end tags that
//! cannot close across a block) and drops the tags that would open an element past the cap,
//! with their end tags. Their text stays where it was. The scan errs towards deeper, so what
//! it lets through is within the cap for the real parser too.

/// Deepest element nesting read as written, as in Chromium.
pub const MAX_DEPTH: usize = 512;

/// Elements that never have content.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param",
    "source", "track", "wbr", "basefont", "bgsound", "frame", "image",
];

/// Elements whose content is text up to their end tag.
#[rustfmt::skip]
const RAW_TEXT: &[&str] = &[
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript",
    "plaintext",
];

/// Elements a start tag of the same name closes (an open `li` is closed by the next `li`).
const IMPLIED_END: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "rb", "rt", "rp", "rtc",
    "tbody", "thead", "tfoot", "colgroup", "caption",
];

/// The HTML standard's "special" elements: an end tag of another element does not close
/// across them.
#[rustfmt::skip]
const SPECIAL: &[&str] = &[
    "address", "applet", "area", "article", "aside", "base", "basefont", "bgsound",
    "blockquote", "body", "br", "button", "caption", "center", "col", "colgroup", "dd",
    "details", "dir", "div", "dl", "dt", "embed", "fieldset", "figcaption", "figure", "footer",
    "form", "frame", "frameset", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hgroup",
    "hr", "html", "iframe", "img", "input", "keygen", "li", "link", "listing", "main",
    "marquee", "menu", "meta", "nav", "noembed", "noframes", "noscript", "object", "ol", "p",
    "param", "plaintext", "pre", "script", "search", "section", "select", "source", "style",
    "summary", "table", "tbody", "td", "template", "textarea", "tfoot", "th", "thead", "title",
    "tr", "track", "ul", "wbr", "xmp",
];

/// Where a search for an element to close stops (the standard's scope boundaries).
const SCOPE: &[&str] = &[
    "applet", "caption", "html", "table", "td", "th", "marquee", "object", "template",
];

/// Open elements looked through for the one an end tag closes: a page that leaves more open
/// above it keeps it open (the scan errs deeper), and a flood of end tags costs linear time.
const MAX_WALK: usize = 128;

/// A page nested past [`MAX_DEPTH`], flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flattened {
    pub html: String,
    /// Start tags dropped (each with its end tag, when it had one).
    pub dropped: usize,
}

/// The page with the elements past [`MAX_DEPTH`] flattened into the element at the cap, or
/// None when it nests no deeper (the common case: nothing is copied).
pub fn flatten(html: &str) -> Option<Flattened> {
    let bytes = html.as_bytes();
    let mut open: Vec<String> = Vec::new();
    // Start tags dropped and not yet matched by an end tag, by name.
    let mut overflow: std::collections::HashMap<String, usize> = Default::default();
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let mut dropped = 0;
    let mut at = 0;
    while let Some(lt) = memchr(b'<', &bytes[at..]).map(|i| at + i) {
        let rest = &bytes[lt..];
        if rest.starts_with(b"<!--") {
            at = find(bytes, lt + 4, b"-->").map_or(bytes.len(), |i| i + 3);
            continue;
        }
        if rest.starts_with(b"<!") || rest.starts_with(b"<?") {
            at = memchr(b'>', &bytes[lt..]).map_or(bytes.len(), |i| lt + i + 1);
            continue;
        }
        let end_tag = rest.get(1) == Some(&b'/');
        let name_at = lt + 1 + usize::from(end_tag);
        if !bytes.get(name_at).is_some_and(u8::is_ascii_alphabetic) {
            at = lt + 1;
            continue;
        }
        let name_end = bytes[name_at..]
            .iter()
            .position(|b| b.is_ascii_whitespace() || *b == b'/' || *b == b'>')
            .map_or(bytes.len(), |i| name_at + i);
        let name = html[name_at..name_end].to_ascii_lowercase();
        let tag_end = tag_end(bytes, name_end);
        if end_tag {
            if let Some(n) = overflow.get_mut(&name).filter(|n| **n > 0) {
                *n -= 1;
                cut.push((lt, tag_end));
            } else {
                close(&mut open, &name);
            }
            at = tag_end;
            continue;
        }
        at = tag_end;
        if VOID.contains(&name.as_str()) {
            continue;
        }
        if RAW_TEXT.contains(&name.as_str()) {
            // Its text is not markup: skip to its end tag, which closes it at once.
            at = raw_text_end(bytes, tag_end, &name);
            continue;
        }
        let self_closing = tag_end >= 2 && &bytes[tag_end - 2..tag_end] == b"/>";
        if self_closing && open.iter().any(|e| e == "svg" || e == "math") {
            continue;
        }
        if IMPLIED_END.contains(&name.as_str()) {
            close_same(&mut open, &name);
        }
        if open.len() >= MAX_DEPTH {
            *overflow.entry(name).or_default() += 1;
            cut.push((lt, tag_end));
            dropped += 1;
        } else {
            open.push(name);
        }
    }
    if dropped == 0 {
        return None;
    }
    let mut out = String::with_capacity(html.len());
    let mut from = 0;
    for (start, end) in cut {
        out.push_str(&html[from..start]);
        from = end;
    }
    out.push_str(&html[from..]);
    Some(Flattened { html: out, dropped })
}

/// Where the tag whose name ends at `from` ends: after its `>`, quoted attribute values
/// skipped.
fn tag_end(bytes: &[u8], from: usize) -> usize {
    let mut quote = None;
    for (i, &b) in bytes[from..].iter().enumerate() {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if b == q => quote = None,
            (None, b'>') => return from + i + 1,
            _ => {}
        }
    }
    bytes.len()
}

/// Where the raw text of `name` that starts at `from` ends: after its end tag.
fn raw_text_end(bytes: &[u8], from: usize, name: &str) -> usize {
    if name == "plaintext" {
        return bytes.len();
    }
    let mut at = from;
    while let Some(i) = find(bytes, at, b"</") {
        let candidate = &bytes[i + 2..];
        if candidate.len() >= name.len()
            && candidate[..name.len()].eq_ignore_ascii_case(name.as_bytes())
        {
            return tag_end(bytes, i + 2 + name.len());
        }
        at = i + 2;
    }
    bytes.len()
}

/// An end tag: pops to the element it closes, if one is open where it can be reached (a
/// special element's end tag reaches up to a scope boundary, another's up to any special
/// element); otherwise it is ignored, as the parser ignores it.
fn close(open: &mut Vec<String>, name: &str) {
    let special = SPECIAL.contains(&name);
    for i in (0..open.len()).rev().take(MAX_WALK) {
        let e = open[i].as_str();
        if e == name {
            open.truncate(i);
            return;
        }
        if (special && SCOPE.contains(&e)) || (!special && SPECIAL.contains(&e)) {
            return;
        }
    }
}

/// A start tag that implies the end of an open element of its name (`li` in `li`): closes
/// it if it is open within the current list, table or block.
fn close_same(open: &mut Vec<String>, name: &str) {
    for i in (0..open.len()).rev().take(MAX_WALK) {
        let e = open[i].as_str();
        if e == name {
            open.truncate(i);
            return;
        }
        if SCOPE.contains(&e) || matches!(e, "ul" | "ol" | "dl" | "select" | "body") {
            return;
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(tag: &str, depth: usize, inner: &str) -> String {
        format!(
            "{}{inner}{}",
            format!("<{tag} class=\"x>y\">").repeat(depth),
            format!("</{tag}>").repeat(depth)
        )
    }

    #[test]
    fn ordinary_pages_are_left_alone() {
        let page = format!(
            "<html><body><ul>{}</ul><p>a<p>b<br><img src=x><script>if (a<b) {{ '<div>' }}</script>{}</body></html>",
            "<li>item".repeat(5000),
            nested("div", MAX_DEPTH - 10, "deep but within")
        );
        assert_eq!(flatten(&page), None);
    }

    #[test]
    fn elements_past_the_cap_are_flattened_and_their_text_kept() {
        let page = format!(
            "<html><body>{}<p>after</p></body></html>",
            nested("div", 100_000, "the innermost words")
        );
        let flat = flatten(&page).expect("flattened");
        assert_eq!(flat.dropped, 100_000 + 2 - MAX_DEPTH);
        assert!(flat.html.contains("the innermost words</div>"));
        assert!(flat.html.ends_with("<p>after</p></body></html>"));
        assert_eq!(flat.html.matches("<div").count(), MAX_DEPTH - 2);
        assert_eq!(flat.html.matches("</div>").count(), MAX_DEPTH - 2);
        assert_eq!(flatten(&flat.html), None, "within the cap once flattened");
    }

    #[test]
    fn end_tags_that_cannot_close_across_a_block_do_not_hide_depth() {
        // `</span>` does not close the `div` opened inside it: the parser nests these.
        let page = "<span><div></span>".repeat(MAX_DEPTH);
        let flat = flatten(&page).expect("counted as nested");
        assert!(flat.dropped >= MAX_DEPTH / 2, "{}", flat.dropped);
    }
}
