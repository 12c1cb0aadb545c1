//! Hostile documents, small on the wire and huge, endless or looping once read: a gzip bomb,
//! a DOCX whose zip inflates to gigabytes, a PDF page tree claiming a million pages, a PDF
//! whose page is its own parent, an HTML page nested without end.

use flate2::{Compress, Compression, Crc, FlushCompress};

/// Bytes of `prefix` then `filler` repeated to at least `total` bytes in all (whole MiB of
/// filler), as one raw deflate
/// stream, with the CRC-32 and length of what it inflates to. Built in linear time from one
/// compressed chunk: after a full flush the compressor starts afresh, so each further chunk
/// compresses to the same bytes.
fn deflate_repeated(prefix: &[u8], filler: u8, total: u64) -> (Vec<u8>, u32, u64) {
    const CHUNK: usize = 1024 * 1024;
    let chunk = vec![filler; CHUNK];
    let mut z = Compress::new(Compression::best(), false);
    let mut flushed = |input: &[u8], flush| {
        let mut out = Vec::with_capacity(input.len() / 64 + 1024);
        let mut at = 0;
        loop {
            let before = z.total_in();
            out.reserve(64 * 1024);
            z.compress_vec(&input[at..], &mut out, flush)
                .expect("in-memory deflate");
            at += (z.total_in() - before) as usize;
            if at == input.len() && out.len() < out.capacity() {
                return out;
            }
        }
    };
    let mut stream = flushed(prefix, FlushCompress::Full);
    let once = flushed(&chunk, FlushCompress::Full);
    let again = flushed(&chunk, FlushCompress::Full);
    assert_eq!(once, again, "a chunk after a full flush compresses alike");
    let chunks = (total.saturating_sub(prefix.len() as u64)).div_ceil(CHUNK as u64);
    for _ in 0..chunks {
        stream.extend_from_slice(&once);
    }
    stream.extend_from_slice(&flushed(&[], FlushCompress::Finish));
    let mut crc = Crc::new();
    crc.update(prefix);
    let mut chunk_crc = Crc::new();
    chunk_crc.update(&chunk);
    for _ in 0..chunks {
        crc.combine(&chunk_crc);
    }
    (
        stream,
        crc.sum(),
        prefix.len() as u64 + chunks * CHUNK as u64,
    )
}

/// A gzip body (serve it with `Content-Encoding: gzip`) of an HTML page that inflates to
/// at least `total` bytes, nearly all spaces.
pub fn gzip_bomb(total: u64) -> Vec<u8> {
    let (deflated, crc, len) = deflate_repeated(b"<html><body><p>", b' ', total);
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend_from_slice(&deflated);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out
}

/// A DOCX (a zip of one `word/document.xml`) whose document inflates to at least `total`
/// bytes (under 4 GiB, the sizes a zip without Zip64 records).
pub fn docx_bomb(total: u64) -> Vec<u8> {
    let prefix = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><w:document \
        xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body><w:p>\
        <w:r><w:t>";
    let (deflated, crc, len) = deflate_repeated(prefix, b' ', total);
    assert!(
        len < u64::from(u32::MAX),
        "a zip without Zip64 holds under 4 GiB"
    );
    let name = b"word/document.xml";
    let mut out = Vec::new();
    let u16le = |out: &mut Vec<u8>, v: u16| out.extend_from_slice(&v.to_le_bytes());
    let u32le = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
    // The entry's fields, the same in its local header and its central directory record:
    // version needed 2.0, no flags, deflate, a 1980-01-01 timestamp, CRC and sizes.
    let fields = |out: &mut Vec<u8>| {
        for v in [20u16, 0, 8, 0, 0x21] {
            u16le(out, v);
        }
        u32le(out, crc);
        u32le(out, deflated.len() as u32);
        u32le(out, len as u32);
        u16le(out, name.len() as u16);
        u16le(out, 0);
    };
    u32le(&mut out, 0x0403_4b50);
    fields(&mut out);
    out.extend_from_slice(name);
    out.extend_from_slice(&deflated);
    let directory = out.len();
    u32le(&mut out, 0x0201_4b50);
    u16le(&mut out, 20);
    fields(&mut out);
    for v in [0u16, 0, 0] {
        u16le(&mut out, v); // comment length, disk, internal attributes
    }
    u32le(&mut out, 0); // external attributes
    u32le(&mut out, 0); // the local header's offset
    out.extend_from_slice(name);
    let directory_len = out.len() - directory;
    u32le(&mut out, 0x0605_4b50);
    for v in [0u16, 0, 1, 1] {
        u16le(&mut out, v);
    }
    u32le(&mut out, directory_len as u32);
    u32le(&mut out, directory as u32);
    u16le(&mut out, 0);
    out
}

/// A PDF whose page tree claims `fan_out²` pages: `fan_out` page-tree nodes that share one
/// `Kids` array naming the same page `fan_out` times. Small on disk; its root's `/Count`
/// says 1,000,000 for a fan-out of 1,000.
pub fn pdf_claiming_pages(fan_out: usize) -> Vec<u8> {
    // 1 catalog, 2 root, 3 font, 4 the shared Kids array, 5 the page, 6 its content,
    // then the nodes.
    let node = |i: usize| 7 + i;
    let refs = |ids: &mut dyn Iterator<Item = usize>| {
        ids.map(|id| format!("{id} 0 R"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let content = b"BT /F1 11 Tf 72 720 Td (One page of a claimed million.) Tj ET";
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Count {} /Kids [{}] >>",
            fan_out * fan_out,
            refs(&mut (0..fan_out).map(node))
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_vec(),
        format!("[{}]", refs(&mut std::iter::repeat_n(5, fan_out))).into_bytes(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
          /Resources << /Font << /F1 3 0 R >> >> /Contents 6 0 R >>"
            .to_vec(),
        [
            format!("<< /Length {} >>\nstream\n", content.len()).as_bytes(),
            content,
            b"\nendstream",
        ]
        .concat(),
    ];
    for _ in 0..fan_out {
        objects.push(
            format!("<< /Type /Pages /Parent 2 0 R /Count {fan_out} /Kids 4 0 R >>").into_bytes(),
        );
    }
    crate::fixtures::pdf_from_objects(&objects, "")
}

/// A PDF whose one page is its own parent and has no resources of its own: a reader that
/// looks the resources up the parent chain never gets out. Its page tree lists itself too.
pub fn pdf_parent_loop() -> Vec<u8> {
    let content = b"BT 72 720 Td (Round and round.) Tj ET";
    crate::fixtures::pdf_from_objects(
        &[
            b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
            b"<< /Type /Pages /Count 1 /Kids [3 0 R 2 0 R] >>".to_vec(),
            b"<< /Type /Page /Parent 3 0 R /Contents 4 0 R >>".to_vec(),
            [
                format!("<< /Length {} >>\nstream\n", content.len()).as_bytes(),
                content,
                b"\nendstream",
            ]
            .concat(),
        ],
        "",
    )
}

/// An HTML page of `depth` nested `div`s around one sentence.
pub fn nested_html(depth: usize) -> String {
    format!(
        "<html><head><title>Nested</title></head><body>{}Words at the bottom of the \
         nesting.{}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_bombs_inflate_to_what_they_say() {
        let gz = gzip_bomb(64 * 1024 * 1024);
        assert!(gz.len() < 256 * 1024, "{} bytes on the wire", gz.len());
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut inflated)
            .expect("a valid gzip stream, CRC and length included");
        assert_eq!(inflated.len(), 64 * 1024 * 1024 + "<html><body><p>".len());
        assert!(inflated.starts_with(b"<html><body><p>   "));

        let docx = docx_bomb(16 * 1024 * 1024);
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&docx[..])).expect("a zip");
        let mut doc = Vec::new();
        zip.by_name("word/document.xml")
            .expect("the document part")
            .read_to_end(&mut doc)
            .expect("inflates with a matching CRC");
        assert!(doc.starts_with(b"<?xml") && doc.len() >= 16 * 1024 * 1024);
    }
}
