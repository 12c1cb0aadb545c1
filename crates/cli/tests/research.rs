//! `fathom research` end to end, as a person runs it: real processes, a real corpus folder,
//! SQLite and Postgres, SIGKILLs at known points inside steps.

mod common;
use common::{fails_with, ok, session_of};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use fathom_engine::store::RunStore;
use fathom_store::{Dialect, SqlStore};

const QUESTION: &str = "How does ownership work in Rust?";

struct Env {
    _tmp: tempfile::TempDir,
    work: PathBuf,
    corpus: PathBuf,
    db: String,
}

async fn env(dialect: Dialect) -> (Env, Option<tempfile::TempDir>) {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&corpus).unwrap();
    fathom_testkit::fixtures::write_sample_corpus(&corpus);
    let (db, keep) = fathom_testkit::db::fresh_url(dialect).await;
    (
        Env {
            _tmp: tmp,
            work,
            corpus,
            db,
        },
        keep,
    )
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fathom"));
        c.current_dir(&self.work)
            .env_remove("DATABASE_URL")
            .env_remove("FATHOM_CRASH_AT")
            .env_remove("FATHOM_CONFIG")
            .arg("--database-url")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run fathom")
    }

    fn research_args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![
            "research",
            QUESTION,
            "--corpus",
            self.corpus.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a
    }

    /// Starts fathom with a crash point; returns the session id once the process halted
    /// there, after killing it with SIGKILL.
    fn run_until_crash(&self, args: &[&str], crash_at: &str) -> String {
        common::run_until_crash(self.cmd(args), crash_at)
    }
}

fn report_path(work: &Path, stdout: &str) -> PathBuf {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report "))
        .expect("report line");
    work.join(line.split(" (").next().unwrap())
}

/// Names of the tools whose results are committed to the run's stream.
async fn streamed_tools(db: &str, id: &str) -> Vec<String> {
    let store = SqlStore::connect(db).await.unwrap();
    store
        .events_after(id, -1, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.envelope.event_type == "ToolCallResult")
        .filter_map(|e| e.envelope.value["tool_name"].as_str().map(str::to_string))
        .collect()
}

async fn killed_twice_then_resumed(dialect: Dialect) {
    let (env, _keep) = env(dialect).await;
    let settings = ["--yes", "--set", "max_report_update_size=400"];

    // The reference: the same research, uninterrupted.
    let out = ok(&env.run(&env.research_args(&[&settings[..], &["-o", "reference.md"]].concat())));
    let reference = std::fs::read_to_string(report_path(&env.work, &out)).unwrap();
    let reference_id = session_of(&out);
    assert!(reference.contains("## Sources"), "{reference}");
    assert!(
        reference.contains("[3]"),
        "several sources cited: {reference}"
    );

    let args = env.research_args(&[&settings[..], &["-o", "crashed.md"]].concat());
    // Killed after the third journaled call of fetch_parse_sources (fetch, parse, fetch):
    // the calls that finished are already on the stream, each with its result.
    let count = |tools: &[String], name: &str| tools.iter().filter(|t| *t == name).count();
    let id = env.run_until_crash(&args, "fetch_parse_sources:3");
    let tools = streamed_tools(&env.db, &id).await;
    assert!(tools.contains(&"web_search".to_string()), "{tools:?}");
    assert_eq!(
        (count(&tools, "fetch_url"), count(&tools, "parse_content")),
        (2, 1),
        "killed inside fetch_parse_sources: {tools:?}"
    );

    // Killed when synthesize_and_patch is done, before its commit: its report updates go
    // on the stream with the commit, so none is there yet.
    let id2 = env.run_until_crash(&["resume", &id], "synthesize_and_patch:commit");
    assert_eq!(id2, id);
    let tools = streamed_tools(&env.db, &id).await;
    assert_eq!(
        count(&tools, "fetch_url"),
        count(&tools, "parse_content"),
        "{tools:?}"
    );
    assert_eq!(
        count(&tools, "update_report"),
        0,
        "killed before synthesize_and_patch committed: {tools:?}"
    );

    let out = ok(&env.run(&["resume", &id]));
    let path = report_path(&env.work, &out);
    assert!(path.ends_with("crashed.md"), "{path:?}");
    let report = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        report, reference,
        "a resumed run writes exactly the report of an uninterrupted one"
    );

    // Each tool call is on the stream once: nothing was committed twice. The uninterrupted
    // run of the same research made exactly the calls the twice-killed one has on record.
    let mut tools = streamed_tools(&env.db, &id).await;
    let mut uninterrupted = streamed_tools(&env.db, &reference_id).await;
    assert!(
        count(&uninterrupted, "web_search") >= 3,
        "{uninterrupted:?}"
    );
    assert!(count(&uninterrupted, "fetch_url") >= 3, "{uninterrupted:?}");
    tools.sort();
    uninterrupted.sort();
    assert_eq!(tools, uninterrupted, "the same calls, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_twice_then_resumed_sqlite() {
    killed_twice_then_resumed(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_twice_then_resumed_postgres() {
    killed_twice_then_resumed(Dialect::Postgres).await;
}

async fn gate_survives_restarts(dialect: Dialect) {
    let (env, _keep) = env(dialect).await;
    // No terminal and no --yes: the run parks at the gate and the process exits.
    let out = ok(&env.run(&env.research_args(&[])));
    let id = session_of(&out);
    assert!(
        out.contains(&format!("waiting for approval: fathom resume {id}")),
        "{out}"
    );
    let shown = ok(&env.run(&["sessions", "show", &id]));
    assert!(shown.contains("status    awaiting_approval"), "{shown}");

    // Rejected with feedback in a new process: a new plan, with the feedback as a section.
    let out = ok(&env.run(&["resume", &id, "--reject", "focus on lifetimes"]));
    assert!(out.contains("waiting for approval"), "{out}");
    let shown = ok(&env.run(&["sessions", "show", &id]));
    assert!(
        shown.contains(". Lifetimes"),
        "re-planned with the feedback: {shown}"
    );

    // Approved in a third process: the run resumes and completes.
    let out = ok(&env.run(&["resume", &id, "--yes"]));
    let report = std::fs::read_to_string(report_path(&env.work, &out)).unwrap();
    assert!(report.contains("## Lifetimes"), "{report}");
    let listed = ok(&env.run(&["sessions", "list"]));
    assert!(listed.contains(&format!("{id}  completed")), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_survives_restarts_sqlite() {
    gate_survives_restarts(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_survives_restarts_postgres() {
    gate_survives_restarts(Dialect::Postgres).await;
}

/// Once `fathom research` has exited, its SQLite database is one file: the write-ahead log
/// is folded in, so copying `fathom.db` alone (to back it up, to another machine) keeps the
/// session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_is_one_file_once_the_command_exits() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let id = session_of(&ok(&env.run(&env.research_args(&["--yes"]))));
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = fathom_testkit::db::copy_of_closed_file(&env.db, elsewhere.path());
    let shown = ok(&Command::new(env!("CARGO_BIN_EXE_fathom"))
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_CONFIG")
        .arg("--database-url")
        .arg(&copy)
        .args(["sessions", "show", &id])
        .output()
        .unwrap());
    assert!(shown.contains("status    completed"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_clear_line_and_loses_nothing() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let out = ok(&env.run(&env.research_args(&["--yes"])));
    let first = session_of(&out);
    let c = env.corpus.to_str().unwrap();

    fails_with(
        &env.run(&["research", "   ", "--corpus", c]),
        "the question is empty",
    );
    fails_with(
        &env.run(&["research", "q?", "--corpus", "/nonexistent/corpus"]),
        "does not exist",
    );
    let file = env.corpus.join("ownership.md");
    fails_with(
        &env.run(&["research", "q?", "--corpus", file.to_str().unwrap()]),
        "is not a folder",
    );

    let junk = env.work.join("junk");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(junk.join("a.txt"), [0u8, 1, 2, 3, 255, 0]).unwrap();
    std::fs::write(junk.join("b.md"), "   \n\n").unwrap();
    std::fs::write(junk.join("c.pngx"), "ignored").unwrap();
    fails_with(
        &env.run(&["research", "q?", "--corpus", junk.to_str().unwrap()]),
        "has no readable HTML, Markdown, text, DOCX or PDF file",
    );

    // Broken files beside good ones are skipped with a note; the research goes on.
    std::fs::write(env.corpus.join("broken.html"), [0xffu8, 0xfe, 0, 0, 0x3c]).unwrap();
    let out = env.run(&env.research_args(&["--yes"]));
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped broken.html: binary content"));

    fails_with(
        &env.run(&["research", "q?", "--corpus", c, "--set", "max_sources=0"]),
        "invalid settings: max_sources",
    );
    fails_with(
        &env.run(&["research", "q?", "--corpus", c, "--settings", "{oops"]),
        "--settings is not valid JSON",
    );
    fails_with(
        &env.run(&["research", "q?", "--corpus", c, "--set", "colour=blue"]),
        "colour",
    );
    fails_with(
        &env.run(&["research", "q?", "--corpus", c, "--set", "language=xx"]),
        "language: 'xx' is not a language Fathom knows; give an ISO 639-1 code: af,",
    );
    fails_with(
        &env.run(&["research", "q?", "--corpus", c, "--set", "language=German"]),
        "invalid settings: language",
    );
    fails_with(&env.run(&["resume", "nope"]), "no research session 'nope'");
    fails_with(
        &env.run(&["sessions", "show", "nope"]),
        "no research session 'nope'",
    );

    let out = Command::new(env!("CARGO_BIN_EXE_fathom"))
        .current_dir(&env.work)
        .args([
            "--database-url",
            "/proc/forbidden/fathom.db",
            "research",
            "q?",
            "--corpus",
            c,
        ])
        .output()
        .unwrap();
    fails_with(&out, "cannot open database /proc/forbidden/fathom.db");

    let listed = ok(&env.run(&["sessions", "list"]));
    assert!(listed.contains(&format!("{first}  completed")), "{listed}");
}

/// The report's Markdown, from the path `fathom research` printed.
fn report_of(env: &Env, out: &str) -> String {
    std::fs::read_to_string(report_path(&env.work, out)).unwrap()
}

/// Headings (`## ...`) of a report.
fn headings(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect()
}

/// Offline, the report's own words follow the reader's language: the question's, detected,
/// or the one asked for; the sentences quoted stay as the (English) sources wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_speaks_the_readers_language_offline() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let c = env.corpus.to_str().unwrap();
    let german = "Wie funktioniert Ownership in Rust?";
    let out = ok(&env.run(&["research", german, "--corpus", c, "--yes"]));
    let report = report_of(&env, &out);
    assert!(report.starts_with(&format!("# {german}\n")), "{report}");
    let h = headings(&report);
    assert!(h.contains(&"Quellen"), "{h:?}");
    assert!(h.contains(&"Wie es funktioniert"), "{h:?}");
    for english in ["Sources", "Overview", "How it works", "Examples", "Summary"] {
        assert!(!h.contains(&english), "{english} in {h:?}");
    }
    assert!(
        report.contains("owner") && report.contains("[1]"),
        "quoted English sentences, cited: {report}"
    );
    let listed = ok(&env.run(&["sessions", "show", &session_of(&out)]));
    assert!(listed.contains("Quellen"), "{listed}");

    // Asked for: an English question, a French report.
    let out = ok(&env.run(&env.research_args(&["--yes", "--set", "language=fr"])));
    let h = headings(&report_of(&env, &out)).join(" | ");
    assert!(h.contains("Fonctionnement") && h.contains("Sources"), "{h}");
    assert!(!h.contains("How it works"), "{h}");

    // A language the offline writer has no words in: the run goes on, in English words, and
    // says so.
    let out = env.run(&env.research_args(&["--yes", "--set", "language=nl"]));
    let stdout = ok(&out);
    let h = headings(&report_of(&env, &stdout)).join(" | ");
    assert!(h.contains("How it works") && h.contains("Sources"), "{h}");
    let shown = ok(&env.run(&["sessions", "show", &session_of(&stdout)]));
    assert!(
        shown.contains("the report's own words are in English"),
        "{shown}"
    );
}

/// The tool results committed to the run's stream, by tool name, in order.
async fn streamed_results(db: &str, id: &str) -> Vec<(String, serde_json::Value)> {
    let store = SqlStore::connect(db).await.unwrap();
    store
        .events_after(id, -1, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.envelope.event_type == "ToolCallResult")
        .map(|e| {
            let name = e.envelope.value["tool_name"].as_str().unwrap().to_string();
            (name, e.envelope.value["tool_output"].clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_answers_as_its_question_needs_and_says_why() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let corpus = env.corpus.to_str().unwrap().to_string();
    let store = SqlStore::connect(&env.db).await.unwrap();
    let mode_of = |results: &[(String, serde_json::Value)]| {
        results
            .iter()
            .rev()
            .find(|(n, _)| n == "route_query")
            .map(|(_, o)| o["raw_output"]["mode"].as_str().unwrap().to_string())
            .unwrap()
    };

    // A short factual question: answered at once from the local sources, with no plan and
    // no gate (approval is required by default, and stdin is closed).
    let out = ok(&env.run(&[
        "research",
        "What does the borrow checker enforce?",
        "--corpus",
        &corpus,
        "-o",
        "simple.md",
    ]));
    let id = session_of(&out);
    let results = streamed_results(&env.db, &id).await;
    assert_eq!(mode_of(&results), "simple", "{results:?}");
    let why = results[0].1["blocks"][0]["text"].as_str().unwrap();
    assert!(
        why.starts_with("Mode: simple, because it asks for a single fact"),
        "{why}"
    );
    let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"search_local"), "{names:?}");
    assert!(!names.contains(&"decompose_query"), "no plan: {names:?}");
    assert!(!names.contains(&"web_search"), "{names:?}");
    let answer = std::fs::read_to_string(report_path(&env.work, &out)).unwrap();
    assert!(answer.contains("## Answer"), "{answer}");
    assert!(!answer.contains("## Summary"), "{answer}");
    assert!(
        answer.contains("The borrow checker enforces these rules at compile time"),
        "{answer}"
    );
    let cited = answer.matches(" [").count();
    assert!((1..=4).contains(&cited), "a few cited sentences: {answer}");
    let state = store.get_run(&id).await.unwrap().unwrap().state;
    assert_eq!(state["route"]["mode"], "simple");
    assert_eq!(state["route"]["by"], "rules");

    // The same question, with the full flow asked for: the first look at the local sources
    // is shown with the plan and shapes it.
    let out = ok(&env.run(&[
        "research",
        "What does the borrow checker enforce?",
        "--corpus",
        &corpus,
        "--set",
        "mode=deep",
        "--yes",
    ]));
    let results = streamed_results(&env.db, &session_of(&out)).await;
    assert_eq!(mode_of(&results), "deep");
    let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
    let look = names.iter().position(|n| *n == "search_local").unwrap();
    let plan = names.iter().position(|n| *n == "decompose_query").unwrap();
    let search = names.iter().position(|n| *n == "web_search").unwrap();
    assert!(look < plan && plan < search, "{names:?}");
    let plan = &results[plan].1;
    assert!(
        plan["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .contains("What the local sources say:"),
        "{plan}"
    );
    assert!(
        !plan["raw_output"]["background"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A quick look: one query, two sections, light depth.
    let out = ok(&env.run(&env.research_args(&["--set", "mode=web", "--yes"])));
    let id = session_of(&out);
    let results = streamed_results(&env.db, &id).await;
    assert_eq!(mode_of(&results), "web");
    let plan = &results
        .iter()
        .find(|(n, _)| n == "decompose_query")
        .unwrap()
        .1;
    assert_eq!(
        plan["raw_output"]["queries"].as_array().unwrap().len(),
        1,
        "{plan}"
    );
    assert_eq!(
        plan["raw_output"]["outline"],
        serde_json::json!(["Answer", "Details"])
    );
    let state = store.get_run(&id).await.unwrap().unwrap().state;
    assert_eq!(state["settings"]["depth"], "light");
    assert!(state["settings"]["timeout_seconds"].as_u64().unwrap() <= 180);

    // A mode that does not exist is refused before anything runs, with the choices.
    let out = env.run(&env.research_args(&["--set", "mode=fast"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mode") && err.contains("\"simple\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_with_a_key_fact_set_reports_recall_and_the_right_page() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let c = env.corpus.to_str().unwrap();
    let set = env.work.join("questions.json");
    std::fs::write(
        &set,
        r#"[
          {"question": "How does ownership work in Rust?", "pages": ["ownership.md"],
           "facts": [["each value exactly one owner"], ["garbage collector pauses"]]},
          {"question": "What does the borrow checker do?", "pages": ["borrowing.html"],
           "facts": [["borrow checker enforces rules compile time"], ["no such words zyx"]]}
        ]"#,
    )
    .unwrap();
    let q = set.to_str().unwrap();
    let out = ok(&env.run(&["eval", "--corpus", c, "--questions", q, "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let all = &v["overall"]["key_facts"];
    assert_eq!(
        (&all["questions"], &all["expected"]),
        (&2.into(), &4.into()),
        "{v}"
    );
    let rows = v["questions"].as_array().unwrap();
    let stated: u64 = rows
        .iter()
        .map(|r| r["key_facts"]["stated"].as_u64().unwrap())
        .sum();
    assert_eq!(all["stated"].as_u64(), Some(stated));
    assert!(stated <= 2, "two facts stand in no document: {v}");
    for r in rows {
        let facts = r["key_facts"]["facts"].as_array().unwrap();
        assert_eq!(facts[1]["sentence"], serde_json::Value::Null, "{r}");
        // A sentence is reported for what it states; pages are shown relative to the corpus.
        if let Some(s) = facts[0]["sentence"].as_str() {
            assert!(s.contains('['), "{s}");
        }
        for p in r["pages_cited"].as_array().unwrap() {
            assert!(env.corpus.join(p.as_str().unwrap()).is_file(), "{r}");
        }
        // Whether research reached the page the facts stand on, whatever was quoted.
        let read: Vec<&str> = r["pages_read"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        let expected = r["key_facts"]["pages"][0].as_str().unwrap();
        assert_eq!(
            r["key_facts"]["expected_page_read"].as_bool(),
            Some(read.contains(&expected)),
            "{r}"
        );
    }
    let reached = rows
        .iter()
        .filter(|r| r["key_facts"]["expected_page_read"] == true)
        .count();
    assert_eq!(all["expected_page_read"].as_u64(), Some(reached as u64));
    assert!(
        reached >= 1,
        "the ownership page is read for the ownership question: {v}"
    );

    // The text form ends with the key-fact line; a text file of questions has none.
    let text = ok(&env.run(&["eval", "--corpus", c, "--questions", q]));
    let last = text.trim().lines().last().unwrap();
    assert!(
        last.starts_with("key facts: ")
            && last.contains("/2 questions, expected page read: ")
            && last.ends_with("/2"),
        "{text}"
    );
    let txt = env.work.join("questions.txt");
    std::fs::write(&txt, "How does ownership work in Rust?\n").unwrap();
    let text = ok(&env.run(&["eval", "--corpus", c, "--questions", txt.to_str().unwrap()]));
    assert!(!text.contains("key facts"), "{text}");

    // A malformed set: one line naming the entry and the field; a page not in the corpus.
    std::fs::write(
        &set,
        r#"[{"question": "Q", "pages": ["ownership.md"], "facts": [["x"]]},
            {"question": "R", "pages": ["ownership.md"]}]"#,
    )
    .unwrap();
    fails_with(
        &env.run(&["eval", "--corpus", c, "--questions", q]),
        "entry 2: field \"facts\" is missing (question \"R\")",
    );
    std::fs::write(
        &set,
        r#"[{"question": "Q", "pages": ["ownership.html"], "facts": [["x"]]}]"#,
    )
    .unwrap();
    fails_with(
        &env.run(&["eval", "--corpus", c, "--questions", q]),
        "entry 1 (question \"Q\"): page ownership.html is not a file of the corpus",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_reports_over_the_python_manual_hold_the_key_facts_and_cite_the_right_page() {
    // The held-out set (tests/pydoc: 29 questions over the Python documentation, used by no
    // other test): a deep offline report states at least 85% of the key facts a reader needs,
    // and cites a page that answers each question.
    let (env, _keep) = env(Dialect::Sqlite).await;
    let pydoc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/pydoc");
    let corpus = pydoc.join("corpus");
    let questions = pydoc.join("questions.json");
    let out = ok(&env.run(&[
        "eval",
        "--corpus",
        corpus.to_str().unwrap(),
        "--questions",
        questions.to_str().unwrap(),
        "--set",
        "mode=deep",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let facts = &v["overall"]["key_facts"];
    let missed: Vec<String> = v["questions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| {
            let question = q["question"].as_str().unwrap_or_default().to_string();
            q["key_facts"]["facts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["sentence"].is_null())
                .map(move |f| format!("{question}: {}", f["phrases"]))
        })
        .collect();
    let recall = facts["recall"].as_f64().unwrap();
    assert!(
        recall >= 0.85,
        "key-fact recall {recall:.2} ({} of {}); missed:\n{}",
        facts["stated"],
        facts["expected"],
        missed.join("\n")
    );
    assert_eq!(facts["right_page"], facts["questions"], "{facts}");
    assert_eq!(v["overall"]["fabricated"], 0, "{}", v["overall"]);
}

/// The held-out key-fact sets (tests/cargo, tests/rustc, tests/nomicon: manuals this project
/// did not write, questions written from their pages before any report was read, no tuning on
/// them): at default settings (mode auto, so a simple route answers some questions in a few
/// sentences), each report cites no source it did not read, and the recall and the questions
/// with their right page cited stay at least where this build put them (a floor against
/// regressions, not a target: see tests/README.md for the figures and the 0.85 still to reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_reports_over_held_out_manuals_keep_their_key_facts_at_default_settings() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    // (set, least recall, least questions with the right page cited)
    for (set, least_recall, least_right) in [
        ("cargo", 0.41, 27),
        ("rustc", 0.52, 37),
        // 89/162: a lead-in is no longer quoted without what it points at (e708b24), and a
        // neighbouring pick in one report changed with it (90/162 before).
        ("nomicon", 0.54, 35),
    ] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests")
            .join(set);
        let out = ok(&env.run(&[
            "eval",
            "--corpus",
            dir.join("corpus").to_str().unwrap(),
            "--questions",
            dir.join("questions.json").to_str().unwrap(),
            "--json",
        ]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let facts = &v["overall"]["key_facts"];
        let recall = facts["recall"].as_f64().unwrap();
        assert!(
            recall >= least_recall,
            "{set}: key-fact recall {recall:.3} ({} of {}) fell below {least_recall}",
            facts["stated"],
            facts["expected"]
        );
        let right = facts["right_page"].as_u64().unwrap();
        assert!(
            right >= least_right,
            "{set}: right page for {right} questions: {facts}"
        );
        assert_eq!(v["overall"]["fabricated"], 0, "{set}: {}", v["overall"]);
        assert_eq!(v["overall"]["failed"], 0, "{set}: {}", v["overall"]);
        // No sentence is said twice in a report, the summary included.
        for q in v["questions"].as_array().unwrap() {
            let md = q["report_markdown"].as_str().unwrap_or_default();
            let body = md.split("\n## Sources").next().unwrap_or_default();
            let mut seen = std::collections::HashSet::new();
            for line in body.lines().filter(|l| !l.starts_with('#')) {
                // Each cited sentence ends with its marker; the writer's fixed notes cite none.
                for sentence in line.split_inclusive(']').map(str::trim) {
                    let Some((text, _)) = sentence.rsplit_once(" [") else {
                        continue;
                    };
                    assert!(
                        text.len() < 20 || seen.insert(text.to_string()),
                        "{set}: said twice in the report on {}: {text}",
                        q["question"]
                    );
                }
            }
        }
        // Every question of these sets was routed, and says how.
        let routes: Vec<&str> = v["questions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["route"]["mode"].as_str().unwrap_or("none"))
            .collect();
        assert!(
            routes.iter().all(|m| ["simple", "deep"].contains(m)),
            "{set}: {routes:?}"
        );
    }
}

/// Local files and the web in one run: by default a server with both searches both (the plan
/// says so per query), ranks their results together and cites each kind, marked; a run asked
/// to search the corpus alone sends no request to the web.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_and_web_sources_in_one_report() {
    use std::sync::atomic::Ordering;
    let (env, _keep) = env(Dialect::Sqlite).await;
    let web = fathom_testkit::web::SearchAndPages::start().await;
    let mut config: serde_json::Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    config["search"]["provider"] = "searxng".into();
    config["search"]["base_url"] = format!("http://{}", web.origin).into();
    config["fetch"]["allow_private_networks"] = true.into();
    config["fetch"]["per_host_interval_ms"] = 0.into();
    let config_path = env.work.join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let cfg = config_path.to_str().unwrap();
    let c = env.corpus.to_str().unwrap();
    let q = "How does ownership work?";

    let out = ok(&env.run(&["--config", cfg, "research", q, "--corpus", c, "--yes"]));
    let report = report_of(&env, &out);
    let listed: Vec<&str> = report
        .split_once("\n## Sources\n")
        .expect("a sources list")
        .1
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    assert!(
        listed.iter().any(|l| l.contains("(local file) — `file://")),
        "{report}"
    );
    assert!(
        listed.iter().any(|l| l.contains("(web page) — `http://")),
        "{report}"
    );
    let shown = ok(&env.run(&["--config", cfg, "sessions", "show", &session_of(&out)]));
    assert!(
        shown.contains(&format!("  - {} [corpus, web]", q.trim_end_matches('?'))),
        "{shown}"
    );
    let made = streamed_tools(&env.db, &session_of(&out)).await;
    assert_eq!(
        web.searches.load(Ordering::SeqCst),
        made.iter().filter(|t| *t == "web_search").count(),
        "each search the run made asked the provider once"
    );

    let (searches, pages) = (
        web.searches.load(Ordering::SeqCst),
        web.pages.load(Ordering::SeqCst),
    );
    let out = ok(&env.run(&[
        "--config",
        cfg,
        "research",
        q,
        "--corpus",
        c,
        "--yes",
        "--settings",
        r#"{"sources": ["corpus"]}"#,
    ]));
    let report = report_of(&env, &out);
    assert!(
        report.contains("`file://") && !report.contains("`http://"),
        "{report}"
    );
    assert!(!report.contains("(local file)"), "one kind: not marked");
    assert_eq!(
        web.searches.load(Ordering::SeqCst),
        searches,
        "no web search"
    );
    assert_eq!(web.pages.load(Ordering::SeqCst), pages, "no web page read");

    // Asking a server without a web provider for the web is refused before anything runs.
    fails_with(
        &env.run(&[
            "research",
            q,
            "--corpus",
            c,
            "--settings",
            r#"{"sources": ["web"]}"#,
        ]),
        "sources: this server cannot search web: no web search provider is configured",
    );
}

/// A web search provider that refuses the key: each search says so (not retried), the run
/// goes on with the local corpus and writes its report, and the session notes the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_provider_refusing_the_key_leaves_the_run_to_its_corpus() {
    let (env, _keep) = env(Dialect::Sqlite).await;
    let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = refusals.clone();
    let app = axum::Router::new().route(
        "/search",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                (axum::http::StatusCode::UNAUTHORIZED, "invalid api key")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut config: serde_json::Value = serde_json::from_str(fathom_testkit::CONFIG_JSON).unwrap();
    config["search"]["provider"] = "tavily".into();
    config["search"]["base_url"] = format!("http://{origin}").into();
    let path = env.work.join("tavily.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let out = env
        .cmd(&[
            "--config",
            path.to_str().unwrap(),
            "research",
            "How does ownership work?",
            "--corpus",
            env.corpus.to_str().unwrap(),
            "--yes",
        ])
        .env("TAVILY_API_KEY", "wrong")
        .output()
        .unwrap();
    let stdout = ok(&out);
    let refusal = "the web search failed (tavily answered HTTP 401; check the search settings); \
                   only the local corpus answered";
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        progress.contains(refusal),
        "the person watching sees the refusal: {progress}"
    );
    let report = report_of(&env, &stdout);
    assert!(report.contains("`file://"), "the corpus answered: {report}");
    // Each search the run made reached the provider once: a refused key is not retried.
    let searches = refusals.load(std::sync::atomic::Ordering::SeqCst);
    let made = streamed_tools(&env.db, &session_of(&stdout)).await;
    let made = made.iter().filter(|t| *t == "web_search").count();
    assert_eq!(searches, made, "one request per search: {made} searches");
    let shown = ok(&env.run(&[
        "--config",
        path.to_str().unwrap(),
        "sessions",
        "show",
        &session_of(&stdout),
    ]));
    assert!(shown.contains("completed"), "{shown}");
    assert_eq!(
        shown.matches(refusal).count(),
        1,
        "the session keeps one note of it: {shown}"
    );
}
