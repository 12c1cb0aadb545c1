//! A small W3C WebDriver client for browser tests: Debian's `chromedriver` driving headless
//! `chromium` (no browser is downloaded at test time). Waits are on conditions with deadlines;
//! a wait that times out panics with what the page showed and what its console said.
//!
//! The binaries are `FATHOM_CHROMEDRIVER` and `FATHOM_CHROMIUM` when set, else found on the
//! `PATH` or where Debian installs them. [`Browser::start`] fails with a message saying how to
//! install them when they are missing.
// Unsafe: kill(2) of the driver's process group when it is dropped.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// How long a wait lasts before the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session, ended (and its driver stopped) on drop.
pub struct Browser {
    http: reqwest::Client,
    driver_port: u16,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

fn find_binary(env: &str, names: &[&str], fixed: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    fixed.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// The browser and its driver, or why they cannot be used.
pub fn browser_binaries() -> Result<(PathBuf, PathBuf), String> {
    let driver = find_binary(
        "FATHOM_CHROMEDRIVER",
        &["chromedriver"],
        &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
    );
    // Debian's /usr/bin/chromium is a shell wrapper; the browser itself is under /usr/lib.
    let chromium = std::env::var_os("FATHOM_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["/usr/lib/chromium/chromium"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .or_else(|| find_binary("FATHOM_CHROMIUM", &["chromium", "chromium-browser"], &[]));
    match (driver, chromium) {
        (Some(d), Some(c)) => Ok((d, c)),
        _ => Err(
            "headless browser tests need Debian's `chromium` and `chromium-driver`: \
                  run scripts/test.sh (installs them as root) or `apt-get install -y chromium \
                  chromium-driver`; or set FATHOM_CHROMIUM and FATHOM_CHROMEDRIVER"
                .into(),
        ),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Browser {
    /// Starts chromedriver and a headless chromium with a `width` x `height` window.
    pub async fn start(width: u32, height: u32) -> Result<Browser, String> {
        let (driver_bin, chromium) = browser_binaries()?;
        let port = free_port();
        // Its own process group, so the browser it starts goes with it on drop, even when the
        // session could not be ended.
        let driver = Command::new(&driver_bin)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", driver_bin.display()))?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let http = fathom_fetch::client_builder()
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| e.to_string())?;
        let mut browser = Browser {
            http,
            driver_port: port,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = browser
                .http
                .get(format!("http://127.0.0.1:{port}/status"))
                .send()
                .await;
            if let Ok(r) = ready
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{} did not become ready", driver_bin.display()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                    "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
                    "--force-device-scale-factor=1", "--lang=en-US",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let v = browser.raw("POST", "/session", Some(caps)).await?;
        browser.session = v["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {v}"))?
            .to_string();
        browser.set_viewport(width, height).await;
        Ok(browser)
    }

    async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.driver_port);
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .json(&body.unwrap_or_else(|| json!({}))),
        };
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status();
        let v: Value = resp
            .json()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "{method} {path}: {status} {}: {}",
                v["value"]["error"].as_str().unwrap_or(""),
                v["value"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
            ));
        }
        Ok(v)
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let v = self
            .raw(method, &format!("/session/{}{path}", self.session), body)
            .await?;
        Ok(v["value"].clone())
    }

    async fn must(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.cmd(method, path, body).await {
            Ok(v) => v,
            Err(e) => panic!("webdriver: {e}\n{}", self.diagnostics().await),
        }
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        let _ = self
            .cmd(
                "POST",
                "/window/rect",
                Some(json!({"width": width, "height": height})),
            )
            .await;
    }

    /// Sizes the window so that the page itself gets `width` x `height` pixels.
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.set_window(width, height).await;
        let inner = self
            .exec("return [window.innerWidth, window.innerHeight];", vec![])
            .await;
        let (w, h) = (
            inner[0].as_u64().unwrap_or(width.into()) as u32,
            inner[1].as_u64().unwrap_or(height.into()) as u32,
        );
        if (w, h) != (width, height) {
            self.set_window(
                width + width.saturating_sub(w),
                height + height.saturating_sub(h),
            )
            .await;
        }
    }

    pub async fn goto(&self, url: &str) {
        self.must("POST", "/url", Some(json!({ "url": url }))).await;
    }

    pub async fn refresh(&self) {
        self.must("POST", "/refresh", None).await;
    }

    pub async fn current_url(&self) -> String {
        self.must("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn exec(&self, script: &str, args: Vec<Value>) -> Value {
        self.must(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Runs `script` (a function body whose last argument is the callback to call with the
    /// result) and returns what it passed back.
    pub async fn exec_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.must(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The first element matching `css`, if any.
    pub async fn find(&self, css: &str) -> Option<Element> {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .ok()?;
        v[ELEMENT].as_str().map(|s| Element(s.to_string()))
    }

    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .unwrap_or(Value::Null);
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(|s| Element(s.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until `script` returns something other than null, false, 0 or "", and returns
    /// it; `what` says what is waited for, for the failure message.
    pub async fn wait_until(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        self.wait_until_for(what, script, args, WAIT).await
    }

    pub async fn wait_until_for(
        &self,
        what: &str,
        script: &str,
        args: Vec<Value>,
        limit: Duration,
    ) -> Value {
        let deadline = Instant::now() + limit;
        let mut last_err = String::new();
        loop {
            match self
                .cmd(
                    "POST",
                    "/execute/sync",
                    Some(json!({"script": script, "args": args.clone()})),
                )
                .await
            {
                Ok(v) if truthy(&v) => return v,
                Ok(_) => {}
                Err(e) => last_err = e,
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what}{}\n{}",
                    if last_err.is_empty() {
                        String::new()
                    } else {
                        format!(" (last error: {last_err})")
                    },
                    self.diagnostics().await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a displayed element matching `css`.
    pub async fn wait_for(&self, css: &str) -> Element {
        self.wait_until(
            &format!("an element '{css}'"),
            "const e = document.querySelector(arguments[0]); \
             return !!e && (e.offsetParent !== null || getComputedStyle(e).position === 'fixed');",
            vec![json!(css)],
        )
        .await;
        self.find(css)
            .await
            .unwrap_or_else(|| panic!("'{css}' vanished"))
    }

    /// Waits until an element matching `css` contains `text`.
    pub async fn wait_for_text(&self, css: &str, text: &str) -> Element {
        self.wait_until(
            &format!("'{text}' in '{css}'"),
            "return Array.from(document.querySelectorAll(arguments[0])) \
               .some((e) => e.textContent.includes(arguments[1]));",
            vec![json!(css), json!(text)],
        )
        .await;
        self.find(css)
            .await
            .unwrap_or_else(|| panic!("'{css}' vanished"))
    }

    pub async fn click(&self, el: &Element) {
        self.must("POST", &format!("/element/{}/click", el.0), None)
            .await;
    }

    /// Finds `css` (waiting for it) and clicks it.
    pub async fn click_css(&self, css: &str) {
        let el = self.wait_for(css).await;
        self.click(&el).await;
    }

    /// Types `text` into `el` (after what it holds).
    pub async fn type_into(&self, el: &Element, text: &str) {
        self.must(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({ "text": text })),
        )
        .await;
    }

    pub async fn clear(&self, el: &Element) {
        self.must("POST", &format!("/element/{}/clear", el.0), None)
            .await;
    }

    /// Replaces the value of the field matching `css`.
    pub async fn fill(&self, css: &str, text: &str) {
        let el = self.wait_for(css).await;
        self.clear(&el).await;
        self.type_into(&el, text).await;
    }

    pub async fn text(&self, el: &Element) -> String {
        self.must("GET", &format!("/element/{}/text", el.0), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// A DOM property of `el` (`value`, `checked`, `href`, ...).
    pub async fn property(&self, el: &Element, name: &str) -> Value {
        self.must("GET", &format!("/element/{}/property/{name}", el.0), None)
            .await
    }

    /// Presses keys (W3C key codes, e.g. "\u{E004}" for Tab) in the focused element.
    pub async fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.must(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        )
        .await;
        let _ = self.cmd("DELETE", "/actions", None).await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.must("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or(""))
            .expect("screenshot is base64")
    }

    /// Saves a PNG of the window to `path`.
    pub async fn save_screenshot(&self, path: &Path) {
        let png = self.screenshot().await;
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// What the browser's console said since the last call.
    pub async fn console(&self) -> Vec<String> {
        self.cmd("POST", "/se/log", Some(json!({"type": "browser"})))
            .await
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["level"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// The page's address, its text and its console, for a failure message.
    pub async fn diagnostics(&self) -> String {
        let url = self
            .cmd("GET", "/url", None)
            .await
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let text = self
            .cmd(
                "POST",
                "/execute/sync",
                Some(json!({"script": "return document.body ? document.body.innerText : ''", "args": []})),
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let text: String = text.chars().take(4000).collect();
        format!(
            "page: {url}\n--- page text ---\n{text}\n--- console ---\n{}",
            self.console().await.join("\n")
        )
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (chromium quits), with a plain blocking request: no runtime here.
        if !self.session.is_empty()
            && let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.driver_port))
        {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        if let Ok(pgid) = i32::try_from(self.driver.id()) {
            // SAFETY: kill(2) with a negative pid signals the process group the driver leads.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
