//! Search over a corpus folder as a person's documentation tree has it.

use fathom_corpus::Corpus;

const CHAPTERS: [(&str, &str); 3] = [
    (
        "ownership.md",
        "# Ownership\n\nEach value in Rust has an owner that frees it.\n\nThere can only be one owner of a value at a time.\n",
    ),
    (
        "borrowing.md",
        "# Borrowing\n\nA reference borrows a value without taking ownership of it.\n\nMany shared references or one mutable reference may exist at once.\n",
    ),
    (
        "lifetimes.md",
        "# Lifetimes\n\nA lifetime names the scope for which a reference is valid.\n\nThe compiler infers most lifetimes with elision rules.\n",
    ),
];

#[tokio::test]
async fn an_all_in_one_page_never_stands_in_for_its_chapters() {
    let dir = tempfile::tempdir().unwrap();
    // Its own introduction says a little of everything, as a printable page's does.
    let mut all = String::from(
        "# The whole book\n\nThis printable page gathers every chapter: each value has one owner at a time, a mutable reference borrows it, and a lifetime with elision rules bounds the reference.\n\n",
    );
    for (name, text) in CHAPTERS {
        std::fs::write(dir.path().join(name), text).unwrap();
        all.push_str(text.replace("# ", "## ").as_str());
        all.push('\n');
    }
    std::fs::write(dir.path().join("print.md"), &all).unwrap();
    // A page that quotes one chapter once is no aggregate.
    std::fs::write(
        dir.path().join("notes.md"),
        "# Notes\n\nEach value in Rust has an owner that frees it.\n\nOwners are a design choice of the language, made for memory safety without a collector.\n\nOwnership takes practice to get used to.\n",
    )
    .unwrap();
    let corpus = Corpus::open(dir.path(), &dir.path().join(".index"))
        .await
        .unwrap();
    corpus.refresh(&|_, _| {}).await.unwrap();

    for (query, chapter) in [
        ("owner of a value", "ownership.md"),
        ("mutable reference borrows", "borrowing.md"),
        ("lifetime elision", "lifetimes.md"),
    ] {
        let hits = corpus.search(query, 10).await.unwrap();
        assert!(
            hits[0].url.ends_with(chapter),
            "{query}: {:?}",
            hits.iter().map(|h| &h.url).collect::<Vec<_>>()
        );
        assert!(
            !hits.iter().any(|h| h.url.ends_with("print.md")),
            "{query}: the all-in-one page is left out"
        );
    }
    let hits = corpus
        .search("design choice memory safety", 10)
        .await
        .unwrap();
    assert!(hits[0].url.ends_with("notes.md"), "{hits:?}");
}
