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

/// The task a researcher was given: the line after "Your task: " in its first message.
pub fn task_of(ask: &str) -> String {
    ask.split_once("Your task: ")
        .map_or("", |(_, rest)| rest.lines().next().unwrap_or(""))
        .to_string()
}

/// The models' side of a deep-research run, for [`crate::llm::Server`]: chosen by
/// role (the system prompt) and by where the conversation stands, so it answers the same in
/// every process. The planner plans `alpha`, `beta`, `gamma`; each researcher searches its
/// task (slowly, so parallel researchers overlap), reads the first result and reports one
/// fact from it plus one tied to a URL it never read; the first reflection (one task done
/// or two) swaps what is left for `delta`, later ones complete; the writer's first section
/// cites source 1, a source 9 that does not exist, and source 1 again for a number no source
/// gives; its second says the first section's first sentence again and cites source 2; the
/// verifier finds no claim it is asked about supported.
pub fn scripted_agent() -> impl Fn(&serde_json::Value, usize) -> Reply + Send + Sync {
    |body, _| {
        let sys = system_prompt(body);
        if sys.starts_with("You route questions") {
            return Reply::text(r#"{"kind": "explanation", "reason": "it needs several sources"}"#);
        }
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
            let ask = last_message(body)["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if ask.contains("Section to write: Overview") {
                return Reply::Text(vec![
                    "The survey measured 42 units in 2024 [1]. ".into(),
                    "A claim that cites nothing read [9]. ".into(),
                    "The survey team counted 17 units [1].".into(),
                ]);
            }
            return Reply::Text(vec![
                "The survey measured 42 units in 2024 [1]. ".into(),
                "A second paragraph about beta keeps the page long enough to be an article [2]."
                    .into(),
            ]);
        }
        if sys.starts_with("You check a report's citations") {
            return Reply::text(
                r#"{"supported": false, "reason": "the passage gives another number"}"#,
            );
        }
        let msg = last_message(body);
        let content = msg["content"].as_str().unwrap_or("").to_string();
        match msg["role"].as_str().unwrap_or("") {
            "user" if body["tools"].is_array() => {
                let task = task_of(&content);
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

/// A model that follows the protocol but not the prompts, as small local models do: it plans
/// and reflects in prose where JSON was asked for; a researcher writes its first tool call
/// as fenced JSON in its text (not in `tool_calls`) with arguments made from the tool's
/// schema alone (each property's description as its value), then reads a URL that was in
/// no result, then reports either nothing (`{"findings": []}`, when its task has an even
/// number of characters) or a fact tied to that invented URL; the writer writes prose with
/// no citation; the verifier says "yes" in prose.
pub fn naive_agent() -> impl Fn(&serde_json::Value, usize) -> Reply + Send + Sync {
    |body, _| {
        let sys = system_prompt(body);
        if !sys.starts_with("You are a researcher") {
            if sys.starts_with("You write one section") {
                return Reply::text(
                    "This section covers the subject in some depth. It is interesting.",
                );
            }
            return Reply::text("Sure, that sounds good to me. Yes.");
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let task = task_of(
            messages
                .get(1)
                .and_then(|m| m["content"].as_str())
                .unwrap_or(""),
        );
        let tool_results = messages.iter().filter(|m| m["role"] == "tool").count();
        if body["tools"].is_array() && tool_results == 0 {
            let tool = &body["tools"][0]["function"];
            let mut args = serde_json::Map::new();
            if let Some(props) = tool["parameters"]["properties"].as_object() {
                for (name, schema) in props {
                    let placeholder = schema["description"].as_str().unwrap_or(name);
                    args.insert(name.clone(), placeholder.into());
                }
            }
            let call = serde_json::json!({"name": tool["name"], "arguments": args});
            return Reply::text(&format!("I will search first.\n```json\n{call}\n```"));
        }
        if body["tools"].is_array() && tool_results == 1 {
            return Reply::call(
                "call_f",
                "fetch_url",
                serde_json::json!({"url": "https://invented.example/article"}),
            );
        }
        if task.chars().count().is_multiple_of(2) {
            Reply::text("{\"findings\": []}")
        } else {
            Reply::text(
                "{\"findings\": [{\"fact\": \"It was measured at 42 units in 2024 by the survey team.\", \
                 \"url\": \"https://invented.example/article\"}]}",
            )
        }
    }
}
