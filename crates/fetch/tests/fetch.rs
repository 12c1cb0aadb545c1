//! The fetcher against a loopback fixture server that misbehaves in every way the internet
//! does, and an SSRF matrix of URLs that must all be refused before any connection.

use std::io::Write;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use fathom_fetch::{FetchConfig, FetchError, SafeFetcher};

async fn fixture() -> String {
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    tokio::spawn(async move {
        let app = Router::new().route("/", get(|| async { "other loopback service" }));
        axum::serve(other, app).await.unwrap();
    });
    let bomb = {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![b' '; 1024 * 1024];
        for _ in 0..64 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap()
    };
    let app = Router::new()
        .route(
            "/robots.txt",
            get(|| async { "User-agent: *\nDisallow: /secret\n" }),
        )
        .route(
            "/page",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<html><title>Page</title><p>Hello</p></html>",
                )
            }),
        )
        .route(
            "/latin1",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=ISO-8859-1")],
                    b"<p>caf\xe9</p>".to_vec(),
                )
            }),
        )
        .route("/secret", get(|| async { "hidden" }))
        .route("/to-page", get(|| async { Redirect::to("/page") }))
        .route(
            "/to-metadata",
            get(|| async { Redirect::to("http://169.254.169.254/latest/meta-data/") }),
        )
        .route(
            "/to-mapped",
            get(|| async { Redirect::temporary("http://[::ffff:10.0.0.1]/") }),
        )
        .route(
            "/to-other-port",
            get(move || async move { Redirect::to(&format!("http://127.0.0.1:{other_port}/")) }),
        )
        .route(
            "/to-file",
            get(|| async { Redirect::to("file:///etc/passwd") }),
        )
        .route("/loop", get(|| async { Redirect::to("/loop") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        // Headers at once, then one byte every 200 ms for ever: only a deadline on the whole
        // request stops it, not one per read.
        .route(
            "/drip",
            get(|| async {
                let drip = futures_util::stream::unfold((), |()| async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Some((Ok::<_, std::io::Error>(vec![b'x']), ()))
                });
                axum::body::Body::from_stream(drip)
            }),
        )
        // Promises 2 GB and sends a few bytes, then nothing.
        .route(
            "/endless",
            get(|| async {
                let first =
                    futures_util::stream::once(async { Ok::<_, std::io::Error>(b"<p>".to_vec()) });
                let body = axum::body::Body::from_stream(futures_util::StreamExt::chain(
                    first,
                    futures_util::stream::pending(),
                ));
                ([(header::CONTENT_LENGTH, "2000000000")], body)
            }),
        )
        .route("/big", get(|| async { "x".repeat(300 * 1024) }))
        .route(
            "/big-chunked",
            get(|| async {
                let chunks = futures_util::stream::iter(
                    (0..300).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 1024])),
                );
                axum::body::Body::from_stream(chunks)
            }),
        )
        .route(
            "/bomb",
            get(move || {
                let bomb = bomb.clone();
                async move {
                    (
                        [
                            (header::CONTENT_TYPE, "text/html"),
                            (header::CONTENT_ENCODING, "gzip"),
                        ],
                        bomb,
                    )
                }
            }),
        )
        .route(
            "/binary",
            get(|| async { ([(header::CONTENT_TYPE, "application/octet-stream")], "\0\0") }),
        )
        .route(
            "/gone",
            get(|| async { (StatusCode::NOT_FOUND, "no").into_response() as Response }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("127.0.0.1:{}", addr.port())
}

fn fetcher(origin: &str) -> SafeFetcher {
    SafeFetcher::new(FetchConfig {
        trusted_origins: vec![origin.to_string()],
        total_timeout: Duration::from_secs(2),
        max_bytes: 256 * 1024,
        per_host_interval: Duration::ZERO,
        ..Default::default()
    })
}

#[tokio::test]
async fn fixture_cases() {
    let origin = fixture().await;
    let f = fetcher(&origin);
    let url = |p: &str| format!("http://{origin}{p}");

    let page = f.fetch(&url("/page")).await.unwrap();
    assert_eq!(page.content_type, "text/html");
    assert_eq!(page.charset.as_deref(), Some("utf-8"));
    assert!(String::from_utf8_lossy(&page.bytes).contains("Hello"));

    let moved = f.fetch(&url("/to-page")).await.unwrap();
    assert_eq!(moved.final_url, url("/page"));
    assert_eq!(moved.redirects, vec![url("/page")]);

    let latin = f.fetch(&url("/latin1")).await.unwrap();
    assert_eq!(latin.charset.as_deref(), Some("ISO-8859-1"));
    assert_eq!(latin.bytes, b"<p>caf\xe9</p>");

    type Is = Box<dyn Fn(&FetchError) -> bool>;
    let cases: Vec<(&str, Is, &str)> = vec![
        (
            "/secret",
            Box::new(|e| matches!(e, FetchError::Robots(..))),
            "robots.txt",
        ),
        (
            "/to-metadata",
            Box::new(
                |e| matches!(e, FetchError::Forbidden { why, .. } if why.contains("link-local")),
            ),
            "169.254.169.254",
        ),
        (
            "/to-mapped",
            Box::new(|e| matches!(e, FetchError::Forbidden { .. })),
            "IPv4-mapped",
        ),
        (
            "/to-other-port",
            Box::new(|e| {
                matches!(
                    e,
                    FetchError::Forbidden {
                        why: "loopback",
                        ..
                    }
                )
            }),
            "loopback",
        ),
        (
            "/to-file",
            Box::new(|e| matches!(e, FetchError::Scheme(s) if s == "file")),
            "file",
        ),
        (
            "/loop",
            Box::new(|e| matches!(e, FetchError::TooManyRedirects(5))),
            "more than 5 redirects",
        ),
        (
            "/slow",
            Box::new(|e| matches!(e, FetchError::Timeout { .. })),
            "timed out",
        ),
        (
            "/drip",
            Box::new(|e| matches!(e, FetchError::Timeout { .. })),
            "timed out",
        ),
        (
            "/endless",
            Box::new(|e| matches!(e, FetchError::TooLarge { .. })),
            "larger than 262144 bytes",
        ),
        (
            "/big",
            Box::new(|e| matches!(e, FetchError::TooLarge { .. })),
            "larger than 262144 bytes",
        ),
        (
            "/big-chunked",
            Box::new(|e| matches!(e, FetchError::TooLarge { .. })),
            "larger than",
        ),
        (
            "/bomb",
            Box::new(|e| matches!(e, FetchError::TooLarge { .. })),
            "larger than",
        ),
        (
            "/binary",
            Box::new(|e| matches!(e, FetchError::ContentType { .. })),
            "application/octet-stream",
        ),
        (
            "/gone",
            Box::new(|e| matches!(e, FetchError::Status { status: 404, .. })),
            "HTTP 404",
        ),
    ];
    for (path, is, text) in cases {
        let err = f.fetch(&url(path)).await.expect_err(path);
        assert!(is(&err), "{path}: {err:?}");
        assert!(
            err.to_string().contains(text),
            "{path}: '{err}' lacks '{text}'"
        );
    }

    // Without trust, the fixture itself is refused: loopback.
    let untrusted = SafeFetcher::new(FetchConfig::default());
    let err = untrusted.fetch(&url("/page")).await.unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Forbidden {
                why: "loopback",
                ..
            }
        ),
        "{err:?}"
    );
    // With private networks allowed (self-hosted sources), robots can be turned off too.
    let open = SafeFetcher::new(FetchConfig {
        allow_private_networks: true,
        obey_robots: false,
        per_host_interval: Duration::ZERO,
        ..Default::default()
    });
    assert!(open.fetch(&url("/secret")).await.is_ok());

    // Politeness: requests to one host are spaced by the configured interval.
    let polite = SafeFetcher::new(FetchConfig {
        trusted_origins: vec![origin.clone()],
        obey_robots: false,
        per_host_interval: Duration::from_millis(300),
        ..Default::default()
    });
    let started = std::time::Instant::now();
    for _ in 0..3 {
        polite.fetch(&url("/page")).await.unwrap();
    }
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

/// Every vector is refused before a connection is made, with a reason that names it.
#[tokio::test]
async fn ssrf_matrix() {
    let f = SafeFetcher::new(FetchConfig {
        per_host_interval: Duration::ZERO,
        obey_robots: false,
        ..Default::default()
    });
    let vectors: &[(&str, &str)] = &[
        ("http://127.0.0.1/", "loopback"),
        ("http://localhost/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://127.1/", "loopback"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://0/", "unspecified"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://224.0.0.1/", "multicast"),
        ("http://255.255.255.255/", "reserved"),
        ("http://[::1]/", "loopback"),
        ("http://[::]/", "unspecified"),
        ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
        ("http://[::ffff:a9fe:a9fe]/", "IPv4-mapped"),
        ("http://[::127.0.0.1]/", "IPv4-compatible"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "unique local"),
        ("http://[fd12:3456::1]/", "unique local"),
        ("http://[ff02::1]/", "multicast"),
        ("http://[64:ff9b::a9fe:a9fe]/", "NAT64"),
        ("http://[2002:7f00:1::]/", "6to4"),
        ("http://[2001:db8::1]/", "documentation"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("ftp://example.com/", "only http and https"),
        ("http://user:pass@example.com/", "user name or password"),
        ("http://", "not a valid URL"),
    ];
    for (url, reason) in vectors {
        let err = f.fetch(url).await.expect_err(url);
        assert!(
            err.to_string().contains(reason),
            "{url}: '{err}' lacks '{reason}'"
        );
    }
    assert!(vectors.len() >= 30);
    // Public addresses pass the check (no connection is made here).
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
    ] {
        assert_eq!(
            fathom_fetch::address::refusal(ip.parse().unwrap()),
            None,
            "{ip}"
        );
    }
}

/// An HTTPS origin on loopback: a rustls server with a leaf certificate (127.0.0.1 and
/// localhost) issued by the test CA in `tests/tls`, answering every request with one page.
async fn https_fixture() -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    fathom_fetch::install_tls();
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(include_bytes!("tls/leaf.pem"))
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("tls/leaf.key")).unwrap();
    let tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses our certificate ends the handshake: nothing to serve.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = if head.starts_with(b"GET /robots.txt ") {
                    "User-agent: *\nAllow: /\n"
                } else {
                    "<html><head><title>Over TLS</title></head><body><p>Served over HTTPS.</p></body></html>"
                };
                let ct = if head.starts_with(b"GET /robots.txt ") {
                    "text/plain"
                } else {
                    "text/html"
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test]
async fn https_with_a_trusted_ca_and_refused_without() {
    let port = https_fixture().await;
    let mut trusting = FetchConfig {
        allow_private_networks: true,
        per_host_interval: Duration::ZERO,
        ..Default::default()
    };
    assert_eq!(trusting.trust_pem(include_bytes!("tls/ca.pem")), Ok(1));
    let f = SafeFetcher::new(trusting.clone());
    for host in ["127.0.0.1", "localhost"] {
        let got = f
            .fetch(&format!("https://{host}:{port}/page"))
            .await
            .unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.content_type, "text/html");
        assert!(String::from_utf8_lossy(&got.bytes).contains("Served over HTTPS"));
    }
    // The same server without the CA: the certificate is refused and the reason says so.
    let untrusting = SafeFetcher::new(FetchConfig {
        extra_roots: Vec::new(),
        ..trusting
    });
    let err = untrusting
        .fetch(&format!("https://localhost:{port}/page"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, FetchError::Connect { .. }), "{err:?}");
    assert!(text.contains("certificate"), "{text}");
    let mut bad = FetchConfig::default();
    assert_eq!(
        bad.trust_pem(b"not a certificate"),
        Err("no PEM certificate in it".into())
    );
}
