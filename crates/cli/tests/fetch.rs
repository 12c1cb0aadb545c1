//! `fathom fetch` against a loopback page: refused by default (loopback), read with
//! `--allow-private-network`, as Markdown or JSON, with a Windows-1252 page decoded.

use std::process::Command;

use axum::Router;
use axum::http::header;
use axum::response::Redirect;
use axum::routing::get;

fn fathom(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_fathom"))
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("FATHOM_CONFIG")
        .args(args)
        .output()
        .expect("run fathom")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_prints_markdown_and_refuses_private_addresses() {
    let app = Router::new()
        .route(
            "/article",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=windows-1252")],
                    b"<html><head><title>Caf\xe9 notes</title></head><body><nav>Menu</nav><article><h1>Caf\xe9 notes</h1><h2>Beans</h2><p>Roasting changes the flavour of coffee beans in many ways, and na\xefve roasting burns them quickly.</p><p>Grinding just before brewing keeps the aroma that would otherwise be lost within minutes.</p></article></body></html>".to_vec(),
                )
            }),
        )
        .route("/old", get(|| async { Redirect::permanent("/article") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let url = format!("{base}/old");
    let refused = tokio::task::spawn_blocking({
        let url = url.clone();
        move || fathom(&["fetch", &url])
    })
    .await
    .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("is loopback") && err.contains("private addresses are not fetched"),
        "{err}"
    );

    let md = tokio::task::spawn_blocking({
        let url = url.clone();
        move || fathom(&["fetch", &url, "--allow-private-network"])
    })
    .await
    .unwrap();
    assert!(
        md.status.success(),
        "{}",
        String::from_utf8_lossy(&md.stderr)
    );
    let text = String::from_utf8_lossy(&md.stdout);
    assert!(text.starts_with("# Café notes\n"), "{text}");
    assert!(text.contains("naïve roasting"), "{text}");
    assert!(!text.contains("Menu"), "boilerplate dropped: {text}");

    let js = tokio::task::spawn_blocking(move || {
        fathom(&["fetch", &url, "--allow-private-network", "--json"])
    })
    .await
    .unwrap();
    assert!(js.status.success());
    let v: serde_json::Value = serde_json::from_slice(&js.stdout).unwrap();
    assert_eq!(v["title"], "Café notes");
    assert_eq!(v["charset"], "windows-1252");
    assert_eq!(v["final_url"], format!("{base}/article"));
    assert_eq!(v["redirects"].as_array().unwrap().len(), 1);
}
