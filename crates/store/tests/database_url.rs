//! Every way of naming a SQLite database opens it, creating the file and its folder.

use fathom_store::{DatabaseTarget, Dialect, SqlStore};

#[tokio::test]
async fn sqlite_urls_and_plain_paths_create_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let abs = dir.path().join("a/abs.db");
    let rel_dir = tempfile::tempdir_in(".").unwrap();
    let rel_name = rel_dir
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let rel = format!("{rel_name}/b/rel.db");
    let plain = dir.path().join("c/plain.db");
    for (given, file) in [
        (format!("sqlite://{}", abs.display()), abs.clone()),
        (format!("sqlite://{rel}"), std::path::PathBuf::from(&rel)),
        (format!("sqlite:{}", plain.display()), plain.clone()),
        (plain.display().to_string(), plain.clone()),
    ] {
        let store = SqlStore::connect(&given)
            .await
            .unwrap_or_else(|e| panic!("{given}: {e}"));
        assert_eq!(store.dialect(), Dialect::Sqlite);
        assert!(file.is_file(), "{given} did not create {}", file.display());
    }
    let t = DatabaseTarget::parse("sqlite:///x/y.db?mode=ro").unwrap();
    assert_eq!(t.url, "sqlite:///x/y.db?mode=ro");
    assert_eq!(t.sqlite_path(), Some("/x/y.db"));
    let err = DatabaseTarget::parse("sqlite://").unwrap_err().to_string();
    assert!(err.contains("empty database path"), "{err}");
}
