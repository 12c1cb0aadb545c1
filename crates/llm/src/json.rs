//! JSON from models that do not always write clean JSON.

use serde_json::Value;

/// The JSON in a model's answer: the whole text if it parses; else the inside of a
/// ```json fence; else the first balanced `{...}` or `[...]` in it; each also tried with
/// trailing commas removed. None when there is no JSON to be found. Bounded: the first 64
/// opening brackets are tried, each scanned for at most 64 KiB.
pub fn parse_loose_json(text: &str) -> Option<Value> {
    let text = text.trim();
    let attempt = |s: &str| {
        serde_json::from_str::<Value>(s)
            .ok()
            .or_else(|| serde_json::from_str(&drop_trailing_commas(s)).ok())
    };
    if let Some(v) = attempt(text) {
        return Some(v);
    }
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        let body = after.split_once('\n').map_or(after, |(_, rest)| rest);
        if let Some(end) = body.find("```")
            && let Some(v) = attempt(body[..end].trim())
        {
            return Some(v);
        }
    }
    let starts = text
        .char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .map(|(i, _)| i)
        .take(64);
    for i in starts {
        if let Some(end) = balanced_end(&text[i..], 64 * 1024)
            && let Some(v) = attempt(&text[i..i + end])
        {
            return Some(v);
        }
    }
    None
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
    fn strict_schemas_require_everything_and_allow_nothing_else() {
        let s = strict_schema(&json!({"type": "object", "properties": {
            "q": {"type": "string"},
            "opts": {"type": "object", "properties": {"n": {"type": "integer"}}}}}));
        assert_eq!(s["required"], json!(["opts", "q"]));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["opts"]["required"], json!(["n"]));
    }
}
