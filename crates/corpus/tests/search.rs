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

#[tokio::test]
async fn a_word_in_nearly_every_passage_is_left_out_of_the_ranking_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in CHAPTERS {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    // A book about Rust: "rust" stands in every passage of these pages.
    for i in 0..12 {
        std::fs::write(
            dir.path().join(format!("extra{i}.md")),
            format!("# Extra {i}\n\nRust programs are built with cargo, step {i}.\n"),
        )
        .unwrap();
    }
    let corpus = Corpus::open(dir.path(), &dir.path().join(".index"))
        .await
        .unwrap();
    corpus.refresh(&|_, _| {}).await.unwrap();
    let hits = corpus.search("rust lifetime elision", 3).await.unwrap();
    assert!(hits[0].url.ends_with("lifetimes.md"), "{hits:?}");
    // A query of common words only still finds what has them.
    let hits = corpus.search("rust", 3).await.unwrap();
    assert_eq!(hits.len(), 3, "{hits:?}");
}

#[tokio::test]
async fn a_file_read_unchanged_comes_parsed_from_the_index() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in CHAPTERS {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let corpus = Corpus::open(dir.path(), &dir.path().join(".index"))
        .await
        .unwrap();
    corpus.refresh(&|_, _| {}).await.unwrap();
    let url = corpus.search("lifetime elision", 1).await.unwrap()[0]
        .url
        .clone();
    let fetched = corpus.fetch(&url).await.unwrap();
    let sha = hex::encode(Sha256::digest(&fetched.bytes));
    let doc = corpus
        .parsed(&url, &sha)
        .await
        .unwrap()
        .expect("kept by the index");
    assert_eq!(doc.title, "Lifetimes");
    assert!(
        doc.blocks.iter().any(|b| b.text.contains("elision rules")),
        "{doc:?}"
    );

    // Changed since it was indexed: the index's form is stale, so none is offered.
    std::fs::write(
        dir.path().join("lifetimes.md"),
        "# Lifetimes\n\nRewritten.\n",
    )
    .unwrap();
    let fetched = corpus.fetch(&url).await.unwrap();
    let sha = hex::encode(Sha256::digest(&fetched.bytes));
    assert!(corpus.parsed(&url, &sha).await.unwrap().is_none());
    // Nor for a file outside the corpus.
    assert!(
        corpus
            .parsed("file:///etc/hostname", &sha)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn only_documents_inside_the_corpus_are_read() {
    let dir = tempfile::tempdir().unwrap();
    // Beside the corpus folder, not in it.
    let secret = dir.path().join("secret.md");
    std::fs::write(&secret, "# Secret\n\nNot yours.\n").unwrap();
    let root = dir.path().join("docs");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("ownership.md"), CHAPTERS[0].1).unwrap();
    std::fs::write(root.join("notes.bin"), b"\x00\x01").unwrap();
    std::os::unix::fs::symlink(&secret, root.join("link.md")).unwrap();
    let corpus = Corpus::open(&root, &dir.path().join(".index"))
        .await
        .unwrap();
    let root = root.canonicalize().unwrap();
    let url = |rel: &str| format!("file://{}/{rel}", root.display());

    let read = corpus.fetch(&url("ownership.md")).await.unwrap();
    assert_eq!(read.bytes, CHAPTERS[0].1.as_bytes());
    // Out of the folder by `..` or by a link: refused, naming the URL.
    for escape in [url("../secret.md"), url("link.md")] {
        let err = corpus.fetch(&escape).await.unwrap_err();
        assert!(
            matches!(err, fathom_corpus::CorpusError::OutsideCorpus(ref u) if *u == escape),
            "{escape}: {err}"
        );
    }
    // Not a document, or not there: refused with the reason.
    let err = corpus.fetch(&url("notes.bin")).await.unwrap_err();
    assert!(err.to_string().contains("not an HTML"), "{err}");
    let err = corpus.fetch(&url("gone.md")).await.unwrap_err();
    assert!(err.to_string().contains("gone.md"), "{err}");
    assert!(corpus.fetch("https://example.com/").await.is_err());
}
