//! Where Postgres and SQLite differ. Everything else is shared SQL.

use crate::sql::Params;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    /// A JSON text parameter stored into a JSON column.
    pub(crate) fn json_in(self, p: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({p} AS jsonb)"),
            Dialect::Sqlite => p.to_string(),
        }
    }

    /// A JSON column read back as text.
    pub(crate) fn json_out(self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("{col}::text"),
            Dialect::Sqlite => col.to_string(),
        }
    }

    /// The path to `segments` of `data`: a literal when every segment is a plain name, so
    /// that an index on the same expression can serve it (SQLite indexes `research_id`, the
    /// key of saved sessions); a bound parameter otherwise.
    pub(crate) fn path_param(self, params: &mut Params, segments: &[String]) -> String {
        let plain = segments
            .iter()
            .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        match (self, plain) {
            (Dialect::Postgres, true) => format!("CAST('{{{}}}' AS text[])", segments.join(",")),
            (Dialect::Postgres, false) => {
                let p = params.text(format!("{{{}}}", segments.join(",")));
                format!("CAST({p} AS text[])")
            }
            (Dialect::Sqlite, true) => format!("'$.{}'", segments.join(".")),
            (Dialect::Sqlite, false) => params.text(format!("$.{}", segments.join("."))),
        }
    }

    /// On Postgres, a containment test that the GIN index on `data` serves, implied by
    /// `data` at `segments` equal to the scalar `value`: a search by a field's value reads
    /// the matching items, not the whole collection. None elsewhere, or for null.
    pub(crate) fn contains_prefilter(
        self,
        params: &mut Params,
        segments: &[String],
        value: &serde_json::Value,
    ) -> Option<String> {
        if self != Dialect::Postgres || value.is_null() || value.is_array() || value.is_object() {
            return None;
        }
        let doc = segments.iter().rev().fold(
            value.clone(),
            |inner, seg| serde_json::json!({ seg: inner }),
        );
        let p = params.text(doc.to_string());
        Some(format!("data @> CAST({p} AS jsonb)"))
    }

    /// The JSON value at `path` (for ordering: typed, missing is NULL).
    pub(crate) fn json_value(self, path: &str) -> String {
        match self {
            Dialect::Postgres => format!("(data #> {path})"),
            Dialect::Sqlite => format!("json_extract(data, {path})"),
        }
    }

    /// The JSON text of the value at `path`, NULL when missing (group keys).
    pub(crate) fn json_text(self, path: &str) -> String {
        match self {
            Dialect::Postgres => format!("((data #> {path})::text)"),
            Dialect::Sqlite => format!("(data -> {path})"),
        }
    }

    /// Text comparisons by code point on both databases.
    pub(crate) fn collate_binary(self) -> &'static str {
        match self {
            Dialect::Postgres => " COLLATE \"C\"",
            Dialect::Sqlite => "",
        }
    }

    /// SQL true when the value at `path` is a number and compares `op` with `param` (a float).
    pub(crate) fn number_cmp(self, path: &str, op: &str, param: &str) -> String {
        match self {
            Dialect::Postgres => format!(
                "(jsonb_typeof(data #> {path}) = 'number' AND CAST(data #>> {path} AS double precision) {op} {param})"
            ),
            Dialect::Sqlite => format!(
                "(json_type(data, {path}) IN ('integer','real') AND json_extract(data, {path}) {op} {param})"
            ),
        }
    }

    pub(crate) fn string_cmp(self, path: &str, op: &str, param: &str) -> String {
        match self {
            Dialect::Postgres => format!(
                "(jsonb_typeof(data #> {path}) = 'string' AND (data #>> {path}) COLLATE \"C\" {op} {param})"
            ),
            Dialect::Sqlite => format!(
                "(json_type(data, {path}) = 'text' AND json_extract(data, {path}) {op} {param})"
            ),
        }
    }

    pub(crate) fn bool_eq(self, path: &str, value: bool) -> String {
        match self {
            Dialect::Postgres => format!(
                "(jsonb_typeof(data #> {path}) = 'boolean' AND (data #>> {path}) = '{value}')"
            ),
            Dialect::Sqlite => format!("(json_type(data, {path}) = '{value}')"),
        }
    }

    /// Missing or JSON null.
    pub(crate) fn is_null(self, path: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("(data #> {path} IS NULL OR jsonb_typeof(data #> {path}) = 'null')")
            }
            Dialect::Sqlite => {
                format!("(json_type(data, {path}) IS NULL OR json_type(data, {path}) = 'null')")
            }
        }
    }

    /// The value at `path` is an array holding `element` (JSON text of a scalar).
    pub(crate) fn array_contains(
        self,
        params: &mut Params,
        path: &str,
        element: &serde_json::Value,
    ) -> String {
        match self {
            Dialect::Postgres => {
                let p = params.text(serde_json::Value::Array(vec![element.clone()]).to_string());
                format!(
                    "(jsonb_typeof(data #> {path}) = 'array' AND (data #> {path}) @> CAST({p} AS jsonb))"
                )
            }
            Dialect::Sqlite => {
                let cond = match element {
                    serde_json::Value::Number(n) => {
                        let p = params.float(n.as_f64().unwrap_or(0.0));
                        format!("je.type IN ('integer','real') AND je.value = {p}")
                    }
                    serde_json::Value::String(s) => {
                        let p = params.text(s.clone());
                        format!("je.type = 'text' AND je.value = {p}")
                    }
                    serde_json::Value::Bool(b) => format!("je.type = '{b}'"),
                    _ => "je.type = 'null'".to_string(),
                };
                format!(
                    "(json_type(data, {path}) = 'array' AND EXISTS (SELECT 1 FROM json_each(data, {path}) je WHERE {cond}))"
                )
            }
        }
    }
}
