use async_trait::async_trait;
use fathom_data::{
    AggregateGroup, AggregatePage, AggregateQuery, CollectionScope, CollectionStore, Condition,
    Field, Filter, Item, NewItem, Op, OrderBy, SearchPage, SearchQuery, StoreError, StoreResult,
    TopLevelField, field_path,
};
use fathom_engine::store::now_ms;
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::dialect::Dialect;
use crate::sql::Params;
use crate::{SqlStore, db_err, json_err};

pub const MAX_PAGE_SIZE: i64 = 1000;

/// Item ids sort in creation order (milliseconds, then a per-process counter), so items made
/// in the same millisecond still list in the order they were made; the random tail keeps ids
/// from different processes apart.
fn item_id(now: i64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
    let tail = uuid::Uuid::new_v4().simple().to_string();
    format!("{now:012x}{n:08x}{}", &tail[..12])
}

fn item_cols(d: Dialect) -> String {
    format!(
        "id, deployment_name, collection, {} AS data, project_id, created_at, updated_at",
        d.json_out("data")
    )
}

/// Postgres `jsonb` cannot hold U+0000, which a JSON string may. So on Postgres every string
/// and key of an item's data (and of a filter's values) is stored with U+0000 written as
/// `NUL_ESCAPE` '0' and `NUL_ESCAPE` itself doubled, and decoded when read: both databases
/// give back what was stored. (Strings holding either character sort by their stored form.)
const NUL_ESCAPE: char = '\u{10FFFF}';

fn map_strings(v: Value, f: &impl Fn(String) -> String) -> Value {
    match v {
        Value::String(s) => Value::String(f(s)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| map_strings(x, f)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (f(k), map_strings(x, f)))
                .collect(),
        ),
        other => other,
    }
}

fn escape_nul(s: String) -> String {
    if !s.contains(['\0', NUL_ESCAPE]) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\0' => out.extend([NUL_ESCAPE, '0']),
            NUL_ESCAPE => out.extend([NUL_ESCAPE, NUL_ESCAPE]),
            c => out.push(c),
        }
    }
    out
}

fn unescape_nul(s: String) -> String {
    if !s.contains(NUL_ESCAPE) {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == NUL_ESCAPE) {
            (_, true) => match chars.next() {
                Some('0') => out.push('\0'),
                Some(next) => out.push(next),
                None => out.push(c),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// An item's data (or a filter value) as stored in `d`.
fn to_stored(d: Dialect, v: Value) -> Value {
    match d {
        Dialect::Postgres => map_strings(v, &escape_nul),
        Dialect::Sqlite => v,
    }
}

/// JSON text read from `d`, as it was given.
fn from_stored(d: Dialect, text: &str) -> StoreResult<Value> {
    let v: Value = serde_json::from_str(text).map_err(json_err)?;
    Ok(match d {
        Dialect::Postgres => map_strings(v, &unescape_nul),
        Dialect::Sqlite => v,
    })
}

fn item_from_row(d: Dialect, row: &AnyRow) -> StoreResult<Item> {
    let data: String = row.try_get("data").map_err(db_err)?;
    Ok(Item {
        id: row.try_get("id").map_err(db_err)?,
        deployment_name: row.try_get("deployment_name").map_err(db_err)?,
        collection: row.try_get("collection").map_err(db_err)?,
        data: from_stored(d, &data)?,
        project_id: row.try_get("project_id").map_err(db_err)?,
        created_at: row.try_get("created_at").map_err(db_err)?,
        updated_at: row.try_get("updated_at").map_err(db_err)?,
    })
}

fn top_column(f: TopLevelField) -> &'static str {
    match f {
        TopLevelField::Id => "id",
        TopLevelField::CreatedAt => "created_at",
        TopLevelField::UpdatedAt => "updated_at",
    }
}

fn sql_op(op: Op) -> &'static str {
    match op {
        Op::Eq => "=",
        Op::Ne => "<>",
        Op::Gt => ">",
        Op::Gte => ">=",
        Op::Lt => "<",
        Op::Lte => "<=",
        Op::Includes | Op::Excludes => unreachable!("list operators have no SQL comparison"),
    }
}

/// `scope AND filter` as SQL.
fn where_clause(d: Dialect, p: &mut Params, scope: &CollectionScope, filter: &Filter) -> String {
    let mut parts = vec![format!(
        "deployment_name = {} AND collection = {}",
        p.text(scope.deployment_name.clone()),
        p.text(scope.collection.clone())
    )];
    parts.extend(conditions(d, p, filter));
    parts.join(" AND ")
}

/// `filter`'s conditions in SQL, one per condition, on the stored form of their values.
fn conditions(d: Dialect, p: &mut Params, filter: &Filter) -> Vec<String> {
    filter
        .0
        .iter()
        .map(|c| {
            let stored = Condition {
                value: to_stored(d, c.value.clone()),
                ..c.clone()
            };
            condition(d, p, &stored)
        })
        .collect()
}

/// Whether a row matches all of `filter`'s conditions, as one boolean: false, never null,
/// where a field is missing, so `NOT` of it holds there.
fn held_clause(d: Dialect, p: &mut Params, filter: &Filter) -> String {
    let parts = conditions(d, p, filter);
    if parts.is_empty() {
        return "1 = 1".into();
    }
    format!("COALESCE(({}), FALSE)", parts.join(" AND "))
}

fn condition(d: Dialect, p: &mut Params, c: &Condition) -> String {
    match &c.field {
        Field::Top(f) => top_condition(d, p, top_column(*f), c.op, &c.value),
        Field::Data(segments) => {
            let path = d.path_param(p, segments);
            match c.op {
                Op::Includes | Op::Excludes => {
                    let list = c.value.as_array().cloned().unwrap_or_default();
                    let any = if list.is_empty() {
                        "1 = 0".to_string()
                    } else {
                        list.iter()
                            .map(|v| {
                                let eq = scalar_eq(d, p, &path, v);
                                let contains = d.array_contains(p, &path, v);
                                format!("{eq} OR {contains}")
                            })
                            .collect::<Vec<_>>()
                            .join(" OR ")
                    };
                    if c.op == Op::Includes {
                        format!("({any})")
                    } else {
                        format!("NOT ({any})")
                    }
                }
                Op::Eq => match d.contains_prefilter(p, segments, &c.value) {
                    Some(pre) => format!("({pre} AND {})", scalar_eq(d, p, &path, &c.value)),
                    None => scalar_eq(d, p, &path, &c.value),
                },
                Op::Ne => format!("NOT {}", scalar_eq(d, p, &path, &c.value)),
                op => match &c.value {
                    Value::Number(n) => {
                        let v = p.float(n.as_f64().unwrap_or(0.0));
                        d.number_cmp(&path, sql_op(op), &v)
                    }
                    Value::String(s) => {
                        let v = p.text(s.clone());
                        d.string_cmp(&path, sql_op(op), &v)
                    }
                    // Rejected when the filter was parsed.
                    _ => "1 = 0".to_string(),
                },
            }
        }
    }
}

fn scalar_eq(d: Dialect, p: &mut Params, path: &str, v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let v = p.float(n.as_f64().unwrap_or(0.0));
            d.number_cmp(path, "=", &v)
        }
        Value::String(s) => {
            let v = p.text(s.clone());
            d.string_cmp(path, "=", &v)
        }
        Value::Bool(b) => d.bool_eq(path, *b),
        _ => d.is_null(path),
    }
}

fn top_condition(d: Dialect, p: &mut Params, col: &str, op: Op, value: &Value) -> String {
    let bind = |p: &mut Params, v: &Value| match v {
        Value::Number(n) => p.int(n.as_i64().unwrap_or(0)),
        Value::String(s) => p.text(s.clone()),
        _ => p.text(String::new()),
    };
    let collate = if col == "id" { d.collate_binary() } else { "" };
    match op {
        Op::Includes | Op::Excludes => {
            let list = value.as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                return if op == Op::Includes {
                    "1 = 0".into()
                } else {
                    "1 = 1".into()
                };
            }
            let ph: Vec<String> = list.iter().map(|v| bind(p, v)).collect();
            let not = if op == Op::Excludes { "NOT " } else { "" };
            format!("{col} {not}IN ({})", ph.join(", "))
        }
        op => format!("{col}{collate} {} {}", sql_op(op), bind(p, value)),
    }
}

fn order_clause(d: Dialect, p: &mut Params, order: &[OrderBy]) -> String {
    let mut parts: Vec<String> = order
        .iter()
        .map(|o| {
            let expr = match &o.field {
                Field::Top(f) => top_column(*f).to_string(),
                Field::Data(segments) => {
                    let path = d.path_param(p, segments);
                    d.json_value(&path)
                }
            };
            let dir = if o.descending { "DESC" } else { "ASC" };
            format!("{expr} {dir} NULLS LAST")
        })
        .collect();
    if order.is_empty() {
        parts.push("created_at ASC".into());
    }
    parts.push(format!("id{} ASC", d.collate_binary()));
    parts.join(", ")
}

/// The JSON text of each group-by field, as SQL expressions.
fn group_keys(d: Dialect, p: &mut Params, group_by: &[Vec<String>]) -> Vec<String> {
    group_by
        .iter()
        .map(|segments| {
            let path = d.path_param(p, segments);
            d.json_text(&path)
        })
        .collect()
}

fn page_size(n: i64) -> i64 {
    if n <= 0 { 10 } else { n.min(MAX_PAGE_SIZE) }
}

/// The fields of `carry`, checked, with every record's own values for them set to null (what
/// a new item that replaces none holds).
fn carried_fields(carry: &[&str], records: &mut [Value]) -> StoreResult<Vec<String>> {
    let mut fields = Vec::with_capacity(carry.len());
    for field in carry {
        match field_path(field)
            .map_err(|e| StoreError::Invalid(e.0))?
            .as_slice()
        {
            [one] => fields.push(one.clone()),
            _ => {
                return Err(StoreError::Invalid(format!(
                    "'{field}' is not a top-level field to carry"
                )));
            }
        }
    }
    if fields.is_empty() {
        return Ok(fields);
    }
    for record in records {
        let Some(object) = record.as_object_mut() else {
            return Err(StoreError::Invalid(
                "a record that carries fields must be an object".into(),
            ));
        };
        for field in &fields {
            object.insert(field.clone(), Value::Null);
        }
    }
    Ok(fields)
}

async fn insert_items(
    store: &SqlStore,
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    scope: &CollectionScope,
    project_id: Option<&str>,
    data: Vec<Value>,
) -> StoreResult<Vec<Item>> {
    let now = now_ms();
    let mut out = Vec::with_capacity(data.len());
    for d in data {
        let id = item_id(now);
        let text = serde_json::to_string(&to_stored(store.dialect, d.clone()))
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let sql = format!(
            "INSERT INTO collection_items (id, deployment_name, collection, data, project_id, created_at, updated_at) \
             VALUES ($1, $2, $3, {}, $5, $6, $6)",
            store.dialect.json_in("$4")
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&id)
            .bind(&scope.deployment_name)
            .bind(&scope.collection)
            .bind(text)
            .bind(project_id.map(str::to_string))
            .bind(now)
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        out.push(Item {
            id,
            deployment_name: scope.deployment_name.clone(),
            collection: scope.collection.clone(),
            data: d,
            project_id: project_id.map(str::to_string),
            created_at: now,
            updated_at: now,
        });
    }
    Ok(out)
}

#[async_trait]
impl CollectionStore for SqlStore {
    async fn create_item(&self, item: NewItem) -> StoreResult<Item> {
        let scope = CollectionScope {
            deployment_name: item.deployment_name,
            collection: item.collection,
        };
        let (mut tx, _turn) = self.begin_write().await?;
        let mut items = insert_items(
            self,
            &mut tx,
            &scope,
            item.project_id.as_deref(),
            vec![item.data],
        )
        .await?;
        self.commit(tx).await?;
        items
            .pop()
            .ok_or_else(|| StoreError::backend("insert returned nothing"))
    }

    async fn get_item(&self, id: &str) -> StoreResult<Option<Item>> {
        let sql = format!(
            "SELECT {} FROM collection_items WHERE id = $1",
            item_cols(self.dialect)
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.db)
            .await
            .map_err(db_err)?;
        row.as_ref()
            .map(|r| item_from_row(self.dialect, r))
            .transpose()
    }

    async fn update_item(&self, id: &str, data: Value) -> StoreResult<Option<Item>> {
        let text = serde_json::to_string(&to_stored(self.dialect, data))
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let _turn = self.write_turn().await;
        let sql = format!(
            "UPDATE collection_items SET data = {}, updated_at = $2 WHERE id = $3 RETURNING {}",
            self.dialect.json_in("$1"),
            item_cols(self.dialect)
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(text)
            .bind(now_ms())
            .bind(id)
            .fetch_optional(&self.db)
            .await
            .map_err(db_err)?;
        self.count_commit();
        row.as_ref()
            .map(|r| item_from_row(self.dialect, r))
            .transpose()
    }

    async fn set_field(&self, id: &str, path: &str, value: Value) -> StoreResult<Option<Item>> {
        let d = self.dialect;
        let segments = field_path(path).map_err(|e| StoreError::Invalid(e.0))?;
        let text = serde_json::to_string(&to_stored(d, value))
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let mut p = Params::default();
        let value = p.text(text);
        let data = d.set_at(&mut p, &segments, &value);
        let id = p.text(id);
        let turn = self.write_turn().await;
        let now = p.int(now_ms());
        let sql = format!(
            "UPDATE collection_items SET data = {data}, updated_at = {now} WHERE id = {id} \
             RETURNING {}",
            item_cols(d)
        );
        let row = p
            .query(sql)
            .fetch_optional(&self.db)
            .await
            .map_err(db_err)?;
        drop(turn);
        self.count_commit();
        row.as_ref().map(|r| item_from_row(d, r)).transpose()
    }

    async fn delete_item(&self, id: &str) -> StoreResult<bool> {
        let _turn = self.write_turn().await;
        let done = sqlx::query("DELETE FROM collection_items WHERE id = $1")
            .bind(id)
            .execute(&self.db)
            .await
            .map_err(db_err)?;
        self.count_commit();
        Ok(done.rows_affected() > 0)
    }

    async fn search(&self, q: &SearchQuery) -> StoreResult<SearchPage> {
        let d = self.dialect;
        let size = page_size(q.page_size);
        let offset = q.offset.max(0);
        let mut p = Params::default();
        let wh = where_clause(d, &mut p, &q.scope, &q.filter);
        let order = order_clause(d, &mut p, &q.order_by);
        let limit = p.count(d, size + 1);
        let off = p.count(d, offset);
        let sql = format!(
            "SELECT {} FROM collection_items WHERE {wh} ORDER BY {order} LIMIT {limit} OFFSET {off}",
            item_cols(d)
        );
        let rows = p.query(sql).fetch_all(&self.db).await.map_err(db_err)?;
        let mut items = rows
            .iter()
            .map(|r| item_from_row(self.dialect, r))
            .collect::<StoreResult<Vec<_>>>()?;
        let next_offset = if items.len() as i64 > size {
            items.truncate(size as usize);
            Some(offset + size)
        } else {
            None
        };
        let total = if q.include_total {
            let mut p = Params::default();
            let wh = where_clause(d, &mut p, &q.scope, &q.filter);
            let row = p
                .query(format!("SELECT COUNT(*) FROM collection_items WHERE {wh}"))
                .fetch_one(&self.db)
                .await
                .map_err(db_err)?;
            Some(row.try_get::<i64, _>(0).map_err(db_err)?)
        } else {
            None
        };
        Ok(SearchPage {
            items,
            next_offset,
            total,
        })
    }

    async fn aggregate(&self, q: &AggregateQuery) -> StoreResult<AggregatePage> {
        let d = self.dialect;
        let size = page_size(q.page_size);
        let offset = q.offset.max(0);
        let mut p = Params::default();
        let keys = group_keys(d, &mut p, &q.group_by);
        let key_cols: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} AS k{i}"))
            .collect();
        let key_names: Vec<String> = (0..keys.len()).map(|i| format!("k{i}")).collect();
        let partition = if keys.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {}", keys.join(", "))
        };
        let order = order_clause(d, &mut p, &q.order_by);
        let wh = where_clause(d, &mut p, &q.scope, &q.filter);
        let mut select = key_cols.clone();
        select.push(format!("COUNT(*) OVER ({partition}) AS cnt"));
        select.push(format!(
            "ROW_NUMBER() OVER ({partition} ORDER BY {order}) AS rn"
        ));
        select.push(item_cols(d));
        let group_order = if key_names.is_empty() {
            "cnt".to_string()
        } else {
            key_names
                .iter()
                .map(|k| format!("{k}{} ASC NULLS LAST", d.collate_binary()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let limit = p.count(d, size + 1);
        let off = p.count(d, offset);
        let sql = format!(
            "SELECT * FROM (SELECT {} FROM collection_items WHERE {wh}) grouped WHERE rn = 1 \
             ORDER BY {group_order} LIMIT {limit} OFFSET {off}",
            select.join(", ")
        );
        let rows = p.query(sql).fetch_all(&self.db).await.map_err(db_err)?;
        let mut groups = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut group_key = Map::new();
            for (i, segments) in q.group_by.iter().enumerate() {
                let text: Option<String> = row.try_get(format!("k{i}").as_str()).map_err(db_err)?;
                let value = match text {
                    Some(t) => from_stored(d, &t)?,
                    None => Value::Null,
                };
                group_key.insert(segments.join("."), value);
            }
            let count: i64 = row.try_get("cnt").map_err(db_err)?;
            groups.push(AggregateGroup {
                group_key,
                count: q.count.then_some(count),
                first_item: if q.first {
                    Some(item_from_row(d, row)?)
                } else {
                    None
                },
            });
        }
        let next_offset = if groups.len() as i64 > size {
            groups.truncate(size as usize);
            Some(offset + size)
        } else {
            None
        };
        // Grouping by nothing gives one group even over an empty collection.
        if q.group_by.is_empty() && groups.is_empty() && offset == 0 {
            groups.push(AggregateGroup {
                group_key: Map::new(),
                count: q.count.then_some(0),
                first_item: None,
            });
        }
        let total = if q.group_by.is_empty() {
            1
        } else {
            let mut p = Params::default();
            let keys = group_keys(d, &mut p, &q.group_by);
            let wh = where_clause(d, &mut p, &q.scope, &q.filter);
            let sql = format!(
                "SELECT COUNT(*) FROM (SELECT 1 AS one FROM collection_items WHERE {wh} GROUP BY {}) g",
                keys.join(", ")
            );
            let row = p.query(sql).fetch_one(&self.db).await.map_err(db_err)?;
            row.try_get::<i64, _>(0).map_err(db_err)?
        };
        Ok(AggregatePage {
            groups,
            next_offset,
            total,
        })
    }

    async fn delete_where(&self, scope: &CollectionScope, filter: &Filter) -> StoreResult<u64> {
        let _turn = self.write_turn().await;
        let mut p = Params::default();
        let wh = where_clause(self.dialect, &mut p, scope, filter);
        let done = p
            .query(format!("DELETE FROM collection_items WHERE {wh}"))
            .execute(&self.db)
            .await
            .map_err(db_err)?;
        self.count_commit();
        Ok(done.rows_affected())
    }

    async fn replace_where(
        &self,
        scope: &CollectionScope,
        filter: &Filter,
        keep: Option<&Filter>,
        carry: &[&str],
        mut data: Vec<Value>,
    ) -> StoreResult<Vec<Item>> {
        let d = self.dialect;
        let carry = carried_fields(carry, &mut data)?;
        // The items it may replace: those matching `filter` that `keep` does not hold. As a
        // condition on each row, Postgres checks it again on a row another write changed
        // while this one waited for its lock.
        let open = |p: &mut Params| {
            let wh = where_clause(d, p, scope, filter);
            match keep {
                Some(k) => format!("{wh} AND NOT {}", held_clause(d, p, k)),
                None => wh,
            }
        };
        // The common case, one record saved again (a session after each step): its item is
        // updated in place, in one statement, keeping its id and the fields it carries as
        // they are when the statement writes.
        if let [record] = data.as_slice() {
            let mut p = Params::default();
            let wh = open(&mut p);
            let text = serde_json::to_string(&to_stored(d, record.clone()))
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            let text = p.text(text);
            let new_data = d.with_carried(&mut p, &text, &carry);
            let turn = self.write_turn().await;
            let now = p.int(now_ms());
            let sql = format!(
                "UPDATE collection_items SET data = {new_data}, updated_at = {now} WHERE {wh} RETURNING {}",
                item_cols(d)
            );
            let rows = p.query(sql).fetch_all(&self.db).await.map_err(db_err)?;
            drop(turn);
            if !rows.is_empty() {
                self.count_commit();
            }
            if let [row] = rows.as_slice() {
                return Ok(vec![item_from_row(d, row)?]);
            }
            // None matched (a first save, or a final item), or several did: below.
        }
        let (mut tx, _turn) = self.begin_write().await?;
        if d == Dialect::Postgres {
            // Two first saves of one record at once would each find nothing to replace and
            // each insert it: replacements of the same items take turns (on SQLite the write
            // transaction already makes them). The lock is the transaction's.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("replace {scope:?} {filter:?}"))
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        let mut p = Params::default();
        let wh = open(&mut p);
        let replaced = p
            .query(format!(
                "DELETE FROM collection_items WHERE {wh} RETURNING {}",
                item_cols(d)
            ))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(k) = keep {
            // Asked after the delete, which waited for any write to the rows it met: a final
            // item committed meanwhile is seen here.
            let mut p = Params::default();
            let sql = format!(
                "SELECT COUNT(*) FROM collection_items WHERE {} AND {}",
                where_clause(d, &mut p, scope, filter),
                held_clause(d, &mut p, k)
            );
            let held: i64 = p
                .query(sql)
                .fetch_one(&mut *tx)
                .await
                .and_then(|row| row.try_get(0))
                .map_err(db_err)?;
            if held > 0 {
                tx.rollback().await.map_err(db_err)?;
                return Ok(Vec::new());
            }
        }
        if !carry.is_empty() {
            // Several items replaced at once (or none): the first of them says, the one a
            // search by the filter finds first (item ids sort in creation order), hence the
            // one its readers and the writers of its fields used.
            let replaced = replaced
                .iter()
                .map(|r| item_from_row(d, r))
                .collect::<StoreResult<Vec<_>>>()?;
            if let Some(first) = replaced.iter().min_by_key(|i| (i.created_at, i.id.clone())) {
                for record in &mut data {
                    for field in &carry {
                        record[field.as_str()] =
                            first.data.get(field.as_str()).cloned().unwrap_or_default();
                    }
                }
            }
        }
        let items = insert_items(self, &mut tx, scope, None, data).await?;
        self.commit(tx).await?;
        Ok(items)
    }
}
