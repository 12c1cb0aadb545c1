//! The agent as a person runs it, with a model: `fathom research` with only OPENAI_BASE_URL
//! and OPENAI_MODEL set, against a scripted model server and a SearxNG-format search on
//! loopback. Killed with SIGKILL inside its research and resumed, it sends no completed
//! model or tool call again and writes the report an uninterrupted run writes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;

use fathom_testkit::agent::scripted_agent;
use fathom_testkit::fixtures::write_sample_corpus;
use fathom_testkit::llm::Server;
use fathom_testkit::web::SearchAndPages;

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    corpus: PathBuf,
    config: PathBuf,
    llm: String,
}

impl Setup {
    /// A work folder with the sample corpus and a config that searches `web` and may fetch
    /// from loopback; runs talk to the model at `llm`.
    fn new(web: &SearchAndPages, llm: &Server) -> std::sync::Arc<Setup> {
        let tmp = tempfile::tempdir().unwrap();
        let corpus = tmp.path().join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        write_sample_corpus(&corpus);
        std::sync::Arc::new(Setup {
            dir: tmp.path().to_path_buf(),
            config: config(tmp.path(), &web.origin),
            corpus,
            llm: llm.base_url.clone(),
            _tmp: tmp,
        })
    }
}

fn fathom(s: &Setup, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fathom"));
    c.current_dir(&s.dir)
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_CRASH_AT")
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", &s.llm)
        .env("OPENAI_MODEL", "scripted")
        .env("FATHOM_CONFIG", &s.config)
        .args(["--database-url", "agent.db"])
        .args(args)
        .stdin(Stdio::null());
    c
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "fathom failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn config(dir: &Path, search_origin: &str) -> PathBuf {
    let mut json: serde_json::Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    json["search"]["provider"] = "searxng".into();
    json["search"]["base_url"] = format!("http://{search_origin}").into();
    json["fetch"]["allow_private_networks"] = true.into();
    json["fetch"]["per_host_interval_ms"] = 0.into();
    let path = dir.join("config.json");
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_run_sends_no_completed_call_again() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let setup = Setup::new(&web, &llm);
    let c = setup.corpus.to_str().unwrap().to_string();
    let args = move |out: &str| -> Vec<String> {
        [
            "research",
            "What did the survey measure?",
            "--corpus",
            &c,
            "--yes",
            // Researched in full: the rules would answer this question directly.
            "--set",
            "mode=deep",
            "--set",
            "max_parallel_researchers=1",
            "-o",
            out,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |a: Vec<String>| {
        let s = setup.clone();
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            fathom(&s, &a).output().unwrap()
        })
    };
    let counts = || {
        (
            llm.requests().len(),
            web.searches.load(Ordering::SeqCst),
            web.pages.load(Ordering::SeqCst),
        )
    };

    // The reference: uninterrupted. Its progress shows the agent at work.
    let out = run(args("reference.md")).await.unwrap();
    let progress = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    for line in [
        "  researcher-1 on \"alpha\"",
        "  searched \"alpha\": 1 results",
        "  read \"All about alpha\"",
        "  reflection: adjust (gamma is covered; delta is missing)",
        "  researcher-1 on \"delta\"",
        "  reflection: complete (enough)",
    ] {
        assert!(
            progress.lines().any(|l| l == line),
            "{line:?} in:\n{progress}"
        );
    }
    let reference = counts();
    let report = std::fs::read_to_string(setup.dir.join("reference.md")).unwrap();
    assert!(
        report.contains("[1]") && report.contains("## Sources"),
        "{report}"
    );
    assert!(reference.0 > 6 && reference.1 >= 2, "{reference:?}");

    // Killed in run_web_research after its 4th journaled call (a researcher's model turn,
    // its search, its next turn, its fetch), then resumed.
    let s = setup.clone();
    let crash_args = args("crashed.md");
    let id = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = crash_args.iter().map(String::as_str).collect();
        common::run_until_crash(fathom(&s, &a), "run_web_research:4")
    })
    .await
    .unwrap();
    let at_crash = counts();
    assert_eq!(
        (at_crash.1 - reference.1, at_crash.2 - reference.2),
        (2, 1),
        "the question's own search (searched beside the model's), one search and one page read before the kill"
    );
    ok(run(vec!["resume".into(), id]).await.unwrap());
    let after = counts();
    assert_eq!(
        (
            after.0 - reference.0,
            after.1 - reference.1,
            after.2 - reference.2
        ),
        reference,
        "the killed and resumed run made exactly the model, search and page requests of an \
         uninterrupted one: no completed call was sent again"
    );
    let crashed = std::fs::read_to_string(setup.dir.join("crashed.md")).unwrap();
    assert_eq!(crashed, report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_measures_citations_offline_and_with_the_agent() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let setup = Setup::new(&web, &llm);
    let questions = setup.dir.join("questions.txt");
    std::fs::write(
        &questions,
        "How does ownership work in Rust?\n\n# skipped\nWhat does borrowing allow?\n",
    )
    .unwrap();
    let (c, q) = (
        setup.corpus.to_str().unwrap().to_string(),
        questions.to_str().unwrap().to_string(),
    );
    let eval = |agent: bool| {
        let (s, c, q) = (setup.clone(), c.clone(), q.clone());
        tokio::task::spawn_blocking(move || {
            let mut cmd = fathom(&s, &["eval", "--corpus", &c, "--questions", &q, "--json"]);
            if agent {
                // Both researched in full: the rules would answer the second one directly.
                cmd.args(["--set", "mode=deep"]);
            } else {
                // The offline writer, over the corpus.
                cmd.env_remove("OPENAI_MODEL").env_remove("FATHOM_CONFIG");
            }
            let v: serde_json::Value = serde_json::from_str(&ok(cmd.output().unwrap())).unwrap();
            v
        })
    };

    let offline = eval(false).await.unwrap();
    assert_eq!(offline["mode"], "offline");
    let all = &offline["overall"];
    assert_eq!(
        (all["runs"].as_u64(), all["failed"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(all["fabricated"], 0);
    assert!(all["citations"].as_u64().unwrap() >= 4, "{all}");
    // The extractive writer quotes: every cited sentence is in its source.
    assert_eq!(all["supported"], all["cited_sentences"]);
    assert_eq!(all["tokens"], 0);
    assert_eq!(llm.requests().len(), 0, "no model call offline");

    let agent = eval(true).await.unwrap();
    assert_eq!(agent["mode"], "agent");
    let all = &agent["overall"];
    assert_eq!(
        all["fabricated"], 0,
        "the [9] markers were removed before the report"
    );
    // Every sentence of the reports stands on a page it cites: the number no page gives was
    // rewritten from its page or left out, the sentence whose only marker named no source read
    // was cited to the page that supports it or removed, and the question's own search adds
    // what it found.
    assert_eq!(
        (
            all["cited_sentences"].as_u64(),
            all["supported"].as_u64(),
            all["claim_sentences"].as_u64()
        ),
        (Some(15), Some(15), Some(15))
    );
    assert_eq!(all["precision"].as_f64(), Some(1.0));
    // Every claim now stands on a passage it cites (issue 42): nothing uncited is left.
    assert!(
        (all["recall"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{all}"
    );
    let calls = llm.requests().len() as u64;
    assert_eq!(
        all["tokens"].as_u64(),
        Some(calls * (fathom_testkit::llm::PROMPT_TOKENS + fathom_testkit::llm::COMPLETION_TOKENS))
    );
    for row in agent["questions"].as_array().unwrap() {
        // The researchers' two pages, and what the question's own search found besides; never
        // a source the run did not read.
        let cited = row["sources_cited"].as_u64().unwrap();
        assert!(
            (2..=row["sources_read"].as_u64().unwrap()).contains(&cited),
            "{row}"
        );
        assert!(row["elapsed_ms"].as_u64().is_some(), "{row}");
    }
}

/// With a model, the reader's language reaches every prompt: the question's, detected (a
/// German question), or the one asked for (`language=fr`), for every role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_prompt_asks_for_the_readers_language() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let setup = Setup::new(&web, &llm);
    let c = setup.corpus.to_str().unwrap().to_string();
    for (question, set, name) in [
        ("Was hat die Umfrage gemessen?", None, "German"),
        (
            "What did the survey measure?",
            Some("language=fr"),
            "French",
        ),
    ] {
        let before = llm.requests().len();
        // Researched in full (the rules would answer both questions directly), so that
        // every role is asked.
        let mut args = vec![
            "research",
            question,
            "--corpus",
            &c,
            "--yes",
            "--set",
            "mode=deep",
            "-o",
            "r.md",
        ];
        if let Some(s) = set {
            args.extend(["--set", s]);
        }
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let s = setup.clone();
        let out = tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            fathom(&s, &a).output().unwrap()
        })
        .await
        .unwrap();
        ok(out);
        let requests = llm.requests();
        let prompts: Vec<String> = requests[before..]
            .iter()
            .map(|r| fathom_testkit::agent::system_prompt(&r.body))
            .collect();
        // The planner, researchers, the reflection, the writer, the verifier.
        assert!(prompts.len() >= 5, "{prompts:#?}");
        for p in &prompts {
            assert!(
                p.contains(&format!("Write everything you write in {name}")),
                "{p}"
            );
        }
        let report = std::fs::read_to_string(setup.dir.join("r.md")).unwrap();
        let sources = if name == "German" {
            "## Quellen"
        } else {
            "## Sources"
        };
        assert!(report.contains(sources), "{report}");
    }
}

/// The scripted agent, but its researchers use the team's MCP tools: a lookup, then a tool
/// that fails, then one that never answers, then their findings from the page searched.
fn agent_with_mcp_tools()
-> impl Fn(&serde_json::Value, usize) -> fathom_testkit::llm::Reply + Send + Sync {
    use fathom_testkit::llm::Reply;
    let scripted = scripted_agent();
    move |body, n| {
        let sys = fathom_testkit::agent::system_prompt(body);
        if !sys.starts_with("You are a researcher") {
            return scripted(body, n);
        }
        let messages = body["messages"].as_array().unwrap();
        let tool_turns = messages.iter().filter(|m| m["role"] == "tool").count();
        let first = messages[1]["content"].as_str().unwrap_or("");
        let task = fathom_testkit::agent::task_of(first);
        match tool_turns {
            0 => Reply::call("m1", "docs_lookup", serde_json::json!({"term": task})),
            1 => Reply::call("m2", "docs_broken", serde_json::json!({"term": task})),
            2 => Reply::call("m3", "docs_stall", serde_json::json!({"term": task})),
            _ => {
                let url = first
                    .split('<')
                    .nth(1)
                    .and_then(|r| r.split('>').next())
                    .unwrap_or("");
                Reply::text(&format!(
                    "{{\"findings\": [{{\"fact\": \"It was measured at 42 units in 2024.\", \"url\": \"{url}\"}}]}}"
                ))
            }
        }
    }
}

/// MCP servers named in the config: their tools (with their schemas) reach the researchers
/// once the plan is approved; a lookup's answer reaches the model, a failing tool and one
/// that hangs (cut at the call timeout) are told as failures and the run goes on; a tool
/// with an invalid schema and a server that cannot start are left out with a note. Every
/// call is journaled: a run killed after its lookup and resumed does not look up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_reach_the_researchers_journaled_and_bounded() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../pyproject-compat/clients/.venv/bin/python");
    assert!(
        python.is_file(),
        "the Python MCP SDK is not installed: run scripts/test.sh, which installs it"
    );
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/server.py");
    let web = SearchAndPages::start().await;
    let llm = Server::start(agent_with_mcp_tools()).await;
    let setup = Setup::new(&web, &llm);
    let calls = setup.dir.join("mcp-calls.jsonl");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&setup.config).unwrap()).unwrap();
    config["mcp"]["servers"] = serde_json::json!([
        {"name": "docs", "command": [python, fixture], "env": {"MCP_CALLS": calls}},
        {"name": "gone", "command": ["/nonexistent/mcp-server"]},
    ]);
    config["mcp"]["call_timeout_seconds"] = 2.into();
    std::fs::write(&setup.config, config.to_string()).unwrap();
    let c = setup.corpus.to_str().unwrap().to_string();
    let args = move |out: &str| -> Vec<String> {
        [
            "research",
            "What did the survey measure?",
            "--corpus",
            &c,
            "--yes",
            // Researched in full: the rules would answer this question directly.
            "--set",
            "mode=deep",
            "--set",
            "max_parallel_researchers=1",
            "--set",
            "depth=light",
            "-o",
            out,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |a: Vec<String>| {
        let s = setup.clone();
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            fathom(&s, &a).output().unwrap()
        })
    };
    let lookups = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"lookup\""))
            .count()
    };

    // Stopped at the gate: no tool of anyone else's was called.
    let mut waiting = args("waiting.md");
    waiting.retain(|a| a != "--yes");
    ok(run(waiting).await.unwrap());
    assert!(
        !calls.exists(),
        "nothing reached the MCP server before approval"
    );

    let stdout = ok(run(args("reference.md")).await.unwrap());
    let id = common::session_of(&stdout);
    let requests = llm.requests();
    let researcher: Vec<&serde_json::Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| fathom_testkit::agent::system_prompt(b).starts_with("You are a researcher"))
        .collect();
    let offered: Vec<&str> = researcher[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"docs_lookup"), "{offered:?}");
    assert!(
        !offered
            .iter()
            .any(|t| t.starts_with("gone_") || *t == "docs_odd"),
        "{offered:?}"
    );
    let lookup = researcher[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "docs_lookup")
        .unwrap();
    assert_eq!(
        lookup["function"]["parameters"]["required"],
        serde_json::json!(["term"])
    );
    let told: Vec<String> = researcher
        .iter()
        .flat_map(|b| b["messages"].as_array().unwrap().iter())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        told.iter()
            .any(|t| t.contains("Glossary:") && t.contains("42 units")),
        "{told:#?}"
    );
    assert!(
        told.iter().any(|t| t.starts_with("docs_broken failed")),
        "{told:#?}"
    );
    assert!(
        told.iter()
            .any(|t| t.contains("docs_stall failed: no answer within 2 s")),
        "{told:#?}"
    );
    let shown = ok(fathom(&setup, &["sessions", "show", &id]).output().unwrap());
    assert!(
        shown.contains("MCP server 'gone' could not be reached"),
        "{shown}"
    );
    assert!(
        shown.contains("MCP tool 'odd' of server 'docs' was left out"),
        "{shown}"
    );
    let reference = lookups();
    assert!(reference >= 1, "the lookup was called");

    // Where the lookup's result sits in its step's journal, to be killed just after it.
    let store = fathom_store::SqlStore::connect(&format!(
        "sqlite://{}",
        setup.dir.join("agent.db").display()
    ))
    .await
    .unwrap();
    let keys: Vec<(i64, String)> =
        sqlx::query_as("SELECT scope, result FROM call_journal WHERE run_id = $1 ORDER BY rowid")
            .bind(&id)
            .fetch_all(store.pool())
            .await
            .unwrap();
    let (scope, _) = keys.iter().find(|(_, r)| r.contains("Glossary:")).unwrap();
    let in_step: Vec<&(i64, String)> = keys.iter().filter(|(s, _)| s == scope).collect();
    let nth = 1 + in_step
        .iter()
        .position(|(_, r)| r.contains("Glossary:"))
        .unwrap();

    let s = setup.clone();
    let crash_args = args("crashed.md");
    let crashed = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = crash_args.iter().map(String::as_str).collect();
        common::run_until_crash(fathom(&s, &a), &format!("run_web_research:{nth}"))
    })
    .await
    .unwrap();
    let at_crash = lookups();
    assert_eq!(at_crash - reference, 1, "killed just after its lookup");
    ok(run(vec!["resume".into(), crashed]).await.unwrap());
    assert_eq!(
        lookups() - reference,
        reference,
        "the resumed run looked up no more than an uninterrupted one: the journaled lookup \
         was not called again"
    );
}
