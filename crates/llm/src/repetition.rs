//! Answers that repeat themselves. Small models at low temperature fall into loops, writing
//! the same sentence or paragraph until `max_tokens` runs out; the loop is cut at its first
//! copy rather than paid for to the end.

/// Content streamed between two looks for a loop, in bytes.
pub(crate) const CHECK_EVERY: usize = 200;
/// Characters at the end of the answer looked at.
const WINDOW: usize = 2000;
/// Lengths of the repeated block, in characters.
const MIN_BLOCK: usize = 8;
const MAX_BLOCK: usize = 600;
/// Copies of the block needed, at least.
const MIN_COPIES: usize = 3;
/// Characters the copies must cover together, at least: a table row with three equal cells
/// repeats exactly too, but briefly.
const MIN_RUN: usize = 160;
/// The same for a block with no letter or digit in it (`|------|------|`, `=====`), which
/// markdown writes legitimately; only a long run of it (blank lines forever) is a loop.
const MIN_RUN_SYMBOLS: usize = 1000;

/// Where to cut `content` if it ends in a loop: the byte length that keeps everything up to
/// the end of the first copy of the repeated block. A loop is exact repetition of a block of
/// 8 to 600 characters, at least 3 times in a row and over at least 160 characters (1000 if
/// the block has no letter or digit), reaching the end. Bounded: the search looks at the last
/// 2000 characters only; finding where the loop began is one backward pass.
pub(crate) fn loop_cut(content: &str) -> Option<usize> {
    let window_start = content
        .char_indices()
        .rev()
        .nth(WINDOW - 1)
        .map_or(0, |(i, _)| i);
    let tail: Vec<char> = content[window_start..].chars().collect();
    let n = tail.len();
    // The shortest period that holds, so that the cut keeps one copy of the true block.
    let period = (MIN_BLOCK..=MAX_BLOCK.min(n / MIN_COPIES)).find(|&p| {
        let block = &tail[n - p..];
        let min_run = if block.iter().any(|c| c.is_alphanumeric()) {
            MIN_RUN
        } else {
            MIN_RUN_SYMBOLS
        };
        let run = (MIN_COPIES * p).max(min_run);
        // From the end backwards: most periods fail at once.
        run <= n && (n - run..n - p).rev().all(|i| tail[i] == tail[i + p])
    })?;
    // The same block in bytes (every window of `period` characters of a periodic text is a
    // rotation of the block, so all have this length), and the loop's start: as far back as
    // the text keeps repeating, then forward to a character's first byte.
    let block: usize = tail[n - period..].iter().map(|c| c.len_utf8()).sum();
    let bytes = content.as_bytes();
    let mut start = content.len() - MIN_COPIES * block;
    while start > 0 && bytes[start - 1] == bytes[start - 1 + block] {
        start -= 1;
    }
    while !content.is_char_boundary(start) {
        start += 1;
    }
    // `start` begins a character and the text repeats from there, so `start + block` does too.
    Some(start + block)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cut, looked for after every character as if the text streamed one at a time.
    fn first_cut(text: &str) -> Option<(usize, String)> {
        text.char_indices()
            .map(|(i, c)| i + c.len_utf8())
            .find_map(|end| Some((end, text[..loop_cut(&text[..end])?].to_string())))
    }

    #[test]
    fn a_looping_sentence_is_cut_after_its_first_copy() {
        let sentence = "When the owner goes out of scope, the value is dropped. ";
        let text = format!(
            "Rust ownership means each value has one owner. {}",
            sentence.repeat(10)
        );
        let (seen, kept) = first_cut(&text).expect("the loop is found");
        // Found by the time three copies were written.
        assert!(
            seen <= "Rust ownership means each value has one owner. ".len() + 3 * sentence.len()
        );
        // The loop is said to begin where the text first repeats (the ". " before it matches
        // the end of the sentence), so the kept copy ends before the last ". ".
        assert_eq!(
            kept,
            "Rust ownership means each value has one owner. When the owner goes out of scope, the value is dropped"
        );
        assert_eq!(
            loop_cut(&text),
            Some(kept.len()),
            "the same cut when looked at late"
        );
    }

    #[test]
    fn short_long_and_non_ascii_loops_are_cut_to_one_copy() {
        // A short phrase needs more copies (160 characters), then keeps one.
        let text = format!("Answer: {}", "I think ".repeat(40));
        let (seen, kept) = first_cut(&text).expect("found");
        assert!(seen <= "Answer: ".len() + 160, "{seen}");
        assert_eq!(kept, "Answer: I think");
        // A paragraph of 500 characters.
        let para: String = (0..50).map(|i| format!("w{:03}_word ", i * 7)).collect();
        assert_eq!(para.chars().count(), 500);
        let text = format!("Intro.\n{}", para.repeat(4));
        let (_, kept) = first_cut(&text).expect("found");
        assert_eq!(kept, format!("Intro.\n{para}"));
        // Characters, not bytes: a 36-character block of Chinese is 108 bytes.
        let zh = "所有权规则：每个值都有一个所有者，当所有者离开作用域时，这个值将被丢弃。";
        let text = format!("答：{}", zh.repeat(8));
        let (_, kept) = first_cut(&text).expect("found");
        assert_eq!(kept, format!("答：{zh}"));
        // Blank lines forever.
        let text = format!("Done.{}", "\n".repeat(1200));
        let (_, kept) = first_cut(&text).expect("found");
        assert_eq!(kept, format!("Done.{}", "\n".repeat(8)));
    }

    #[test]
    fn prose_json_lists_and_tables_are_not_cut() {
        let prose = "Ownership is Rust's most unique feature and has deep implications for the rest of the language. It enables Rust to make memory safety guarantees without needing a garbage collector, so it's important to understand how ownership works. In this chapter, we'll talk about ownership as well as several related features: borrowing, slices, and how Rust lays data out in memory. All programs have to manage the way they use a computer's memory while running. Some languages have garbage collection that regularly looks for no-longer-used memory as the program runs; in other languages, the programmer must explicitly allocate and free the memory. Rust uses a third approach: memory is managed through a system of ownership with a set of rules that the compiler checks.";
        assert_eq!(first_cut(prose), None);
        let facts: Vec<String> = (0..60)
            .map(|i| {
                format!(
                    "{{\"fact\": \"Claim {} about the borrow checker.\", \"url\": \"https://example.test/u{i}\"}}",
                    (b'A' + (i % 26) as u8) as char
                )
            })
            .collect();
        let json = format!("{{\"facts\": [{}]}}", facts.join(", "));
        assert_eq!(first_cut(&json), None);
        let mut table = String::from(
            "| Feature | Rust | Go | Java |\n|----------------|----------------|----------------|----------------|\n",
        );
        for row in [
            "Garbage collector",
            "Generics",
            "Null safety",
            "Green threads",
        ] {
            table.push_str(&format!(
                "| {row:<14} | Not supported  | Not supported  | Not supported  |\n"
            ));
        }
        table.push_str(&format!("|{}|\n", "-".repeat(400)));
        assert_eq!(first_cut(&table), None);
        let list: String = (1..=80)
            .map(|i| format!("{i}. See the section above.\n"))
            .collect();
        assert_eq!(first_cut(&list), None);
    }
}
