//! The LLM agent end to end: deep-research with every model call answered by a scripted
//! OpenAI-compatible server on loopback, web search by a SearxNG-format server and pages by
//! a page server, all counting their requests.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fathom_engine::EngineConfig;
use fathom_engine::store::{RunStatus, RunStore};
use fathom_fetch::{FetchConfig, SafeFetcher};
use fathom_llm::{ModelConfig, OpenAiChat};
use fathom_research::agent::Models;
use fathom_research::tools::web::{SearchApi, WebFetcher, WebSearch};
use fathom_research::{ApproveEvent, Research, ResearchDeps};
use fathom_store::Dialect;
use fathom_testkit::agent::{last_message as last, scripted_agent, system_prompt as system};
use fathom_testkit::db as testing;
use fathom_testkit::llm::{COMPLETION_TOKENS, PROMPT_TOKENS, Server};
use fathom_testkit::web::SearchAndPages;
use serde_json::json;

fn models(base: &str) -> Models {
    let c = || {
        let mut c = ModelConfig::new(base, "scripted", None);
        c.idle_timeout = Duration::from_secs(20);
        Arc::new(OpenAiChat::new(c).unwrap()) as Arc<dyn fathom_llm::ChatModel>
    };
    Models {
        planner: c(),
        researcher: c(),
        writer: c(),
    }
}

/// Drives run `id` to its next stop (the gate or its end), within a minute.
async fn drive(research: &Research, id: &str) -> RunStatus {
    tokio::time::timeout(Duration::from_secs(60), research.engine.drive_run(id))
        .await
        .expect("run made progress")
        .unwrap()
}

/// Starts "What did the survey measure?" at light depth without the approval gate and drives
/// it to its end, which must be a completed run.
async fn light_run_completed(research: &Research) -> fathom_engine::store::RunRecord {
    let run = research
        .start(
            "What did the survey measure?",
            Some(json!({"mode": "deep", "require_approval": false, "depth": "light"})),
        )
        .await
        .unwrap();
    assert_eq!(drive(research, &run.id).await, RunStatus::Completed);
    run
}

/// A researcher's first request: its instructions and its task, nothing else yet.
fn is_first_research_turn(body: &serde_json::Value) -> bool {
    system(body).starts_with("You are a researcher")
        && body["messages"].as_array().is_some_and(|m| m.len() == 2)
}

/// The tasks researchers were started on, in the order the model server saw them.
fn tasks_started(llm: &Server) -> Vec<String> {
    llm.requests()
        .iter()
        .filter(|r| is_first_research_turn(&r.body))
        .map(|r| fathom_testkit::agent::task_of(last(&r.body)["content"].as_str().unwrap_or("")))
        .collect()
}

async fn service(
    web: &SearchAndPages,
    llm: &Server,
) -> (Research, Arc<fathom_store::SqlStore>, testing::TestDb) {
    service_with_local(web, llm, None).await
}

/// As [`service`], with a local corpus beside the web search.
async fn service_with_local(
    web: &SearchAndPages,
    llm: &Server,
    local: Option<Arc<fathom_corpus::Corpus>>,
) -> (Research, Arc<fathom_store::SqlStore>, testing::TestDb) {
    let db = testing::fresh(Dialect::Sqlite).await;
    let store = Arc::new(db.store.clone());
    let fetcher = SafeFetcher::new(FetchConfig {
        trusted_origins: vec![web.origin.clone()],
        per_host_interval: Duration::ZERO,
        ..Default::default()
    });
    let deps = ResearchDeps {
        config: fathom_testkit::research_config(),
        tools: fathom_research::tools::Tools {
            search: Arc::new(
                WebSearch::new(
                    SearchApi::Searxng {
                        base_url: format!("http://{}", web.origin),
                    },
                    Duration::from_secs(5),
                )
                .unwrap(),
            ),
            local: local
                .clone()
                .map(|c| c as Arc<dyn fathom_research::tools::SearchProvider>),
            fetcher: Arc::new(WebFetcher::new(fetcher, local)),
            parser: fathom_parse::ContentParser::default(),
            artifacts: store.clone(),
            docs: Default::default(),
            external: None,
        },
        models: Some(models(&llm.base_url)),
        sessions: store.clone(),
        delivery: Default::default(),
    };
    let research = Research::new(store.clone(), EngineConfig::default(), deps);
    (research, store, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_plans_without_the_web_then_researches_in_parallel_and_cites_what_it_read() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let (research, store, _db) = service(&web, &llm).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(json!({"mode": "deep", "max_parallel_researchers": 2, "depth": "medium"})),
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Waiting);

    // Phase A: one planner call; not one search or page request.
    assert_eq!(web.searches.load(Ordering::SeqCst), 0);
    assert_eq!(web.pages.load(Ordering::SeqCst), 0);
    let asked = llm.requests();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].body.get("tools").is_none(),
        "the planner has no tools"
    );
    assert_eq!(asked[0].body["response_format"]["type"], "json_schema");
    let events = store.events_after(&run.id, -1, 1000).await.unwrap();
    // First the coordinator: the question, and the route the setting asked for.
    assert_eq!(
        events[0].envelope.value["current_agent_name"],
        "coordinator"
    );
    assert_eq!(events[2].envelope.value["tool_name"], "route_query");
    assert_eq!(
        events[2].envelope.value["tool_output"]["raw_output"]["mode"],
        "deep"
    );
    let events = &events[3..];
    let types: Vec<&str> = events
        .iter()
        .map(|e| e.envelope.event_type.as_str())
        .collect();
    // The planner's text streams live, in as many deltas as arrived between flushes.
    let deltas = types.iter().filter(|t| **t == "AgentStream").count();
    assert!(deltas >= 1, "{types:?}");
    let mut expected = vec!["AgentInput"];
    expected.extend(std::iter::repeat_n("AgentStream", deltas));
    expected.extend(["AgentOutput", "ToolCall", "ToolCallResult"]);
    assert_eq!(types, expected);
    let streamed: String = events[1..=deltas]
        .iter()
        .map(|e| e.envelope.value["delta"].as_str().unwrap())
        .collect();
    assert_eq!(events[deltas].envelope.value["response"], streamed.as_str());
    assert!(
        streamed.starts_with("{\"clarifying_questions\": []"),
        "{streamed}"
    );
    let output = &events[deltas + 1].envelope.value;
    assert_eq!(output["current_agent_name"], "planner");
    assert_eq!(
        output["response"]["additional_kwargs"]["usage"],
        json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
               "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS})
    );
    assert_eq!(
        output["structured_response"]["queries"],
        json!(["alpha", "beta", "gamma"])
    );
    assert_eq!(
        events[deltas + 3].envelope.value["tool_name"],
        "decompose_query"
    );

    research
        .decide(
            &run.id,
            ApproveEvent {
                approved: true,
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);

    // Step 1 ran alpha and beta side by side (the bound is 2); the reflection replaced gamma
    // with delta; step 2 ran delta; the second reflection completed.
    assert_eq!(
        llm.max_in_flight(),
        2,
        "researchers ran in parallel, two at most"
    );
    let tasks = tasks_started(&llm);
    let mut sorted = tasks.clone();
    sorted.sort();
    assert_eq!(sorted, ["alpha", "beta", "delta"]);
    assert_eq!(tasks[2], "delta");
    let reflections = llm
        .requests()
        .iter()
        .filter(|r| system(&r.body).starts_with("You review research"))
        .count();
    assert_eq!(reflections, 2);
    // The three tasks' searches, and at most three beside them: the question first, then
    // the built-in planner's queries for it; each search reads its one result.
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let reached: Vec<&str> = events
        .iter()
        .filter(|e| {
            e.envelope.event_type == "ToolCall"
                && e.envelope.value["tool_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("web_search-reach"))
        })
        .map(|e| e.envelope.value["tool_kwargs"]["query"].as_str().unwrap())
        .collect();
    assert_eq!(reached.first(), Some(&"What did the survey measure?"));
    assert!(reached.len() <= 3, "{reached:?}");
    assert_eq!(web.searches.load(Ordering::SeqCst), 3 + reached.len());
    assert_eq!(web.pages.load(Ordering::SeqCst), 3 + reached.len());

    let done = store.get_run(&run.id).await.unwrap().unwrap();
    let result = done.result.unwrap().value;
    let report = result["report_markdown"].as_str().unwrap();
    // [1] and [2] name sources read; [9] named none and is gone, and so is its sentence,
    // which no page read says. The fabricated finding (a URL never fetched) never reached
    // the writer.
    assert!(
        report.contains("The survey measured 42 units in 2024. [1]"),
        "{report}"
    );
    assert!(
        !report.contains("A claim that cites nothing read."),
        "{report}"
    );
    assert!(
        !report.contains("[9]") && !report.contains("[3]"),
        "{report}"
    );
    assert!(
        report.contains("## Overview") && report.contains("## Details"),
        "{report}"
    );
    let cited: Vec<&str> = result["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["url"].as_str().unwrap())
        .collect();
    assert_eq!(cited.len(), 2, "{cited:?}");
    assert!(cited.iter().all(|u| u.contains("/pages/")), "{cited:?}");
    let writer_asks: Vec<String> = llm
        .requests()
        .iter()
        .filter(|r| system(&r.body).starts_with("You write one section"))
        .map(|r| last(&r.body)["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(writer_asks.len(), 2, "one call per outline section");
    assert!(
        writer_asks[0].contains("[1] All about"),
        "sources listed: {}",
        writer_asks[0]
    );
    assert!(!writer_asks[0].contains("Made up"), "{}", writer_asks[0]);

    // Every model call's tokens are counted: 1 plan + 9 researcher turns + 2 reflections + 2
    // sections + 1 verifier call (on the sentence the offline check could not confirm).
    let session = research.sessions().get(&run.id).await.unwrap();
    // Each cited sentence was checked against the passage it cites. The one giving a number
    // the page does not (17) failed the offline check and the verifier's, and was rewritten
    // from the passage, then left out: the report already said that; the others held. The
    // second section's repeat of the first was left out before any check. The sentence
    // whose citation named no source read, and the second section's about beta, are about
    // neither their section nor the question: left out before the check, and recorded. The
    // second section, left empty, was written from the sources' own sentences.
    let claims = session["claims"].as_array().unwrap();
    let off_topic: Vec<&str> = claims
        .iter()
        .filter(|c| c["reason"] == "about neither its section's subject nor the question")
        .map(|c| {
            assert_eq!(c["outcome"], "removed", "{c}");
            c["sentence"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        off_topic,
        [
            "A claim that cites nothing read.",
            "A second paragraph about beta keeps the page long enough to be an article."
        ]
    );
    let overview: Vec<&serde_json::Value> = claims
        .iter()
        .filter(|c| c["section"] == "Overview" && c["source_url"] != "")
        .collect();
    assert_eq!(overview.len(), 2, "{claims:?}");
    assert!(
        claims
            .iter()
            .any(|c| c["section"] == "Details" && c["outcome"] == "kept"),
        "{claims:?}"
    );
    for c in overview {
        let wrong = c["sentence"].as_str().unwrap().contains("17 units");
        assert_eq!(
            c["verdict"],
            if wrong { "unsupported" } else { "supported" },
            "{c}"
        );
        assert_eq!(
            c["checked_by"],
            if wrong { "model" } else { "offline" },
            "{c}"
        );
        assert_eq!(c["outcome"], if wrong { "removed" } else { "kept" }, "{c}");
        assert!(!c["span"]["text"].as_str().unwrap().is_empty(), "{c}");
        if wrong {
            assert!(c["rewritten"].as_str().unwrap().contains("42 units"), "{c}");
            let reason = c["reason"].as_str().unwrap();
            assert!(reason.ends_with("an earlier sentence says the same"), "{c}");
        }
    }
    // What the second section said again is said once.
    assert_eq!(
        report
            .matches("The survey measured 42 units in 2024")
            .count(),
        1,
        "{report}"
    );
    assert!(
        session["notes"]
            .to_string()
            .contains("said again what the report already said")
    );
    assert!(!report.contains("17 units"), "{report}");
    let calls = llm.requests().len() as u64;
    assert_eq!(calls, 15);
    assert_eq!(
        session["tokens_used"],
        calls * (PROMPT_TOKENS + COMPLETION_TOKENS)
    );
    // The researchers' three, then the best sentences (six at most) of the pages the
    // question's own searches read.
    let findings = session["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 3 + 6);
    assert!(
        findings[..3]
            .iter()
            .all(|f| f["fact"] == "It was measured at 42 units in 2024."),
        "{findings:?}"
    );
    // Each tool and model call is on the stream once, each call with its result.
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let count = |t: &str| events.iter().filter(|e| e.envelope.event_type == t).count();
    assert_eq!(count("ToolCall"), count("ToolCallResult"));
    assert_eq!(
        count("AgentOutput") as u64,
        calls + 1,
        "one per model call, and the writer's report"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn near_the_token_budget_research_stops_and_the_report_says_so() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let (research, store, _db) = service(&web, &llm).await;
    // 1000 tokens; each scripted call costs 120, and research stops at 80 % of the budget:
    // the plan and the first step (two researchers, three turns each, and the reflection)
    // spend 960, so the second step never starts.
    let run = research
        .start(
            "What did the survey measure?",
            Some(
                json!({"mode": "deep", "require_approval": false, "token_budget": 1000,
                        "max_parallel_researchers": 2}),
            ),
        )
        .await
        .unwrap();
    let status = drive(&research, &run.id).await;
    assert_eq!(status, RunStatus::Completed);
    let researched = tasks_started(&llm);
    assert_eq!(
        researched.len(),
        2,
        "only the first step ran: {researched:?}"
    );
    let result = store
        .get_run(&run.id)
        .await
        .unwrap()
        .unwrap()
        .result
        .unwrap()
        .value;
    let report = result["report_markdown"].as_str().unwrap();
    assert!(
        report.contains(
            "Research was cut short: the token budget was nearly spent (960 of 1000 tokens)"
        ),
        "{report}"
    );
    assert!(
        report.contains("42 units in 2024. [1]"),
        "written from what was gathered: {report}"
    );
    let session = research.sessions().get(&run.id).await.unwrap();
    assert_eq!(
        session["cut_short"],
        "the token budget was nearly spent (960 of 1000 tokens)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_the_run_and_an_unusable_plan_falls_back() {
    let web = SearchAndPages::start().await;
    // Every call refused: the run fails and says why; nothing is searched.
    let refused = Server::start(|_: &serde_json::Value, _| {
        fathom_testkit::llm::Reply::Status(
            401,
            vec![],
            json!({"error": {"message": "Incorrect API key provided"}}),
        )
    })
    .await;
    let (research, store, _db) = service(&web, &refused).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(json!({"mode": "deep", "require_approval": false})),
        )
        .await
        .unwrap();
    let status = drive(&research, &run.id).await;
    assert_eq!(status, RunStatus::Failed);
    let error = store
        .get_run(&run.id)
        .await
        .unwrap()
        .unwrap()
        .error
        .unwrap();
    // The step's failure, with the model server's answer kept under it as its cause.
    assert!(
        error.contains(
            "the model cannot be used: the model server refused the request: HTTP 401: \
             Incorrect API key provided"
        ),
        "{error}"
    );
    assert_eq!(web.searches.load(Ordering::SeqCst), 0);

    // A planner that answers in prose twice: the built-in planner's plan is used, and the
    // plan's tool result says so.
    let prose = Server::start(|body: &serde_json::Value, _| {
        if system(body).starts_with("You are the planner") {
            fathom_testkit::llm::Reply::text("I would search for a few things and then write.")
        } else {
            scripted_agent()(body, 0)
        }
    })
    .await;
    let (research, store, _db) = service(&web, &prose).await;
    let run = research
        .start(
            "How does ownership work in Rust?",
            Some(json!({"mode": "deep"})),
        )
        .await
        .unwrap();
    let status = drive(&research, &run.id).await;
    assert_eq!(status, RunStatus::Waiting);
    assert_eq!(
        prose.requests().len(),
        2,
        "asked twice, the second time told why"
    );
    let retry = &prose.requests()[1].body["messages"];
    assert!(
        retry[3]["content"]
            .as_str()
            .unwrap()
            .contains("That plan cannot be used: the answer held no JSON"),
        "{retry}"
    );
    let events = store.events_after(&run.id, -1, 100).await.unwrap();
    let plan = events
        .iter()
        .find(|e| {
            e.envelope.event_type == "ToolCallResult"
                && e.envelope.value["tool_name"] == "decompose_query"
        })
        .unwrap();
    let text = plan.envelope.value["tool_output"]["blocks"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("the model's plan could not be used"),
        "{text}"
    );
    assert!(
        !plan.envelope.value["tool_output"]["raw_output"]["queries"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_deadline_research_stops_and_the_report_says_so() {
    let web = SearchAndPages::start().await;
    // Researchers take 7.5 s to start: with a 10 s research budget (wrap-up 3 s before the
    // end), the first step ends past the wrap-up time and the second step never starts.
    let slow = Server::start(|body: &serde_json::Value, i| {
        let reply = scripted_agent()(body, i);
        if is_first_research_turn(body) {
            fathom_testkit::llm::Reply::Delayed(7500, Box::new(reply))
        } else {
            reply
        }
    })
    .await;
    let (research, store, _db) = service(&web, &slow).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(
                json!({"mode": "deep", "require_approval": false, "timeout_seconds": 10,
                        "max_parallel_researchers": 3}),
            ),
        )
        .await
        .unwrap();
    let status = drive(&research, &run.id).await;
    assert_eq!(status, RunStatus::Completed);
    let report = store
        .get_run(&run.id)
        .await
        .unwrap()
        .unwrap()
        .result
        .unwrap()
        .value["report_markdown"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        report.contains("Research was cut short: the time budget was nearly spent"),
        "{report}"
    );
    assert!(report.contains("42 units in 2024. [1]"), "{report}");
    let started = tasks_started(&slow);
    assert_eq!(started.len(), 3, "one step only: {started:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_text_reaches_the_stream_while_the_model_is_still_answering() {
    let web = SearchAndPages::start().await;
    // The planner sends its first piece, then thinks for 1.5 s before the rest.
    let llm = Server::start(|body: &serde_json::Value, i| {
        if system(body).starts_with("You are the planner") {
            use fathom_testkit::llm::{chunk, done, usage};
            fathom_testkit::llm::Reply::Raw(vec![
                chunk(json!({"content": "{\"clarifying_questions\": [], "}), None),
                (
                    1500,
                    chunk(
                        json!({"content": "\"queries\": [\"a\"], \"outline\": [\"O\"]}"}),
                        None,
                    )
                    .1,
                ),
                chunk(json!({}), Some("stop")),
                usage(),
                done(),
            ])
        } else {
            scripted_agent()(body, i)
        }
    })
    .await;
    let (research, store, _db) = service(&web, &llm).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(json!({"mode": "deep"})),
        )
        .await
        .unwrap();
    let engine = research.engine.clone();
    let id = run.id.clone();
    let driving = tokio::spawn(async move { engine.drive_run(&id).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let first = loop {
        let events = store.events_after(&run.id, -1, 100).await.unwrap();
        if let Some(e) = events
            .iter()
            .find(|e| e.envelope.event_type == "AgentStream")
        {
            break e.envelope.value.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no AgentStream within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Seen while the model was still answering: only the first piece, and no output yet.
    assert_eq!(llm.in_flight(), 1, "the planner call is still open");
    assert_eq!(first["delta"], "{\"clarifying_questions\": [], ");
    assert_eq!(first["current_agent_name"], "planner");
    let outputs = store
        .events_after(&run.id, -1, 100)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.envelope.event_type == "AgentOutput")
        .count();
    assert_eq!(outputs, 0);
    assert_eq!(driving.await.unwrap().unwrap(), RunStatus::Waiting);
    let streamed: String = store
        .events_after(&run.id, -1, 100)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.envelope.event_type == "AgentStream")
        .map(|e| e.envelope.value["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        streamed,
        "{\"clarifying_questions\": [], \"queries\": [\"a\"], \"outline\": [\"O\"]}"
    );
}

/// A model that follows the protocol but not the prompts (see `naive_agent`): prose plans,
/// tool calls written as text with arguments taken from the schema, URLs that were in no
/// result, empty or misattributed findings, an uncited report. The run still reads what its
/// searches found and ends with a report whose every section cites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_naive_model_still_gets_a_cited_report_from_what_the_searches_found() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(fathom_testkit::agent::naive_agent()).await;
    let (research, store, _db) = service(&web, &llm).await;
    let run = light_run_completed(&research).await;

    // The tool call written in text was run, with the schema's words as its query; the
    // invented URL was never requested (it is on no trusted origin and fails), but the
    // search's top result was read.
    assert!(web.searches.load(Ordering::SeqCst) >= 1);
    assert!(web.pages.load(Ordering::SeqCst) >= 1);
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let calls: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.envelope.event_type == "ToolCall")
        .map(|e| &e.envelope.value)
        .collect();
    assert!(
        calls.iter().any(|c| c["tool_name"] == "web_search"
            && c["tool_kwargs"]["query"] == "What to search for."),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c["tool_kwargs"]["url"] == "https://invented.example/article")
    );

    let done = store.get_run(&run.id).await.unwrap().unwrap();
    let result = done.result.unwrap().value;
    let report = result["report_markdown"].as_str().unwrap();
    let sources = result["sources"].as_array().unwrap();
    assert!(!sources.is_empty(), "{report}");
    assert!(
        sources
            .iter()
            .all(|s| s["url"].as_str().unwrap().contains("/pages/")),
        "{sources:?}"
    );
    // The model's uncited prose is gone: each section holds cited sentences of the page
    // read, or says that nothing read covered it.
    let sections: Vec<&str> = report
        .split("\n## ")
        .skip(1)
        .filter(|s| !s.starts_with("Sources"))
        .collect();
    assert!(sections.iter().any(|s| s.contains("[1]")), "{report}");
    for s in &sections {
        assert!(
            s.contains("[1]") || s.contains("None of the sources read covered this section."),
            "{s}\n\n{report}"
        );
    }
    assert!(
        !report.contains("covers the subject in some depth"),
        "{report}"
    );
    assert!(report.contains("42 units in 2024"), "{report}");

    let session = research.sessions().get(&run.id).await.unwrap();
    let notes: Vec<&str> = session["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let noted = |what: &str| notes.iter().any(|n| n.contains(what));
    assert!(
        noted("which was not read; it matches a passage of"),
        "{notes:?}"
    );
    assert!(
        noted("reported no usable findings; the best passages it read stand in"),
        "{notes:?}"
    );
    assert!(
        noted("was written from the sources' own sentences"),
        "{notes:?}"
    );
    // Each cited sentence was checked against its passage, and holds; the model's prose,
    // which states nothing ("This section covers the subject in some depth."), is no claim
    // and was left out.
    let claims = session["claims"].as_array().unwrap();
    assert!(!claims.is_empty());
    for c in claims {
        if c["outcome"] == "removed" {
            let reason = c["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("not a claim")
                    || reason == "about neither its section's subject nor the question",
                "{c}"
            );
            continue;
        }
        assert_eq!(c["verdict"], "supported", "{c}");
        assert_eq!(c["outcome"], "kept", "{c}");
        assert!(!c["span"]["text"].as_str().unwrap().is_empty(), "{c}");
    }
    assert!(
        claims
            .iter()
            .any(|c| c["sentence"].as_str().unwrap().contains("42 units"))
    );
}

/// A model that misbehaves in every way item by item, each met by a bounded answer: a
/// researcher that loops (cut by the client, asked again once), answers without using the
/// tools (told once to search), asks for two searches in one message (both run), and
/// overflows its context (the pages read are shortened, once); a writer that answers empty
/// twice (given up on; the section is written from the sources). Every call carries an
/// output bound, and the run makes exactly the calls these bounds allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_silent_overflowing_model_meets_bounded_retries_and_the_run_completes() {
    use fathom_testkit::llm::Reply;
    let web = SearchAndPages::start().await;
    // Every other request that carries tool results is refused as too long: the researcher
    // meets one refusal and one shortened retry.
    let overflows = std::sync::atomic::AtomicUsize::new(0);
    let llm = Server::start(move |body: &serde_json::Value, _| {
        let sys = system(body);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last_text = last(body)["content"].as_str().unwrap_or("").to_string();
        if sys.starts_with("You write one section") {
            return Reply::text("");
        }
        if sys.starts_with("You are the planner") {
            // A task the search finds nothing for: the researcher starts with nothing read.
            return Reply::text(
                r#"{"clarifying_questions": [], "queries": ["alpha (no results)"], "outline": ["Overview", "Details"]}"#,
            );
        }
        if sys.starts_with("You review research") {
            return Reply::text(r#"{"decision": "complete", "tasks": [], "reason": "enough"}"#);
        }
        if messages.len() == 2 {
            return Reply::Text(vec!["Alpha is warm in winter. ".to_string(); 400]);
        }
        if last_text.starts_with("Your answer repeated itself") {
            return Reply::text("Alpha is well known; no need to search.");
        }
        if last_text.starts_with("You have read nothing yet") {
            return Reply::ToolCalls(vec![
                ("c1".into(), "web_search".into(), vec![r#"{"query": "alpha"}"#.into()]),
                ("c2".into(), "web_search".into(), vec![r#"{"query": "alpha winter"}"#.into()]),
            ]);
        }
        let tools: Vec<&serde_json::Value> =
            messages.iter().filter(|m| m["role"] == "tool").collect();
        if overflows.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            return Reply::Status(
                400,
                vec![],
                json!({"error": {"code": 400, "type": "exceed_context_size_error",
                    "message": "the request exceeds the available context size, try increasing it"}}),
            );
        }
        let text = tools[0]["content"].as_str().unwrap_or("");
        let url = text.split('<').nth(1).and_then(|r| r.split('>').next()).unwrap_or("");
        Reply::text(&format!(
            r#"{{"findings": [{{"fact": "It was measured at 42 units in 2024.", "url": "{url}"}}]}}"#
        ))
    })
    .await;
    let (research, store, _db) = service(&web, &llm).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(
                json!({"mode": "deep", "require_approval": false, "depth": "light", "max_parallel_researchers": 1}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);

    let asked = llm.requests();
    let role = |prefix: &str| {
        asked
            .iter()
            .filter(|r| system(&r.body).starts_with(prefix))
            .count()
    };
    // Planner 1; the researcher: the loop, once again, the nudge's turn, the overflow, the
    // shortened retry; 1 reflection (complete); writer: each of two sections empty twice.
    assert_eq!(role("You are the planner"), 1);
    assert_eq!(role("You are a researcher"), 5);
    assert_eq!(role("You review research"), 1);
    assert_eq!(role("You write one section"), 4);
    assert_eq!(asked.len(), 11);
    for r in &asked {
        assert!(
            r.body["max_tokens"].as_u64().is_some_and(|n| n <= 1000),
            "{}",
            r.body
        );
    }

    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let inputs: Vec<String> = events
        .iter()
        .filter(|e| e.envelope.event_type == "AgentInput")
        .map(|e| {
            e.envelope.value["input"][0]["blocks"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        inputs
            .iter()
            .any(|i| i.starts_with("Your answer repeated itself")),
        "{inputs:?}"
    );
    assert!(
        inputs
            .iter()
            .any(|i| i.starts_with("Your answer was empty")),
        "{inputs:?}"
    );
    // The looping answer reached the stream cut: its output holds one copy of the sentence.
    let looped = events
        .iter()
        .find(|e| {
            e.envelope.event_type == "AgentOutput"
                && e.envelope.value["response"]["blocks"][0]["text"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("Alpha is warm"))
        })
        .expect("the looping answer's output");
    let content = looped.envelope.value["response"]["blocks"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        content.matches("Alpha is warm in winter.").count() == 1,
        "{content}"
    );
    // (The question's own searches, beside the model's, are apart.)
    let searches: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e.envelope.event_type == "ToolCall"
                && e.envelope.value["tool_name"] == "web_search"
                && !e.envelope.value["tool_id"]
                    .as_str()
                    .unwrap()
                    .starts_with("web_search-reach")
        })
        .map(|e| &e.envelope.value["tool_kwargs"]["query"])
        .collect();
    assert_eq!(
        searches,
        [
            &json!("alpha (no results)"),
            &json!("alpha"),
            &json!("alpha winter")
        ],
        "the task searched first (nothing found), then both calls of one message"
    );

    let session = research.sessions().get(&run.id).await.unwrap();
    let notes = session["notes"].to_string();
    assert!(notes.contains("outgrew the model's context"), "{notes}");
    assert!(
        notes.contains("was written from the sources' own sentences"),
        "{notes}"
    );
    assert_eq!(
        session["findings"][0]["fact"],
        "It was measured at 42 units in 2024."
    );
    let report = session["report_markdown"].as_str().unwrap();
    assert!(
        report.contains("42 units in 2024") && report.contains("[1]"),
        "{report}"
    );
}

/// A researcher whose task finds nothing and which never searches itself: after one
/// reminder, the research question is searched for it and what that finds is read, so the
/// report still rests on sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_researcher_that_never_searches_has_the_question_searched_for_it() {
    use fathom_testkit::llm::Reply;
    let web = SearchAndPages::start().await;
    let llm = Server::start(|body: &serde_json::Value, _| {
        let sys = system(body);
        if sys.starts_with("You are the planner") {
            Reply::text(
                r#"{"clarifying_questions": [], "queries": ["alpha (no results)"], "outline": ["Overview"]}"#,
            )
        } else if sys.starts_with("You review research") {
            Reply::text(r#"{"decision": "complete", "tasks": [], "reason": "enough"}"#)
        } else {
            Reply::text(r#"{"findings": []}"#)
        }
    })
    .await;
    let (research, _store, _db) = service(&web, &llm).await;
    let run = light_run_completed(&research).await;
    let researcher_calls = llm
        .requests()
        .iter()
        .filter(|r| system(&r.body).starts_with("You are a researcher"))
        .count();
    assert_eq!(
        researcher_calls, 2,
        "its answer, and its answer after one reminder"
    );
    let session = research.sessions().get(&run.id).await.unwrap();
    let notes = session["notes"].to_string();
    assert!(
        notes.contains("further search results were read for it"),
        "{notes}"
    );
    let report = session["report_markdown"].as_str().unwrap();
    assert!(
        report.contains("42 units in 2024") && report.contains("[1]"),
        "{report}"
    );
    let title = session["cited_sources"][0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("All about What did the survey measure"),
        "{title}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_coordinator_model_sends_a_simple_question_to_a_direct_answer_from_local_sources() {
    use fathom_testkit::llm::Reply;
    let web = SearchAndPages::start().await;
    let scripted = scripted_agent();
    let llm = Server::start(move |body, n| {
        if system(body).starts_with("You route questions") {
            return Reply::text(r#"{"kind": "fact", "reason": "one fact from one page"}"#);
        }
        scripted(body, n)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("survey.md"),
        "# The survey\n\nThe survey measured 42 units in 2024. A second paragraph about beta \
         keeps the page long enough to be an article. The survey was run by volunteers.\n",
    )
    .unwrap();
    let corpus = Arc::new(
        fathom_corpus::Corpus::open(dir.path(), &dir.path().join(".index"))
            .await
            .unwrap(),
    );
    corpus.refresh(&|_, _| {}).await.unwrap();
    let (research, store, _db) = service_with_local(&web, &llm, Some(corpus)).await;
    // Approval is required by default: a simple answer has no plan to approve. A few words of
    // no form the rules know: the model is asked how to answer them.
    let run = research.start("survey measured units", None).await.unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);

    assert_eq!(
        web.searches.load(Ordering::SeqCst),
        0,
        "nothing left the machine"
    );
    assert_eq!(web.pages.load(Ordering::SeqCst), 0);
    let asked = llm.requests();
    let roles: Vec<String> = asked
        .iter()
        .map(|r| system(&r.body).split('.').next().unwrap().to_string())
        .collect();
    assert_eq!(
        roles,
        [
            "You route questions for a research assistant by the kind of answer they ask for",
            "You write one section of a research report"
        ],
        "a route and one section, no planner and no researcher"
    );
    assert!(
        last(&asked[1].body)["content"]
            .as_str()
            .unwrap()
            .contains("Section to write: Answer")
    );
    let state = store.get_run(&run.id).await.unwrap().unwrap().state;
    assert_eq!(state["route"]["mode"], "simple");
    assert_eq!(state["route"]["by"], "model");
    assert_eq!(state["route"]["reason"], "one fact from one page");
    let report = state["report_markdown"].as_str().unwrap();
    assert!(report.contains("## Answer"), "{report}");
    assert!(
        report.contains("The survey measured 42 units in 2024"),
        "{report}"
    );
    assert!(
        report.contains("survey.md"),
        "cites the local page: {report}"
    );
    // The model wrote the answer from the best passages of the page, and what it wrote was
    // checked like any report: the cited sentence held; the one about something else than
    // the question (a paragraph about beta, its citation naming no source) was left out.
    let ask = last(&asked[1].body)["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        ask.contains("- The survey measured 42 units in 2024."),
        "{ask}"
    );
    assert!(
        report.contains("The survey measured 42 units in 2024. [1]"),
        "{report}"
    );
    assert!(!report.contains("about beta"), "{report}");
    let session = research.sessions().get(&run.id).await.unwrap();
    let outcomes: Vec<(&str, &str)> = session["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["outcome"].as_str().unwrap(),
                c["sentence"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (
                "removed",
                "A second paragraph about beta keeps the page long enough to be an article."
            ),
            ("kept", "The survey measured 42 units in 2024.")
        ],
        "{}",
        session["claims"]
    );
}

/// With a model, a question whose form the rules read by a phrase is routed by them: the
/// model is not asked (the scripted coordinator would call it an explanation, for full
/// research), and the run answers it directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_question_the_rules_read_is_routed_without_asking_the_model() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("survey.md"),
        "# The survey\n\nThe survey measured 42 units in 2024. The survey was run by \
         volunteers over two summers, and its figures are published every spring.\n",
    )
    .unwrap();
    let corpus = Arc::new(
        fathom_corpus::Corpus::open(dir.path(), &dir.path().join(".index"))
            .await
            .unwrap(),
    );
    corpus.refresh(&|_, _| {}).await.unwrap();
    let (research, store, _db) = service_with_local(&web, &llm, Some(corpus)).await;
    let run = research
        .start("What did the survey measure?", None)
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);
    let state = store.get_run(&run.id).await.unwrap().unwrap().state;
    assert_eq!(state["route"]["mode"], "simple");
    assert_eq!(state["route"]["by"], "rules");
    assert_eq!(state["route"]["kind"], "fact");
    let roles: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| system(&r.body).split('.').next().unwrap().to_string())
        .collect();
    assert_eq!(
        roles,
        ["You write one section of a research report"],
        "no routing call: one section written"
    );
}

/// A follow-up with the agent: its plan splits the planner's queries into those the parent's
/// documents answer and the rest, researchers are started on exactly the rest, and the
/// parent's documents are among what the writer cites from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follow_up_researches_only_what_the_parents_sources_do_not_answer() {
    let web = SearchAndPages::start().await;
    let llm = Server::start(scripted_agent()).await;
    let (research, store, _db) = service(&web, &llm).await;
    // The parent researches "alpha" only (its plan edited at the gate).
    let parent = research
        .start(
            "What did the survey measure?",
            Some(json!({"mode": "deep", "depth": "light"})),
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &parent.id).await, RunStatus::Waiting);
    let plan = fathom_research::Plan {
        question: "What did the survey measure?".into(),
        queries: vec!["alpha".into()],
        outline: vec!["Findings".into()],
        ..Default::default()
    };
    research
        .decide(
            &parent.id,
            ApproveEvent {
                approved: true,
                plan: Some(plan),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &parent.id).await, RunStatus::Completed);
    let before = tasks_started(&llm).len();
    let run = research
        .start_follow_up(
            "What did the survey find?",
            Some(json!({"require_approval": false, "depth": "light"})),
            Some(parent.id.clone()),
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);
    let session = research.sessions().get(&run.id).await.unwrap();
    assert_eq!(session["parent_id"], parent.id.as_str());
    let split = &session["plan"]["follow_up"];
    let search: Vec<String> = serde_json::from_value(split["search"].clone()).unwrap();
    let covered = split["covered"].as_array().unwrap();
    assert_eq!(
        covered.len() + search.len(),
        session["plan"]["queries"].as_array().unwrap().len(),
        "{split}"
    );
    assert!(!covered.is_empty() && !search.is_empty(), "{split}");
    // Researchers start on exactly what the parent does not answer (reflection may add
    // tasks after them); none on what it does.
    let started = tasks_started(&llm)[before..].to_vec();
    // Researchers of one batch run in parallel: their first requests come in any order.
    let mut first = started[..search.len().min(started.len())].to_vec();
    first.sort();
    let mut wanted = search.clone();
    wanted.sort();
    assert_eq!(first, wanted, "{started:?}");
    for c in covered {
        let q = c["query"].as_str().unwrap();
        assert!(
            !started.iter().any(|t| t == q),
            "{q} is answered by the parent: {started:?}"
        );
    }
    let from_parent: Vec<&serde_json::Value> = session["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["from_session"] == parent.id.as_str())
        .collect();
    assert!(!from_parent.is_empty(), "{}", session["sources"]);
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.envelope.value["tool_name"] == "search_session")
    );
    assert!(session["report_markdown"].as_str().unwrap().contains("[1]"));
}

/// With a model the model writes, and every sentence that states something stands on a
/// source: a sentence it wrote without a citation is cited to the page that says it,
/// rewritten from the closest sentence read, or removed (as are a transition and a sentence
/// about neither its section nor the question), and the session says which. Headings it writes never run into the prose, and its Markdown
/// (backticks, emphasis) reaches the report as written. The question itself is searched
/// beside the model's queries, and a light run that did its two steps is not "cut short".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sentence_the_model_writes_stands_on_a_source_or_goes() {
    use fathom_testkit::llm::Reply;
    let web = SearchAndPages::start().await;
    let scripted = scripted_agent();
    let llm = Server::start(move |body, n| {
        let sys = system(body);
        if sys.starts_with("You review research") {
            return Reply::text(r#"{"decision": "continue", "tasks": [], "reason": "go on"}"#);
        }
        if sys.starts_with("You are the planner") {
            return Reply::text(
                r#"{"clarifying_questions": [], "queries": ["alpha", "beta", "gamma"],
                    "outline": ["The survey's pages", "Measurements"]}"#,
            );
        }
        if sys.starts_with("You write one section") {
            return Reply::text(
                "### Survey Results\n\
                 The `survey team` measured it at **42 units** [1].\n\
                 Let us look at the details.\n\
                 `Box` is a stack-allocated smart pointer.\n\
                 The survey weighed every page on a scale.\n\
                 A second paragraph about alpha keeps the page from being 3 articles.\n\
                 Measurement Details\n\
                 The key fact about beta is that it was measured in 2024.",
            );
        }
        scripted(body, n)
    })
    .await;
    let (research, store, _db) = service(&web, &llm).await;
    let run = research
        .start(
            "What did the survey measure?",
            Some(
                json!({"mode": "deep", "require_approval": false, "depth": "light",
                        "max_parallel_researchers": 1}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(drive(&research, &run.id).await, RunStatus::Completed);

    // Light depth is two steps: alpha, then beta; gamma is left for a deeper run, which is
    // what the depth asked for, not research cut short.
    assert_eq!(tasks_started(&llm), ["alpha", "beta"]);
    let session = research.sessions().get(&run.id).await.unwrap();
    assert!(session["cut_short"].is_null(), "{}", session["cut_short"]);
    assert!(
        session["notes"]
            .to_string()
            .contains("1 planned tasks were left for a deeper run: light depth allows 2"),
        "{}",
        session["notes"]
    );

    // The question and the built-in planner's queries were searched beside the model's,
    // journaled like any search, and bounded.
    let events = store.events_after(&run.id, -1, 10_000).await.unwrap();
    let searches: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| {
            e.envelope.event_type == "ToolCall" && e.envelope.value["tool_name"] == "web_search"
        })
        .map(|e| {
            (
                e.envelope.value["tool_id"].as_str().unwrap(),
                e.envelope.value["tool_kwargs"]["query"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        searches[0],
        ("web_search-reach1", "What did the survey measure?"),
        "{searches:?}"
    );
    let reached = searches
        .iter()
        .filter(|(id, _)| id.starts_with("web_search-reach"))
        .count();
    assert!((1..=3).contains(&reached), "{searches:?}");
    assert_eq!(web.searches.load(Ordering::SeqCst), reached + 2);

    let report = session["report_markdown"].as_str().unwrap();
    // Kept, cited, with its Markdown as the model wrote it.
    assert!(
        report.contains("The `survey team` measured it at **42 units**. [1]"),
        "{report}"
    );
    assert!(!report.contains("\\`"), "no escaped backtick: {report}");
    // Headings the model wrote are gone: none runs into a sentence.
    assert!(
        !report.contains("Survey Results") && !report.contains("Measurement Details"),
        "{report}"
    );
    // The transition and the claim no page supports are gone; the wrong count is rewritten
    // from the page (it is about the section's subject, pages); the sentence a page says
    // is cited to it.
    assert!(!report.contains("Let us look"), "{report}");
    assert!(!report.contains("stack-allocated"), "{report}");
    assert!(!report.contains("on a scale"), "{report}");
    assert!(!report.contains("3 articles"), "{report}");
    assert!(
        report.contains(
            "A second paragraph about alpha keeps the page long enough to be an article. ["
        ),
        "{report}"
    );
    assert!(
        report.contains("The key fact about beta is that it was measured in 2024. ["),
        "{report}"
    );
    // Every sentence of the sections is cited.
    let body = report
        .split("\n## ")
        .skip(1)
        .filter(|s| !s.starts_with("Sources"));
    for section in body {
        for line in section
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty() && !l.starts_with('_'))
        {
            // "Text. [1] Next." splits as "Text." and "[1] Next.": the marker is the first's.
            let sentences = fathom_parse::text::sentences(line);
            for (i, s) in sentences.iter().enumerate() {
                let cited =
                    s.ends_with(']') || sentences.get(i + 1).is_some_and(|n| n.starts_with('['));
                assert!(cited, "uncited sentence \"{s}\" in {report}");
            }
        }
    }
    let claims = session["claims"].as_array().unwrap();
    let outcome = |needle: &str| {
        claims
            .iter()
            .find(|c| c["sentence"].as_str().unwrap().contains(needle))
            .map(|c| {
                (
                    c["outcome"].as_str().unwrap(),
                    c["reason"].as_str().unwrap(),
                )
            })
            .unwrap_or_else(|| panic!("no claim record for {needle}: {claims:?}"))
    };
    assert_eq!(outcome("Let us look").0, "removed");
    assert!(outcome("Let us look").1.starts_with("not a claim"));
    assert_eq!(
        outcome("stack-allocated"),
        (
            "removed",
            "about neither its section's subject nor the question"
        )
    );
    assert_eq!(outcome("on a scale").0, "removed");
    assert!(
        outcome("on a scale")
            .1
            .starts_with("written without a citation; no source read supports it"),
        "{:?}",
        outcome("on a scale")
    );
    assert_eq!(outcome("3 articles").0, "rewritten");
    assert_eq!(outcome("about beta").0, "attributed");
    assert_eq!(outcome("**42 units**").0, "kept");
}
