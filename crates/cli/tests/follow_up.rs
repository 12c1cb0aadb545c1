//! Follow-up questions on a saved session, offline, as a person asks them:
//! `fathom research --follow-up ID "QUESTION"`. A follow-up the parent's sources answer reads
//! nothing new (no search, no fetch, no corpus look: its sources are the parent's); one they
//! do not cover searches and reads what it needs. Bad parents are refused with one line and
//! nothing stored.

mod common;
use common::{fails_with, ok, session_of};

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use fathom_engine::store::RunStore;
use fathom_store::{Dialect, SqlStore};
use serde_json::Value;

struct Env {
    _tmp: tempfile::TempDir,
    _keep: Option<tempfile::TempDir>,
    work: PathBuf,
    corpus: PathBuf,
    db: String,
}

async fn env(dialect: Dialect) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    // A chapter on another subject: nothing the ownership question reads says a word of it.
    std::fs::write(
        corpus.join("patterns.md"),
        "# The patterns chapter\n\nPattern matching compares a value against a series of patterns with the match keyword. Each arm of a match expression names a pattern and the code to run when the value fits it. The compiler checks that the arms are exhaustive, so every possible value is handled. Patterns can destructure tuples, enums and structs to bind their parts to names.\n",
    )
    .unwrap();
    let (db, keep) = fathom_testkit::db::fresh_url(dialect).await;
    Env {
        _tmp: tmp,
        _keep: keep,
        work,
        corpus,
        db,
    }
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_fathom"))
            .current_dir(&self.work)
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CONFIG")
            .arg("--database-url")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run fathom")
    }

    async fn session(&self, id: &str) -> Value {
        let store = std::sync::Arc::new(SqlStore::connect(&self.db).await.unwrap());
        let config = fathom_testkit::research_config();
        fathom_research::Sessions::new(store, &config)
            .get(id)
            .await
            .unwrap()
    }

    /// (tool name, tool kwargs) of every tool result on the run's stream.
    async fn tools(&self, id: &str) -> Vec<(String, Value)> {
        let store = SqlStore::connect(&self.db).await.unwrap();
        store
            .events_after(id, -1, 10_000)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.envelope.event_type == "ToolCallResult")
            .map(|e| {
                let v = &e.envelope.value;
                (
                    v["tool_name"].as_str().unwrap_or_default().to_string(),
                    v["tool_kwargs"].clone(),
                )
            })
            .collect()
    }
}

fn urls(session: &Value, pred: impl Fn(&Value) -> bool) -> Vec<String> {
    session["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| pred(s))
        .map(|s| s["url"].as_str().unwrap().to_string())
        .collect()
}

async fn follow_ups(dialect: Dialect) {
    let env = env(dialect).await;
    let c = env.corpus.to_str().unwrap();
    let out = ok(&env.run(&[
        "research",
        "How does ownership work in Rust?",
        "--corpus",
        c,
        "--yes",
    ]));
    let parent = session_of(&out);
    let parent_session = env.session(&parent).await;
    let parent_read = urls(&parent_session, |s| s["status"] == "read");
    assert!(!parent_read.is_empty(), "{parent_session}");
    assert!(
        !parent_read.iter().any(|u| u.contains("patterns")),
        "the parent read nothing on patterns: {parent_read:?}"
    );

    // Answered by the parent's sources: no corpus look, no search, no fetch; the report
    // cites the parent's documents. The corpus comes from the parent's record.
    let out = ok(&env.run(&[
        "research",
        "What are the ownership rules in Rust?",
        "--follow-up",
        &parent,
        "--yes",
    ]));
    let id = session_of(&out);
    let tools = env.tools(&id).await;
    let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
    for gone in ["web_search", "search_local", "fetch_url", "parse_content"] {
        assert!(
            !names.contains(&gone),
            "a covered follow-up calls no {gone}: {names:?}"
        );
    }
    assert!(names.contains(&"search_session"), "{names:?}");
    let s = env.session(&id).await;
    assert_eq!(s["parent_id"], parent.as_str(), "{s}");
    assert_eq!(s["parent_query"], "How does ownership work in Rust?");
    assert_eq!(s["status"], "completed");
    let plan = &s["plan"]["follow_up"];
    assert_eq!(plan["parent_id"], parent.as_str(), "{plan}");
    assert!(
        plan["search"].as_array().unwrap().is_empty(),
        "every query answered by the parent's sources: {plan}"
    );
    assert!(!plan["covered"].as_array().unwrap().is_empty(), "{plan}");
    let read = urls(&s, |s| s["status"] == "read");
    assert!(
        read.iter().all(|u| parent_read.contains(u)),
        "nothing read beyond the parent's sources: {read:?} vs {parent_read:?}"
    );
    assert!(
        s["sources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["from_session"] == parent.as_str()),
        "{}",
        s["sources"]
    );
    let report = s["report_markdown"].as_str().unwrap();
    assert!(
        report.contains("[1]") && report.contains("## Sources"),
        "{report}"
    );
    let cited: Vec<&str> = s["cited_sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["url"].as_str())
        .collect();
    assert!(!cited.is_empty() && cited.iter().all(|u| parent_read.iter().any(|p| p == u)));

    // Not covered: the plan says which queries are searched, they are, and the new chapter
    // is read and cited.
    let out = ok(&env.run(&[
        "research",
        "How does pattern matching with match work?",
        "--follow-up",
        &parent,
        "--corpus",
        c,
        "--yes",
    ]));
    let id2 = session_of(&out);
    let tools = env.tools(&id2).await;
    let searched: Vec<&Value> = tools
        .iter()
        .filter(|(n, _)| n == "web_search")
        .map(|(_, k)| k)
        .collect();
    let s2 = env.session(&id2).await;
    let plan = &s2["plan"]["follow_up"];
    let to_search: Vec<&str> = plan["search"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!to_search.is_empty(), "{plan}");
    assert_eq!(
        searched
            .iter()
            .filter_map(|k| k["query"].as_str())
            .collect::<Vec<_>>(),
        to_search,
        "exactly the queries the plan marks as new searches are searched"
    );
    assert!(
        tools
            .iter()
            .any(|(n, k)| n == "fetch_url" && k["url"].as_str().unwrap_or("").contains("patterns")),
        "{tools:?}"
    );
    let report = s2["report_markdown"].as_str().unwrap();
    assert!(report.to_lowercase().contains("match"), "{report}");

    // Listed with their parent, by the CLI.
    let listed = ok(&env.run(&["sessions", "list"]));
    assert!(
        listed.contains(&format!("(follow-up of {parent})")),
        "{listed}"
    );
    let shown = ok(&env.run(&["sessions", "show", &id]));
    assert!(shown.contains(&format!("follows   {parent}")), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_read_the_parents_sources_first_sqlite() {
    follow_ups(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_read_the_parents_sources_first_postgres() {
    follow_ups(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parents_are_refused_and_nothing_is_stored() {
    let env = env(Dialect::Sqlite).await;
    let c = env.corpus.to_str().unwrap();
    // A session waiting at the gate (no --yes, no terminal).
    let out = ok(&env.run(&[
        "research",
        "How does ownership work in Rust?",
        "--corpus",
        c,
    ]));
    let waiting = session_of(&out);
    let before = ok(&env.run(&["sessions", "list"]));

    fails_with(
        &env.run(&["research", "Why?", "--follow-up", "nope", "--corpus", c]),
        "no research session 'nope' to follow up",
    );
    fails_with(
        &env.run(&["research", "Why?", "--follow-up", &waiting, "--corpus", c]),
        &format!(
            "research session '{waiting}' is not finished (status: awaiting_approval); a follow-up can be asked once it has completed"
        ),
    );
    // Without --corpus, a parent the CLI never ran has no corpus to fall back on.
    fails_with(
        &env.run(&["research", "Why?", "--follow-up", "nope"]),
        "session 'nope' has no recorded corpus",
    );
    assert_eq!(
        ok(&env.run(&["sessions", "list"])),
        before,
        "nothing stored"
    );
}
