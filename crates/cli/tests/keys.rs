//! API keys with roles on a real `fathom serve`: a keys file made with `fathom keys hash`,
//! one key per role; each role's allowed and refused routes; who decided on a plan, when and
//! on which round, in the session, on the stream and in `fathom sessions show`; a `run` key
//! that may cancel its own runs and no other.

mod common;
#[path = "common/served.rs"]
mod served;

use common::{fathom_on, ok};
use fathom_store::Dialect;
use serde_json::{Value, json};
use served::*;

const KEYS: [(&str, &str, &str); 5] = [
    ("reader", "read", "key-read-1"),
    ("runner", "run", "key-run-1"),
    ("runner2", "run", "key-run-2"),
    ("approver", "approve", "key-approve-1"),
    ("boss", "admin", "key-admin-1"),
];

struct Client {
    http: reqwest::Client,
    api: String,
    root: String,
}

impl Client {
    async fn call(
        &self,
        method: reqwest::Method,
        url: String,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, url);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str, key: Option<&str>) -> (u16, Value) {
        self.call(
            reqwest::Method::GET,
            format!("{}{path}", self.api),
            key,
            None,
        )
        .await
    }

    async fn post(&self, path: &str, key: Option<&str>, body: Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            format!("{}{path}", self.api),
            key,
            Some(body),
        )
        .await
    }

    async fn start(&self, key: &str) -> String {
        let (status, body) = self
            .post(
                "/workflows/deep-research/run-nowait",
                Some(key),
                json!({"start_event": {"query": QUESTION}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["handler_id"].as_str().unwrap().to_string()
    }

    /// The stream of run `id` read with `key` until an event matches `until`.
    async fn stream_until(
        &self,
        id: &str,
        key: &str,
        until: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        use eventsource_stream::Eventsource;
        use futures_util::StreamExt;
        let resp = self
            .http
            .get(format!("{}/events/{id}?api_key={key}", self.api))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut events = resp.bytes_stream().eventsource();
        let mut seen = Vec::new();
        tokio::time::timeout(DEADLINE, async {
            while let Some(Ok(ev)) = events.next().await {
                let v: Value = serde_json::from_str(&ev.data).unwrap();
                let done = until(&v);
                seen.push(v);
                if done {
                    return;
                }
            }
            panic!("the stream of {id} ended first: {seen:?}");
        })
        .await
        .expect("the event within the deadline");
        seen
    }

    async fn session(&self, id: &str) -> Value {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                format!("{}/api/v1/beta/agent-data/:search", self.root),
                Some("key-read-1"),
                Some(
                    json!({"deployment_name": "_public", "collection": "research-sessions",
                            "filter": {"research_id": {"eq": id}}}),
                ),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["items"][0]["data"].clone()
    }

    async fn wait_status(&self, id: &str, want: &str) {
        wait_until(&format!("{id} {want}"), || async {
            self.get(&format!("/handlers/{id}"), Some("key-read-1"))
                .await
                .1["status"]
                == want
        })
        .await;
    }
}

fn is_plan(v: &Value) -> bool {
    v["type"] == "ToolCallResult" && v["value"]["tool_name"] == "decompose_query"
}

fn decision_of(v: &Value) -> Option<Value> {
    (v["type"] == "AgentInput")
        .then(|| v["value"]["input"][0]["additional_kwargs"]["decision"].clone())
        .filter(|d| d.is_object())
}

fn refused(answer: &(u16, Value), name: &str, role: &str, needs: &str) {
    assert_eq!(answer.0, 403, "{}", answer.1);
    let detail = answer.1["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(&format!("this key ({name}) has role {role}; "))
            && detail.ends_with(&format!("needs role {needs}")),
        "{detail}"
    );
}

async fn keys_with_roles(dialect: Dialect) {
    let env = env(dialect).await;
    // The keys file, one line at a time from `fathom keys hash` (the key on stdin).
    let entries: Vec<Value> = KEYS
        .iter()
        .map(|(name, role, key)| {
            let line = ok(&fathom_on(
                &env.db,
                env.tmp.path(),
                &["keys", "hash", "--name", name, "--role", role],
                &format!("{key}\n"),
            ));
            let entry: Value = serde_json::from_str(line.trim()).unwrap();
            assert_eq!(entry["name"], *name);
            assert_eq!(entry["sha256"].as_str().unwrap().len(), 64);
            assert!(!line.contains(key), "the key itself is not printed");
            entry
        })
        .collect();
    let keys_file = env.tmp.path().join("keys.json");
    std::fs::write(&keys_file, serde_json::to_string_pretty(&entries).unwrap()).unwrap();
    let served = Served::spawn(
        &env,
        &["serve", "--keys-file", keys_file.to_str().unwrap()],
        &[],
        "serving deployment",
    );
    let c = Client {
        http: http(),
        api: served.api(),
        root: served.root.clone(),
    };

    // 401: no key, an unknown one; health stays open.
    assert_eq!(c.get("/workflows", None).await.0, 401);
    assert_eq!(c.get("/workflows", Some("key-nobody")).await.0, 401);
    assert_eq!(c.get("/health", None).await.0, 200);

    // read: every read, nothing else.
    assert_eq!(c.get("/workflows", Some("key-read-1")).await.0, 200);
    assert_eq!(c.get("/handlers", Some("key-read-1")).await.0, 200);
    let start = json!({"start_event": {"query": QUESTION}});
    refused(
        &c.post(
            "/workflows/deep-research/run-nowait",
            Some("key-read-1"),
            start.clone(),
        )
        .await,
        "reader",
        "read",
        "run",
    );
    let item = json!({"deployment_name": "_public", "collection": "notes", "data": {"a": 1}});
    let agent_data = format!("{}/api/v1/beta/agent-data", c.root);
    refused(
        &c.call(
            reqwest::Method::POST,
            agent_data.clone(),
            Some("key-read-1"),
            Some(item.clone()),
        )
        .await,
        "reader",
        "read",
        "admin",
    );

    // run: starts runs and follows them; may not decide or write Agent Data.
    let mine = c.start("key-run-1").await;
    c.stream_until(&mine, "key-run-1", is_plan).await;
    c.wait_status(&mine, "running").await;
    let approve = json!({"event": {"type": "ApproveEvent", "value": {"approved": true}}});
    refused(
        &c.post(
            &format!("/events/{mine}"),
            Some("key-run-1"),
            approve.clone(),
        )
        .await,
        "runner",
        "run",
        "approve",
    );
    refused(
        &c.call(
            reqwest::Method::POST,
            agent_data.clone(),
            Some("key-approve-1"),
            Some(item.clone()),
        )
        .await,
        "approver",
        "approve",
        "admin",
    );
    assert_eq!(
        c.call(
            reqwest::Method::POST,
            agent_data,
            Some("key-admin-1"),
            Some(item)
        )
        .await
        .0,
        200
    );

    // approve: a rejection with feedback, then an approval whose `by` is forged: the server
    // says who sent each, and the plan round each was on.
    let reject = json!({"event": {"type": "ApproveEvent",
        "value": {"approved": false, "feedback": "cover borrowing too", "by": "mallory"}}});
    let sent = c
        .post(&format!("/events/{mine}"), Some("key-approve-1"), reject)
        .await;
    assert_eq!(sent.0, 200, "{}", sent.1);
    let seen = c
        .stream_until(&mine, "key-read-1", |v| {
            is_plan(v) && v["value"]["tool_kwargs"]["feedback"][0] == "cover borrowing too"
        })
        .await;
    let rejected = seen
        .iter()
        .find_map(decision_of)
        .expect("the rejection streamed");
    assert_eq!(rejected["action"], "rejected");
    assert_eq!(rejected["by"], "approver");
    assert_eq!(rejected["plan_round"], 1);
    assert_eq!(rejected["feedback"], "cover borrowing too");
    c.wait_status(&mine, "running").await;
    wait_until("the second plan at the gate", || async {
        c.session(&mine).await["status"] == "awaiting_approval"
    })
    .await;
    let forged = json!({"event": {"type": "ApproveEvent",
        "value": {"approved": true, "by": "mallory", "at": "1999-01-01T00:00:00Z"}}});
    let sent = c
        .post(&format!("/events/{mine}"), Some("key-approve-1"), forged)
        .await;
    assert_eq!(sent.0, 200, "{}", sent.1);
    let seen = c
        .stream_until(&mine, "key-read-1", |v| v["type"] == "ResearchResult")
        .await;
    let decisions: Vec<Value> = seen.iter().filter_map(decision_of).collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    let approved = &decisions[1];
    assert_eq!(approved["action"], "approved");
    assert_eq!(
        approved["by"], "approver",
        "the sender's `by` is overwritten"
    );
    assert_eq!(approved["plan_round"], 2);
    assert_ne!(approved["at"], "1999-01-01T00:00:00Z");
    assert!(
        seen.iter()
            .any(|v| v["value"]["input"][0]["blocks"][0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("plan round 2 approved by approver at "))),
        "the decision is said in words too"
    );
    c.wait_status(&mine, "completed").await;
    let session = c.session(&mine).await;
    let recorded = session["decisions"].as_array().expect("decisions");
    assert_eq!(recorded.len(), 2, "{session}");
    assert_eq!(recorded[0]["by"], "approver");
    assert_eq!(recorded[0]["plan_round"], 1);
    assert_eq!(recorded[1]["by"], "approver");
    assert_eq!(recorded[1]["plan_round"], 2);
    assert_eq!(recorded[1]["at"], approved["at"]);

    // Cancels: a `run` key cancels its own run, not another key's; admin cancels any; purge
    // is admin's.
    let theirs = c.start("key-run-2").await;
    c.stream_until(&theirs, "key-run-2", is_plan).await;
    refused(
        &c.post(
            &format!("/handlers/{theirs}/cancel"),
            Some("key-run-1"),
            json!({}),
        )
        .await,
        "runner",
        "run",
        "admin",
    );
    refused(
        &c.post(
            &format!("/handlers/{theirs}/cancel?purge=true"),
            Some("key-run-2"),
            json!({}),
        )
        .await,
        "runner2",
        "run",
        "admin",
    );
    let cancelled = c
        .post(
            &format!("/handlers/{theirs}/cancel"),
            Some("key-run-2"),
            json!({}),
        )
        .await;
    assert_eq!(cancelled.0, 200, "{}", cancelled.1);
    let seen = c
        .stream_until(&theirs, "key-read-1", |v| {
            v["type"] == "WorkflowCancelledEvent"
        })
        .await;
    assert_eq!(seen.last().unwrap()["value"], json!({"by": "runner2"}));
    wait_until("the cancel in the session", || async {
        c.session(&theirs).await["status"] == "cancelled"
    })
    .await;
    let session = c.session(&theirs).await;
    assert_eq!(session["decisions"][0]["action"], "cancelled");
    assert_eq!(session["decisions"][0]["by"], "runner2");
    let third = c.start("key-run-1").await;
    let by_admin = c
        .post(
            &format!("/handlers/{third}/cancel?purge=true"),
            Some("key-admin-1"),
            json!({}),
        )
        .await;
    assert_eq!(by_admin.0, 200, "{}", by_admin.1);
    drop(served);

    let shown = ok(&fathom_on(
        &env.db,
        env.tmp.path(),
        &["sessions", "show", &mine],
        "",
    ));
    assert!(
        shown.contains("decision  plan round 1 rejected by approver at ")
            && shown.contains(": cover borrowing too")
            && shown.contains("decision  plan round 2 approved by approver at "),
        "{shown}"
    );
    let shown = ok(&fathom_on(
        &env.db,
        env.tmp.path(),
        &["sessions", "show", &theirs],
        "",
    ));
    assert!(
        shown.contains("decision  run cancelled by runner2 at "),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_roles_sqlite() {
    keys_with_roles(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_roles_postgres() {
    keys_with_roles(Dialect::Postgres).await;
}

/// Without keys, on loopback: every route as before, decisions recorded with `by` null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_keys_decisions_are_anonymous() {
    let env = env(Dialect::Sqlite).await;
    let served = Served::start(&env, "w1", None);
    let client = http();
    let id = start_run(&client, &served.api()).await;
    approve(&client, &served.api(), &id).await;
    let events = follow_to_end(client.clone(), served.api(), id.clone()).await;
    let decision = events
        .iter()
        .find_map(|(_, v)| decision_of(v))
        .expect("the decision streamed");
    assert_eq!(decision["by"], Value::Null);
    assert_eq!(decision["action"], "approved");
    drop(served);
    let shown = ok(&fathom_on(
        &env.db,
        env.tmp.path(),
        &["sessions", "show", &id],
        "",
    ));
    assert!(
        shown.contains("decision  plan round 1 approved by anonymous at "),
        "{shown}"
    );
}

/// A keys file with a mistake is refused at start, saying which entry.
#[test]
fn a_bad_keys_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.json");
    std::fs::write(&file, r#"[{"name": "x", "role": "root", "sha256": "00"}]"#).unwrap();
    let db = format!("sqlite://{}", dir.path().join("f.db").display());
    let out = fathom_on(
        &db,
        dir.path(),
        &[
            "serve",
            "--port",
            "0",
            "--keys-file",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("entry 1"), "{err}");
}
