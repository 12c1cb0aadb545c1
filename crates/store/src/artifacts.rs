use async_trait::async_trait;
use fathom_data::{Artifact, ArtifactMeta, ArtifactStore, StoreResult};
use fathom_engine::store::now_ms;
use sha2::{Digest, Sha256};
use sqlx::Row;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::{SqlStore, db_err};

/// Artifacts most recently known stored at most (each about 150 bytes).
const KNOWN_MAX: usize = 8192;

/// What this process knows is stored: an artifact's id is its content's hash and an artifact
/// is never changed or removed, so storing the same bytes again (a document read by run
/// after run) can answer from here without a round trip or sending the bytes again.
#[derive(Default)]
pub(crate) struct Stored(Mutex<HashMap<String, ArtifactMeta>>);

impl Stored {
    fn get(&self, file_id: &str) -> Option<ArtifactMeta> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(file_id)
            .cloned()
    }

    fn keep(&self, meta: &ArtifactMeta) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Forgetting all at the bound is cheap and only costs round trips again.
        if known.len() >= KNOWN_MAX {
            known.clear();
        }
        known.insert(meta.file_id.clone(), meta.clone());
    }
}

#[async_trait]
impl ArtifactStore for SqlStore {
    async fn put_artifact(&self, content_type: &str, bytes: &[u8]) -> StoreResult<ArtifactMeta> {
        let file_id = hex::encode(Sha256::digest(bytes));
        if let Some(meta) = self.stored.get(&file_id) {
            return Ok(meta);
        }
        let turn = self.write_turn().await;
        let done = sqlx::query(
            "INSERT INTO artifacts (file_id, content_type, size, bytes, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (file_id) DO NOTHING",
        )
        .bind(&file_id)
        .bind(content_type)
        .bind(bytes.len() as i64)
        .bind(bytes)
        .bind(now_ms())
        .execute(&self.db)
        .await
        .map_err(db_err)?;
        drop(turn);
        if done.rows_affected() > 0 {
            self.count_commit();
        }
        let row =
            sqlx::query("SELECT content_type, size, created_at FROM artifacts WHERE file_id = $1")
                .bind(&file_id)
                .fetch_one(&self.db)
                .await
                .map_err(db_err)?;
        let meta = ArtifactMeta {
            file_id,
            content_type: row.try_get(0).map_err(db_err)?,
            size: row.try_get(1).map_err(db_err)?,
            created_at: row.try_get(2).map_err(db_err)?,
        };
        self.stored.keep(&meta);
        Ok(meta)
    }

    async fn get_artifact(&self, file_id: &str) -> StoreResult<Option<Artifact>> {
        let row = sqlx::query(
            "SELECT content_type, size, created_at, bytes FROM artifacts WHERE file_id = $1",
        )
        .bind(file_id)
        .fetch_optional(&self.db)
        .await
        .map_err(db_err)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(Artifact {
            meta: ArtifactMeta {
                file_id: file_id.to_string(),
                content_type: row.try_get(0).map_err(db_err)?,
                size: row.try_get(1).map_err(db_err)?,
                created_at: row.try_get(2).map_err(db_err)?,
            },
            bytes: row.try_get(3).map_err(db_err)?,
        }))
    }
}
