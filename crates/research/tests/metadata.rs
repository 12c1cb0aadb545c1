//! `research-metadata` run through the engine on a real SQLite store, as the frontend's
//! `runToCompletion({})` does before it lists sessions.

use std::sync::Arc;

use fathom_corpus::Corpus;
use fathom_engine::store::RunStatus;
use fathom_engine::{EngineConfig, StartOptions};
use fathom_research::{RESEARCH_METADATA, Research};
use fathom_store::Dialect;
use fathom_testkit::db as testing;
use serde_json::json;

#[tokio::test]
async fn metadata_returns_the_collection_and_the_resolved_settings_schema() {
    let db = testing::fresh(Dialect::Sqlite).await;
    let store = Arc::new(db.store.clone());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "# A\n\nSome text to index here.\n").unwrap();
    let corpus = Arc::new(
        Corpus::open(dir.path(), &dir.path().join(".index"))
            .await
            .unwrap(),
    );
    let deps = fathom_testkit::offline_research_deps(corpus, store.clone());
    let research = Research::new(store, EngineConfig::default(), deps);
    let run = research
        .engine
        .start(RESEARCH_METADATA, json!({}), StartOptions::default())
        .await
        .unwrap();
    let status = research.engine.drive_run(&run.id).await.unwrap();
    assert_eq!(status, RunStatus::Completed);
    let done = research
        .engine
        .store()
        .get_run(&run.id)
        .await
        .unwrap()
        .unwrap();
    let result = done.result.unwrap();
    assert_eq!(result.event_type, "MetadataResponse");
    assert_eq!(result.types, Some(vec!["StopEvent".to_string()]));
    let v = result.value;
    assert_eq!(v["research_collection"], "research-sessions");
    assert_eq!(v["extracted_data_collection"], "research-sessions");
    let schema = &v["json_schema"];
    assert!(!schema.to_string().contains("$ref"), "{schema}");
    assert_eq!(schema["properties"]["max_sources"]["type"], "integer");
    assert_eq!(schema["properties"]["max_sources"]["minimum"], 1);
    assert_eq!(schema["properties"]["max_sources"]["maximum"], 100);
    assert_eq!(v["settings_defaults"]["max_sources"], 8);
}
