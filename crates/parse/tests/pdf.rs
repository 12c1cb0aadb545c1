//! PDF text extraction, page by page, on generated PDFs.

use fathom_parse::pdf::extract;
use fathom_testkit::fixtures::sample_pdf;

#[test]
fn text_comes_out_page_by_page_with_the_info_metadata() {
    let pdf = sample_pdf(
        &[
            "Ownership rules\nEach value has exactly one owner at a time.",
            "Borrowing lets code use a value (without owning it).",
            "Lifetimes describe how long references stay valid.",
        ],
        "The Book, in PDF",
        "Ferris",
    );
    let text = extract(&pdf, 100).unwrap();
    assert_eq!(text.page_count, 3);
    assert_eq!(text.title.as_deref(), Some("The Book, in PDF"));
    assert_eq!(text.author.as_deref(), Some("Ferris"));
    let ns: Vec<u32> = text.pages.iter().map(|p| p.n).collect();
    assert_eq!(ns, [1, 2, 3]);
    assert!(
        text.pages[0].text.contains("exactly one owner"),
        "{:?}",
        text.pages[0]
    );
    assert!(
        text.pages[1].text.contains("(without owning it)"),
        "{:?}",
        text.pages[1]
    );
    assert!(!text.pages[0].text.contains("Borrowing"));
    let cut = extract(&pdf, 2).unwrap();
    assert_eq!((cut.page_count, cut.pages.len()), (3, 2));
}

#[test]
fn what_is_not_a_pdf_is_refused_with_a_reason() {
    assert!(
        extract(b"<html>hi</html>", 10)
            .unwrap_err()
            .contains("no %PDF- header")
    );
    let e = extract(b"%PDF-1.7\n1 0 obj << /Type /Catalog", 10).unwrap_err();
    assert!(e.starts_with("unreadable PDF"), "{e}");
}
