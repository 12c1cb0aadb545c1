//! The models' side of a deep-research run, scripted.

use crate::llm::Reply;

/// The system prompt of a chat-completions request.
pub fn system_prompt(body: &serde_json::Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The last message of a chat-completions request.
pub fn last_message(body: &serde_json::Value) -> serde_json::Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default()
}

/// The models' side of a deep-research run, for [`crate::llm::Server`]: chosen by
/// role (the system prompt) and by where the conversation stands, so it answers the same in
/// every process. The planner plans `alpha`, `beta`, `gamma`; each researcher searches its
/// task (slowly, so parallel researchers overlap), reads the first result and reports one
/// fact from it plus one tied to a URL it never read; the first reflection (one task done
/// or two) swaps what is left for `delta`, later ones complete; the writer cites source 1,
/// a source 9 that does not exist, and source 2.
pub fn scripted_agent() -> impl Fn(&serde_json::Value, usize) -> Reply + Send + Sync {
    |body, _| {
        let sys = system_prompt(body);
        if sys.starts_with("You are the planner") {
            return Reply::Text(vec![
                "{\"clarifying_questions\": [], \"queries\": [\"alpha\", \"beta\", ".into(),
                "\"gamma\"], \"outline\": [\"Overview\", \"Details\"]}".into(),
            ]);
        }
        if sys.starts_with("You review research") {
            let brief = last_message(body)["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            return if brief.contains("- delta") {
                Reply::text(r#"{"decision": "complete", "tasks": [], "reason": "enough"}"#)
            } else {
                Reply::text(
                    r#"{"decision": "adjust", "tasks": ["delta"], "reason": "gamma is covered; delta is missing"}"#,
                )
            };
        }
        if sys.starts_with("You write one section") {
            return Reply::Text(vec![
                "The survey measured 42 units in 2024 [1]. ".into(),
                "A claim that cites nothing read [9]. ".into(),
                "Later work agreed with it [2].".into(),
            ]);
        }
        let msg = last_message(body);
        let content = msg["content"].as_str().unwrap_or("").to_string();
        match msg["role"].as_str().unwrap_or("") {
            "user" if body["tools"].is_array() => {
                let task = content
                    .rsplit("Your task: ")
                    .next()
                    .unwrap_or("")
                    .to_string();
                Reply::Delayed(
                    300,
                    Box::new(Reply::ToolCalls(vec![(
                        "call_s".into(),
                        "web_search".into(),
                        vec!["{\"query\": ".into(), format!("\"{task}\"}}")],
                    )])),
                )
            }
            "tool" => match content.split('<').nth(1).and_then(|r| r.split('>').next()) {
                Some(url) => Reply::call("call_f", "fetch_url", serde_json::json!({"url": url})),
                None => {
                    let url = content
                        .lines()
                        .nth(1)
                        .unwrap_or("")
                        .trim_start_matches("URL: ");
                    Reply::text(&format!(
                        "{{\"findings\": [{{\"fact\": \"It was measured at 42 units in 2024.\", \"url\": \"{url}\"}}, \
                         {{\"fact\": \"Made up from a page never read.\", \"url\": \"http://elsewhere.test/x\"}}]}}"
                    ))
                }
            },
            _ => Reply::text("{\"findings\": []}"),
        }
    }
}
