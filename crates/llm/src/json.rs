//! JSON from models that do not always write clean JSON.

use serde_json::Value;

/// The JSON in a model's answer: the whole text if it parses; else the inside of a
/// ```json fence; else the first JSON value found in it (see [`json_values`]); each also
/// tried with trailing commas removed. None when there is no JSON to be found.
pub fn parse_loose_json(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Some(v) = lenient(text) {
        return Some(v);
    }
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        let body = after.split_once('\n').map_or(after, |(_, rest)| rest);
        if let Some(end) = body.find("```")
            && let Some(v) = lenient(body[..end].trim())
        {
            return Some(v);
        }
    }
    json_values(text).next()
}

/// Opening brackets a scan tries, and how far each is followed.
const MAX_STARTS: usize = 64;
const MAX_SPAN: usize = 64 * 1024;

/// The JSON values written in `text`, left to right and not overlapping: each balanced
/// `{...}` or `[...]` that parses (trailing commas tolerated), wherever it stands (prose,
/// fences, tags). A value found is skipped as a whole, so its inner brackets are not tried.
/// Bounded: at most 64 opening brackets are tried, each followed for at most 64 KiB.
pub(crate) fn json_values(text: &str) -> impl Iterator<Item = Value> + '_ {
    let mut pos = 0;
    let mut tries = 0;
    std::iter::from_fn(move || {
        while tries < MAX_STARTS {
            let start = pos + text.get(pos..)?.find(['{', '['])?;
            tries += 1;
            let found = balanced_end(&text[start..], MAX_SPAN)
                .and_then(|end| Some((end, lenient(&text[start..start + end])?)));
            match found {
                Some((end, v)) => {
                    pos = start + end;
                    return Some(v);
                }
                // Both brackets are one byte, so the next character starts right after.
                None => pos = start + 1,
            }
        }
        None
    })
}

/// Strict parse, else with trailing commas dropped.
fn lenient(s: &str) -> Option<Value> {
    serde_json::from_str::<Value>(s)
        .ok()
        .or_else(|| serde_json::from_str(&drop_trailing_commas(s)).ok())
}

/// Whether a scan of JSON text is inside a string literal (escapes minded).
#[derive(Default)]
struct StringTracker {
    in_str: bool,
    escaped: bool,
}

impl StringTracker {
    /// Takes the next character; true if it is part of a string literal (quotes included).
    fn in_string(&mut self, c: char) -> bool {
        if self.in_str {
            match c {
                _ if self.escaped => self.escaped = false,
                '\\' => self.escaped = true,
                '"' => self.in_str = false,
                _ => {}
            }
            return true;
        }
        self.in_str = c == '"';
        self.in_str
    }
}

/// Where the bracket opening `s` closes (byte index after it), minding strings.
fn balanced_end(s: &str, limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut strings = StringTracker::default();
    for (i, c) in s.char_indices().take_while(|(i, _)| *i < limit) {
        if strings.in_string(c) {
            continue;
        }
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `[1, 2,]` → `[1, 2]`, outside strings.
fn drop_trailing_commas(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut strings = StringTracker::default();
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !strings.in_string(c) && c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// A schema made acceptable to strict structured output (OpenAI's `strict: true`): every
/// object lists all its properties as required and allows no others.
pub fn strict_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), strict_schema(v)))
                .collect();
            if out.get("type") == Some(&Value::String("object".into()))
                && let Some(Value::Object(props)) = out.get("properties")
            {
                let names: Vec<Value> = props.keys().cloned().map(Value::String).collect();
                out.insert("required".into(), Value::Array(names));
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict_schema).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn loose_json_is_found_in_fences_prose_and_trailing_commas() {
        assert_eq!(parse_loose_json(r#"{"a": 1}"#), Some(json!({"a": 1})));
        assert_eq!(
            parse_loose_json("Here you go:\n```json\n{\"a\": [1, 2,],}\n```\nDone."),
            Some(json!({"a": [1, 2]}))
        );
        assert_eq!(
            parse_loose_json(r#"Sure! The plan is {"queries": ["a {b}", "c\"}"]} as asked."#),
            Some(json!({"queries": ["a {b}", "c\"}"]}))
        );
        assert_eq!(parse_loose_json("no json here"), None);
        assert_eq!(parse_loose_json(r#"{"a": 1"#), None);
    }

    #[test]
    fn json_values_are_found_in_order_each_taken_whole() {
        let text = "Two calls:\n<tool_call>{\"a\": {\"b\": [1]}}</tool_call>\n```json\n[2, 3,]\n```\nnot {json} and {\"c\": \"}{\"}";
        let found: Vec<Value> = json_values(text).collect();
        // The inner `{"b": [1]}` and `[1]` are not found again; `{json}` is skipped.
        assert_eq!(
            found,
            [json!({"a": {"b": [1]}}), json!([2, 3]), json!({"c": "}{"})]
        );
        // Bounded: brackets that never close are given up after 64 tries.
        let text = format!("{}{}", "{".repeat(100), r#"{"late": true}"#);
        assert_eq!(json_values(&text).count(), 0);
        let text = format!("{}{}", "{ ".repeat(10), r#"{"early": true}"#);
        assert_eq!(
            json_values(&text).collect::<Vec<_>>(),
            [json!({"early": true})]
        );
    }

    #[test]
    fn strict_schemas_require_everything_and_allow_nothing_else() {
        let s = strict_schema(&json!({"type": "object", "properties": {
            "q": {"type": "string"},
            "opts": {"type": "object", "properties": {"n": {"type": "integer"}}}}}));
        assert_eq!(s["required"], json!(["opts", "q"]));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["opts"]["required"], json!(["n"]));
        // Length limits are kept: they are how a schema keeps a small model's answer short.
        let s = strict_schema(&json!({"type": "object", "properties": {
            "facts": {"type": "array", "maxItems": 12,
                      "items": {"type": "string", "minLength": 1, "maxLength": 300}}}}));
        let facts = &s["properties"]["facts"];
        assert_eq!(facts["maxItems"], json!(12));
        assert_eq!(facts["items"]["maxLength"], json!(300));
        assert_eq!(facts["items"]["minLength"], json!(1));
    }
}
