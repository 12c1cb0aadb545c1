//! One accepted HTTP/1 connection, its requests answered here, and the odd ones by hyper.
//!
//! Why: hyper keeps two 8 KiB buffers for every connection's life, to read requests and to
//! write response heads, with no setting to shrink them. An event stream is a connection that
//! stays open as long as its run lasts, mostly idle (10,000 readers parked at an approval gate
//! is a case we serve): those buffers were 16 KiB of the ~20 kB a parked reader held, 160 MB
//! for 10,000. Here a connection holds no buffer between requests or while a stream waits; a
//! request's head is read in a buffer dropped once parsed, and a response is written as its
//! body comes.
//!
//! Answered here: HTTP/1.1 and HTTP/1.0 requests (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`,
//! `OPTIONS`) whose head came in one piece within [`HEAD_PEEK`] bytes, with no body or one of
//! at most [`MAX_BODY`] bytes by `Content-Length`. A client's usual flow (start a run, then
//! follow its stream on the same connection) stays here throughout. Every request goes
//! through the same router (auth, CORS, limits, errors); only the HTTP/1 framing is done here:
//! a response with its known length, else chunked (HTTP/1.0: until the connection closes).
//! Anything else (`HEAD`, `Transfer-Encoding`, `Expect`, `Upgrade`, a larger body, a head
//! split across reads, a target or `Content-Length` this parser does not take) is left unread
//! in the socket and the connection handed to hyper, which serves (or refuses) it and the rest
//! of the connection.

use std::io;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, HttpBody as _};
use axum::http::{self, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use futures_util::FutureExt as _;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt as _;

/// The most of a request head looked at before deciding who answers it. This API's requests
/// are a few hundred bytes; a larger head (many cookies) is hyper's to read.
const HEAD_PEEK: usize = 4096;

/// The longest response body written in one write with its head, when it is at hand.
const WITH_HEAD: u64 = 16 * 1024;

/// The largest request body read here (this API's JSON requests are well under it); a larger
/// one is hyper's, which hands it to the router as it comes (and the router refuses one over
/// the server's body limit before it is read).
const MAX_BODY: u64 = 64 * 1024;

/// How long a read of a request's head or body may wait for the client.
const READ_LIMIT: Duration = Duration::from_secs(30);

/// How long a request's body may take to arrive in all.
const BODY_LIMIT: Duration = Duration::from_secs(60);

/// The most of a body taken from the socket at a time: a body is held as it comes, not
/// allocated whole from the length its head declares.
const BODY_STEP: usize = 8 * 1024;

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
        // Boxed: its state (a head being read) is not needed while a response is written.
        match Box::pin(next_request(&tcp, &mut stop)).await {
            Next::Closed => return,
            Next::Hyper => break,
            Next::Ours(req, keep_alive) => {
                let http10 = req.version() == http::Version::HTTP_10;
                // Boxed: the router's future is large and needed only until the response
                // head; unboxed it would stay in this task's state for a stream's life.
                let response = match Box::pin(app.clone().oneshot(*req)).await {
                    Ok(response) => response,
                    Err(infallible) => match infallible {},
                };
                // A server stopping says so, and takes no next request on this connection.
                let keep_alive = keep_alive && !*stop.borrow();
                if !respond(&tcp, response, keep_alive, http10).await || *stop.borrow() {
                    return;
                }
            }
        }
    }
    // Boxed for the same reason: a connection served here never holds hyper's state.
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
    /// A request read from the socket, its body too: answered here. With whether the
    /// connection stays open after it.
    Ours(Box<Request<Body>>, bool),
    /// Anything else, left unread: hyper's.
    Hyper,
    /// The client closed the connection, or the server is stopping.
    Closed,
}

/// Waits for the next request's head and decides who answers it, by looking at it without
/// taking it from the socket; only a request answered here is then read, body and all.
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
    // At once: the socket holds bytes (awaited, not polled once: a task out of its budget
    // would see nothing there).
    let seen = tokio::select! {
        seen = tcp.peek(&mut buf) => match seen {
            Ok(n) if n > 0 => n,
            _ => return Next::Closed,
        },
        () = stopping(stop) => return Next::Closed,
    };
    let Some(head) = parse_head(&buf[..seen]) else {
        return Next::Hyper;
    };
    // The head is taken from the socket (it is there: it was just seen), then the body.
    if Box::pin(read_exactly(tcp, &mut buf[..head.len]))
        .await
        .is_err()
    {
        return Next::Closed;
    }
    drop(buf);
    let body = if head.body_len == 0 {
        Body::empty()
    } else {
        // One deadline for the whole body, and none of it kept past the server stopping.
        let body = Box::pin(tokio::time::timeout(
            BODY_LIMIT,
            read_body(tcp, head.body_len),
        ));
        tokio::select! {
            body = body => match body {
                Ok(Ok(body)) => Body::from(body),
                _ => return Next::Closed,
            },
            () = stopping(stop) => return Next::Closed,
        }
    };
    match head.request.body(body) {
        Ok(req) => Next::Ours(Box::new(req), head.keep_alive),
        // Not reached: every part was checked in `parse_head`. The head is read, so the
        // connection cannot be handed on.
        Err(e) => {
            tracing::warn!(error = %e, "request head accepted but not buildable; connection closed");
            Next::Closed
        }
    }
}

/// A request head answered here.
struct Head {
    request: http::request::Builder,
    keep_alive: bool,
    /// The head's length in bytes.
    len: usize,
    body_len: usize,
}

/// The head at the start of `bytes`, if it is whole and its request is one answered here.
fn parse_head(bytes: &[u8]) -> Option<Head> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = parsed.parse(bytes).ok()? else {
        return None;
    };
    let method = match parsed.method? {
        "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        "OPTIONS" => Method::OPTIONS,
        // HEAD (a GET's head with no body), CONNECT, TRACE, anything else: hyper's.
        _ => return None,
    };
    // HTTP/1.0 too: what a proxy such as nginx speaks to its upstream unless told otherwise.
    let http10 = match parsed.version? {
        1 => false,
        0 => true,
        _ => return None,
    };
    // A target `http` does not take (`<`, a relative path) is hyper's to refuse, unread.
    let uri = http::Uri::try_from(parsed.path?).ok()?;
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .version(if http10 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        });
    let (mut close, mut keep) = (false, false);
    let mut body_len: Option<u64> = None;
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        if name == header::CONTENT_LENGTH {
            // Copies must agree (else hyper refuses the request); a larger body is hyper's.
            // Digits only, as RFC 9110 has it (`u64` parsing would also take a `+`).
            let digits = value.as_bytes();
            if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n = value.to_str().ok()?.parse::<u64>().ok()?;
            if body_len.is_some_and(|first| first != n) || n > MAX_BODY {
                return None;
            }
            // A copy that agrees (`16` after `016`) is dropped, as hyper drops it: the router
            // sees the one header it would see behind hyper.
            if body_len.replace(n).is_some() {
                continue;
            }
        } else if name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::EXPECT
        {
            return None;
        } else if name == header::CONNECTION {
            close |= has_token(&value, "close");
            keep |= has_token(&value, "keep-alive");
        }
        request = request.header(name, value);
    }
    Some(Head {
        request,
        // An HTTP/1.1 connection is kept unless the client asks otherwise; an HTTP/1.0 one
        // only if it asks (and the response's length is known: see `respond`).
        keep_alive: !close && (!http10 || keep),
        len,
        body_len: usize::try_from(body_len.unwrap_or(0)).ok()?,
    })
}

/// Fills `buf` from the socket, or fails if the client sends nothing for [`READ_LIMIT`] or
/// closes first.
async fn read_exactly(tcp: &TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let len = buf.len();
    transfer(
        len,
        |done| tcp.try_read(&mut buf[done..]),
        || tokio::time::timeout(READ_LIMIT, tcp.readable()),
        io::ErrorKind::UnexpectedEof,
    )
    .await
}

/// Reads a body of `len` bytes, growing it as it comes (each read waits at most
/// [`READ_LIMIT`]).
async fn read_body(tcp: &TcpStream, len: usize) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    transfer(
        len,
        |done| {
            body.resize(done + (len - done).min(BODY_STEP), 0);
            let read = tcp.try_read(&mut body[done..]);
            body.truncate(done + read.as_ref().map_or(0, |n| *n));
            read
        },
        || tokio::time::timeout(READ_LIMIT, tcp.readable()),
        io::ErrorKind::UnexpectedEof,
    )
    .await?;
    Ok(body)
}

/// Moves `len` bytes with `step` (a read or write from the offset done so far, which returns
/// how many it moved), waiting with `ready` whenever the socket would block; `stalled` is the
/// error for a step that moves nothing (the other side closed).
async fn transfer<F>(
    len: usize,
    mut step: impl FnMut(usize) -> io::Result<usize>,
    ready: impl Fn() -> tokio::time::Timeout<F>,
    stalled: io::ErrorKind,
) -> io::Result<()>
where
    F: std::future::Future<Output = io::Result<()>>,
{
    let mut done = 0;
    // Bounded by `len`: each pass moves some, or waits at most the limit of `ready`.
    while done < len {
        match step(done) {
            Ok(0) => return Err(stalled.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                ready()
                    .await
                    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            }
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
            keep_alive &= !has_token(value, "close");
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
    } else if http10 {
        // HTTP/1.0 closes unless told otherwise.
        push_header(&mut head, "connection", b"keep-alive");
    }
    head.extend_from_slice(b"\r\n");
    // Not kept past here: what is held across the writes below is in every stream's task.
    drop(parts);
    // A short body already at hand goes out with the head, in one write (one packet for most
    // JSON answers); what it was not is polled below.
    let mut pending = None;
    if let Framing::Length(left) = &mut framing
        && *left <= WITH_HEAD
    {
        match std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).now_or_never()
        {
            Some(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    let (within, over) = within_length(&data, left);
                    head.extend_from_slice(within);
                    if over {
                        let _ = Box::pin(write_all(tcp, &head)).await;
                        return false;
                    }
                }
                Err(frame) => pending = Some(Some(Ok(frame))),
            },
            polled => pending = polled,
        }
    }
    if Box::pin(write_all(tcp, &head)).await.is_err() {
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
        let frame = match pending.take() {
            Some(frame) => frame,
            None => tokio::select! {
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
            },
        };
        // Boxed, as the other writes here: a write's state (a deadline among it) is needed
        // only while it lasts, and unboxed it would be in every connection's task for life.
        match Box::pin(write_frame(tcp, frame, &mut framing)).await {
            Sent::More => {}
            Sent::End => break,
            Sent::Failed => return false,
        }
    }
    match framing {
        Framing::Chunked => Box::pin(write_all(tcp, b"0\r\n\r\n")).await.is_ok() && keep_alive,
        // Short of its declared length: the client can only tell by the connection closing.
        Framing::Length(left) if left > 0 => {
            tracing::warn!("response body shorter than its content-length; connection closed");
            false
        }
        Framing::Length(_) => keep_alive,
        Framing::Close | Framing::None => false,
    }
}

/// What became of a frame of a response body.
enum Sent {
    /// Written (or nothing to write); more may come.
    More,
    /// The body ended.
    End,
    /// The body failed, was longer than declared, or the client could not be written to:
    /// the connection is done.
    Failed,
}

/// Writes one polled frame of a response body as `framing` has it.
async fn write_frame(
    tcp: &TcpStream,
    frame: Option<Result<hyper::body::Frame<axum::body::Bytes>, axum::Error>>,
    framing: &mut Framing,
) -> Sent {
    let data = match frame {
        None => return Sent::End,
        Some(Err(e)) => {
            tracing::debug!(error = %e, "response body failed; connection closed");
            return Sent::Failed;
        }
        Some(Ok(frame)) => match frame.into_data() {
            Ok(data) if !data.is_empty() => data,
            // Trailers, or an empty chunk (which would read as the body's end).
            _ => return Sent::More,
        },
    };
    let written = match framing {
        Framing::Chunked => {
            let mut chunk = Vec::with_capacity(data.len() + 16);
            chunk.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            chunk.extend_from_slice(&data);
            chunk.extend_from_slice(b"\r\n");
            write_all(tcp, &chunk).await
        }
        Framing::Length(left) => {
            let (within, over) = within_length(&data, left);
            let written = write_all(tcp, within).await;
            if over {
                return Sent::Failed;
            }
            written
        }
        Framing::Close | Framing::None => write_all(tcp, &data).await,
    };
    if written.is_err() {
        return Sent::Failed;
    }
    Sent::More
}

/// The part of `data` within the `left` bytes a declared length still allows (taken from
/// it), and whether `data` went over: never more is written than declared, as what follows
/// would be read as another response, and a body that goes over ends its connection.
fn within_length<'d>(data: &'d [u8], left: &mut u64) -> (&'d [u8], bool) {
    let take = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
    *left -= take as u64;
    let over = take < data.len();
    if over {
        tracing::warn!("response body longer than its content-length; connection closed");
    }
    (&data[..take], over)
}

/// Whether a `Connection` header lists `token`.
fn has_token(value: &HeaderValue, token: &str) -> bool {
    value
        .to_str()
        .is_ok_and(|v| v.split(',').any(|o| o.trim().eq_ignore_ascii_case(token)))
}

fn push_header(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Writes all of `bytes`, or fails if the client takes none of them for [`WRITE_LIMIT`]. The
/// socket is tried first: it mostly has room, and a timer armed for every event or heartbeat
/// of 10,000 streams costs more than the write.
async fn write_all(tcp: &TcpStream, bytes: &[u8]) -> io::Result<()> {
    transfer(
        bytes.len(),
        |done| tcp.try_write(&bytes[done..]),
        || tokio::time::timeout(WRITE_LIMIT, tcp.writable()),
        io::ErrorKind::WriteZero,
    )
    .await
}

#[cfg(test)]
mod head_fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_requests_are_answered_here() {
        let taken =
            |head: &str| parse_head(head.as_bytes()).map(|h| (h.keep_alive, h.len, h.body_len));
        let get =
            "GET /events/r1?sse=true HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
        assert_eq!(taken(get), Some((true, get.len(), 0)));
        // The head's length, not what follows it (a pipelined request stays in the socket).
        assert_eq!(
            taken(&format!("{get}GET /health HTTP/1.1\r\n\r\n")),
            Some((true, get.len(), 0))
        );
        let close = "GET /handlers HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n";
        assert_eq!(taken(close), Some((false, close.len(), 0)));
        // HTTP/1.0: closed after, unless it asks to keep the connection.
        let http10 = "GET /events/r1 HTTP/1.0\r\n\r\n";
        assert_eq!(taken(http10), Some((false, http10.len(), 0)));
        let kept = "GET /handlers HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
        assert_eq!(taken(kept), Some((true, kept.len(), 0)));
        // A body by its length, read after the head (whether or not it came with it).
        let post = "POST /workflows/w/run-nowait HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(taken(&format!("{post}{{}}")), Some((true, post.len(), 2)));
        assert_eq!(taken(post), Some((true, post.len(), 2)));
        let twice = "PUT /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(taken(twice), Some((true, twice.len(), 3)));
        // A copy that agrees is dropped, as hyper drops it: the router sees the first alone.
        let copies = "PUT /x HTTP/1.1\r\nContent-Length: 016\r\nContent-Length: 16\r\n\r\n";
        let req = parse_head(copies.as_bytes())
            .unwrap()
            .request
            .body(())
            .unwrap();
        let lengths: Vec<_> = req
            .headers()
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .collect();
        assert_eq!(lengths, ["016"]);
        let most = format!("POST /x HTTP/1.1\r\nContent-Length: {MAX_BODY}\r\n\r\n");
        assert_eq!(taken(&most), Some((true, most.len(), MAX_BODY as usize)));
        for left in [
            "GET /events/r1 HTTP/1.1\r\nHost: x\r\n",
            "get /events/r1 HTTP/1.1\r\n\r\n",
            "HEAD /events/r1 HTTP/1.1\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "GET /a<b HTTP/1.1\r\n\r\n",
            "GET a/b HTTP/1.1\r\n\r\n",
            "POST /x HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            &format!(
                "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                MAX_BODY + 1
            ),
            "POST /x HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
            "GET /events/r1 HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
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
        read_to_close(&mut conn, request).await
    }

    /// Reads from `conn` until the server closes it (cleanly, within the deadline); all of it.
    async fn read_to_close(conn: &mut TcpStream, what: &str) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(DEADLINE, conn.read_to_end(&mut got))
            .await
            .unwrap_or_else(|_| panic!("{what}: the server closed the connection"))
            .unwrap_or_else(|e| panic!("{what}: closed cleanly, not {e}"));
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
            .route(
                "/echo",
                axum::routing::post(|body: String| async move { body }),
            )
    }

    #[tokio::test]
    async fn a_body_is_read_and_the_connection_serves_on() {
        let (addr, _stop, _task) = served(framing_app()).await;
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        // The head first, its body in a write of its own (as some clients send them).
        conn.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n")
            .await
            .unwrap();
        conn.flush().await.unwrap();
        conn.write_all(b"hello there").await.unwrap();
        let mut got = String::new();
        read_until(&mut conn, &mut got, "hello there").await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("\r\ncontent-length: 11\r\n"), "{got}");
        // Then a stream on the same connection, as a client starts a run and follows it.
        conn.write_all(b"GET /events/chunks HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut next = String::new();
        read_until(&mut conn, &mut next, "0\r\n\r\n").await;
        assert!(next.starts_with("HTTP/1.1 200 OK\r\n"), "{next}");
        assert_eq!(body_of(&next), "1\r\na\r\n2\r\nbc\r\n0\r\n\r\n");
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
        // HTTP/1.0 asking to keep its connection: kept when the length is known.
        let r = exchange(
            &addr,
            "GET /events/close HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        )
        .await;
        assert!(
            r.contains("\r\nconnection: close\r\n"),
            "the router asked: {r}"
        );
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        conn.write_all(
            b"POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
        )
        .await
        .unwrap();
        let mut got = String::new();
        read_until(&mut conn, &mut got, "\r\n\r\nhi").await;
        assert!(got.contains("\r\nconnection: keep-alive\r\n"), "{got}");
        conn.write_all(b"GET /events/chunks HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let rest = read_to_close(&mut conn, "a body of unknown length").await;
        assert!(rest.contains("\r\nconnection: close\r\n"), "{rest}");
        assert_eq!(body_of(&rest), "abc");
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
        let r = exchange(&addr, "GET /events/close HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.contains("\r\nconnection: close\r\n"), "{r}");
        assert_eq!(body_of(&r), "x");
    }

    #[tokio::test]
    async fn requests_sent_together_are_answered_in_turn() {
        let (addr, _stop, _task) = served(framing_app()).await;
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        // A body and the requests after it in one write; the last one's target is refused
        // (by hyper, to which the connection goes with it unread).
        conn.write_all(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst\
              GET /events/chunks HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /a<b HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await
        .unwrap();
        let mut got = String::new();
        read_until(&mut conn, &mut got, "HTTP/1.1 400").await;
        let answers: Vec<&str> = got.split("HTTP/1.1 ").skip(1).collect();
        assert_eq!(answers.len(), 3, "{got}");
        assert!(
            answers[0].starts_with("200 OK") && answers[0].ends_with("\r\n\r\nfirst"),
            "{got}"
        );
        assert!(
            answers[1].starts_with("200 OK")
                && answers[1].ends_with("\r\n\r\n1\r\na\r\n2\r\nbc\r\n0\r\n\r\n"),
            "{got}"
        );
        assert!(answers[2].starts_with("400"), "{got}");
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
        let app = framing_app().route("/other", axum::routing::post(|| async { "other" }));
        let (addr, stop, task) = served(app).await;
        // Idle before any request; after a 204 written here; after a request hyper served
        // (a chunked body).
        let before = TcpStream::connect(&addr).await.unwrap();
        let mut after_ours = TcpStream::connect(&addr).await.unwrap();
        after_ours
            .write_all(b"GET /events/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        read_until(&mut after_ours, &mut String::new(), "\r\n\r\n").await;
        let mut after_hyper = TcpStream::connect(&addr).await.unwrap();
        after_hyper
            .write_all(
                b"POST /other HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            )
            .await
            .unwrap();
        read_until(&mut after_hyper, &mut String::new(), "other").await;
        // Halfway through a body: the server has taken the head and what came of the body.
        let mut mid_body = TcpStream::connect(&addr).await.unwrap();
        mid_body
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf")
            .await
            .unwrap();
        let (server_end, client_end) = (addr.parse().unwrap(), mid_body.local_addr().unwrap());
        tokio::time::timeout(DEADLINE, async {
            while fathom_testkit::tcp::unread_by_server(server_end, client_end) != Some(0) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the server read the head and the half body");
        stop.send(()).unwrap();
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("serve returned with the connections idle")
            .unwrap();
        for (what, mut conn) in [
            ("before", before),
            ("after ours", after_ours),
            ("after hyper", after_hyper),
            ("halfway through a body", mid_body),
        ] {
            let rest = read_to_close(&mut conn, what).await;
            assert!(rest.is_empty(), "{what}: {rest:?}");
        }
    }
}
