//! The Agent Data API (`llama-compat.md` §9) on Fathom's own store: JSON items by deployment
//! and collection, with search, aggregation and delete-by-filter. Research sessions live here,
//! so a frontend lists and reloads them with the LlamaCloud SDKs.

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use fathom_data::{
    AggregateQuery, CollectionScope, Filter, Item, NewItem, OrderBy, SearchQuery,
    format_timestamp_ms,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::State as AppRef;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, PathParam, QueryParams};

const DEFAULT_PAGE_SIZE: i64 = 10;
const MAX_PAGE_SIZE: i64 = 1000;
/// Past this an offset cannot name a page (and `offset + page_size` stays far from overflow).
pub(crate) const MAX_OFFSET: i64 = 999_999_999_999;

/// An item as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ItemView {
    pub id: String,
    pub deployment_name: String,
    pub collection: String,
    #[schema(value_type = Object)]
    pub data: Value,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub project_id: Option<String>,
}

impl From<Item> for ItemView {
    fn from(i: Item) -> Self {
        ItemView {
            id: i.id,
            deployment_name: i.deployment_name,
            collection: i.collection,
            data: i.data,
            created_at: Some(format_timestamp_ms(i.created_at)),
            updated_at: Some(format_timestamp_ms(i.updated_at)),
            project_id: i.project_id,
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateItem {
    pub deployment_name: String,
    /// Defaults to `default`.
    pub collection: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct UpdateItem {
    #[schema(value_type = Object)]
    pub data: Value,
}

/// The body of `:search`, `:aggregate` and `:delete`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct QueryBody {
    pub deployment_name: String,
    pub collection: Option<String>,
    /// `{"field": {"op": value}}` with ops eq, ne, gt, gte, lt, lte, includes, excludes.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<Value>,
    /// e.g. `"data.name desc, created_at"`.
    pub order_by: Option<String>,
    #[serde(default, deserialize_with = "integer")]
    pub offset: Option<i64>,
    /// 1 to 1000; default 10.
    #[serde(default, deserialize_with = "integer")]
    pub page_size: Option<i64>,
    pub page_token: Option<String>,
    pub include_total: Option<bool>,
    /// `:aggregate` only: data fields to group by.
    pub group_by: Option<Vec<String>>,
    /// `:aggregate` only: count the items of each group.
    pub count: Option<bool>,
    /// `:aggregate` only: include the first item of each group.
    pub first: Option<bool>,
}

/// An integer as JSON Schema counts them: `5.0` is one too (serde's `i64` refuses it).
fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    n.as_i64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() <= fathom_data::MAX_EXACT_INTEGER as f64)
                .map(|f| f as i64)
        })
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, got {n}")))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SearchResponse {
    pub items: Vec<ItemView>,
    pub next_page_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_size: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AggregateGroupView {
    #[schema(value_type = Object)]
    pub group_key: Map<String, Value>,
    pub count: Option<i64>,
    pub first_item: Option<ItemView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AggregateResponse {
    pub items: Vec<AggregateGroupView>,
    pub next_page_token: Option<String>,
    pub total_size: Option<i64>,
}

/// Whitespace as the OpenAPI document's patterns mean it (`\s` of JSON Schema's ECMA-262
/// regular expressions): Unicode's, less U+0085, plus U+FEFF. Trimming by it refuses as
/// blank exactly what the document calls blank.
fn is_schema_space(c: char) -> bool {
    c == '\u{feff}' || (c.is_whitespace() && c != '\u{85}')
}

fn scope(deployment_name: &str, collection: Option<&str>) -> ApiResult<CollectionScope> {
    let deployment_name = deployment_name.trim_matches(is_schema_space);
    if deployment_name.is_empty() {
        return Err(ApiError::bad_request("deployment_name is required"));
    }
    let collection = collection
        .map(|c| c.trim_matches(is_schema_space))
        .filter(|c| !c.is_empty());
    for (field, value) in [
        ("deployment_name", Some(deployment_name)),
        ("collection", collection),
    ] {
        no_nul(field, value)?;
    }
    Ok(CollectionScope {
        deployment_name: deployment_name.to_string(),
        collection: collection.unwrap_or("default").to_string(),
    })
}

/// Names are stored as text, which cannot hold a NUL character on Postgres; refused on
/// both databases alike. (Values inside `data` are stored faithfully.)
fn no_nul(field: &str, value: Option<&str>) -> ApiResult<()> {
    if value.is_some_and(|v| v.contains('\0')) {
        return Err(ApiError::bad_request(format!(
            "'{field}' contains a NUL character (\\u0000), which a name cannot hold"
        )));
    }
    Ok(())
}

fn require_object(data: &Value) -> ApiResult<()> {
    if data.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request("'data' must be a JSON object"))
    }
}

/// The project an item is created in: the `Project-Id` header or `project_id` query parameter.
fn project_id(headers: &HeaderMap, query: &QueryParams) -> ApiResult<Option<String>> {
    let id = headers
        .get("project-id")
        .and_then(|v| v.to_str().ok())
        .or_else(|| query.get("project_id"))
        .map(str::trim)
        .filter(|p| !p.is_empty());
    no_nul("project_id", id)?;
    Ok(id.map(String::from))
}

/// Page tokens are opaque to clients: the offset of the next page, in decimal.
fn page_token(offset: i64) -> String {
    offset.to_string()
}

/// Reads a page token: decimal, or the base64 form earlier versions gave.
fn read_page_token(token: &str) -> ApiResult<i64> {
    let token = token.trim();
    token
        .parse::<i64>()
        .ok()
        .or_else(|| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.strip_prefix("o:")?.parse::<i64>().ok())
        })
        .filter(|o| *o >= 0)
        .ok_or_else(|| ApiError::bad_request("invalid page_token; pass next_page_token as given"))
}

struct Window {
    offset: i64,
    page_size: i64,
}

fn window(body: &QueryBody) -> ApiResult<Window> {
    let page_size = body.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
    if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(ApiError::bad_request(format!(
            "page_size must be between 1 and {MAX_PAGE_SIZE}, not {page_size}"
        )));
    }
    let offset = match body.page_token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => read_page_token(t)?,
        None => body.offset.unwrap_or(0),
    };
    if !(0..=MAX_OFFSET).contains(&offset) {
        return Err(ApiError::bad_request(format!(
            "offset must be between 0 and {MAX_OFFSET}, not {offset}"
        )));
    }
    Ok(Window { offset, page_size })
}

fn parse_filter(body: &QueryBody) -> ApiResult<Filter> {
    match &body.filter {
        None | Some(Value::Null) => Ok(Filter::default()),
        Some(f) => Ok(Filter::parse(f)?),
    }
}

fn parse_order(body: &QueryBody) -> ApiResult<Vec<OrderBy>> {
    Ok(OrderBy::parse_list(body.order_by.as_deref().unwrap_or(""))?)
}

/// Creates an item.
#[utoipa::path(post, path = "/api/v1/beta/agent-data", tag = "agent-data",
    request_body = CreateItem,
    responses((status = 200, body = ItemView), (status = 400, body = crate::ErrorBody)))]
pub async fn create_item(
    State(state): State<AppRef>,
    headers: HeaderMap,
    query: QueryParams,
    ApiJson(body): ApiJson<CreateItem>,
) -> ApiResult<Json<ItemView>> {
    let scope = scope(&body.deployment_name, body.collection.as_deref())?;
    require_object(&body.data)?;
    let item = state
        .collections
        .create_item(NewItem {
            deployment_name: scope.deployment_name,
            collection: scope.collection,
            data: body.data,
            project_id: project_id(&headers, &query)?,
        })
        .await?;
    Ok(Json(item.into()))
}

fn item_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Agent data item {id} not found"))
}

/// Reads an item.
#[utoipa::path(get, path = "/api/v1/beta/agent-data/{item_id}", tag = "agent-data",
    params(("item_id" = String, Path)),
    responses((status = 200, body = ItemView), (status = 404, body = crate::ErrorBody)))]
pub async fn get_item(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
) -> ApiResult<Json<ItemView>> {
    let item = state.collections.get_item(&id).await?;
    Ok(Json(item.ok_or_else(|| item_not_found(&id))?.into()))
}

/// Overwrites an item's data.
#[utoipa::path(put, path = "/api/v1/beta/agent-data/{item_id}", tag = "agent-data",
    params(("item_id" = String, Path)), request_body = UpdateItem,
    responses((status = 200, body = ItemView), (status = 400, body = crate::ErrorBody),
              (status = 404, body = crate::ErrorBody)))]
pub async fn update_item(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
    ApiJson(body): ApiJson<UpdateItem>,
) -> ApiResult<Json<ItemView>> {
    require_object(&body.data)?;
    let item = state.collections.update_item(&id, body.data).await?;
    Ok(Json(item.ok_or_else(|| item_not_found(&id))?.into()))
}

/// Deletes an item.
#[utoipa::path(delete, path = "/api/v1/beta/agent-data/{item_id}", tag = "agent-data",
    params(("item_id" = String, Path)),
    responses((status = 200, description = "`{}`"), (status = 404, body = crate::ErrorBody)))]
pub async fn delete_item(
    State(state): State<AppRef>,
    PathParam(id): PathParam,
) -> ApiResult<Json<Value>> {
    if state.collections.delete_item(&id).await? {
        Ok(Json(json!({})))
    } else {
        Err(item_not_found(&id))
    }
}

/// `POST /agent-data/:search`, `:aggregate` and `:delete` arrive here as an item id; an item
/// itself takes no POST.
pub async fn post_verb(
    State(state): State<AppRef>,
    PathParam(verb): PathParam,
    request: Request,
) -> ApiResult<Response> {
    if !matches!(verb.as_str(), ":search" | ":aggregate" | ":delete") {
        let mut refused = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "an item takes GET, PUT or DELETE; POST is for :search, :aggregate and :delete, \
                 not '{verb}'"
            ),
        )
        .into_response();
        refused.headers_mut().insert(
            header::ALLOW,
            header::HeaderValue::from_static("GET, PUT, DELETE"),
        );
        return Ok(refused);
    }
    let ApiJson(body) = ApiJson::<QueryBody>::from_request(request, &state).await?;
    match verb.as_str() {
        ":search" => search(state, body).await.map(|r| r.into_response()),
        ":aggregate" => aggregate(state, body).await.map(|r| r.into_response()),
        _ => delete_where(state, body).await.map(|r| r.into_response()),
    }
}

/// Searches a collection.
#[utoipa::path(post, path = "/api/v1/beta/agent-data/:search", tag = "agent-data",
    request_body = QueryBody,
    responses((status = 200, body = SearchResponse), (status = 400, body = crate::ErrorBody)))]
pub async fn search(state: AppRef, body: QueryBody) -> ApiResult<Json<SearchResponse>> {
    let w = window(&body)?;
    let query = SearchQuery {
        scope: scope(&body.deployment_name, body.collection.as_deref())?,
        filter: parse_filter(&body)?,
        order_by: parse_order(&body)?,
        offset: w.offset,
        page_size: w.page_size,
        include_total: body.include_total.unwrap_or(false),
    };
    let page = state.collections.search(&query).await?;
    Ok(Json(SearchResponse {
        items: page.items.into_iter().map(ItemView::from).collect(),
        next_page_token: page.next_offset.map(page_token),
        total_size: page.total,
    }))
}

/// Groups and counts a collection's items.
#[utoipa::path(post, path = "/api/v1/beta/agent-data/:aggregate", tag = "agent-data",
    request_body = QueryBody,
    responses((status = 200, body = AggregateResponse), (status = 400, body = crate::ErrorBody)))]
pub async fn aggregate(state: AppRef, body: QueryBody) -> ApiResult<Json<AggregateResponse>> {
    let group_by = body
        .group_by
        .iter()
        .flatten()
        .map(|g| OrderBy::parse_group_field(g))
        .collect::<Result<Vec<_>, _>>()?;
    let w = window(&body)?;
    let query = AggregateQuery {
        scope: scope(&body.deployment_name, body.collection.as_deref())?,
        filter: parse_filter(&body)?,
        order_by: parse_order(&body)?,
        group_by,
        count: body.count.unwrap_or(false),
        first: body.first.unwrap_or(false),
        offset: w.offset,
        page_size: w.page_size,
    };
    let page = state.collections.aggregate(&query).await?;
    Ok(Json(AggregateResponse {
        items: page
            .groups
            .into_iter()
            .map(|g| AggregateGroupView {
                group_key: g.group_key,
                count: g.count,
                first_item: g.first_item.map(ItemView::from),
            })
            .collect(),
        next_page_token: page.next_offset.map(page_token),
        total_size: Some(page.total),
    }))
}

/// Deletes the items matching a filter.
#[utoipa::path(post, path = "/api/v1/beta/agent-data/:delete", tag = "agent-data",
    request_body = QueryBody,
    responses((status = 200, description = "`{\"deleted_count\": n}`"),
              (status = 400, body = crate::ErrorBody)))]
pub async fn delete_where(state: AppRef, body: QueryBody) -> ApiResult<Json<Value>> {
    let scope = scope(&body.deployment_name, body.collection.as_deref())?;
    let filter = parse_filter(&body)?;
    let n = state.collections.delete_where(&scope, &filter).await?;
    Ok(Json(json!({"deleted_count": n})))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blank is what the document's pattern calls blank: a name of U+0085 alone (not `\s` in
    /// JSON Schema's regular expressions) is a name, one of U+00A0 or U+FEFF alone is not.
    #[test]
    fn blank_names_are_what_the_document_says() {
        assert!(scope("\u{85}", None).is_ok());
        assert!(scope(" \u{a0}\u{feff}\t", None).is_err());
        assert_eq!(
            scope(" docs ", Some("\u{2003}")).unwrap().collection,
            "default"
        );
    }
}
