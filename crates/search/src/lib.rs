//! # fathom-search: where a run's sources come from
//!
//! A [`SearchProvider`] answers a query with hits: the local corpus (its FTS5 index), a web
//! search API ([`web::WebSearch`]: SearxNG, Tavily, Brave), or both ranked together
//! ([`blended`]). A [`Fetcher`] reads a hit's address: the safe web fetcher
//! ([`web::WebFetcher`], `file://` from the corpus). Knows nothing of runs: the research
//! tools journal what these return.

pub mod config;
pub mod web;

pub use config::SearchSection;

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use fathom_corpus::{Corpus, Fetched, SearchHit};
use fathom_parse::ParsedDoc;

/// Where `web_search` looks. The local corpus offline; web search APIs online.
#[async_trait]
pub trait SearchProvider: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// Whether a search stays on this machine (the local corpus) rather than reaching the web.
    fn is_local(&self) -> bool {
        false
    }
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, String>;

    /// The search's hits and, when it asks several places and one of them failed while the
    /// others answered, what failed: a person must know that the web was not searched.
    async fn search_all(&self, query: &str, limit: usize) -> Result<Found, String> {
        self.search(query, limit).await.map(|hits| Found {
            hits,
            missing: None,
        })
    }
}

/// What a search found, as journaled: the hits, and what part of the search failed.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(from = "FoundStored")]
pub struct Found {
    pub hits: Vec<SearchHit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

/// [`Found`] as stored: runs journaled before partial failures were kept hold the hits alone.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum FoundStored {
    Hits(Vec<SearchHit>),
    Found {
        hits: Vec<SearchHit>,
        #[serde(default)]
        missing: Option<String>,
    },
}

impl From<FoundStored> for Found {
    fn from(stored: FoundStored) -> Self {
        match stored {
            FoundStored::Hits(hits) => Found {
                hits,
                missing: None,
            },
            FoundStored::Found { hits, missing } => Found { hits, missing },
        }
    }
}

/// How `fetch_url` reads a document.
#[async_trait]
pub trait Fetcher: Send + Sync + 'static {
    async fn fetch(&self, url: &str) -> Result<Fetched, String>;

    /// The document at `url` as already parsed, when its content is still `sha256` (hex of its
    /// bytes): the local corpus keeps what its index parsed, so a run need not parse it again.
    async fn parsed(&self, _url: &str, _sha256: &str) -> Option<ParsedDoc> {
        None
    }
}

/// Counts a search by provider and outcome (ok, empty, error) for the operator's metrics.
pub(crate) fn count_search(provider: &str, hits: &Result<Vec<SearchHit>, String>) {
    let outcome = match hits {
        Ok(h) if h.is_empty() => "empty",
        Ok(_) => "ok",
        Err(_) => "error",
    };
    metrics::counter!("fathom_search_total", "provider" => provider.to_string(), "outcome" => outcome)
        .increment(1);
}

#[async_trait]
impl SearchProvider for Corpus {
    fn name(&self) -> &str {
        "local corpus"
    }
    fn is_local(&self) -> bool {
        true
    }
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, String> {
        let hits = Corpus::search(self, query, limit)
            .await
            .map_err(|e| e.to_string());
        count_search("corpus", &hits);
        hits
    }
}

#[async_trait]
impl Fetcher for Corpus {
    async fn fetch(&self, url: &str) -> Result<Fetched, String> {
        Corpus::fetch(self, url).await.map_err(|e| e.to_string())
    }

    async fn parsed(&self, url: &str, sha256: &str) -> Option<ParsedDoc> {
        // An index that cannot answer is no reason to fail: the document is parsed instead.
        Corpus::parsed(self, url, sha256).await.ok().flatten()
    }
}

/// `local` and `web` searched at once as one provider, their results ranked together by
/// reciprocal rank fusion and deduplicated by canonical URL.
pub fn blended(
    local: Arc<dyn SearchProvider>,
    web: Arc<dyn SearchProvider>,
) -> Arc<dyn SearchProvider> {
    Arc::new(Blended { local, web })
}

/// The corpus and the web searched at once, their results ranked together by reciprocal rank
/// fusion (their scores are not comparable: BM25 beside a search engine's) and deduplicated
/// by canonical URL. One failing leaves the other's results.
struct Blended {
    local: Arc<dyn SearchProvider>,
    web: Arc<dyn SearchProvider>,
}

/// The rank offset of reciprocal rank fusion (Cormack et al. 2009): a hit's score is the sum
/// over lists of 1 / (K + rank).
const FUSION_K: f64 = 60.0;

#[async_trait]
impl SearchProvider for Blended {
    fn name(&self) -> &str {
        "local corpus and web"
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, String> {
        self.search_all(query, limit).await.map(|found| found.hits)
    }

    async fn search_all(&self, query: &str, limit: usize) -> Result<Found, String> {
        let (local, web) = tokio::join!(
            self.local.search(query, limit),
            self.web.search(query, limit)
        );
        let (lists, missing): (Vec<Vec<SearchHit>>, _) = match (local, web) {
            (Err(a), Err(b)) => return Err(format!("{a}; {b}")),
            (Ok(l), Err(e)) => (
                vec![l],
                Some(format!(
                    "the web search failed ({e}); only the local corpus answered"
                )),
            ),
            (Err(e), Ok(w)) => (
                vec![w],
                Some(format!(
                    "the local corpus search failed ({e}); only the web answered"
                )),
            ),
            (Ok(l), Ok(w)) => (vec![l, w], None),
        };
        let mut fused: Vec<(String, SearchHit, f64)> = Vec::new();
        for list in &lists {
            for (rank, hit) in list.iter().enumerate() {
                let score = 1.0 / (FUSION_K + rank as f64 + 1.0);
                let key = web::canonical_url(&hit.url);
                match fused.iter_mut().find(|(k, _, _)| *k == key) {
                    Some(entry) => entry.2 += score,
                    None => fused.push((key, hit.clone(), score)),
                }
            }
        }
        // Stable: at equal scores the corpus's hit (listed first) comes first.
        fused.sort_by(|a, b| b.2.total_cmp(&a.2));
        let hits = fused
            .into_iter()
            .take(limit)
            .map(|(_, hit, score)| SearchHit { score, ..hit })
            .collect();
        Ok(Found { hits, missing })
    }
}
