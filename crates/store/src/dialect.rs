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

    /// `data` with the value at `segments` set to the JSON text parameter `value`, as one
    /// expression: each object on the way is the one `data` holds there (at the time the
    /// statement writes), or a new one where it holds none or something else.
    pub(crate) fn set_at(self, params: &mut Params, segments: &[String], value: &str) -> String {
        self.set_below(params, segments, 0, value)
    }

    /// [`Dialect::set_at`] from the object at `segments[..depth]` down.
    fn set_below(
        self,
        params: &mut Params,
        segments: &[String],
        depth: usize,
        value: &str,
    ) -> String {
        let Some(key) = segments.get(depth) else {
            return match self {
                Dialect::Postgres => format!("CAST({value} AS jsonb)"),
                Dialect::Sqlite => format!("json({value})"),
            };
        };
        let here = &segments[..depth];
        let inner = self.set_below(params, segments, depth + 1, value);
        match self {
            Dialect::Postgres => {
                let at = match here {
                    [] => "data".to_string(),
                    _ => format!("(data #> {})", self.path_param(params, here)),
                };
                let key = params.text(key.clone());
                format!(
                    "((CASE WHEN jsonb_typeof({at}) = 'object' THEN {at} ELSE CAST('{{}}' AS jsonb) END) \
                     || jsonb_build_object(CAST({key} AS text), {inner}))"
                )
            }
            Dialect::Sqlite => {
                let object = match here {
                    [] => {
                        "(CASE WHEN json_type(data) = 'object' THEN data ELSE '{}' END)".to_string()
                    }
                    _ => {
                        let at = self.path_param(params, here);
                        format!(
                            "(CASE WHEN json_type(data, {at}) = 'object' \
                             THEN json_extract(data, {at}) ELSE '{{}}' END)"
                        )
                    }
                };
                let key = self.path_param(params, std::slice::from_ref(key));
                format!("json_set({object}, {key}, {inner})")
            }
        }
    }

    /// The JSON text parameter `record` with its top-level fields `carry` set to the values
    /// `data` holds for them (null where it holds none), as one expression.
    pub(crate) fn with_carried(
        self,
        params: &mut Params,
        record: &str,
        carry: &[String],
    ) -> String {
        if carry.is_empty() {
            return self.json_in(record);
        }
        match self {
            Dialect::Postgres => {
                let pairs: Vec<String> = carry
                    .iter()
                    .map(|k| {
                        let key = params.text(k.clone());
                        format!("CAST({key} AS text), data -> CAST({key} AS text)")
                    })
                    .collect();
                format!(
                    "(CAST({record} AS jsonb) || jsonb_build_object({}))",
                    pairs.join(", ")
                )
            }
            Dialect::Sqlite => {
                let pairs: Vec<String> = carry
                    .iter()
                    .map(|k| {
                        let at = self.path_param(params, std::slice::from_ref(k));
                        format!("{at}, data -> {at}")
                    })
                    .collect();
                format!("json_set({record}, {})", pairs.join(", "))
            }
        }
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
