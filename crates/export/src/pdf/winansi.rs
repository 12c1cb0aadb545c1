//! Text in the standard PDF fonts: WinAnsiEncoding (Windows code page 1252), which every PDF
//! reader knows for Helvetica and Courier without an embedded font, and the fonts' character
//! widths, from Adobe's published AFM metrics, to measure lines before placing them. A
//! character WinAnsi lacks is written as its nearest equivalent (a dash, a quote, the letter
//! under an accent) or, failing that, as `?`.

/// Codes 0x80 to 0x9F, where WinAnsi differs from Latin-1; `None` marks the five unused codes.
const HIGH: [Option<char>; 32] = [
    Some('€'),
    None,
    Some('‚'),
    Some('ƒ'),
    Some('„'),
    Some('…'),
    Some('†'),
    Some('‡'),
    Some('ˆ'),
    Some('‰'),
    Some('Š'),
    Some('‹'),
    Some('Œ'),
    None,
    Some('Ž'),
    None,
    None,
    Some('‘'),
    Some('’'),
    Some('“'),
    Some('”'),
    Some('•'),
    Some('–'),
    Some('—'),
    Some('˜'),
    Some('™'),
    Some('š'),
    Some('›'),
    Some('œ'),
    None,
    Some('ž'),
    Some('Ÿ'),
];

/// The WinAnsi code of `c`, if WinAnsi has it.
pub fn code_of(c: char) -> Option<u8> {
    let u = c as u32;
    match u {
        0x20..=0x7E | 0xA0..=0xFF => Some(u as u8),
        _ => HIGH
            .iter()
            .position(|h| *h == Some(c))
            .map(|i| 0x80 + i as u8),
    }
}

/// Appends `text` to `out` in WinAnsi. Tabs become a space; other control characters and
/// marks that only modify the letter before them (combining accents, zero-width joiners)
/// are left out.
pub fn encode_into(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        if let Some(b) = code_of(c) {
            // The soft hyphen shows in some readers and not in others: leave it out.
            if b != 0xAD {
                out.push(b);
            }
            continue;
        }
        match c {
            '\t' | '\n' | '\r' => out.push(b' '),
            c if c.is_control() => {}
            '\u{0300}'..='\u{036F}' | '\u{200B}'..='\u{200F}' | '\u{2060}' | '\u{FEFF}' => {}
            '\u{0100}'..='\u{017F}' => {
                out.push(LATIN_EXTENDED_A_BASE[(c as u32 - 0x100) as usize]);
            }
            _ => out.extend_from_slice(nearest(c).as_bytes()),
        }
    }
}

/// The WinAnsi text of `text`.
pub fn encode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    encode_into(text, &mut out);
    out
}

/// ASCII for a character WinAnsi lacks.
fn nearest(c: char) -> &'static str {
    match c {
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2043}' | '\u{2212}' => "-",
        '\u{2015}' => "--",
        '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => " ",
        '\u{2032}' | '\u{02B9}' | '\u{02BC}' | '\u{2035}' => "'",
        '\u{2033}' | '\u{02BA}' | '\u{2036}' => "\"",
        '\u{201B}' => "'",
        '\u{201F}' => "\"",
        '\u{2039}' => "<",
        '\u{203A}' => ">",
        '\u{2024}' => ".",
        '\u{2025}' => "..",
        '\u{2044}' | '\u{2215}' => "/",
        '\u{2190}' => "<-",
        '\u{2192}' => "->",
        '\u{2194}' => "<->",
        '\u{21D0}' => "<=",
        '\u{21D2}' => "=>",
        '\u{2264}' => "<=",
        '\u{2265}' => ">=",
        '\u{2260}' => "!=",
        '\u{2248}' => "~",
        '\u{2217}' => "*",
        '\u{2219}' | '\u{22C5}' => "\u{b7}",
        '\u{2713}' | '\u{2714}' => "v",
        '\u{2717}' | '\u{2718}' => "x",
        '\u{FB00}' => "ff",
        '\u{FB01}' => "fi",
        '\u{FB02}' => "fl",
        '\u{FB03}' => "ffi",
        '\u{FB04}' => "ffl",
        _ => "?",
    }
}

/// Helvetica (and Helvetica-Oblique, which has the same widths), codes 32 to 255.
pub const HELVETICA: [u16; 224] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556,
    556, 556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667,
    611, 778, 722, 278, 500, 667, 556, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667,
    667, 611, 278, 278, 278, 469, 556, 333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500,
    222, 833, 556, 556, 556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,
    0, 556, 0, 222, 556, 333, 1000, 556, 556, 333, 1000, 667, 333, 1000, 0, 611, 0, 0, 222, 222,
    333, 333, 350, 556, 1000, 333, 1000, 500, 333, 944, 0, 500, 667, 278, 333, 556, 556, 556, 556,
    260, 556, 333, 737, 370, 556, 584, 333, 737, 333, 400, 584, 333, 333, 333, 578, 537, 278, 333,
    333, 365, 556, 834, 834, 834, 611, 667, 667, 667, 667, 667, 667, 1000, 722, 667, 667, 667, 667,
    278, 278, 278, 278, 722, 722, 778, 778, 778, 778, 778, 584, 778, 722, 722, 722, 722, 667, 667,
    611, 556, 556, 556, 556, 556, 556, 889, 500, 556, 556, 556, 556, 278, 278, 278, 278, 556, 556,
    556, 556, 556, 556, 556, 584, 611, 556, 556, 556, 556, 500, 556, 500,
];

/// Helvetica-Bold (and Helvetica-BoldOblique), codes 32 to 255.
pub const HELVETICA_BOLD: [u16; 224] = [
    278, 333, 474, 556, 556, 889, 722, 238, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556,
    556, 556, 556, 556, 556, 556, 556, 333, 333, 584, 584, 584, 611, 975, 722, 722, 722, 722, 667,
    611, 778, 722, 278, 556, 722, 611, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667,
    667, 611, 333, 278, 333, 584, 556, 333, 556, 611, 556, 611, 556, 333, 611, 611, 278, 278, 556,
    278, 889, 611, 611, 611, 611, 389, 556, 333, 611, 556, 778, 556, 556, 500, 389, 280, 389, 584,
    0, 556, 0, 278, 556, 500, 1000, 556, 556, 333, 1000, 667, 333, 1000, 0, 611, 0, 0, 278, 278,
    500, 500, 350, 556, 1000, 333, 1000, 556, 333, 944, 0, 500, 667, 278, 333, 556, 556, 556, 556,
    280, 556, 333, 737, 370, 556, 584, 333, 737, 333, 400, 584, 333, 333, 333, 611, 556, 278, 333,
    333, 365, 556, 834, 834, 834, 611, 722, 722, 722, 722, 722, 722, 1000, 722, 667, 667, 667, 667,
    278, 278, 278, 278, 722, 722, 778, 778, 778, 778, 778, 584, 778, 722, 722, 722, 722, 667, 667,
    611, 556, 556, 556, 556, 556, 556, 889, 556, 556, 556, 556, 556, 278, 278, 278, 278, 611, 611,
    611, 611, 611, 611, 611, 584, 611, 611, 611, 611, 611, 556, 611, 556,
];

/// The letter each of U+0100 to U+017F (Latin Extended-A) is written on, for the accented
/// letters WinAnsi lacks.
const LATIN_EXTENDED_A_BASE: &[u8; 128] = b"AaAaAaCcCcCcCcDdDdEeEeEeEeEeGgGgGgGgHhHhIiIiIiIiIiIiJjKkkLlLlLlLlLlNnNnNnnNnOoOoOoOoRrRrRrSsSsSsSsTtTtTtUuUuUuUuUuUuWwYyYZzZzZzs";

/// Courier's every character is 600 units wide.
pub const COURIER_WIDTH: u16 = 600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curly_quotes_and_dashes_keep_their_winansi_codes() {
        assert_eq!(
            encode("“a” ‘b’ – — … €"),
            b"\x93a\x94 \x91b\x92 \x96 \x97 \x85 \x80"
        );
        assert_eq!(encode("café Größe"), b"caf\xe9 Gr\xf6\xdfe");
    }

    #[test]
    fn what_winansi_lacks_is_written_as_its_nearest_or_a_question_mark() {
        assert_eq!(encode("Łódź → x ≤ y"), b"L\xf3dz -> x <= y");
        assert_eq!(encode("ﬁne e\u{301} \u{200b}x"), b"fine e x");
        assert_eq!(encode("日本 🦀"), b"?? ?");
        assert_eq!(encode("a\tb\u{7}c"), b"a bc");
    }

    #[test]
    fn every_code_written_has_a_width() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        for b in encode(&all) {
            assert!(b >= 32, "control code {b} written");
            assert!(HELVETICA[(b - 32) as usize] > 0, "code {b} has no width");
            assert!(
                HELVETICA_BOLD[(b - 32) as usize] > 0,
                "code {b} has no bold width"
            );
        }
    }
}
