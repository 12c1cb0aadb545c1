//! Fathom as an MCP server, driven by the official Python `mcp` client (installed by
//! scripts/test.sh into pyproject-compat/clients): over stdio (`fathom mcp`, started by the
//! client as its child) and over streamable HTTP at `/mcp` on `fathom serve`, behind the API
//! key. Each lists the tools, starts a research over the local corpus, approves its plan and
//! reads the cited report back.

#[path = "common/served.rs"]
mod served;

use std::path::{Path, PathBuf};
use std::process::Command;

use fathom_engine::store::{RunStatus, RunStore};
use fathom_store::Dialect;
use serde_json::Value;
use served::*;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pyproject-compat/clients")
}

fn python() -> PathBuf {
    let python = clients_dir().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the Python MCP client is not installed: run scripts/test.sh, which installs it"
    );
    python
}

/// Runs mcp_client.py with `args`; its summary line.
fn mcp_client(args: &[&str]) -> Value {
    let out = Command::new(python())
        .current_dir(clients_dir())
        .arg("mcp_client.py")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mcp_client.py {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a summary line")
}

/// The research the client did, as the store has it: completed, once.
async fn completed(db: &str, summary: &Value) {
    let id = summary["research_id"].as_str().unwrap();
    let store = fathom_store::SqlStore::connect(db).await.unwrap();
    let run = store.get_run(id).await.unwrap().expect("the run is stored");
    assert_eq!(run.status, RunStatus::Completed, "{summary}");
    assert!(summary["cited"].as_u64().unwrap() >= 1, "{summary}");
    assert_eq!(
        summary["tools"],
        serde_json::json!([
            "get_progress",
            "get_report",
            "review_plan",
            "search_sessions",
            "start_research"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_over_mcp_on_stdio() {
    let env = env(Dialect::Sqlite).await;
    let fathom = env!("CARGO_BIN_EXE_fathom");
    let (db, corpus) = (env.db.clone(), env.corpus.to_str().unwrap().to_string());
    let index = env.tmp.path().join("index");
    let summary = tokio::task::spawn_blocking(move || {
        mcp_client(&[
            "stdio",
            fathom,
            "--database-url",
            &db,
            "--index-dir",
            index.to_str().unwrap(),
            "mcp",
            "--corpus",
            &corpus,
        ])
    })
    .await
    .unwrap();
    completed(&env.db, &summary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_over_mcp_on_streamable_http_behind_the_api_key() {
    let env = env(Dialect::Sqlite).await;
    let served = Served::spawn(
        &env,
        &["serve", "--api-key", "mcp-key"],
        &[],
        "serving deployment",
    );
    let url = format!("{}/mcp", served.root);
    // Without the key, nothing.
    let refused = http()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let summary = tokio::task::spawn_blocking(move || mcp_client(&["http", &url, "mcp-key"]))
        .await
        .unwrap();
    completed(&env.db, &summary).await;
}
