//! The head parser fed generated requests, bounded and repeatable (a fixed seed, a few
//! thousand cases, seconds in `cargo test`), against hyper reading the same bytes.
//!
//! Each case is one connection's input: a request head built from a grammar of the ways heads
//! go wrong (smuggling's header variants, bad lengths, line ends, NULs, folds, odd methods,
//! targets and versions), a body of about the length it declares, a pipelined request after
//! it, and sometimes a few bytes mutated anywhere. For each case:
//!
//! - What the connection serves is what hyper alone serves: the requests Fathom takes itself
//!   (by [`parse_head`], as `next_request` does: a peek of at most [`HEAD_PEEK`] bytes, the
//!   body read by its length, the next request only if the connection is kept), then what
//!   hyper makes of the rest, must be the requests hyper makes of the whole input, each with
//!   the same method, target, version, headers and body (or the same body cut short). So
//!   Fathom never takes a head hyper refuses, never frames a body otherwise, and never reads
//!   a next request hyper would not.
//! - A head cut short is never taken: [`parse_head`] of any prefix of the input is nothing,
//!   or (once the prefix holds the whole head) exactly what it is of the whole.
//! - Nothing panics.
//!
//! hyper runs in memory over a duplex pipe, with `half_close` on so that the end of a case's
//! input is the end of what it reads, not a reason to drop what it read before.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Response, Uri, Version};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{HEAD_PEEK, MAX_BODY, parse_head};

/// Cases per run, and the seed they come from (a failure names its case; the same seed
/// brings it back). `FATHOM_FUZZ_CASES` and `FATHOM_FUZZ_SEED` change them for a longer run
/// by hand (`FATHOM_FUZZ_CASES=1000000 cargo test -p fathom-server --lib head_fuzz`).
const CASES: usize = 5000;
const SEED: u64 = 0x4f5d_2a61_9c3e_0b17;

fn from_env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A request as a server took it: with its body, or `None` for a body cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: Method,
    uri: Uri,
    version: Version,
    /// In order, as the router gets them.
    headers: Vec<(String, Vec<u8>)>,
    body: Option<Vec<u8>>,
}

impl Seen {
    fn new(parts: axum::http::request::Parts, body: Option<Vec<u8>>) -> Seen {
        Seen {
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            headers: headers(&parts.headers),
            body,
        }
    }
}

fn headers(map: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect()
}

/// What the connection serves of `input`: the requests Fathom reads itself, then hyper's of
/// the rest.
async fn served(input: &[u8]) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut at = 0;
    // Bounded by the input: each pass takes a head and its body from it, or ends.
    while at < input.len() {
        let peeked = &input[at..input.len().min(at + HEAD_PEEK)];
        let Some(head) = parse_head(peeked) else {
            seen.extend(hyper_serves(&input[at..]).await);
            break;
        };
        let start = at + head.len;
        let body = input.get(start..start + head.body_len).map(<[u8]>::to_vec);
        let whole = body.is_some();
        let request = head.request.body(()).expect("a head taken builds");
        seen.push(Seen::new(request.into_parts().0, body));
        if !whole || !head.keep_alive {
            break;
        }
        at = start + head.body_len;
    }
    seen
}

/// The requests hyper alone makes of `input` (the server's HTTP/1 builder, as `serve` has it),
/// each body read whole.
async fn hyper_serves(input: &[u8]) -> Vec<Seen> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = {
        let seen = seen.clone();
        hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
            let seen = seen.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(Body::new(body), usize::MAX)
                    .await
                    .ok()
                    .map(|b| b.to_vec());
                seen.lock().unwrap().push(Seen::new(parts, body));
                Ok::<_, Infallible>(Response::new(Body::empty()))
            }
        })
    };
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let connection = hyper::server::conn::http1::Builder::new()
        .half_close(true)
        .serve_connection(hyper_util::rt::TokioIo::new(server), service);
    let client = async move {
        // hyper may close before reading it all (a head it refused): that ends the writing.
        let _ = client.write_all(input).await;
        let _ = client.shutdown().await;
        let mut answers = Vec::new();
        let _ = client.read_to_end(&mut answers).await;
    };
    let _ = tokio::join!(connection, client);
    std::mem::take(&mut *seen.lock().unwrap())
}

/// What [`parse_head`] made of a head, comparable.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    request: Seen,
    keep_alive: bool,
    len: usize,
    body_len: usize,
}

fn parsed(bytes: &[u8]) -> Option<Parsed> {
    let head = parse_head(bytes)?;
    let request = head.request.body(()).expect("a head taken builds");
    Some(Parsed {
        request: Seen::new(request.into_parts().0, None),
        keep_alive: head.keep_alive,
        len: head.len,
        body_len: head.body_len,
    })
}

#[tokio::test]
async fn generated_heads_are_framed_as_hyper_frames_them() {
    let (cases, seed) = (
        from_env("FATHOM_FUZZ_CASES", CASES),
        from_env("FATHOM_FUZZ_SEED", SEED),
    );
    let mut rng = Gen::new(seed);
    let (mut taken, mut handed_on, mut refused_by_hyper) = (0, 0, 0);
    for case in 0..cases {
        let input = rng.input();
        let shown = input.escape_ascii().to_string();
        let window = &input[..input.len().min(HEAD_PEEK)];
        let whole = parsed(window);
        // Cut anywhere: nothing, until the whole head is there. (Every cut of a short head;
        // of one near the window's size, every cut in its first bytes and about its end.)
        let end = whole.as_ref().map_or(window.len(), |w| w.len);
        let cuts = (0..=window.len())
            .filter(|&cut| cut <= 256 || cut.abs_diff(end) <= 40 || cut % 97 == 0);
        for cut in cuts {
            let want = whole.as_ref().filter(|w| cut >= w.len);
            assert_eq!(
                parsed(&window[..cut]).as_ref(),
                want,
                "seed {seed:#x}, case {case}, cut at {cut}: {shown}"
            );
        }
        let (connection, hyper) = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            (served(&input).await, hyper_serves(&input).await)
        })
        .await
        .unwrap_or_else(|_| panic!("seed {seed:#x}, case {case} took 10 s: {shown}"));
        assert_eq!(connection, hyper, "seed {seed:#x}, case {case}: {shown}");
        match whole {
            Some(_) => taken += 1,
            None if hyper.is_empty() => refused_by_hyper += 1,
            None => handed_on += 1,
        }
    }
    eprintln!(
        "{cases} cases (seed {seed:#x}): {taken} first heads taken by Fathom, {handed_on} \
         handed on and served by hyper, {refused_by_hyper} refused by hyper"
    );
    // The generator still reaches all three (a change to it that stopped doing so would
    // test less while passing).
    for (what, n) in [
        ("taken", taken),
        ("handed on", handed_on),
        ("refused", refused_by_hyper),
    ] {
        assert!(n >= cases / 10, "only {n} of {cases} cases {what}");
    }
}

/// The generator: splitmix64 (small, fast, the same sequence on every machine), and the
/// faults a case may still take.
struct Gen {
    state: u64,
    /// Faults left for this case: most sites choose among well-formed variants, and take an
    /// ill-formed one only while this lasts (so a case is mostly well-formed, with a fault or
    /// three where they matter, rather than broken in so many places that any parser refuses
    /// it at its first line).
    faults: usize,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            state: seed,
            faults: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[self.below(from.len())]
    }

    /// Whether a fault goes here (one of those left, at one site in six).
    fn fault(&mut self) -> bool {
        let here = self.faults > 0 && self.one_in(6);
        if here {
            self.faults -= 1;
        }
        here
    }

    /// One of `good`, or of `bad` where a fault goes.
    fn choose<'a, T: ?Sized>(&mut self, good: &[&'a T], bad: &[&'a T]) -> &'a T {
        if !bad.is_empty() && self.fault() {
            self.pick(bad)
        } else {
            self.pick(good)
        }
    }

    fn eol(&mut self) -> &'static str {
        self.choose(
            &["\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\n"],
            &["\r", "\r\r\n", "\n\r", " \r\n", "\r\n\r\n"],
        )
    }

    fn space(&mut self) -> &'static str {
        self.choose(&[" "], &["  ", "\t", "", "\r", "\0"])
    }

    /// One connection's input: a head, a body, the next request; with none to three faults.
    fn input(&mut self) -> Vec<u8> {
        self.faults = [0, 0, 0, 1, 1, 1, 2, 3][self.below(8)];
        let mut out: Vec<u8> = Vec::new();
        if self.one_in(20) {
            out.extend_from_slice(b"\r\n");
        }
        let method = self.choose(
            &[
                "GET", "GET", "GET", "GET", "POST", "POST", "POST", "POST", "PUT", "PATCH",
                "DELETE", "OPTIONS", "HEAD", "TRACE", "get", "GeT",
            ],
            &["G\0T", "", "GET\x7f", "PRI", "G(T"],
        );
        out.extend_from_slice(method.as_bytes());
        let space = self.space();
        out.extend_from_slice(space.as_bytes());
        let target = self.choose(
            &[
                "/",
                "/health",
                "/a?b=c&d",
                "/",
                "/health",
                "*",
                "http://h/x",
                "h:80",
                "//x",
                "/%00",
            ],
            &["/a<b", "/a b", "/\x7f", "", "/a#f", "/a\0", "x", "/\u{e9}"],
        );
        out.extend_from_slice(target.as_bytes());
        let space = self.space();
        out.extend_from_slice(space.as_bytes());
        let version = self.choose(
            &["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"],
            &[
                "HTTP/1.2",
                "HTTP/2.0",
                "http/1.1",
                "HTTP/1.10",
                "HTTP/1",
                "HTTP/11",
                "HTTP/0.9",
                "",
            ],
        );
        out.extend_from_slice(version.as_bytes());
        let eol = self.eol();
        out.extend_from_slice(eol.as_bytes());
        let mut body = Declared::None;
        for _ in 0..self.below(6) {
            self.header(&mut out, &mut body);
        }
        // Sometimes a head about as long as Fathom looks at: whole within it, or not.
        if self.one_in(25) {
            let pad = HEAD_PEEK - 200 + self.below(400);
            out.extend_from_slice(b"X-Pad: ");
            out.extend(std::iter::repeat_n(b'p', pad));
            let eol = self.eol();
            out.extend_from_slice(eol.as_bytes());
        }
        let eol = self.eol();
        out.extend_from_slice(eol.as_bytes());
        match body {
            Declared::None => {}
            Declared::Length(n) => {
                // The length declared; where a fault goes, short or long of it.
                let n = if self.fault() {
                    if self.one_in(2) {
                        n.saturating_sub(1 + self.below(3))
                    } else {
                        n + 1 + self.below(3)
                    }
                } else {
                    n
                };
                out.extend((0..n).map(|i| b'a' + (i % 26) as u8));
            }
            Declared::Chunked => {
                let chunks = self.choose(
                    &[
                        &b"5\r\nhello\r\n0\r\n\r\n"[..],
                        b"0\r\n\r\n",
                        b"5;x=y\r\nhello\r\n0\r\nT: t\r\n\r\n",
                    ],
                    &[b"5\nhello\n0\n\n", b"zz\r\n", b"ffffffffffffffffff\r\n"],
                );
                out.extend_from_slice(chunks);
            }
        }
        out.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: n\r\n\r\n");
        if self.one_in(4) {
            out.extend_from_slice(b"POST /after HTTP/1.1\r\nContent-Length: 2\r\n\r\nok");
        }
        if self.fault() {
            for _ in 0..1 + self.below(3) {
                self.mutate(&mut out);
            }
        }
        out
    }

    /// A header line, noting the body it declares.
    fn header(&mut self, out: &mut Vec<u8>, body: &mut Declared) {
        let line: Vec<u8> = match self.below(10) {
            0 | 1 => {
                let fold = format!("X-A: a{} b", self.eol());
                self.choose(
                    &[
                        &b"Host: h"[..],
                        b"X-B: b",
                        b"Accept: */*",
                        b"X-A:\ta\t",
                        b"X-A:",
                        b"X-A: \xc3\xa9",
                        b"X-A: a\x80\xff",
                        b"Content_Length: 3",
                    ],
                    &[
                        b"X-A: a\0b",
                        b"X-A: a\rb",
                        b"X-A: a\x7fb",
                        b": x",
                        b"X-A x",
                        b"X A: x",
                        b"X-A: a\nb",
                        fold.as_bytes(),
                        b"X-\0A: x",
                    ],
                )
                .to_vec()
            }
            2..=4 => {
                let name = self.choose(
                    &[
                        "Content-Length",
                        "Content-Length",
                        "content-length",
                        "CONTENT-LENGTH",
                    ],
                    &[
                        "Content-Length ",
                        "Content-Length\t",
                        " Content-Length",
                        "Content-Length\0",
                    ],
                );
                // A second length agrees with the first, unless a fault goes there.
                let n = match *body {
                    Declared::Length(n) if !self.fault() => n,
                    _ => self.below(20),
                };
                let value = if self.fault() {
                    match self.below(9) {
                        0 => format!("+{n}"),
                        1 => "-1".into(),
                        2 => format!("{n}, {n}"),
                        3 => String::new(),
                        4 => format!("0x{n}"),
                        5 => format!("{n} {n}"),
                        6 => format!("{}", MAX_BODY + 1),
                        _ => self
                            .pick(&[
                                "99999999999999999999",
                                "18446744073709551615",
                                "18446744073709551616",
                                "00000000000000000000005",
                                "1e1",
                            ])
                            .into(),
                    }
                } else {
                    match self.below(6) {
                        0 => format!("0{n}"),
                        1 => format!("  {n} "),
                        _ => n.to_string(),
                    }
                };
                if let Ok(n) = value.trim().parse::<usize>()
                    && n <= 64
                {
                    *body = Declared::Length(n);
                }
                [name.as_bytes(), b": ", value.as_bytes()].concat()
            }
            5 => {
                let name = self.choose(
                    &[
                        "Transfer-Encoding",
                        "transfer-encoding",
                        "Transfer_Encoding",
                    ],
                    &[
                        "Transfer-Encoding ",
                        " Transfer-Encoding",
                        "Transfer-Encoding\t",
                    ],
                );
                let value = self.choose(
                    &["chunked", "Chunked", " chunked", "identity, chunked"],
                    &[
                        "chunked, identity",
                        "xchunked",
                        "\"chunked\"",
                        "identity",
                        "chunked\x0b",
                        "chunked,",
                    ],
                );
                *body = Declared::Chunked;
                format!("{name}: {value}").into_bytes()
            }
            6 => {
                let value = self.choose(
                    &[
                        "close",
                        "keep-alive",
                        "Keep-Alive",
                        "keep-alive, close",
                        "close, keep-alive",
                        "upgrade",
                        "x",
                        "clos\u{e9}",
                    ],
                    &["close\0"],
                );
                format!("Connection: {value}").into_bytes()
            }
            _ => self
                .pick(&[
                    "Expect: 100-continue",
                    "Expect: 100-Continue",
                    "Upgrade: websocket",
                    "Upgrade: h2c",
                ])
                .as_bytes()
                .to_vec(),
        };
        out.extend_from_slice(&line);
        let eol = self.eol();
        out.extend_from_slice(eol.as_bytes());
    }

    /// A byte replaced, inserted or removed, or a run of bytes repeated, anywhere.
    fn mutate(&mut self, out: &mut Vec<u8>) {
        const BYTES: &[u8] = b"\0\r\n \t:,\x7f\x80\xff09a-\"\x0b\x0c";
        let at = self.below(out.len());
        let byte = BYTES[self.below(BYTES.len())];
        match self.below(4) {
            0 => out[at] = byte,
            1 => out.insert(at, byte),
            2 => {
                out.remove(at);
            }
            _ => {
                let end = (at + 1 + self.below(40)).min(out.len());
                let run = out[at..end].to_vec();
                out.splice(at..at, run);
            }
        }
    }
}

/// The body a generated head declared last.
enum Declared {
    None,
    Length(usize),
    Chunked,
}
