//! The saved session record against the exports recorded in it, on both stores: the
//! workflow's snapshot saves (a save after the run completed: the delivery step's, or a step
//! run again) keep the exports made meanwhile, and exports made at the same moment as saves
//! each keep their entry.

use std::sync::Arc;

use fathom_data::{CollectionScope, CollectionStore};
use fathom_export::{Format, SessionExports};
use fathom_research::Sessions;
use fathom_store::Dialect;
use fathom_testkit::db::fresh;
use serde_json::{Value, json};

const REPORT: &str = "# Ownership\n\nEach value has one owner [1].\n\n## Sources\n\n1. The book — `https://doc.rust-lang.org/book/`\n";

/// A completed session's snapshot as the workflow saves it, at delivery round `round`.
fn snapshot(round: u32) -> Value {
    json!({"research_id": "r1", "query": "Ownership?", "status": "completed",
           "report_markdown": REPORT, "sources": [], "settings": {},
           "delivery": {"webhook": {"status": "pending", "round": round}}})
}

async fn snapshot_saves_keep_the_exports_recorded_meanwhile(dialect: Dialect) {
    let db = fresh(dialect).await;
    let store: Arc<dyn CollectionStore> = Arc::new(db.store.clone());
    let config = fathom_testkit::research_config();
    let sessions = Arc::new(Sessions::new(store.clone(), &config));
    let scope = CollectionScope {
        deployment_name: config.deployment_name.clone(),
        collection: config.research_collection.clone(),
    };
    let exports = Arc::new(SessionExports::new(
        store.clone(),
        Arc::new(db.store.clone()),
        scope,
    ));
    sessions.put("r1", snapshot(0)).await.unwrap();

    // Saved after an export: the export stays, and a record claiming exports of its own
    // does not replace them.
    let pdf = exports.export("r1", Format::Pdf).await.unwrap();
    sessions.put("r1", snapshot(1)).await.unwrap();
    let mut claiming = snapshot(2);
    claiming["exports"] = json!({"pdf": {"file_id": "not the record's to say"}});
    sessions.put("r1", claiming).await.unwrap();
    let saved = sessions.get("r1").await.unwrap();
    assert_eq!(saved["exports"]["pdf"]["file_id"], pdf.file_id.as_str());
    assert_eq!(saved["delivery"]["webhook"]["round"], 2);

    // Saves and exports of every format at once: every format's entry stays.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..30u32 {
        let sessions = sessions.clone();
        tasks.spawn(async move {
            sessions.put("r1", snapshot(3 + i)).await.unwrap();
            None
        });
        let exports = exports.clone();
        let format = [Format::Html, Format::Docx, Format::Pdf][i as usize % 3];
        tasks.spawn(async move {
            let made = exports.export("r1", format).await.unwrap();
            Some((format.name(), made.file_id))
        });
    }
    let mut made: Vec<(&str, String)> = tasks.join_all().await.into_iter().flatten().collect();
    made.sort();
    made.dedup();
    assert_eq!(made.len(), 3, "one file per format: {made:?}");
    let saved = sessions.get("r1").await.unwrap();
    for (format, file_id) in &made {
        assert_eq!(
            saved["exports"][format]["file_id"],
            file_id.as_str(),
            "{format} lost: {}",
            saved["exports"]
        );
    }
    let round = saved["delivery"]["webhook"]["round"].as_u64().unwrap();
    assert!(
        (3..33).contains(&round),
        "the record is one of the saves: {round}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_saves_keep_the_exports_recorded_meanwhile_sqlite() {
    snapshot_saves_keep_the_exports_recorded_meanwhile(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_saves_keep_the_exports_recorded_meanwhile_postgres() {
    snapshot_saves_keep_the_exports_recorded_meanwhile(Dialect::Postgres).await;
}
