//! The client against a scripted OpenAI-compatible server on loopback that streams real
//! chunk formats: each request takes the next scripted reply, and the server records what it
//! was sent and when.

use std::sync::Mutex;
use std::time::Duration;

use fathom_llm::{
    ChatModel, ChatRequest, FINISH_REPETITION, LlmError, Message, ModelConfig, OpenAiChat,
    ResponseFormat, StreamDelta, ToolSpec,
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
    req.max_tokens = Some(512);
    req.response_format = Some(ResponseFormat {
        name: "plan".into(),
        schema: json!({"type": "object", "properties": {"outline": {"type": "array",
            "maxItems": 5, "items": {"type": "string", "maxLength": 80}}}}),
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
    // Length limits reach the server (they keep small models from rambling).
    let outline = &first["json_schema"]["schema"]["properties"]["outline"];
    assert_eq!(
        (&outline["maxItems"], &outline["items"]["maxLength"]),
        (&json!(5), &json!(80))
    );
    assert_eq!(seen[0].body["max_tokens"], 512);
    assert_eq!(seen[1].body["max_tokens"], 512);
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

fn search_tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "web_search".into(),
        description: "Search the web".into(),
        parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
    }]
}

#[tokio::test]
async fn a_tool_call_written_as_text_is_taken_as_a_call() {
    // As Qwen2.5-Coder-1.5B answers behind a llama-server that does not parse its calls.
    let qwen =
        "```json\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"rust ownership\"}}\n```";
    let pieces = || {
        text_stream(&[
            "```json\n{\"name\": \"web_",
            "search\", \"arguments\": {\"query\": \"rust ownership\"}}\n```",
        ])
    };
    let server = Server::sequence(vec![pieces(), pieces()]).await;
    let c = client(&server.base_url);
    let mut req = question();
    req.tools = search_tools();
    let (r, _) = chat(&c, &req).await;
    let r = r.unwrap();
    assert_eq!(r.content, qwen, "the text is left as it was");
    assert_eq!(r.finish_reason, "stop");
    assert_eq!(r.tool_calls.len(), 1);
    let call = &r.tool_calls[0];
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("text-call-0", "web_search")
    );
    assert_eq!(call.kwargs(), Ok(json!({"query": "rust ownership"})));
    // Without tools offered, JSON in the answer is just the answer.
    let (r, _) = chat(&c, &question()).await;
    assert!(r.unwrap().tool_calls.is_empty());
}

#[tokio::test]
async fn a_looping_answer_is_cut_at_its_first_copy_and_no_longer_read() {
    let intro = "Rust ownership means each value has one owner. ";
    let sentence = "When the owner goes out of scope, the value is dropped. ";
    // The first copy, up to where the text starts repeating itself (its ". " matches the
    // end of the intro).
    let kept = "Rust ownership means each value has one owner. When the owner goes out of scope, the value is dropped";
    let mut pieces = vec![intro.to_string()];
    pieces.extend(std::iter::repeat_n(sentence.to_string(), 2000));
    let looping = Reply::Text(pieces);
    let whole = Reply::Whole(format!("{intro}{}", sentence.repeat(50)));
    let server = Server::sequence(vec![looping, whole]).await;
    let c = client(&server.base_url);
    let (r, deltas) = chat(&c, &question()).await;
    let r = r.unwrap();
    assert_eq!(r.content, kept);
    assert_eq!(r.finish_reason, FINISH_REPETITION);
    assert_eq!(r.attempts, 1);
    // It stopped reading after a few copies; the server sees the connection closed.
    assert!(deltas.len() <= 6, "read {} pieces", deltas.len());
    // The server sees the connection closed: the answer ends without its 2,000 pieces sent.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.in_flight() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream is still open after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        server.lines_sent() < 200,
        "{} of the 2,004 lines were sent",
        server.lines_sent()
    );
    // A whole answer that loops is cut the same way.
    let r = chat(&c, &question()).await.0.unwrap();
    assert_eq!(
        (r.content.as_str(), r.finish_reason.as_str()),
        (kept, FINISH_REPETITION)
    );
    assert_eq!(
        server.requests().len(),
        2,
        "a cut answer is not asked for again"
    );
}

#[tokio::test]
async fn a_prompt_too_long_for_the_context_is_reported_and_not_retried() {
    let cases = [
        // llama.cpp's llama-server.
        (
            400,
            json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192}}),
            "the request exceeds the available context size, try increasing it",
        ),
        // OpenAI.
        (
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        ),
        // vLLM.
        (
            400,
            json!({"object": "error", "message": "unused", "error": {"message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4488 in the messages, 512 in the completion).", "type": "BadRequestError", "code": 400}}),
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4488 in the messages, 512 in the completion).",
        ),
        // A proxy in front of a model, with the error as a plain string.
        (
            413,
            json!({"error": "prompt is too long: 9000 tokens > 8192 maximum"}),
            "prompt is too long: 9000 tokens > 8192 maximum",
        ),
    ];
    for (status, body, message) in cases {
        let server = Server::sequence(vec![Reply::Status(status, vec![], body)]).await;
        let mut req = question();
        req.response_format = Some(ResponseFormat {
            name: "plan".into(),
            schema: json!({"type": "object"}),
        });
        let err = chat(&client(&server.base_url), &req).await.0.unwrap_err();
        assert_eq!(
            err,
            LlmError::ContextExceeded {
                message: message.into()
            }
        );
        assert_eq!(server.requests().len(), 1, "{message}");
    }
    assert_eq!(
        LlmError::ContextExceeded {
            message: "n_ctx 8192".into()
        }
        .to_string(),
        "the conversation exceeds the model's context: n_ctx 8192"
    );
    // The same error in the stream, as some servers send it once streaming has begun.
    let server = Server::sequence(vec![Reply::Raw(vec![(
        2,
        json!({"error": {"message": "too many tokens in the prompt", "type": "invalid_request_error"}}).to_string(),
    )])])
    .await;
    let err = chat(&client(&server.base_url), &question())
        .await
        .0
        .unwrap_err();
    assert!(matches!(err, LlmError::ContextExceeded { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}
