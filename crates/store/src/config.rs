//! The `storage` section of Fathom's config file: which database the stores open.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    /// A SQLite path or `sqlite:` URL, or a `postgres://` URL; `--database-url` and
    /// `DATABASE_URL` win over it.
    pub database_url: Option<String>,
}

impl StorageSection {
    /// `database_url`, unless blank.
    pub fn into_database_url(self) -> Option<String> {
        self.database_url.filter(|u| !u.trim().is_empty())
    }
}
