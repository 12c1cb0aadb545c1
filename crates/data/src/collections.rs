//! Agent Data collections (`llama-compat.md` §9): JSON items grouped by deployment and
//! collection, searched with a small filter grammar. Parsing and validation live here so both
//! stores, and the HTTP edge, share one definition of what a valid query is.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: String,
    pub deployment_name: String,
    pub collection: String,
    pub data: Value,
    pub project_id: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewItem {
    pub deployment_name: String,
    pub collection: String,
    pub data: Value,
    pub project_id: Option<String>,
}

/// Where items live: a deployment's collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionScope {
    pub deployment_name: String,
    pub collection: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    Includes,
    Excludes,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "gt" => Op::Gt,
            "gte" => Op::Gte,
            "lt" => Op::Lt,
            "lte" => Op::Lte,
            "includes" => Op::Includes,
            "excludes" => Op::Excludes,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopLevelField {
    Id,
    CreatedAt,
    UpdatedAt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A path into `data`, one segment per dot.
    Data(Vec<String>),
    Top(TopLevelField),
}

impl Field {
    /// Filter keys name data fields without a prefix; `created_at`, `updated_at` and `id`
    /// name the item's own fields.
    fn parse_filter_key(key: &str) -> Result<Field, FilterError> {
        match key {
            "created_at" => Ok(Field::Top(TopLevelField::CreatedAt)),
            "updated_at" => Ok(Field::Top(TopLevelField::UpdatedAt)),
            "id" => Ok(Field::Top(TopLevelField::Id)),
            _ => Ok(Field::Data(parse_path(
                key.strip_prefix("data.").unwrap_or(key),
            )?)),
        }
    }

    /// In `order_by` and `group_by`, data fields carry the `data.` prefix.
    fn parse_sort_key(key: &str) -> Result<Field, FilterError> {
        match key {
            "created_at" => Ok(Field::Top(TopLevelField::CreatedAt)),
            "updated_at" => Ok(Field::Top(TopLevelField::UpdatedAt)),
            "id" => Ok(Field::Top(TopLevelField::Id)),
            _ => match key.strip_prefix("data.") {
                Some(path) => Ok(Field::Data(parse_path(path)?)),
                None => Err(FilterError(format!(
                    "cannot order by '{key}': data fields need the 'data.' prefix; top-level fields are id, created_at, updated_at"
                ))),
            },
        }
    }
}

const MAX_PATH_SEGMENTS: usize = 8;

/// The segments of a dotted path into an item's `data` (`exports.pdf`), as a filter names
/// its fields: letters, digits, `_` and `-`, at most eight levels.
pub fn field_path(path: &str) -> Result<Vec<String>, FilterError> {
    parse_path(path)
}

fn parse_path(path: &str) -> Result<Vec<String>, FilterError> {
    let segments: Vec<String> = path.split('.').map(str::to_string).collect();
    if segments.len() > MAX_PATH_SEGMENTS {
        return Err(FilterError(format!(
            "field '{path}' is nested too deeply (at most {MAX_PATH_SEGMENTS} levels)"
        )));
    }
    for s in &segments {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(FilterError(format!(
                "invalid field name '{path}': use letters, digits, '_' and '-', separated by '.'"
            )));
        }
    }
    Ok(segments)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub field: Field,
    pub op: Op,
    /// For `includes`/`excludes` an array; otherwise a number, string, bool or null. For
    /// `created_at`/`updated_at` comparisons a timestamp in milliseconds.
    pub value: Value,
}

/// Conditions AND-ed together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter(pub Vec<Condition>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

const MAX_CONDITIONS: usize = 64;
/// The largest integer a JSON number written with a fraction (`5.0`) is read as exactly.
pub const MAX_EXACT_INTEGER: i64 = 9_000_000_000_000_000;
const MAX_LIST: usize = 1000;

impl Filter {
    /// Parses `{"<field>": {"<op>": value, ...}, ...}`.
    pub fn parse(json: &Value) -> Result<Filter, FilterError> {
        let obj = match json {
            Value::Null => return Ok(Filter::default()),
            Value::Object(o) => o,
            _ => {
                return Err(FilterError(
                    "filter must be an object of field → {operator: value}".into(),
                ));
            }
        };
        let mut out = Vec::new();
        for (key, ops) in obj {
            let field = Field::parse_filter_key(key)?;
            let ops = ops.as_object().ok_or_else(|| {
                FilterError(format!(
                    "filter for '{key}' must be an object like {{\"eq\": value}}"
                ))
            })?;
            if ops.is_empty() {
                return Err(FilterError(format!("filter for '{key}' names no operator")));
            }
            for (op_name, value) in ops {
                let op = Op::parse(op_name).ok_or_else(|| {
                    FilterError(format!(
                        "unknown operator '{op_name}' for '{key}'; use eq, ne, gt, gte, lt, lte, includes, excludes"
                    ))
                })?;
                out.push(Condition {
                    value: check_value(key, &field, op, value)?,
                    field: field.clone(),
                    op,
                });
                if out.len() > MAX_CONDITIONS {
                    return Err(FilterError(format!(
                        "filter has more than {MAX_CONDITIONS} conditions"
                    )));
                }
            }
        }
        Ok(Filter(out))
    }

    /// `field == value` on a data field: the filter session snapshots replace by.
    pub fn data_eq(field: &str, value: impl Into<Value>) -> Filter {
        Filter(vec![Condition {
            field: Field::Data(field.split('.').map(str::to_string).collect()),
            op: Op::Eq,
            value: value.into(),
        }])
    }
}

fn check_value(key: &str, field: &Field, op: Op, value: &Value) -> Result<Value, FilterError> {
    match op {
        Op::Includes | Op::Excludes => {
            let list = value
                .as_array()
                .ok_or_else(|| FilterError(format!("'{key}': includes/excludes take an array")))?;
            if list.len() > MAX_LIST {
                return Err(FilterError(format!("'{key}': list longer than {MAX_LIST}")));
            }
            let mut checked = Vec::with_capacity(list.len());
            for v in list {
                checked.push(check_scalar(key, field, v)?);
            }
            Ok(Value::Array(checked))
        }
        Op::Gt | Op::Gte | Op::Lt | Op::Lte => {
            let v = check_scalar(key, field, value)?;
            if !(v.is_number() || v.is_string()) {
                return Err(FilterError(format!(
                    "'{key}': gt/gte/lt/lte compare numbers, strings or dates"
                )));
            }
            Ok(v)
        }
        Op::Eq | Op::Ne => check_scalar(key, field, value),
    }
}

fn check_scalar(key: &str, field: &Field, value: &Value) -> Result<Value, FilterError> {
    match field {
        Field::Top(TopLevelField::CreatedAt | TopLevelField::UpdatedAt) => match value {
            Value::String(s) => parse_timestamp_ms(s).map(Value::from).ok_or_else(|| {
                FilterError(format!(
                    "'{key}': '{s}' is not an ISO-8601 date or datetime"
                ))
            }),
            Value::Number(n) if n.is_i64() => Ok(value.clone()),
            // `5.0` is an integer to JSON Schema, and so to this filter.
            Value::Number(n)
                if n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() <= MAX_EXACT_INTEGER as f64) =>
            {
                Ok(Value::from(n.as_f64().unwrap_or_default() as i64))
            }
            _ => Err(FilterError(format!(
                "'{key}' compares with an ISO-8601 datetime"
            ))),
        },
        Field::Top(TopLevelField::Id) => match value {
            Value::String(_) => Ok(value.clone()),
            _ => Err(FilterError(format!("'{key}' compares with a string"))),
        },
        Field::Data(_) => match value {
            Value::Array(_) | Value::Object(_) => Err(FilterError(format!(
                "'{key}': compare with a number, string, boolean or null"
            ))),
            _ => Ok(value.clone()),
        },
    }
}

/// Parses `YYYY-MM-DD` or an RFC 3339 datetime into milliseconds since the epoch.
pub fn parse_timestamp_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let date = s.get(..10)?;
    let mut parts = date.split('-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    let rest = &s[10..];
    if rest.is_empty() {
        return Some(days * 86_400_000);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, offset_ms) = split_offset(rest)?;
    let mut hms = clock.split(':');
    let h: i64 = hms.next()?.parse().ok()?;
    let mi: i64 = hms.next()?.parse().ok()?;
    let sec_str = hms.next().unwrap_or("0");
    let (sec, frac) = match sec_str.split_once('.') {
        Some((s, f)) => (s.parse::<i64>().ok()?, f),
        None => (sec_str.parse::<i64>().ok()?, ""),
    };
    if h > 23 || mi > 59 || sec > 60 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    Some(days * 86_400_000 + ((h * 60 + mi) * 60 + sec) * 1000 + ms - offset_ms)
}

fn split_offset(s: &str) -> Option<(&str, i64)> {
    if let Some(c) = s.strip_suffix(['Z', 'z']) {
        return Some((c, 0));
    }
    if let Some(i) = s.rfind(['+', '-']) {
        let (clock, off) = s.split_at(i);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':').unwrap_or((&off[1..], "0"));
        let minutes = oh.parse::<i64>().ok()? * 60 + om.parse::<i64>().ok()?;
        return Some((clock, sign * minutes * 60_000));
    }
    Some((s, 0))
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with microseconds and `+00:00`, the
/// form the Python servers emit.
pub fn format_timestamp_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    let (h, rem) = (in_day / 3_600_000, in_day % 3_600_000);
    let (mi, rem) = (rem / 60_000, rem % 60_000);
    let (s, milli) = (rem / 1000, rem % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}000+00:00")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderBy {
    pub field: Field,
    pub descending: bool,
}

impl OrderBy {
    /// Parses `"data.name desc, created_at"`.
    pub fn parse_list(s: &str) -> Result<Vec<OrderBy>, FilterError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut words = part.split_whitespace();
            let field = Field::parse_sort_key(words.next().unwrap_or_default())?;
            let descending = match words.next().map(|w| w.to_ascii_lowercase()) {
                None => false,
                Some(w) if w == "asc" => false,
                Some(w) if w == "desc" => true,
                Some(w) => {
                    return Err(FilterError(format!(
                        "order_by '{part}': expected 'asc' or 'desc', got '{w}'"
                    )));
                }
            };
            if words.next().is_some() {
                return Err(FilterError(format!("order_by '{part}': too many words")));
            }
            out.push(OrderBy { field, descending });
            if out.len() > 8 {
                return Err(FilterError("order_by names more than 8 fields".into()));
            }
        }
        Ok(out)
    }

    /// Parses a `group_by` entry: data fields, with or without the `data.` prefix.
    pub fn parse_group_field(s: &str) -> Result<Vec<String>, FilterError> {
        parse_path(s.strip_prefix("data.").unwrap_or(s))
    }
}

#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub scope: CollectionScope,
    pub filter: Filter,
    pub order_by: Vec<OrderBy>,
    pub offset: i64,
    pub page_size: i64,
    pub include_total: bool,
}

#[derive(Debug, Clone)]
pub struct SearchPage {
    pub items: Vec<Item>,
    /// Offset of the next page, when there is one.
    pub next_offset: Option<i64>,
    pub total: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct AggregateQuery {
    pub scope: CollectionScope,
    pub filter: Filter,
    pub order_by: Vec<OrderBy>,
    /// Data field paths to group by; empty means one group of everything.
    pub group_by: Vec<Vec<String>>,
    pub count: bool,
    pub first: bool,
    pub offset: i64,
    pub page_size: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AggregateGroup {
    pub group_key: Map<String, Value>,
    pub count: Option<i64>,
    pub first_item: Option<Item>,
}

#[derive(Debug, Clone)]
pub struct AggregatePage {
    pub groups: Vec<AggregateGroup>,
    pub next_offset: Option<i64>,
    pub total: i64,
}

#[async_trait]
pub trait CollectionStore: Send + Sync + 'static {
    async fn create_item(&self, item: NewItem) -> StoreResult<Item>;
    async fn get_item(&self, id: &str) -> StoreResult<Option<Item>>;
    /// Overwrites `data`; None if no such item.
    async fn update_item(&self, id: &str, data: Value) -> StoreResult<Option<Item>>;
    /// Sets the value at `path` (dotted, see [`field_path`]) in item `id`'s data to `value`,
    /// in one write that reads the data as it is then: what else it holds, written meanwhile
    /// by others, is kept. Where an object on the way is missing (or is not an object), one is
    /// made. None if no such item.
    async fn set_field(&self, id: &str, path: &str, value: Value) -> StoreResult<Option<Item>>;
    async fn delete_item(&self, id: &str) -> StoreResult<bool>;
    async fn search(&self, query: &SearchQuery) -> StoreResult<SearchPage>;
    async fn aggregate(&self, query: &AggregateQuery) -> StoreResult<AggregatePage>;
    async fn delete_where(&self, scope: &CollectionScope, filter: &Filter) -> StoreResult<u64>;
    /// Deletes the items matching `filter` and inserts `data` as new items, in one
    /// transaction: an idempotent snapshot write. One record replacing the one item that
    /// matches updates that item in place (it keeps its id and creation time).
    ///
    /// With `keep`, an item matching `filter` that also matches `keep` is final: while one
    /// exists nothing is written and no item is returned. The check is part of the write, so
    /// a write that was already under way cannot undo a final record that lands first.
    ///
    /// `carry` names top-level fields that belong to the items, not to the records (an
    /// export recorded in a session with [`CollectionStore::set_field`]): a record's own
    /// values for them are ignored, and each new item has the value the item it replaces had
    /// when the write took place (null where it had none). Records must then be objects.
    async fn replace_where(
        &self,
        scope: &CollectionScope,
        filter: &Filter,
        keep: Option<&Filter>,
        carry: &[&str],
        data: Vec<Value>,
    ) -> StoreResult<Vec<Item>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_parse_and_reject_with_reasons() {
        let f =
            Filter::parse(&json!({"score": {"lt": 100, "gte": 50}, "tags": {"includes": ["a"]}}))
                .unwrap();
        assert_eq!(f.0.len(), 3);
        let err = Filter::parse(&json!({"score": {"between": 1}})).unwrap_err();
        assert!(err.0.contains("unknown operator 'between'"), "{err}");
        let err = Filter::parse(&json!({"x; drop table": {"eq": 1}})).unwrap_err();
        assert!(err.0.contains("invalid field name"), "{err}");
        let err = Filter::parse(&json!({"tags": {"includes": "a"}})).unwrap_err();
        assert!(err.0.contains("take an array"), "{err}");
        let err = Filter::parse(&json!({"created_at": {"gte": "yesterday"}})).unwrap_err();
        assert!(err.0.contains("not an ISO-8601"), "{err}");
    }

    #[test]
    fn order_by_needs_data_prefix_for_data_fields() {
        let o = OrderBy::parse_list("data.name desc, created_at").unwrap();
        assert_eq!(o[0].field, Field::Data(vec!["name".into()]));
        assert!(o[0].descending);
        assert_eq!(o[1].field, Field::Top(TopLevelField::CreatedAt));
        assert!(OrderBy::parse_list("name").is_err());
        assert!(OrderBy::parse_list("data.name sideways").is_err());
    }

    #[test]
    fn timestamps_round_trip() {
        let ms = parse_timestamp_ms("2026-11-22T04:14:15.692+00:00").unwrap();
        assert_eq!(format_timestamp_ms(ms), "2026-11-22T04:14:15.692000+00:00");
        assert_eq!(parse_timestamp_ms("2024-01-01"), Some(1_704_067_200_000));
        assert_eq!(
            parse_timestamp_ms("2024-01-01T02:00:00+02:00"),
            Some(1_704_067_200_000)
        );
        assert_eq!(parse_timestamp_ms("2024-13-01"), None);
    }
}
