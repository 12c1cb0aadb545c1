//! Saved research sessions: the records the workflow writes to the research collection, one
//! per run, replaced whole on every save (by `research_id`; the item keeps its id).

use std::sync::Arc;

use fathom_data::{
    CollectionScope, CollectionStore, Condition, Field, Filter, Op, OrderBy, SearchQuery,
    StoreError,
};
use fathom_export::EXPORTS_FIELD;
use serde_json::{Value, json};

use crate::error::ResearchError;
use crate::settings::ResearchConfig;
use crate::state::SessionStatus;

/// Saved research sessions, as written by the workflow to the research collection.
pub struct Sessions {
    store: Arc<dyn CollectionStore>,
    scope: CollectionScope,
}

impl Sessions {
    /// The research collection named in `config`.
    pub fn new(store: Arc<dyn CollectionStore>, config: &ResearchConfig) -> Sessions {
        let scope = CollectionScope {
            deployment_name: config.deployment_name.clone(),
            collection: config.research_collection.clone(),
        };
        Sessions::in_scope(store, scope)
    }

    /// Records keyed by `research_id` in any collection (the CLI keeps its own there).
    pub fn in_scope(store: Arc<dyn CollectionStore>, scope: CollectionScope) -> Sessions {
        Sessions { store, scope }
    }

    /// Replaces the record of research `id` (or adds it), in one write. A record saying its
    /// run stopped (cancelled or failed) is final: a save of a live one meets it and writes
    /// nothing. A step's save already on its way when the run was cancelled can land after
    /// the stop was recorded; it must not make the session look running again. The exports
    /// recorded in the session ([`EXPORTS_FIELD`]) are the record's, kept as they are when
    /// the write lands, whatever `record` says.
    pub async fn put(&self, id: &str, record: Value) -> Result<(), StoreError> {
        let stopped = json!([SessionStatus::Cancelled, SessionStatus::Failed]);
        let stopped_items = Filter(vec![Condition {
            field: Field::Data(vec!["status".into()]),
            op: Op::Includes,
            value: stopped.clone(),
        }]);
        let live = !stopped
            .as_array()
            .is_some_and(|s| s.contains(&record["status"]));
        let keep = live.then_some(&stopped_items);
        self.store
            .replace_where(
                &self.scope,
                &Filter::data_eq("research_id", id),
                keep,
                &[EXPORTS_FIELD],
                vec![record],
            )
            .await?;
        Ok(())
    }

    /// The saved session record of research `id`.
    pub async fn get(&self, id: &str) -> Result<Value, ResearchError> {
        self.find(id)
            .await?
            .ok_or_else(|| ResearchError::UnknownSession(id.to_string()))
    }

    /// The record of research `id`, if there is one.
    pub async fn find(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let page = self
            .store
            .search(&SearchQuery {
                scope: self.scope.clone(),
                filter: Filter::data_eq("research_id", id),
                order_by: Vec::new(),
                offset: 0,
                page_size: 1,
                include_total: false,
            })
            .await?;
        Ok(page.items.into_iter().next().map(|i| i.data))
    }

    /// Saved sessions, newest first.
    pub async fn list(&self, limit: i64) -> Result<Vec<Value>, ResearchError> {
        let order_by = OrderBy::parse_list("created_at desc")
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let page = self
            .store
            .search(&SearchQuery {
                scope: self.scope.clone(),
                filter: Filter::default(),
                order_by,
                offset: 0,
                page_size: limit.clamp(1, 1000),
                include_total: false,
            })
            .await?;
        Ok(page.items.into_iter().map(|i| i.data).collect())
    }
}
