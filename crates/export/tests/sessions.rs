//! Exports of saved sessions on both stores: made once per report and format, recorded in
//! the session, made again when the report changes; unknown and unfinished sessions refused.

use std::sync::Arc;

use fathom_data::{CollectionScope, CollectionStore, NewItem};
use fathom_export::{ExportError, Format, RENDERER_VERSION, SessionExports};
use fathom_store::{Dialect, SqlStore};
use fathom_testkit::db::fresh;
use serde_json::{Value, json};

const REPORT: &str = "# Ownership\n\nEach value has one owner [1].\n\n## Sources\n\n1. The book — `https://doc.rust-lang.org/book/`\n";

fn scope() -> CollectionScope {
    CollectionScope {
        deployment_name: "_public".into(),
        collection: "research-sessions".into(),
    }
}

/// A session record as the research workflow writes it.
async fn save(store: &SqlStore, id: &str, status: &str, report: &str) {
    store
        .create_item(NewItem {
            deployment_name: scope().deployment_name,
            collection: scope().collection,
            data: json!({"research_id": id, "query": "Ownership?", "status": status,
                         "report_markdown": report, "sources": []}),
            project_id: None,
        })
        .await
        .unwrap();
}

async fn session(store: &SqlStore, id: &str) -> Value {
    let page = store
        .search(&fathom_data::SearchQuery {
            scope: scope(),
            filter: fathom_data::Filter::data_eq("research_id", id),
            order_by: Vec::new(),
            offset: 0,
            page_size: 10,
            include_total: false,
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1, "one record per session");
    page.items[0].data.clone()
}

async fn artifacts_of_type(store: &SqlStore, content_type: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM artifacts WHERE content_type = '{content_type}'"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap()
}

async fn made_once_and_again_when_the_report_changes(dialect: Dialect) {
    let db = fresh(dialect).await;
    let store = Arc::new(db.store.clone());
    let exports = SessionExports::new(store.clone(), store.clone(), scope());
    save(&db.store, "s1", "completed", REPORT).await;

    let first = exports.export("s1", Format::Pdf).await.unwrap();
    assert!(!first.reused);
    assert!(first.bytes.starts_with(b"%PDF-"));
    assert_eq!(first.file_name, "ownership.pdf");
    let second = exports.export("s1", Format::Pdf).await.unwrap();
    assert!(
        second.reused,
        "the second request returns the stored export"
    );
    assert_eq!(second.file_id, first.file_id);
    assert_eq!(second.bytes, first.bytes);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(artifacts_of_type(&db.store, "application/pdf").await, 1);

    // Recorded in the session, beside the other formats.
    let docx = exports.export("s1", Format::Docx).await.unwrap();
    let record = session(&db.store, "s1").await;
    let pdf = &record["exports"]["pdf"];
    assert_eq!(pdf["file_id"], first.file_id.as_str());
    assert_eq!(pdf["sha256"], first.file_id.as_str());
    assert_eq!(pdf["bytes"], first.bytes.len());
    assert_eq!(pdf["content_type"], "application/pdf");
    assert_eq!(pdf["renderer"], RENDERER_VERSION);
    assert!(pdf["created_at"].as_str().unwrap().starts_with("20"));
    assert_eq!(record["exports"]["docx"]["file_id"], docx.file_id.as_str());
    // The rest of the record is kept.
    assert_eq!(record["query"], "Ownership?");
    assert_eq!(record["report_markdown"], REPORT);

    // The stored bytes are what was returned.
    let stored = fathom_data::ArtifactStore::get_artifact(&db.store, &first.file_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.bytes, first.bytes);

    // A changed report makes a new export, and the record follows it.
    let item_id = store
        .search(&fathom_data::SearchQuery {
            scope: scope(),
            filter: fathom_data::Filter::data_eq("research_id", "s1"),
            order_by: Vec::new(),
            offset: 0,
            page_size: 1,
            include_total: false,
        })
        .await
        .unwrap()
        .items[0]
        .id
        .clone();
    let mut changed = record.clone();
    changed["report_markdown"] = json!(REPORT.replace("one owner", "exactly one owner"));
    store.update_item(&item_id, changed).await.unwrap();
    let third = exports.export("s1", Format::Pdf).await.unwrap();
    assert!(!third.reused);
    assert_ne!(third.file_id, first.file_id);
    assert_eq!(artifacts_of_type(&db.store, "application/pdf").await, 2);
    let record = session(&db.store, "s1").await;
    assert_eq!(record["exports"]["pdf"]["file_id"], third.file_id.as_str());
    assert_eq!(record["exports"]["docx"]["file_id"], docx.file_id.as_str());
}

#[tokio::test]
async fn made_once_and_again_when_the_report_changes_sqlite() {
    made_once_and_again_when_the_report_changes(Dialect::Sqlite).await;
}

#[tokio::test]
async fn made_once_and_again_when_the_report_changes_postgres() {
    made_once_and_again_when_the_report_changes(Dialect::Postgres).await;
}

#[tokio::test]
async fn unknown_and_unfinished_sessions_are_refused_and_left_alone() {
    let db = fresh(Dialect::Sqlite).await;
    let store = Arc::new(db.store.clone());
    let exports = SessionExports::new(store.clone(), store.clone(), scope());
    save(&db.store, "waiting", "awaiting_approval", "").await;
    save(&db.store, "running", "running", "# Half\n\nA start.\n").await;
    save(&db.store, "empty", "completed", "  ").await;

    let err = exports.export("nope", Format::Html).await.unwrap_err();
    assert!(matches!(err, ExportError::UnknownSession(_)), "{err}");
    assert_eq!(err.to_string(), "research session 'nope' not found");
    for (id, status) in [("waiting", "awaiting_approval"), ("running", "running")] {
        let err = exports.export(id, Format::Pdf).await.unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("is not finished (status: {status})")),
            "{err}"
        );
    }
    let err = exports.export("empty", Format::Docx).await.unwrap_err();
    assert!(matches!(err, ExportError::NoReport(_)), "{err}");
    // Nothing was stored, and the records are as they were.
    for ct in Format::ALL.map(Format::content_type) {
        assert_eq!(artifacts_of_type(&db.store, ct).await, 0);
    }
    assert!(session(&db.store, "running").await.get("exports").is_none());
}
