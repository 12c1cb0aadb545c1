//! A scripted OpenAI-compatible server on loopback, for tests of anything that talks to a
//! model: each request to `/chat/completions` is answered by a function of the request (and
//! of how many came before), in the real streaming chunk format; every request is recorded
//! with the time it arrived.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Streamed text in these pieces, then `finish_reason: stop` and a usage chunk.
    Text(Vec<String>),
    /// Streamed tool calls `(id, name, argument pieces)`, all in one answer (parallel calls
    /// interleave their pieces), then `finish_reason: tool_calls` and a usage chunk.
    ToolCalls(Vec<(String, String, Vec<String>)>),
    /// Raw SSE `data:` payloads, each after its pause in milliseconds.
    Raw(Vec<(u64, String)>),
    /// A status with a JSON body and headers.
    Status(u16, Vec<(&'static str, String)>, Value),
    /// A whole, non-streamed completion with this text.
    Whole(String),
    /// The same reply, after a pause before the first byte.
    Delayed(u64, Box<Reply>),
}

impl Reply {
    pub fn text(t: &str) -> Reply {
        Reply::Text(vec![t.to_string()])
    }
    /// One tool call with its arguments in one piece.
    pub fn call(id: &str, name: &str, args: Value) -> Reply {
        Reply::ToolCalls(vec![(id.into(), name.into(), vec![args.to_string()])])
    }
}

/// Prompt and completion tokens every streamed answer reports.
pub const PROMPT_TOKENS: u64 = 100;
pub const COMPLETION_TOKENS: u64 = 20;

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub body: Value,
    pub authorization: Option<String>,
}

type Responder = dyn Fn(&Value, usize) -> Reply + Send + Sync;

struct Shared {
    respond: Box<Responder>,
    seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Stream lines (`data: ...`) handed to the connection, over all requests.
    lines_sent: AtomicUsize,
}

/// The running server. Dropping it leaves the server running until the test ends.
#[derive(Clone)]
pub struct Server {
    pub base_url: String,
    shared: Arc<Shared>,
}

impl Server {
    /// Starts a server answering each request with `respond(body, index)`.
    pub async fn start(respond: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static) -> Server {
        let shared = Arc::new(Shared {
            respond: Box::new(respond),
            seen: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            lines_sent: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("bound"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Server { base_url, shared }
    }

    /// Answers the requests with `replies`, in order (and fails a test that asks for more).
    pub async fn sequence(replies: Vec<Reply>) -> Server {
        let replies = Mutex::new(replies.into_iter());
        Server::start(move |_, i| {
            replies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .next()
                .unwrap_or_else(|| panic!("request {i} has no scripted reply"))
        })
        .await
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Requests being answered now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// How many streamed lines the server has handed to its connections: a client that stops
    /// reading early closes the connection, and the rest are never sent.
    pub fn lines_sent(&self) -> usize {
        self.shared.lines_sent.load(Ordering::SeqCst)
    }

    /// The most requests that were being answered at one time.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = {
        let mut seen = shared.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.push(Seen {
            at: Instant::now(),
            body: body.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
        seen.len() - 1
    };
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let open = Answering(shared.clone());
    let mut reply = (shared.respond)(&body, index);
    while let Reply::Delayed(ms, inner) = reply {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        reply = *inner;
    }
    render(reply, open)
}

/// A request being answered, until its last byte is sent (dropped with the body stream).
struct Answering(Arc<Shared>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A `chat.completion.chunk` as OpenAI streams it, sent 2 ms after the one before.
pub fn chunk(delta: Value, finish: Option<&str>) -> (u64, String) {
    let c = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "scripted-model", "choices": [{"index": 0, "delta": delta,
        "logprobs": null, "finish_reason": finish}]});
    (2, c.to_string())
}

/// The last chunk of a stream with `stream_options.include_usage`.
pub fn usage() -> (u64, String) {
    let c = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "scripted-model", "choices": [],
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                  "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}});
    (2, c.to_string())
}

/// The stream's end marker.
pub fn done() -> (u64, String) {
    (2, "[DONE]".into())
}

fn render(reply: Reply, open: Answering) -> Response {
    let lines = match reply {
        Reply::Status(code, headers, body) => {
            let mut b = Response::builder()
                .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
            for (k, v) in headers {
                b = b.header(k, v);
            }
            return b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap_or_default();
        }
        Reply::Whole(text) => {
            let v = json!({"id": "x", "object": "chat.completion", "model": "scripted-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}});
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string()))
                .unwrap_or_default();
        }
        Reply::Raw(lines) => lines,
        Reply::Text(parts) => {
            let mut lines = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
            lines.extend(parts.iter().map(|p| chunk(json!({"content": p}), None)));
            lines.push(chunk(json!({}), Some("stop")));
            lines.push(usage());
            lines.push(done());
            lines
        }
        Reply::ToolCalls(calls) => {
            let mut lines = vec![chunk(json!({"role": "assistant", "content": null}), None)];
            for (i, (id, name, _)) in calls.iter().enumerate() {
                lines.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
            }
            let longest = calls.iter().map(|c| c.2.len()).max().unwrap_or(0);
            for piece in 0..longest {
                for (i, (_, _, args)) in calls.iter().enumerate() {
                    if let Some(a) = args.get(piece) {
                        lines.push(chunk(
                            json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}),
                            None,
                        ));
                    }
                }
            }
            lines.push(chunk(json!({}), Some("tool_calls")));
            lines.push(usage());
            lines.push(done());
            lines
        }
        Reply::Delayed(..) => unreachable!("unwrapped before rendering"),
    };
    // `open` lives as long as the stream: the request counts as in flight until its end.
    let stream =
        futures_util::stream::unfold((lines.into_iter(), open), |(mut it, open)| async move {
            let (pause, data) = it.next()?;
            tokio::time::sleep(Duration::from_millis(pause)).await;
            open.0.lines_sent.fetch_add(1, Ordering::SeqCst);
            Some((
                Ok::<_, std::convert::Infallible>(format!("data: {data}\n\n")),
                (it, open),
            ))
        });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}
