//! The `search` section of Fathom's config file: where `web_search` looks, as written and
//! turned, with the fetcher's config, into a [`WebConfig`].

use std::time::Duration;

use fathom_fetch::FetchConfig;
use serde::Deserialize;

use crate::web::{Provider, WebConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchSection {
    pub provider: Provider,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_seconds: u64,
}

impl Default for SearchSection {
    fn default() -> Self {
        SearchSection {
            provider: Provider::Corpus,
            base_url: None,
            api_key_env: None,
            timeout_seconds: 15,
        }
    }
}

impl SearchSection {
    /// Where `web_search` looks (blank values left out), and `fetch` for how `fetch_url`
    /// reads.
    pub fn web_config(&self, fetch: FetchConfig) -> WebConfig {
        WebConfig {
            provider: self.provider,
            base_url: self.base_url.clone().filter(|u| !u.trim().is_empty()),
            api_key_env: self.api_key_env.clone().filter(|k| !k.trim().is_empty()),
            search_timeout: Duration::from_secs(self.timeout_seconds.max(1)),
            fetch,
        }
    }
}
