//! Which key started which run, so that a `run` key may cancel its own runs and no others.
//! Kept as Agent Data items (deployment `_fathom`, collection `run-starters`), one per run
//! started with a key, written after the run is created: a run with no record (started
//! without keys, from the command line, or before its record landed) is cancelled by an
//! `admin` key only.

use fathom_data::{CollectionScope, Filter, SearchQuery};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiResult;

const DEPLOYMENT: &str = "_fathom";
const COLLECTION: &str = "run-starters";

fn scope() -> CollectionScope {
    CollectionScope {
        deployment_name: DEPLOYMENT.into(),
        collection: COLLECTION.into(),
    }
}

/// Records that the key `key` started run `run_id`.
pub(crate) async fn record(state: &AppState, run_id: &str, key: &str) -> ApiResult<()> {
    state
        .collections
        .replace_where(
            &scope(),
            &Filter::data_eq("run_id", run_id),
            None,
            &[],
            vec![json!({"run_id": run_id, "key": key})],
        )
        .await?;
    Ok(())
}

/// The name of the key that started run `run_id`, if one is recorded.
pub(crate) async fn starter(state: &AppState, run_id: &str) -> ApiResult<Option<String>> {
    let page = state
        .collections
        .search(&SearchQuery {
            scope: scope(),
            filter: Filter::data_eq("run_id", run_id),
            order_by: Vec::new(),
            offset: 0,
            page_size: 1,
            include_total: false,
        })
        .await?;
    Ok(page
        .items
        .first()
        .and_then(|i| i.data.get("key"))
        .and_then(Value::as_str)
        .map(String::from))
}

/// Forgets run `run_id`'s starter (the run was purged).
pub(crate) async fn forget(state: &AppState, run_id: &str) -> ApiResult<()> {
    state
        .collections
        .delete_where(&scope(), &Filter::data_eq("run_id", run_id))
        .await?;
    Ok(())
}
