//! The client against a scripted OpenAI-compatible server on loopback that streams real
//! chunk formats: each request takes the next scripted reply, and the server records what it
//! was sent and when.

use std::sync::Mutex;
use std::time::Duration;

use fathom_llm::{
    ChatModel, ChatRequest, LlmError, Message, ModelConfig, OpenAiChat, ResponseFormat,
    StreamDelta, ToolSpec,
};
use fathom_testkit::llm::{COMPLETION_TOKENS, PROMPT_TOKENS, Reply, Server, chunk, done};
use serde_json::{Value, json};

fn client(base: &str) -> OpenAiChat {
    let mut c = ModelConfig::new(base, "test-model", Some("sk-test".into()));
    c.idle_timeout = Duration::from_millis(400);
    c.timeout = Duration::from_secs(10);
    c.max_attempts = 3;
    OpenAiChat::new(c).unwrap()
}

fn text_stream(parts: &[&str]) -> Reply {
    Reply::Text(parts.iter().map(|p| p.to_string()).collect())
}

fn question() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("You are terse."),
            Message::user("Say hello."),
        ],
        ..Default::default()
    }
}

/// Runs a chat and collects the deltas it streamed.
async fn chat(
    c: &OpenAiChat,
    req: &ChatRequest,
) -> (Result<fathom_llm::ChatResponse, LlmError>, Vec<StreamDelta>) {
    let deltas = Mutex::new(Vec::new());
    let r = c.chat(req, &|d| deltas.lock().unwrap().push(d)).await;
    (r, deltas.into_inner().unwrap())
}

#[tokio::test]
async fn a_plain_answer_streams_and_reports_its_usage() {
    let server = Server::sequence(vec![text_stream(&["Hel", "lo", ", world."])]).await;
    let base = server.base_url.clone();
    let (r, deltas) = chat(&client(&base), &question()).await;
    let r = r.unwrap();
    assert_eq!(r.content, "Hello, world.");
    assert_eq!(r.finish_reason, "stop");
    assert_eq!(r.model, "scripted-model");
    assert_eq!(r.attempts, 1);
    let usage = r.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (
            PROMPT_TOKENS,
            COMPLETION_TOKENS,
            PROMPT_TOKENS + COMPLETION_TOKENS
        )
    );
    let texts: Vec<&StreamDelta> = deltas.iter().collect();
    assert_eq!(
        texts,
        [
            &StreamDelta::Text("Hel".into()),
            &StreamDelta::Text("lo".into()),
            &StreamDelta::Text(", world.".into())
        ]
    );
    let seen = server.requests();
    let (body, auth) = (&seen[0].body, &seen[0].authorization);
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert!(body.get("tools").is_none() && body.get("response_format").is_none());
}

#[tokio::test]
async fn parallel_tool_calls_split_across_chunks_are_put_back_together() {
    let calls = |v: Value| chunk(json!({"tool_calls": v}), None);
    let stream = Reply::Raw(vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        calls(json!([{"index": 0, "id": "call_a", "type": "function",
                      "function": {"name": "web_search", "arguments": ""}}])),
        calls(json!([{"index": 0, "function": {"arguments": "{\"que"}}])),
        calls(json!([{"index": 1, "id": "call_b", "type": "function",
                      "function": {"name": "fetch_url", "arguments": "{\"url\": "}}])),
        calls(json!([{"index": 0, "function": {"arguments": "ry\": \"rust borrow\"}"}}])),
        calls(json!([{"index": 1, "function": {"arguments": "\"https://x.test/a\",}"}}])),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]);
    let server = Server::sequence(vec![stream]).await;
    let base = server.base_url.clone();
    let mut req = question();
    req.tools = vec![
        ToolSpec {
            name: "web_search".into(),
            description: "Search the web".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        },
        ToolSpec {
            name: "fetch_url".into(),
            description: "Read a page".into(),
            parameters: json!({"type": "object", "properties": {"url": {"type": "string"}}}),
        },
    ];
    let (r, deltas) = chat(&client(&base), &req).await;
    let r = r.unwrap();
    assert_eq!(r.finish_reason, "tool_calls");
    assert_eq!(r.usage, None, "this server reported no usage");
    let got: Vec<(&str, &str, Value)> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.kwargs().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("call_a", "web_search", json!({"query": "rust borrow"})),
            // A trailing comma, tolerated.
            ("call_b", "fetch_url", json!({"url": "https://x.test/a"})),
        ]
    );
    assert_eq!(
        deltas,
        [
            StreamDelta::ToolCallStarted {
                index: 0,
                id: "call_a".into(),
                name: "web_search".into()
            },
            StreamDelta::ToolCallStarted {
                index: 1,
                id: "call_b".into(),
                name: "fetch_url".into()
            },
        ]
    );
    let seen = server.requests();
    assert_eq!(seen[0].body["tools"][1]["function"]["name"], "fetch_url");
    assert_eq!(seen[0].body["tool_choice"], "auto");
}

#[tokio::test]
async fn malformed_json_is_retried_or_reported_usefully() {
    // A broken chunk before anything was shown: the call is tried again.
    let broken = Reply::Raw(vec![(
        5,
        "{\"choices\": [{\"delta\": {\"content\": ".into(),
    )]);
    let server = Server::sequence(vec![broken, text_stream(&["fine"])]).await;
    let base = server.base_url.clone();
    let (r, _) = chat(&client(&base), &question()).await;
    let r = r.unwrap();
    assert_eq!((r.content.as_str(), r.attempts), ("fine", 2));
    assert_eq!(server.requests().len(), 2);

    // Tool arguments that are not JSON: the call comes back, and its kwargs say why.
    let bad_args = Reply::Raw(vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function":
            {"name": "web_search", "arguments": "{\"query\": "}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ]);
    // Structured output answered in prose around a fenced block.
    let prose = text_stream(&["Here is the plan:\n```json\n{\"queries\": [\"a\", \"b\",]}\n```"]);
    let server = Server::sequence(vec![bad_args, prose]).await;
    let base = server.base_url.clone();
    let c = client(&base);
    let (r, _) = chat(&c, &question()).await;
    let err = r.unwrap().tool_calls[0].kwargs().unwrap_err();
    assert!(
        err.contains("arguments of web_search are not valid JSON"),
        "{err}"
    );
    let (r, _) = chat(&c, &question()).await;
    assert_eq!(r.unwrap().json(), Some(json!({"queries": ["a", "b"]})));
}

#[tokio::test]
async fn rate_limits_are_waited_out_as_the_server_asks() {
    let limited = Reply::Status(
        429,
        vec![("retry-after", "1".into())],
        json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
    );
    let server = Server::sequence(vec![limited, text_stream(&["ok"])]).await;
    let base = server.base_url.clone();
    let (r, _) = chat(&client(&base), &question()).await;
    assert_eq!(r.unwrap().attempts, 2);
    let gap = {
        let seen = server.requests();
        seen[1].at - seen[0].at
    };
    assert!(
        gap >= Duration::from_millis(950),
        "waited {gap:?}, Retry-After said 1 s"
    );

    // 5xx on every attempt: a useful error naming the last failure.
    let down = || Reply::Status(503, vec![], json!({"error": {"message": "overloaded"}}));
    let server = Server::sequence(vec![down(), down(), down()]).await;
    let base = server.base_url.clone();
    let (r, _) = chat(&client(&base), &question()).await;
    assert_eq!(
        r.unwrap_err(),
        LlmError::Unavailable {
            attempts: 3,
            last: "HTTP 503: overloaded".into()
        }
    );
    assert_eq!(server.requests().len(), 3);

    // A bad key is not retried.
    let server = Server::sequence(vec![Reply::Status(
        401,
        vec![],
        json!({"error": {"message": "Incorrect API key provided"}}),
    )])
    .await;
    let base = server.base_url.clone();
    let (r, _) = chat(&client(&base), &question()).await;
    assert_eq!(
        r.unwrap_err(),
        LlmError::Refused {
            status: 401,
            message: "Incorrect API key provided".into()
        }
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stall_past_the_timeout_is_abandoned() {
    // Silent before the first chunk: retried, then given up.
    let silent = || Reply::Raw(vec![(3_000, "[DONE]".into())]);
    let server = Server::sequence(vec![silent(), silent(), silent()]).await;
    let base = server.base_url.clone();
    let (r, _) = chat(&client(&base), &question()).await;
    let err = r.unwrap_err();
    assert_eq!(
        err,
        LlmError::Stalled {
            after: Duration::from_millis(400)
        }
    );
    assert_eq!(
        err.to_string(),
        "the model sent nothing for 400ms and was abandoned"
    );
    assert_eq!(server.requests().len(), 3);

    // Silent after text was shown: not retried (the reader would see it twice).
    let mid = Reply::Raw(vec![
        chunk(json!({"content": "Partial"}), None),
        (3_000, "[DONE]".into()),
    ]);
    let server = Server::sequence(vec![mid]).await;
    let base = server.base_url.clone();
    let (r, deltas) = chat(&client(&base), &question()).await;
    assert!(matches!(r.unwrap_err(), LlmError::Stalled { .. }));
    assert_eq!(deltas, [StreamDelta::Text("Partial".into())]);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn structured_output_falls_back_when_the_server_lacks_json_schema() {
    let refused = Reply::Status(
        400,
        vec![],
        json!({"error": {"message": "response_format json_schema is not supported"}}),
    );
    let whole = Reply::Whole("{\"outline\": [\"Overview\"]}".into());
    let server = Server::sequence(vec![refused, whole]).await;
    let base = server.base_url.clone();
    let mut req = question();
    req.response_format = Some(ResponseFormat {
        name: "plan".into(),
        schema: json!({"type": "object", "properties": {"outline": {"type": "array",
            "items": {"type": "string"}}}}),
    });
    let (r, deltas) = chat(&client(&base), &req).await;
    let r = r.unwrap();
    assert_eq!(r.json(), Some(json!({"outline": ["Overview"]})));
    assert_eq!(
        r.usage.unwrap().total_tokens,
        PROMPT_TOKENS + COMPLETION_TOKENS
    );
    assert_eq!(
        deltas,
        [StreamDelta::Text("{\"outline\": [\"Overview\"]}".into())]
    );
    let seen = server.requests();
    let first = &seen[0].body["response_format"];
    assert_eq!(first["type"], "json_schema");
    assert_eq!(first["json_schema"]["strict"], true);
    assert_eq!(
        first["json_schema"]["schema"]["additionalProperties"],
        false
    );
    assert!(
        seen[1].body.get("response_format").is_none(),
        "asked again without it"
    );
}

#[tokio::test]
async fn a_server_without_stream_options_is_asked_again_without_them() {
    // As older llama.cpp and Ollama builds answer an unknown field.
    let refused = Reply::Status(
        400,
        vec![],
        json!({"error": {"message": "Unrecognized request argument supplied: stream_options"}}),
    );
    let server = Server::sequence(vec![refused, text_stream(&["fine"])]).await;
    let (r, _) = chat(&client(&server.base_url), &question()).await;
    let r = r.unwrap();
    assert_eq!((r.content.as_str(), r.attempts), ("fine", 1));
    let seen = server.requests();
    assert!(seen[0].body.get("stream_options").is_some());
    assert!(seen[1].body.get("stream_options").is_none());
    // A 400 about anything else is the caller's mistake: not retried.
    let server = Server::sequence(vec![Reply::Status(
        400,
        vec![],
        json!({"error": {"message": "messages: field required"}}),
    )])
    .await;
    let (r, _) = chat(&client(&server.base_url), &question()).await;
    assert_eq!(
        r.unwrap_err(),
        LlmError::Refused {
            status: 400,
            message: "messages: field required".into()
        }
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let e = |base: &str, model: &str| OpenAiChat::new(ModelConfig::new(base, model, None)).err();
    assert_eq!(
        e("http://localhost:1/v1", " "),
        Some(LlmError::Config("no model named".into()))
    );
    assert!(matches!(e("ftp://x/v1", "m"), Some(LlmError::Config(m)) if m.contains("not http(s)")));
    assert!(matches!(e("not a url", "m"), Some(LlmError::Config(m)) if m.contains("not a url")));
}
