//! Tool calls written as text. Small local models (Qwen2.5-Coder behind a llama-server that
//! does not parse its tool-call format, for one) answer a request that offered tools with the
//! call in `content`: a ```json fence, a bare object, Hermes `<tool_call>` tags, an array.

use serde_json::{Map, Value};

use crate::json::{json_values, parse_loose_json};
use crate::types::{ToolCallRequest, ToolSpec};

/// Calls taken from one answer, at most.
const MAX_CALLS: usize = 8;
/// Elements of one array looked at, at most.
const MAX_ELEMENTS: usize = 32;
/// Keys models use for the tool's name, and for its arguments, in order of preference.
const NAME_KEYS: [&str; 4] = ["name", "tool", "tool_name", "function"];
const ARGUMENT_KEYS: [&str; 5] = ["arguments", "parameters", "args", "kwargs", "input"];

/// The tool calls written as JSON text in `content`: objects like
/// `{"name": "web_search", "arguments": {...}}` (or `tool`/`tool_name`/`function` for the
/// name, `parameters`/`args`/`kwargs`/`input` for the arguments, which may be an object or
/// JSON text), bare, fenced, in `<tool_call>` tags or in an array; several in one answer.
/// Only calls of a tool in `tools` count. Ids are `text-call-0`, `text-call-1`, ...;
/// `arguments` is the arguments object as JSON text. A call written twice is taken once.
/// Bounded: at most 8 calls, found by the bounded scan of [`parse_loose_json`].
pub fn calls_in_text(content: &str, tools: &[ToolSpec]) -> Vec<ToolCallRequest> {
    let mut found = Vec::new();
    if tools.is_empty() {
        return Vec::new();
    }
    for value in json_values(content) {
        collect(&value, tools, &mut found, 0);
        if found.len() >= MAX_CALLS {
            break;
        }
    }
    found
        .into_iter()
        .enumerate()
        .map(|(i, (name, arguments))| ToolCallRequest {
            id: format!("text-call-{i}"),
            name,
            arguments,
        })
        .collect()
}

/// Adds the calls in `value` to `found` (name, argument text), descending into arrays and
/// `{"tool_calls": [...]}` at most twice.
fn collect(value: &Value, tools: &[ToolSpec], found: &mut Vec<(String, String)>, depth: u8) {
    if depth > 2 {
        return;
    }
    match value {
        Value::Array(items) => {
            for item in items.iter().take(MAX_ELEMENTS) {
                if found.len() >= MAX_CALLS {
                    return;
                }
                collect(item, tools, found, depth + 1);
            }
        }
        Value::Object(map) => {
            if let Some(calls @ Value::Array(_)) = map.get("tool_calls") {
                return collect(calls, tools, found, depth + 1);
            }
            if let Some(call) = as_call(map, tools)
                && found.len() < MAX_CALLS
                && !found.contains(&call)
            {
                found.push(call);
            }
        }
        _ => {}
    }
}

/// The call an object describes: the tool's name and its arguments as JSON text.
fn as_call(map: &Map<String, Value>, tools: &[ToolSpec]) -> Option<(String, String)> {
    // `{"type": "function", "function": {"name": ..., "arguments": ...}}`, as the API
    // writes calls.
    let map = match map.get("function") {
        Some(Value::Object(inner)) => inner,
        _ => map,
    };
    let name = NAME_KEYS
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))?
        .trim();
    let tool = tools.iter().find(|t| t.name == name)?;
    let arguments = match ARGUMENT_KEYS.iter().find_map(|k| map.get(*k)) {
        Some(Value::Object(args)) => Value::Object(args.clone()),
        Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(text)) => match parse_loose_json(text) {
            Some(v @ Value::Object(_)) => v,
            _ => return None,
        },
        Some(_) => return None,
        None => flat_arguments(map, tool)?,
    };
    Some((tool.name.clone(), arguments.to_string()))
}

/// `{"name": "web_search", "query": "..."}`: the arguments written beside the name. Taken
/// only when every other key is a parameter of the tool, so that an object which merely
/// names a tool is not mistaken for a call.
fn flat_arguments(map: &Map<String, Value>, tool: &ToolSpec) -> Option<Value> {
    let params = tool
        .parameters
        .get("properties")
        .and_then(Value::as_object)?;
    let mut args = Map::new();
    for (k, v) in map {
        if NAME_KEYS.contains(&k.as_str()) || k == "type" || k == "id" {
            continue;
        }
        if !params.contains_key(k) {
            return None;
        }
        args.insert(k.clone(), v.clone());
    }
    Some(Value::Object(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        let tool = |name: &str, param: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {param: {"type": "string"}}}),
        };
        vec![tool("web_search", "query"), tool("fetch_url", "url")]
    }

    /// (id, name, arguments) of the calls found.
    fn found(content: &str) -> Vec<(String, String, Value)> {
        calls_in_text(content, &tools())
            .into_iter()
            .map(|c| {
                let args: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
                (c.id, c.name, args)
            })
            .collect()
    }

    fn call(i: usize, name: &str, args: Value) -> (String, String, Value) {
        (format!("text-call-{i}"), name.to_string(), args)
    }

    #[test]
    fn a_fenced_call_as_qwen_writes_it_is_found() {
        let got = found(
            "```json\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"rust ownership\"}}\n```",
        );
        assert_eq!(
            got,
            [call(0, "web_search", json!({"query": "rust ownership"}))]
        );
        // With prose around it, and the arguments as JSON text.
        let got = found(
            "I'll search for that.\n\n```json\n{\n  \"name\": \"web_search\",\n  \"arguments\": \"{\\\"query\\\": \\\"borrow checker\\\"}\"\n}\n```\n\nThen I will read the results.",
        );
        assert_eq!(
            got,
            [call(0, "web_search", json!({"query": "borrow checker"}))]
        );
    }

    #[test]
    fn hermes_tags_arrays_and_several_fences_give_several_calls_in_order() {
        let hermes = "<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"tokio runtime\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"fetch_url\", \"arguments\": {\"url\": \"https://tokio.rs\"}}\n</tool_call>";
        let both = [
            call(0, "web_search", json!({"query": "tokio runtime"})),
            call(1, "fetch_url", json!({"url": "https://tokio.rs"})),
        ];
        assert_eq!(found(hermes), both);
        let array = r#"[{"name": "web_search", "arguments": {"query": "tokio runtime"}},
                        {"name": "fetch_url", "arguments": {"url": "https://tokio.rs"}},]"#;
        assert_eq!(found(array), both);
        let fences = "First:\n```json\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"tokio runtime\"}}\n```\nand then:\n```json\n{\"name\": \"fetch_url\", \"arguments\": {\"url\": \"https://tokio.rs\"}}\n```";
        assert_eq!(found(fences), both);
        let wrapped = r#"{"tool_calls": [{"type": "function", "function": {"name": "web_search", "arguments": "{\"query\": \"tokio runtime\"}"}}, {"type": "function", "function": {"name": "fetch_url", "arguments": {"url": "https://tokio.rs"}}}]}"#;
        assert_eq!(found(wrapped), both);
    }

    #[test]
    fn other_key_names_and_the_flat_form_are_understood() {
        let q = json!({"query": "q"});
        for text in [
            r#"{"tool": "web_search", "parameters": {"query": "q"}}"#,
            r#"{"tool_name": "web_search", "args": {"query": "q"}}"#,
            r#"{"function": "web_search", "kwargs": {"query": "q"}}"#,
            r#"{"name": "web_search", "input": {"query": "q"}}"#,
            r#"{"name": "web_search", "query": "q"}"#,
        ] {
            assert_eq!(found(text), [call(0, "web_search", q.clone())], "{text}");
        }
        assert_eq!(
            found(r#"{"name": "web_search"}"#),
            [call(0, "web_search", json!({}))]
        );
    }

    #[test]
    fn unknown_tools_non_calls_and_repeats_yield_nothing_more() {
        assert_eq!(
            found(r#"{"name": "delete_everything", "arguments": {"query": "x"}}"#),
            []
        );
        // Naming a tool is not calling it; neither is arguments that are not an object.
        assert_eq!(
            found(r#"{"name": "web_search", "description": "Search the web"}"#),
            []
        );
        assert_eq!(found(r#"{"name": "web_search", "arguments": "rust"}"#), []);
        assert_eq!(found("Rust has no GC {really} [1]."), []);
        assert_eq!(found(r#"{"queries": ["a", "b"]}"#), []);
        assert!(calls_in_text(r#"{"name": "web_search"}"#, &[]).is_empty());
        // An unknown call beside a known one: only the known one.
        let mixed = r#"[{"name": "shell", "arguments": {"cmd": "ls"}},
                        {"name": "fetch_url", "arguments": {"url": "u"}}]"#;
        assert_eq!(found(mixed), [call(0, "fetch_url", json!({"url": "u"}))]);
        // The same call twice (tags, then a fence) is one call.
        let twice = "<tool_call>{\"name\": \"web_search\", \"arguments\": {\"query\": \"q\"}}</tool_call>\n```json\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"q\"}}\n```";
        assert_eq!(found(twice), [call(0, "web_search", json!({"query": "q"}))]);
    }

    #[test]
    fn at_most_eight_calls_are_taken() {
        let many: Vec<Value> = (0..20)
            .map(|i| json!({"name": "web_search", "arguments": {"query": format!("q{i}")}}))
            .collect();
        let got = found(&Value::Array(many).to_string());
        assert_eq!(got.len(), 8);
        assert_eq!(got[7], call(7, "web_search", json!({"query": "q7"})));
    }
}
