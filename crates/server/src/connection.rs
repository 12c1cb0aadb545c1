//! One accepted HTTP/1 connection: its event-stream requests answered here, everything else
//! by hyper.
//!
//! Why: an event stream is a connection that stays open for as long as its run lasts, mostly
//! idle (10,000 readers parked at an approval gate is a case we serve). hyper keeps two 8 KiB
//! buffers for every connection's life, to read requests and to write response heads, with no
//! setting to shrink them: 16 KiB of the ~20 kB a parked reader held, 160 MB for 10,000. Here a
//! stream holds no buffer while it waits; its request head is read in a buffer dropped once
//! parsed, and each event is written as it comes.
//!
//! What is answered here is narrow on purpose: an HTTP/1.1 or HTTP/1.0 `GET` of a run's events
//! (`/events/{id}`, also under `/deployments/{name}`), with no body, whose head came in one
//! piece. It goes through the same router as any request (auth, CORS, errors), and only its
//! response is written here: with its known length, else chunked (HTTP/1.0: until the
//! connection closes). Anything else (another route, a body, a head split across reads, a head
//! larger than [`HEAD_PEEK`]) is left unread in the socket and the connection handed to hyper,
//! which serves it and what follows. After a stream ends, the connection is kept for the
//! client's next request, answered here again or by hyper. So a stream on a connection that
//! served another request first (a browser's pooled one, say) is hyper's, as before.

use std::io;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, HttpBody as _};
use axum::http::{self, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use futures_util::FutureExt as _;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt as _;

/// The most of a request head looked at before deciding who answers it. An event-stream
/// request is a few hundred bytes; a larger head (many cookies) is hyper's to read.
const HEAD_PEEK: usize = 4096;

/// Headers parsed in a head; a request with more is hyper's.
const MAX_HEADERS: usize = 48;

/// How long one write may wait for a client that reads nothing before the connection is
/// dropped (its stream ends; the client reconnects with `Last-Event-ID` when it wakes).
const WRITE_LIMIT: Duration = Duration::from_secs(30);

/// Serves `tcp` until the client closes it, it fails, or `stop` turns true (then the response
/// in flight is finished and nothing more is read).
pub(crate) async fn serve(
    tcp: TcpStream,
    app: Router,
    http: hyper::server::conn::http1::Builder,
    mut stop: watch::Receiver<bool>,
) {
    // Bounded by the client's requests; each pass answers one.
    loop {
        match next_request(&tcp, &mut stop).await {
            Next::Closed => return,
            Next::Hyper => break,
            Next::Stream(req, keep_alive) => {
                let http10 = req.version() == http::Version::HTTP_10;
                // Boxed: the router's future is large and needed only until the response
                // head; unboxed it would stay in this task's state for the stream's life.
                let response = match Box::pin(app.clone().oneshot(*req)).await {
                    Ok(response) => response,
                    Err(infallible) => match infallible {},
                };
                if !respond(&tcp, response, keep_alive, http10).await || *stop.borrow() {
                    return;
                }
            }
        }
    }
    // Boxed for the same reason: a connection streamed here never holds hyper's state.
    Box::pin(serve_with_hyper(tcp, app, http, stop)).await;
}

async fn serve_with_hyper(
    tcp: TcpStream,
    app: Router,
    http: hyper::server::conn::http1::Builder,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper_util::service::TowerToHyperService::new(app);
    let connection = http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = stopping(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended {
        tracing::trace!(error = %e, "connection ended with an error");
    }
}

/// Resolves once the server stops (or is gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Who answers the next request on a connection.
enum Next {
    /// An event-stream request, read from the socket: answered here. With whether the
    /// connection stays open after it.
    Stream(Box<Request<Body>>, bool),
    /// Anything else, left unread: hyper's.
    Hyper,
    /// The client closed the connection, or the server is stopping.
    Closed,
}

/// Waits for the next request's head and decides who answers it, by looking at it without
/// taking it from the socket; only an event-stream request's head is then read.
async fn next_request(tcp: &TcpStream, stop: &mut watch::Receiver<bool>) -> Next {
    // Bounded by the client: each pass waits for the socket to be readable, and a readiness
    // that turns out stale (tokio keeps it after a read that emptied the socket) is cleared
    // by the look that finds nothing, so the next wait is a real one.
    loop {
        tokio::select! {
            ready = tcp.readable() => if ready.is_err() { return Next::Closed },
            () = stopping(stop) => return Next::Closed,
        }
        let mut one = [0u8; 1];
        match tcp.peek(&mut one).now_or_never() {
            Some(Ok(0) | Err(_)) => return Next::Closed,
            Some(Ok(_)) => break,
            None => {}
        }
    }
    // Allocated once the head is there, dropped once it is parsed: an idle connection holds
    // no buffer.
    let mut buf = vec![0u8; HEAD_PEEK];
    let seen = match tcp.peek(&mut buf).now_or_never() {
        Some(Ok(n)) if n > 0 => n,
        _ => return Next::Closed,
    };
    let Some((req, keep_alive, head_len)) = stream_request(&buf[..seen]) else {
        return Next::Hyper;
    };
    drop(buf);
    match discard(tcp, head_len).await {
        Ok(()) => Next::Stream(Box::new(req), keep_alive),
        Err(_) => Next::Closed,
    }
}

/// The request in `bytes` if it is a complete event-stream request this module answers: with
/// whether the connection stays open after it, and the length of its head.
fn stream_request(bytes: &[u8]) -> Option<(Request<Body>, bool, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head_len) = parsed.parse(bytes).ok()? else {
        return None;
    };
    // HTTP/1.0 too: what a proxy such as nginx speaks to its upstream unless told otherwise.
    let http10 = match (parsed.method, parsed.version) {
        (Some("GET"), Some(1)) => false,
        (Some("GET"), Some(0)) => true,
        _ => return None,
    };
    let target = parsed.path?;
    if !is_event_stream(target) {
        return None;
    }
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(target)
        .version(if http10 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        });
    // An HTTP/1.0 connection is closed after its response (its body may be delimited by the
    // close); an HTTP/1.1 one is kept unless the client asks otherwise.
    let mut keep_alive = !http10;
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        if name == header::CONTENT_LENGTH {
            // A body on a GET, however unusual, is for hyper to read.
            if value.as_bytes() != b"0" {
                return None;
            }
        } else if name == header::TRANSFER_ENCODING || name == header::UPGRADE {
            return None;
        } else if name == header::CONNECTION {
            keep_alive &= !value
                .to_str()
                .ok()?
                .split(',')
                .any(|o| o.trim().eq_ignore_ascii_case("close"));
        }
        req = req.header(name, value);
    }
    Some((req.body(Body::empty()).ok()?, keep_alive, head_len))
}

/// `/events/{id}` or `/deployments/{name}/events/{id}`, with any query.
fn is_event_stream(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let rest = match path.strip_prefix("/deployments/") {
        Some(rest) => match rest.split_once('/') {
            Some((name, rest)) if !name.is_empty() => rest,
            _ => return false,
        },
        None => path.strip_prefix('/').unwrap_or(path),
    };
    rest.strip_prefix("events/")
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Reads and drops `len` bytes already seen in the socket (a request's head).
async fn discard(tcp: &TcpStream, mut len: usize) -> io::Result<()> {
    let mut sink = [0u8; 512];
    // Bounded by `len`: each pass takes at least one byte or fails.
    while len > 0 {
        tcp.readable().await?;
        let want = len.min(sink.len());
        match tcp.try_read(&mut sink[..want]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => len -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How a response's body is delimited on the wire.
enum Framing {
    /// No body (204, 304).
    None,
    /// `Content-Length`: this many bytes are left to write.
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0, length unknown).
    Close,
}

/// Writes `response` to the client; whether the connection may serve another request after.
/// A client that goes away meanwhile ends it at once (its stream is dropped, and with it the
/// run's follower), not at the next event or heartbeat.
async fn respond(
    tcp: &TcpStream,
    response: Response<Body>,
    mut keep_alive: bool,
    http10: bool,
) -> bool {
    let (parts, mut body) = response.into_parts();
    // Never sent as a final answer; should the router give one, the connection ends with it.
    keep_alive &= !parts.status.is_informational();
    let bodiless = parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    // A length the router declared, if it declared one clearly (copies that disagree, or one
    // that is not a number, are dropped and the body is framed by what it is).
    let mut declared = parts.headers.get_all(header::CONTENT_LENGTH).iter();
    let declared_length = declared
        .next()
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .filter(|first| {
            declared.all(|v| v.to_str().ok().and_then(|v| v.trim().parse().ok()) == Some(*first))
        });
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONNECTION {
            // The router's own close (hyper honours it too).
            keep_alive &= !value
                .to_str()
                .is_ok_and(|v| v.split(',').any(|o| o.trim().eq_ignore_ascii_case("close")));
            continue;
        }
        if name == header::TRANSFER_ENCODING || name == header::CONTENT_LENGTH {
            continue;
        }
        push_header(&mut head, name.as_str(), value.as_bytes());
    }
    if !parts.headers.contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(SystemTime::now());
        push_header(&mut head, "date", date.as_bytes());
    }
    let mut framing = if bodiless {
        Framing::None
    } else if let Some(len) = declared_length.or_else(|| body.size_hint().exact()) {
        push_header(&mut head, "content-length", len.to_string().as_bytes());
        Framing::Length(len)
    } else if http10 {
        keep_alive = false;
        Framing::Close
    } else {
        push_header(&mut head, "transfer-encoding", b"chunked");
        Framing::Chunked
    };
    if !keep_alive {
        push_header(&mut head, "connection", b"close");
    }
    head.extend_from_slice(b"\r\n");
    if write_all(tcp, &head).await.is_err() {
        return false;
    }
    drop(head);
    if matches!(framing, Framing::None) {
        return keep_alive;
    }
    // Whether to look for the client closing: not once it has sent its next request, whose
    // bytes wait in the socket for this response to end.
    let mut watch_client = true;
    // Bounded by the body, which ends with its run's stream (or the server's closing).
    loop {
        let frame = tokio::select! {
            frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)) => frame,
            ready = tcp.readable(), if watch_client => {
                if ready.is_err() {
                    return false;
                }
                // A client that half-closes is taken as gone, as hyper takes it.
                let mut one = [0u8; 1];
                match tcp.peek(&mut one).now_or_never() {
                    Some(Ok(0) | Err(_)) => return false,
                    Some(Ok(_)) => watch_client = false,
                    // Nothing there (the readiness was stale, and is cleared now) or this
                    // task's budget ran out: wait again.
                    None => {}
                }
                continue;
            }
        };
        let data = match frame {
            None => break,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed; connection closed");
                return false;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                // Trailers, or an empty chunk (which would read as the body's end).
                _ => continue,
            },
        };
        let written = match &mut framing {
            Framing::Chunked => {
                let mut chunk = Vec::with_capacity(data.len() + 16);
                chunk.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                chunk.extend_from_slice(&data);
                chunk.extend_from_slice(b"\r\n");
                write_all(tcp, &chunk).await
            }
            Framing::Length(left) => {
                // Never more than declared: what follows would be read as another response.
                let take = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= take as u64;
                let written = write_all(tcp, &data[..take]).await;
                if take < data.len() {
                    tracing::warn!(
                        "response body longer than its content-length; connection closed"
                    );
                    return false;
                }
                written
            }
            Framing::Close | Framing::None => write_all(tcp, &data).await,
        };
        if written.is_err() {
            return false;
        }
    }
    match framing {
        Framing::Chunked => write_all(tcp, b"0\r\n\r\n").await.is_ok() && keep_alive,
        // Short of its declared length: the client can only tell by the connection closing.
        Framing::Length(left) if left > 0 => {
            tracing::warn!("response body shorter than its content-length; connection closed");
            false
        }
        Framing::Length(_) => keep_alive,
        Framing::Close | Framing::None => false,
    }
}

fn push_header(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Writes all of `bytes`, or fails if the client takes none of them for [`WRITE_LIMIT`].
async fn write_all(tcp: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    // Bounded by `bytes`: each pass writes some, or waits at most the limit. The socket is
    // tried first: it mostly has room, and a timer armed for every event or heartbeat of
    // 10,000 streams costs more than the write.
    while !bytes.is_empty() {
        match tcp.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(WRITE_LIMIT, tcp.writable())
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_stream_targets() {
        for yes in [
            "/events/abc",
            "/events/abc?sse=true&after_sequence=3",
            "/deployments/default/events/abc",
            "/deployments/x/events/abc?api_key=k",
        ] {
            assert!(is_event_stream(yes), "{yes}");
        }
        for no in [
            "/events/",
            "/events/abc/more",
            "/events",
            "/workflows/research/events",
            "/deployments//events/abc",
            "/deployments/x/workflows/y/events",
            "/eventsabc",
            "*",
        ] {
            assert!(!is_event_stream(no), "{no}");
        }
    }

    #[test]
    fn only_whole_bodiless_http11_gets_of_a_stream_are_taken() {
        let taken = |head: &str| stream_request(head.as_bytes()).map(|(_, keep, len)| (keep, len));
        let get =
            "GET /events/r1?sse=true HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
        assert_eq!(taken(get), Some((true, get.len())));
        // The head's length, not what follows it (a pipelined request stays in the socket).
        assert_eq!(
            taken(&format!("{get}GET /health HTTP/1.1\r\n\r\n")),
            Some((true, get.len()))
        );
        assert_eq!(
            taken("GET /events/r1 HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n"),
            Some((false, 58))
        );
        // HTTP/1.0: closed after.
        let http10 = "GET /events/r1 HTTP/1.0\r\n\r\n";
        assert_eq!(taken(http10), Some((false, http10.len())));
        for left in [
            "GET /events/r1 HTTP/1.1\r\nHost: x\r\n",
            "get /events/r1 HTTP/1.1\r\n\r\n",
            "HEAD /events/r1 HTTP/1.1\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
            "POST /events/r1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            "GET /events/r1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            "GET /events/r1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            "GET /handlers/r1 HTTP/1.1\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nBad Header: x\r\n\r\n",
            &format!(
                "GET /events/r1 HTTP/1.1\r\n{}\r\n",
                "X: y\r\n".repeat(MAX_HEADERS + 1)
            ),
        ] {
            assert_eq!(taken(left), None, "{left:?}");
        }
    }

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const DEADLINE: Duration = Duration::from_secs(10);

    /// `crate::serve` on loopback with `app`; its address, the switch that stops it, and the
    /// task that ends when it has returned.
    async fn served(
        app: Router,
    ) -> (
        String,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crate::serve(listener, app, async move {
            let _ = stopped.await;
        }));
        (addr, stop, task)
    }

    /// Sends `request` on a new connection and reads until the server closes it.
    async fn exchange(addr: &str, request: &str) -> String {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(DEADLINE, conn.read_to_end(&mut got))
            .await
            .expect("the server closed the connection")
            .unwrap();
        String::from_utf8(got).unwrap()
    }

    /// Reads from `conn` until what was read holds `needle`; all of it.
    async fn read_until(conn: &mut TcpStream, got: &mut String, needle: &str) {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(DEADLINE, async {
            while !got.contains(needle) {
                let n = conn.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before {needle:?}; read {got:?}");
                got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {needle:?} in time; read {got:?}"));
    }

    fn body_of(response: &str) -> &str {
        response.split_once("\r\n\r\n").expect("a head").1
    }

    fn framing_app() -> Router {
        let chunks = || {
            let parts = ["a", "", "bc"].map(|p| Ok::<_, io::Error>(axum::body::Bytes::from(p)));
            Body::from_stream(futures_util::stream::iter(parts))
        };
        Router::new()
            .route("/events/chunks", get(move || async move { chunks() }))
            .route(
                "/events/long",
                get(|| async { ([(header::CONTENT_LENGTH, "5")], "hello world") }),
            )
            .route(
                "/events/short",
                get(|| async {
                    let parts = [Ok::<_, io::Error>(axum::body::Bytes::from("hi"))];
                    let body = Body::from_stream(futures_util::stream::iter(parts));
                    ([(header::CONTENT_LENGTH, "10")], body)
                }),
            )
            .route(
                "/events/close",
                get(|| async { ([(header::CONNECTION, "close")], "x") }),
            )
            .route("/events/nothing", get(|| async { StatusCode::NO_CONTENT }))
    }

    #[tokio::test]
    async fn responses_are_framed_as_http_11_wants() {
        let (addr, _stop, _task) = served(framing_app()).await;
        let req = |path: &str, version: &str| {
            format!("GET {path} {version}\r\nHost: x\r\nConnection: close\r\n\r\n")
        };
        // Chunked, an empty part skipped (it would read as the end).
        let r = exchange(&addr, &req("/events/chunks", "HTTP/1.1")).await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("\r\ntransfer-encoding: chunked\r\n"), "{r}");
        assert!(r.contains("\r\ndate: "), "{r}");
        assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
        assert_eq!(body_of(&r), "1\r\na\r\n2\r\nbc\r\n0\r\n\r\n");
        // HTTP/1.0 has no chunks: the body ends with the connection.
        let r = exchange(&addr, &req("/events/chunks", "HTTP/1.0")).await;
        assert!(!r.contains("transfer-encoding"), "{r}");
        assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
        assert_eq!(body_of(&r), "abc");
        // A declared length is kept: never more on the wire, and a short body closes.
        let r = exchange(&addr, &req("/events/long", "HTTP/1.1")).await;
        assert_eq!(r.matches("content-length").count(), 1, "{r}");
        assert!(r.contains("\r\ncontent-length: 5\r\n"), "{r}");
        assert_eq!(body_of(&r), "hello");
        let r = exchange(&addr, &req("/events/short", "HTTP/1.1")).await;
        assert!(r.contains("\r\ncontent-length: 10\r\n"), "{r}");
        assert_eq!(body_of(&r), "hi");
        // 204: neither a length nor chunks.
        let r = exchange(&addr, &req("/events/nothing", "HTTP/1.1")).await;
        assert!(r.starts_with("HTTP/1.1 204 No Content\r\n"), "{r}");
        assert!(
            !r.contains("content-length") && !r.contains("transfer-encoding"),
            "{r}"
        );
        assert_eq!(body_of(&r), "");
        // The router's own `Connection: close` closes the connection the client would keep.
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        conn.write_all(b"GET /events/close HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(DEADLINE, conn.read_to_end(&mut got))
            .await
            .expect("closed by the server")
            .unwrap();
        let r = String::from_utf8(got).unwrap();
        assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
        assert_eq!(body_of(&r), "x");
    }

    #[tokio::test]
    async fn a_request_sent_while_a_stream_is_open_is_answered_after_it() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, io::Error>>(4);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
        let app = framing_app().route(
            "/events/live",
            get(move || {
                let rx = rx.lock().unwrap().take().expect("asked once");
                async move { Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)) }
            }),
        );
        let (addr, _stop, _task) = served(app).await;
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        conn.write_all(b"GET /events/live HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = String::new();
        read_until(&mut conn, &mut got, "\r\n\r\n").await;
        assert!(got.contains("transfer-encoding: chunked"), "{got}");
        // The next request, sent while the stream is open, waits in the socket for it.
        conn.write_all(b"GET /events/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tx.send(Ok("one".into())).await.unwrap();
        read_until(&mut conn, &mut got, "3\r\none\r\n").await;
        assert!(
            !got.contains("204"),
            "answered before the stream ended: {got}"
        );
        drop(tx);
        read_until(&mut conn, &mut got, "HTTP/1.1 204 No Content\r\n").await;
        let (stream, _) = got.split_once("HTTP/1.1 204").unwrap();
        assert!(stream.ends_with("3\r\none\r\n0\r\n\r\n"), "{got}");
        let mut next = got.split_once("HTTP/1.1 204").unwrap().1.to_string();
        read_until(&mut conn, &mut next, "\r\n\r\n").await;
        assert!(!next.contains("connection: close"), "kept: {next}");
    }

    #[tokio::test]
    async fn stopping_is_not_held_up_by_idle_connections() {
        let app = framing_app().route("/other", get(|| async { "other" }));
        let (addr, stop, task) = served(app).await;
        // Idle before any request; after a 204 written here; after a request hyper served.
        let before = TcpStream::connect(&addr).await.unwrap();
        let mut after_ours = TcpStream::connect(&addr).await.unwrap();
        after_ours
            .write_all(b"GET /events/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        read_until(&mut after_ours, &mut String::new(), "\r\n\r\n").await;
        let mut after_hyper = TcpStream::connect(&addr).await.unwrap();
        after_hyper
            .write_all(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        read_until(&mut after_hyper, &mut String::new(), "other").await;
        stop.send(()).unwrap();
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("serve returned with the connections idle")
            .unwrap();
        for (what, mut conn) in [
            ("before", before),
            ("after ours", after_ours),
            ("after hyper", after_hyper),
        ] {
            let mut rest = Vec::new();
            tokio::time::timeout(DEADLINE, conn.read_to_end(&mut rest))
                .await
                .unwrap_or_else(|_| panic!("{what}: closed"))
                .unwrap();
            assert!(rest.is_empty(), "{what}: {rest:?}");
        }
    }
}
