use async_trait::async_trait;
use fathom_data::{Artifact, ArtifactMeta, ArtifactStore, DataResult};
use fathom_engine::store::now_ms;
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::{SqlStore, db_err};

#[async_trait]
impl ArtifactStore for SqlStore {
    async fn put_artifact(&self, content_type: &str, bytes: &[u8]) -> DataResult<ArtifactMeta> {
        let file_id = hex::encode(Sha256::digest(bytes));
        let done = sqlx::query(
            "INSERT INTO artifacts (file_id, content_type, size, bytes, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (file_id) DO NOTHING",
        )
        .bind(&file_id)
        .bind(content_type)
        .bind(bytes.len() as i64)
        .bind(bytes.to_vec())
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() > 0 {
            self.count_commit();
        }
        let row =
            sqlx::query("SELECT content_type, size, created_at FROM artifacts WHERE file_id = $1")
                .bind(&file_id)
                .fetch_one(&self.pool)
                .await
                .map_err(db_err)?;
        Ok(ArtifactMeta {
            file_id,
            content_type: row.try_get(0).map_err(db_err)?,
            size: row.try_get(1).map_err(db_err)?,
            created_at: row.try_get(2).map_err(db_err)?,
        })
    }

    async fn get_artifact(&self, file_id: &str) -> DataResult<Option<Artifact>> {
        let row = sqlx::query(
            "SELECT content_type, size, created_at, bytes FROM artifacts WHERE file_id = $1",
        )
        .bind(file_id)
        .fetch_optional(&self.pool)
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
