use async_trait::async_trait;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactMeta {
    /// Lower-case hex sha256 of the bytes: the same content is stored once.
    pub file_id: String,
    pub content_type: String,
    pub size: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct Artifact {
    pub meta: ArtifactMeta,
    pub bytes: Vec<u8>,
}

/// Content-addressed blobs: raw fetched bytes, extracted text.
#[async_trait]
pub trait ArtifactStore: Send + Sync + 'static {
    async fn put_artifact(&self, content_type: &str, bytes: &[u8]) -> StoreResult<ArtifactMeta>;
    async fn get_artifact(&self, file_id: &str) -> StoreResult<Option<Artifact>>;
}
