//! The deep-research step graph is checked in: a change to which step accepts or emits which
//! event changes the snapshot (and must change the diagram in docs/step-graph.md with it).

use std::sync::Arc;

use fathom_corpus::Corpus;
use fathom_engine::{EngineConfig, StepGraph};
use fathom_research::{DEEP_RESEARCH, Research};
use fathom_store::Dialect;
use fathom_testkit::db as testing;

#[tokio::test]
async fn the_step_graph_is_the_one_checked_in_and_drawn_in_the_docs() {
    let db = testing::fresh(Dialect::Sqlite).await;
    let store = Arc::new(db.store.clone());
    let dir = tempfile::tempdir().unwrap();
    let corpus = Arc::new(
        Corpus::open(dir.path(), &dir.path().join(".index"))
            .await
            .unwrap(),
    );
    let deps = fathom_testkit::offline_research_deps(corpus, store.clone());
    let research = Research::new(store, EngineConfig::default(), deps);
    let wf = research.engine.workflow(DEEP_RESEARCH).unwrap();
    let graph = StepGraph::of(wf.as_ref());

    // The steps the seed contract names keep their names; replanning after a rejection is a
    // step of its own.
    let names = graph.step_names();
    for step in [
        "draft_plan",
        "await_approval",
        "run_web_research",
        "fetch_parse_sources",
        "synthesize_and_patch",
        "persist_session",
        "replan",
    ] {
        assert!(names.contains(&step), "{step} in {names:?}");
    }
    assert_eq!(
        names.len(),
        names.iter().collect::<std::collections::HashSet<_>>().len()
    );

    let diagram = graph.mermaid();
    insta::assert_snapshot!("deep_research_step_graph", diagram);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/step-graph.md"),
    )
    .unwrap();
    assert!(
        docs.contains(&format!("```mermaid\n{diagram}```")),
        "docs/step-graph.md draws another graph; paste this one:\n{diagram}"
    );
}
