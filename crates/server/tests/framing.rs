//! HTTP/1 framing and request smuggling (issue 45): Fathom reads the common requests' heads
//! itself and hands the rest of a connection to hyper, and two parsers on one connection are
//! where smuggling lives. The real app is served here twice on loopback: as `fathom serve`
//! serves it ([`fathom_server::serve`]: Fathom's own reader, hyper for what it hands on), and
//! by hyper alone (hyper's HTTP/1 builder as `serve` configures it, every connection hyper's
//! from its first byte). Each case's bytes go to both over raw TCP, and what comes back must
//! be the same: each response's status and body in order, and how the connection ended. A
//! request is either refused (hyper's 400, 431 or a close without an answer) or answered
//! once, and the request after it is read where it really starts: each case ends with a
//! pipelined `GET /livez ... Connection: close`, answered only where the server found it.
//!
//! The reference is the same app rather than a toy echo service, so that responses compare
//! byte for byte; `POST /reports/render` stands for a route that reads its body (its JSON
//! decides the answer: a body framed wrong is a 400 with a `detail`, told apart from hyper's
//! own empty 400).
//!
//! Every read has a deadline: a server that waits for bytes that never come is an outcome
//! ("open" after [`QUIET`]), never a hang.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fathom_research::Research;
use fathom_server::{AppState, Deployment, ServerConfig};
use fathom_store::Dialect;
use fathom_testkit::db::{TestDb, fresh};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How long a connection may stay silent before the case takes the server as waiting for
/// more: far longer than any answer here takes, and no case is meant to reach it.
const QUIET: Duration = Duration::from_secs(10);

/// How long the server may take to read what a case sent before the case writes more.
const SETTLE: Duration = Duration::from_secs(10);

/// The request every case ends with: answered only if the server reads it where it starts,
/// and it closes the connection once answered.
const LAST: &str = "GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// A JSON body `POST /reports/render` answers with 200.
const DOC: &str = r#"{"markdown":"one"}"#;

/// The app served both ways; both stop when this is dropped.
struct Servers {
    fathom: SocketAddr,
    hyper: SocketAddr,
    _db: TestDb,
    _dir: tempfile::TempDir,
    stop: watch::Sender<bool>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The whole app (SQLite, the offline research deps, no worker: no run is started here),
/// served by `fathom_server::serve` and by hyper alone.
async fn servers() -> Servers {
    let db = fresh(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let corpus = fathom_testkit::fixtures::sample_corpus(dir.path()).await;
    let store = Arc::new(db.store.clone());
    let deps = fathom_testkit::offline_research_deps(corpus, store.clone());
    let research = Research::new(store.clone(), Default::default(), deps);
    let config = ServerConfig {
        body_limit: 64 * 1024,
        ..ServerConfig::new(Deployment::load(None).unwrap())
    };
    let state = AppState::new(research.engine.clone(), store.clone(), store, config).unwrap();
    let app = fathom_server::router(state);
    let (stop, stopped) = watch::channel(false);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fathom = listener.local_addr().unwrap();
    let mut shut = stopped.clone();
    tokio::spawn(fathom_server::serve(listener, app.clone(), async move {
        let _ = shut.changed().await;
    }));

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hyper = listener.local_addr().unwrap();
    let mut shut = stopped;
    tokio::spawn(async move {
        // Bounded by the servers' life; each pass accepts one connection.
        loop {
            let tcp = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
                _ = shut.changed() => return,
            };
            tcp.set_nodelay(true).unwrap();
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service),
            );
        }
    });
    Servers {
        fathom,
        hyper,
        _db: db,
        _dir: dir,
        stop,
    }
}

/// What a client saw of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    /// Each response, in order: its status and its body (de-chunked).
    answers: Vec<(u16, String)>,
    end: End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The server closed the connection (a FIN, or a reset once what it sent was read).
    Closed,
    /// Still open, and silent for [`QUIET`].
    Open,
    /// Closed or silent in the middle of a response.
    Cut,
}

/// `200 404 | closed`: each answer's status, `d` after one whose body is a `{"detail"}`
/// (the app's own refusal, as opposed to hyper's empty one), then how the connection ended.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (status, body) in &self.answers {
            let detail = if body.starts_with("{\"detail\"") {
                "d"
            } else {
                ""
            };
            write!(f, "{status}{detail} ")?;
        }
        let end = match self.end {
            End::Closed => "closed",
            End::Open => "open",
            End::Cut => "cut",
        };
        write!(f, "| {end}")
    }
}

/// The client's side of a connection: what it has read and not yet taken apart.
struct Wire {
    conn: OwnedReadHalf,
    buf: Vec<u8>,
}

impl Wire {
    /// Reads what comes next; the end if the server closed or stayed silent.
    async fn more(&mut self) -> Result<(), End> {
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(QUIET, self.conn.read(&mut chunk)).await {
            Err(_) => Err(End::Open),
            Ok(Ok(0) | Err(_)) => Err(End::Closed),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
        }
    }

    /// The first `n` bytes read, taken.
    async fn take(&mut self, n: usize) -> Result<Vec<u8>, End> {
        while self.buf.len() < n {
            self.more().await.map_err(|_| End::Cut)?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// A line ending in CRLF, taken, without it.
    async fn line(&mut self) -> Result<String, End> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.take(at + 2).await?;
                return Ok(String::from_utf8_lossy(&line[..at]).into_owned());
            }
            self.more().await.map_err(|_| End::Cut)?;
        }
    }

    /// The next response, or how the connection ended if none came.
    async fn response(&mut self) -> Result<(u16, String), End> {
        if self.buf.is_empty() {
            self.more().await?;
        }
        let status_line = self.line().await?;
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3)?.parse().ok())
            .ok_or(End::Cut)?;
        let (mut length, mut chunked) = (None, false);
        // Bounded by the head the server sent.
        loop {
            let line = self.line().await?;
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').ok_or(End::Cut)?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<usize>().map_err(|_| End::Cut)?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
        let body = if (100..200).contains(&status) || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            let mut body = Vec::new();
            // Bounded by the response; each pass takes a chunk.
            loop {
                let size = self.line().await?;
                let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| End::Cut)?;
                if size == 0 {
                    // No trailers are sent here: the blank line that ends the body.
                    self.line().await?;
                    break;
                }
                body.extend(self.take(size).await?);
                self.line().await?;
            }
            body
        } else if let Some(n) = length {
            self.take(n).await?
        } else {
            // Until the connection closes (an HTTP/1.0 response of unknown length).
            while self.more().await.is_ok() {}
            std::mem::take(&mut self.buf)
        };
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// Every response on `conn` until the server closes it (or stops answering).
async fn outcome(conn: OwnedReadHalf) -> Outcome {
    let mut wire = Wire {
        conn,
        buf: Vec::new(),
    };
    let mut answers = Vec::new();
    // Bounded by what the server sends: each pass takes one response or ends.
    loop {
        match wire.response().await {
            Ok(answer) => answers.push(answer),
            Err(end) => return Outcome { answers, end },
        }
    }
}

/// A connection to `addr` whose answers are being read (the outcome, once it has ended),
/// and its write half.
async fn connect(addr: SocketAddr) -> (tokio::task::JoinHandle<Outcome>, OwnedWriteHalf) {
    let conn = TcpStream::connect(addr).await.unwrap();
    conn.set_nodelay(true).unwrap();
    let (read, write) = conn.into_split();
    (tokio::spawn(outcome(read)), write)
}

/// Sends `bytes` to `addr` in pieces cut at `cuts`, each piece once the server has read all
/// before it (so that every piece is a read of its own), and reads what comes back.
async fn exchange_in_pieces(addr: SocketAddr, bytes: &[u8], cuts: &[usize]) -> Outcome {
    let (answers, mut write) = connect(addr).await;
    let client = write.local_addr().unwrap();
    let mut from = 0;
    for &to in cuts {
        send(&mut write, &bytes[from..to]).await;
        from = to;
        settled(addr, client).await;
    }
    send(&mut write, &bytes[from..]).await;
    let outcome = answers.await.unwrap();
    drop(write);
    outcome
}

/// Waits until the server has read everything sent on the connection from `client` (or
/// closed it).
async fn settled(server: SocketAddr, client: SocketAddr) {
    tokio::time::timeout(SETTLE, async {
        while fathom_testkit::tcp::unread_by_server(server, client).is_some_and(|n| n > 0) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the server at {server} read what {client} sent"));
}

/// Writes `bytes`, all it can: a server that closed (or refuses a long head and stops
/// reading it) ends the writing, not the case. The connection is not half-closed after: a
/// server may take a client's end of input as the client gone.
async fn send(write: &mut OwnedWriteHalf, bytes: &[u8]) {
    let _ = tokio::time::timeout(QUIET, write.write_all(bytes)).await;
}

/// Sends `bytes` on a new connection to `addr` in one write, and reads what comes back.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Outcome {
    let (answers, mut write) = connect(addr).await;
    send(&mut write, bytes).await;
    let outcome = answers.await.unwrap();
    drop(write);
    outcome
}

/// A case: what a client sends (then [`LAST`]), and what both servers must answer.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    want: &'static str,
}

fn case(name: &'static str, bytes: impl AsRef<[u8]>, want: &'static str) -> Case {
    Case {
        name,
        bytes: bytes.as_ref().to_vec(),
        want,
    }
}

/// `POST /reports/render` with `headers` (each ending in CRLF) and `body`.
fn post(headers: &str, body: &str) -> String {
    format!(
        "POST /reports/render HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         {headers}\r\n{body}"
    )
}

/// `GET /health` with `headers` (each ending in CRLF).
fn get(headers: &str) -> String {
    format!("GET /health HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n")
}

/// [`DOC`] as one chunk and the last.
const CHUNKED_DOC: &str = "12\r\n{\"markdown\":\"one\"}\r\n0\r\n\r\n";

/// A request hidden in a body: a server that frames the body short answers it (404).
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// `Content-Length` that covers [`CHUNKED_DOC`] and the [`SMUGGLED`] request after it, and
/// the body it covers.
fn cl_over_smuggled() -> (String, String) {
    let body = format!("{CHUNKED_DOC}{SMUGGLED}");
    (format!("Content-Length: {}\r\n", body.len()), body)
}

/// A request whose obfuscated `Transfer-Encoding` header(s) `te` stand beside a
/// `Content-Length` covering a smuggled request: a server that takes one framing where the
/// other server took the other answers `/smuggled`.
fn te_te(te: &str) -> String {
    let (cl, body) = cl_over_smuggled();
    post(&format!("{cl}{te}"), &body)
}

fn cases() -> Vec<Case> {
    let (cl, body) = cl_over_smuggled();
    let doc_cl = format!("Content-Length: {}\r\n", DOC.len());
    vec![
        // Plain requests, pipelined.
        case(
            "GET, GET after it",
            get("") + &get(""),
            "200 200 200 | closed",
        ),
        case(
            "POST with a body, GET after it",
            post(&doc_cl, DOC) + &get(""),
            "200 200 200 | closed",
        ),
        case(
            "three bodies in one write",
            post(&doc_cl, DOC) + &post("Content-Length: 3\r\n", "{x}") + &post(&doc_cl, DOC),
            "200 400d 200 200 | closed",
        ),
        case(
            "GET with a body",
            get("Content-Length: 5\r\n") + "hello" + &get(""),
            "200 200 200 | closed",
        ),
        case(
            "body longer than its Content-Length",
            post(&doc_cl, &format!("{DOC}xx")),
            "200 405d | closed",
        ),
        case(
            "body shorter than its Content-Length",
            post("Content-Length: 30\r\n", DOC),
            "400d 400 | closed",
        ),
        // CL.TE and TE.CL: both framings on one request. hyper frames by the chunks, drops
        // the length, and closes the connection after answering.
        case(
            "CL.TE: Content-Length covers a smuggled request",
            post(&format!("{cl}Transfer-Encoding: chunked\r\n"), &body),
            "200 | closed",
        ),
        case(
            "TE.CL: Transfer-Encoding first",
            post(&format!("Transfer-Encoding: chunked\r\n{cl}"), &body),
            "200 | closed",
        ),
        case(
            "TE.CL: a short Content-Length, a chunk holding a request",
            post(
                "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                &format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len()),
            ),
            "400d | closed",
        ),
        case(
            "Content-Length: 0 and chunked",
            post(
                "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
                CHUNKED_DOC,
            ) + SMUGGLED,
            "200 | closed",
        ),
        // TE.TE: a Transfer-Encoding one parser might not see as chunked.
        case(
            "TE.TE: xchunked",
            te_te("Transfer-Encoding: xchunked\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: a space before the colon",
            te_te("Transfer-Encoding : chunked\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: chunked, then another coding",
            te_te("Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: another coding, then chunked",
            te_te("Transfer-Encoding: x\r\nTransfer-Encoding: chunked\r\n"),
            "200 | closed",
        ),
        case(
            "TE.TE: chunked, identity",
            te_te("Transfer-Encoding: chunked, identity\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: identity, chunked",
            te_te("Transfer-Encoding: identity, chunked\r\n"),
            "200 | closed",
        ),
        case(
            "TE.TE: CHUNKED",
            te_te("Transfer-Encoding: CHUNKED\r\n"),
            "200 | closed",
        ),
        case(
            "TE.TE: a tab before the value",
            te_te("Transfer-Encoding:\tchunked\r\n"),
            "200 | closed",
        ),
        case(
            "TE.TE: quoted",
            te_te("Transfer-Encoding: \"chunked\"\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: folded onto the line before",
            te_te("X-A: a\r\n Transfer-Encoding: chunked\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: a vertical tab after chunked",
            te_te("Transfer-Encoding: chunked\x0b\r\n"),
            "400 | closed",
        ),
        case(
            "TE.TE: Transfer_Encoding (another header)",
            te_te("Transfer_Encoding: chunked\r\n"),
            "400d 200 | closed",
        ),
        case(
            "Transfer-Encoding in HTTP/1.0",
            post("Transfer-Encoding: chunked\r\n", CHUNKED_DOC).replace("HTTP/1.1", "HTTP/1.0"),
            "400 | closed",
        ),
        case(
            "chunked, a request after it",
            post("Transfer-Encoding: chunked\r\n", CHUNKED_DOC) + &get(""),
            "200 200 200 | closed",
        ),
        case(
            "chunked, a chunk extension and a trailer",
            post(
                "Transfer-Encoding: chunked\r\n",
                "12;x=y\r\n{\"markdown\":\"one\"}\r\n0\r\nX-T: t\r\n\r\n",
            ),
            "200 200 | closed",
        ),
        case(
            "chunked, a size that is not hex",
            post("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"),
            "400d | closed",
        ),
        case(
            "chunked, a size line ending in a bare LF",
            post(
                "Transfer-Encoding: chunked\r\n",
                "12\n{\"markdown\":\"one\"}\r\n0\r\n\r\n",
            ),
            "400d | closed",
        ),
        // Content-Length, duplicated or not a plain number.
        case(
            "two equal Content-Lengths",
            post(&format!("{doc_cl}{doc_cl}"), DOC),
            "200 200 | closed",
        ),
        case(
            "two different Content-Lengths",
            post(&format!("{doc_cl}Content-Length: 19\r\n"), DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: +18",
            post("Content-Length: +18\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: -1",
            post("Content-Length: -1\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: 18, 18",
            post("Content-Length: 18, 18\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: 0x12",
            post("Content-Length: 0x12\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: 1 8",
            post("Content-Length: 1 8\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length empty",
            post("Content-Length: \r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length past u64",
            post("Content-Length: 99999999999999999999\r\n", DOC),
            "400 | closed",
        ),
        case(
            "Content-Length: 018",
            post("Content-Length: 018\r\n", DOC),
            "200 200 | closed",
        ),
        case(
            "Content-Length with spaces around it",
            post("Content-Length:   18  \r\n", DOC),
            "200 200 | closed",
        ),
        case(
            "Content-Length over the body limit",
            post("Content-Length: 70000\r\n", &"x".repeat(70_000)),
            "413d 200 | closed",
        ),
        // Obsolete line folding.
        case("a folded header", get("X-A: a\r\n b\r\n"), "400 | closed"),
        case(
            "a folded Content-Length",
            post("Content-Length: 1\r\n 8\r\n", DOC),
            "400 | closed",
        ),
        // Bare CR and LF.
        case(
            "bare LF line ends",
            "GET /health HTTP/1.1\nHost: localhost\n\n",
            "200 200 | closed",
        ),
        case(
            "a bare LF ends the head",
            "GET /health HTTP/1.1\r\nHost: localhost\r\n\n",
            "200 200 | closed",
        ),
        case(
            "bare LF line ends and a body",
            format!(
                "POST /reports/render HTTP/1.1\nContent-Type: application/json\n\
                 Content-Length: 18\n\n{DOC}"
            ),
            "200 200 | closed",
        ),
        case(
            "a bare CR ends the request line",
            "GET /health HTTP/1.1\rHost: localhost\r\n\r\n",
            "400 | closed",
        ),
        case(
            "a bare CR in a header value",
            get("X-A: a\rb\r\n"),
            "400 | closed",
        ),
        case("CR CR LF", get("X-A: a\r\r\n"), "400 | closed"),
        // NUL.
        case(
            "NUL in a header value",
            get("X-A: a\0b\r\n"),
            "400 | closed",
        ),
        case("NUL in a header name", get("X-\0A: a\r\n"), "400 | closed"),
        case(
            "NUL in the target",
            "GET /hea\0lth HTTP/1.1\r\nHost: localhost\r\n\r\n",
            "400 | closed",
        ),
        case(
            "NUL before the request line",
            format!("\0{}", get("")),
            "400 | closed",
        ),
        // Heads larger than Fathom reads itself.
        case(
            "a 5,000-byte head",
            get(&format!("X-Long: {}\r\n", "a".repeat(5000))),
            "200 200 | closed",
        ),
        case(
            "49 headers",
            get(&"X-N: v\r\n".repeat(49)),
            "200 200 | closed",
        ),
        case(
            "101 headers",
            get(&"X-N: v\r\n".repeat(101)),
            "431 | closed",
        ),
        // Past hyper's read buffer (408 KiB) whichever way its reads fall: a head that ends
        // within twice that may arrive whole in one read and be taken.
        case(
            "a 1 MB head",
            get(&format!("X-Long: {}\r\n", "a".repeat(1_000_000))),
            "431 | closed",
        ),
        case(
            "an 8,000-byte target",
            format!(
                "GET /health?q={} HTTP/1.1\r\nHost: localhost\r\n\r\n",
                "a".repeat(8000)
            ),
            "200 200 | closed",
        ),
        // HTTP/1.0 and keep-alive.
        case(
            "HTTP/1.0",
            "GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n",
            "200 | closed",
        ),
        case(
            "HTTP/1.0 keep-alive",
            "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            "200 200 | closed",
        ),
        case(
            "HTTP/1.0 keep-alive with a body",
            post(&format!("Connection: Keep-Alive\r\n{doc_cl}"), DOC)
                .replace("HTTP/1.1", "HTTP/1.0"),
            "200 200 | closed",
        ),
        case(
            "HTTP/1.0 keep-alive, then close",
            "GET /health HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            "200 | closed",
        ),
        case(
            "Connection: close",
            get("Connection: close\r\n"),
            "200 | closed",
        ),
        case(
            "Connection: keep-alive, close",
            get("Connection: keep-alive, close\r\n"),
            "200 | closed",
        ),
        // The request line.
        case(
            "a leading empty line",
            format!("\r\n{}", get("")),
            "200 200 | closed",
        ),
        case(
            "an absolute-form target",
            "GET http://localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            "200 200 | closed",
        ),
        case(
            "a lowercase method",
            "get /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            "405d 200 | closed",
        ),
        case(
            "two spaces after the method",
            "GET  /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            "400 | closed",
        ),
        case(
            "HTTP/1.2",
            "GET /health HTTP/1.2\r\nHost: localhost\r\n\r\n",
            "400 | closed",
        ),
        case(
            "the HTTP/2 preface",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "| closed",
        ),
        case(
            "Expect: 100-continue",
            post(&format!("{doc_cl}Expect: 100-continue\r\n"), DOC),
            "100 200 200 | closed",
        ),
        case(
            "Upgrade: websocket, answered as a plain GET",
            get("Connection: upgrade\r\nUpgrade: websocket\r\n"),
            "200 200 | closed",
        ),
    ]
}

/// Both servers answer each case alike, and as the case says; and alike again when a request
/// Fathom answers itself comes first (so that Fathom hands the connection on mid-way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_is_answered_as_hyper_answers_it() {
    let servers = servers().await;
    let first = post(&format!("Content-Length: {}\r\n", DOC.len()), DOC);
    let mut table = vec![
        "| case | Fathom | hyper alone |".to_string(),
        "|---|---|---|".into(),
    ];
    let mut wrong = Vec::new();
    for case in cases() {
        let bytes = [case.bytes.as_slice(), LAST.as_bytes()].concat();
        let after = [first.as_bytes(), &bytes].concat();
        for (name, bytes, want) in [
            (case.name.to_string(), bytes, case.want.to_string()),
            (
                format!("{} (after a POST)", case.name),
                after,
                format!("200 {}", case.want),
            ),
        ] {
            let (fathom, hyper) = tokio::join!(
                exchange(servers.fathom, &bytes),
                exchange(servers.hyper, &bytes)
            );
            table.push(format!("| {name} | {fathom} | {hyper} |"));
            if fathom != hyper || fathom.to_string() != want.trim_start() {
                wrong.push(format!(
                    "{name}: want {want}\n  fathom {fathom}: {:?}\n  hyper  {hyper}: {:?}",
                    fathom.answers, hyper.answers
                ));
            }
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Requests to cut into pieces: one Fathom answers itself with the one after it; HTTP/1.0
/// keep-alive with a body; bare LF line ends; and CL.TE, hyper's from its first byte.
fn to_cut() -> Vec<(&'static str, Vec<u8>)> {
    let doc_cl = format!("Content-Length: {}\r\n", DOC.len());
    let (cl, body) = cl_over_smuggled();
    [
        (
            "POST with a body, GET after it",
            post(&doc_cl, DOC) + &get(""),
        ),
        (
            "HTTP/1.0 keep-alive with a body",
            post(&format!("Connection: keep-alive\r\n{doc_cl}"), DOC)
                .replace("HTTP/1.1", "HTTP/1.0"),
        ),
        (
            "bare LF line ends and a body",
            format!(
                "POST /reports/render HTTP/1.1\nContent-Type: application/json\n\
                 Content-Length: 18\n\n{DOC}"
            ),
        ),
        (
            "CL.TE",
            post(&format!("{cl}Transfer-Encoding: chunked\r\n"), &body),
        ),
    ]
    .into_iter()
    .map(|(name, bytes)| (name, [bytes.as_bytes(), LAST.as_bytes()].concat()))
    .collect()
}

/// A head (and a body, and the request after them) cut in two at every byte, the server
/// having read the first piece before the second comes: Fathom sees a head it cannot take
/// whole, hands the connection to hyper with what it has, and every cut is answered as the
/// bytes sent whole are by hyper alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_split_at_every_byte_is_answered_as_whole() {
    let servers = servers().await;
    for (name, bytes) in to_cut() {
        let whole = exchange(servers.hyper, &bytes).await;
        assert_eq!(exchange(servers.fathom, &bytes).await, whole, "{name}");
        for at in 1..bytes.len() {
            let cut = exchange_in_pieces(servers.fathom, &bytes, &[at]).await;
            assert_eq!(cut, whole, "{name}, cut at {at}: {:?}", &bytes[..at]);
        }
    }
}

/// Heads and bodies that come a byte at a time (each read by the server before the next is
/// sent), and a large body in pieces: answered as when they come whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_bodies_are_answered_as_whole() {
    let servers = servers().await;
    let markdown = "word ".repeat(2000);
    let big = format!("{{\"markdown\":\"{markdown}\"}}");
    let big = [
        post(&format!("Content-Length: {}\r\n", big.len()), &big).as_bytes(),
        LAST.as_bytes(),
    ]
    .concat();
    let head_len = big.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut cases: Vec<(&str, Vec<u8>, Vec<usize>)> = to_cut()
        .into_iter()
        .map(|(name, bytes)| {
            let every: Vec<usize> = (1..bytes.len()).collect();
            (name, bytes, every)
        })
        .collect();
    // The head whole, its 10 kB body in 100-byte pieces.
    cases.push((
        "a 10 kB body in 100-byte pieces",
        big.clone(),
        (head_len..big.len()).step_by(100).collect(),
    ));
    for (name, bytes, cuts) in cases {
        let whole = exchange(servers.hyper, &bytes).await;
        for (server, addr) in [("fathom", servers.fathom), ("hyper", servers.hyper)] {
            let slow = exchange_in_pieces(addr, &bytes, &cuts).await;
            assert_eq!(slow, whole, "{name}, {server}");
        }
    }
}

/// A client that sends its requests and closes its side at once (`printf ... | nc -N`).
/// Fathom answers every request it has read whole before the end of input, each where it
/// starts; hyper (`half_close` off, as `serve` has it) takes the end of input as the client
/// gone, and answers such requests or not depending on whether its answer was ready before
/// it read that end. A difference with nothing to smuggle: hyper's answers are always the
/// first of Fathom's, and both close. (What Fathom hands on, hyper serves as it would.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_is_answered_what_it_sent() {
    let servers = servers().await;
    let doc_cl = format!("Content-Length: {}\r\n", DOC.len());
    for (name, bytes, want) in [
        ("GET", get(""), "200 | closed"),
        ("GET, GET", get("") + &get(""), "200 200 | closed"),
        ("POST with a body", post(&doc_cl, DOC), "200 | closed"),
    ] {
        let mut seen = Vec::new();
        for addr in [servers.fathom, servers.hyper] {
            let (answers, mut write) = connect(addr).await;
            send(&mut write, bytes.as_bytes()).await;
            write.shutdown().await.unwrap();
            seen.push(answers.await.unwrap());
        }
        let (fathom, hyper) = (&seen[0], &seen[1]);
        assert_eq!(fathom.to_string(), want, "{name}: {:?}", fathom.answers);
        assert!(
            fathom.answers.starts_with(&hyper.answers) && hyper.end == End::Closed,
            "{name}: fathom {fathom}, hyper {hyper}"
        );
    }
}
