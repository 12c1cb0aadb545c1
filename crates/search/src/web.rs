//! The web: search through SearxNG, Tavily or Brave, and reading through the SSRF-safe
//! fetcher (corpus `file://` URLs still read locally).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fathom_fetch::SafeFetcher;
use serde_json::{Value, json};

use fathom_corpus::{Corpus, Fetched, SearchHit};
use fathom_parse::{DocKind, ParsedDoc};

use crate::{Fetcher, SearchProvider};

/// The form of a URL two results are compared by: lower-case scheme and host, no default
/// port, no fragment, no tracking parameters, no trailing slash on a non-root path.
pub fn canonical_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw.trim()) else {
        return raw.trim().to_string();
    };
    url.set_fragment(None);
    if url.path().len() > 1 && url.path().ends_with('/') {
        let trimmed = url.path().trim_end_matches('/').to_string();
        url.set_path(&trimmed);
    }
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !(k.starts_with("utm_") || matches!(k.as_str(), "fbclid" | "gclid" | "ref" | "ref_src"))
        })
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    url.to_string()
}

/// `fetch_url`: web URLs through the safe fetcher, `file://` URLs from the corpus.
pub struct WebFetcher {
    safe: SafeFetcher,
    corpus: Option<Arc<Corpus>>,
}

impl WebFetcher {
    pub fn new(safe: SafeFetcher, corpus: Option<Arc<Corpus>>) -> WebFetcher {
        WebFetcher { safe, corpus }
    }
}

#[async_trait]
impl Fetcher for WebFetcher {
    async fn fetch(&self, url: &str) -> Result<Fetched, String> {
        if url.starts_with("file://") {
            return match &self.corpus {
                Some(c) => Fetcher::fetch(c.as_ref(), url).await,
                None => Err(format!("{url}: no local corpus is configured")),
            };
        }
        let f = self.safe.fetch(url).await.map_err(|e| e.to_string())?;
        let kind = kind_of(&f)?;
        Ok(Fetched {
            url: f.url,
            kind,
            bytes: f.bytes,
            charset: f.charset,
        })
    }

    async fn parsed(&self, url: &str, sha256: &str) -> Option<ParsedDoc> {
        match &self.corpus {
            Some(c) if url.starts_with("file://") => Fetcher::parsed(c.as_ref(), url, sha256).await,
            _ => None,
        }
    }
}

/// The kind of a fetched document: its declared type, else its URL's extension.
pub fn kind_of(f: &fathom_fetch::Fetched) -> Result<DocKind, String> {
    DocKind::from_content_type(&f.content_type)
        .or_else(|| DocKind::from_path(url::Url::parse(&f.final_url).ok()?.path()))
        .ok_or_else(|| {
            let ct = if f.content_type.is_empty() {
                "of no declared type"
            } else {
                &f.content_type
            };
            format!("{} is {ct}, which Fathom does not read", f.final_url)
        })
}

/// A web search API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchApi {
    /// A SearxNG instance's JSON API (`/search?format=json`).
    Searxng {
        base_url: String,
    },
    Tavily {
        base_url: String,
        api_key: String,
    },
    Brave {
        base_url: String,
        api_key: String,
    },
}

impl SearchApi {
    pub fn name(&self) -> &'static str {
        match self {
            SearchApi::Searxng { .. } => "searxng",
            SearchApi::Tavily { .. } => "tavily",
            SearchApi::Brave { .. } => "brave",
        }
    }
}

/// `web_search` through a search API, with retries on 429, 5xx and timeouts.
pub struct WebSearch {
    api: SearchApi,
    http: reqwest::Client,
    attempts: u32,
    backoff: Duration,
}

impl WebSearch {
    pub fn new(api: SearchApi, timeout: Duration) -> Result<WebSearch, String> {
        let http = fathom_fetch::client_builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("fathom/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(WebSearch {
            api,
            http,
            attempts: 3,
            backoff: Duration::from_millis(500),
        })
    }

    /// Fewer, quicker retries (tests).
    pub fn with_retries(mut self, attempts: u32, backoff: Duration) -> WebSearch {
        self.attempts = attempts.max(1);
        self.backoff = backoff;
        self
    }

    fn request(&self, query: &str, limit: usize) -> reqwest::RequestBuilder {
        match &self.api {
            SearchApi::Searxng { base_url } => self
                .http
                .get(format!("{}/search", base_url.trim_end_matches('/')))
                .query(&[("q", query), ("format", "json")]),
            SearchApi::Tavily { base_url, api_key } => self
                .http
                .post(format!("{}/search", base_url.trim_end_matches('/')))
                .bearer_auth(api_key)
                .json(&json!({"query": query, "max_results": limit, "search_depth": "basic"})),
            SearchApi::Brave { base_url, api_key } => self
                .http
                .get(format!(
                    "{}/res/v1/web/search",
                    base_url.trim_end_matches('/')
                ))
                .header("X-Subscription-Token", api_key)
                .header("Accept", "application/json")
                .query(&[("q", query), ("count", &limit.min(20).to_string())]),
        }
    }

    /// Result rows, read field by field: a null or oddly typed field in one row (search
    /// engines send both) costs that field, not the whole answer.
    fn hits(&self, body: &Value, limit: usize) -> Vec<SearchHit> {
        let rows = match &self.api {
            SearchApi::Brave { .. } => body.pointer("/web/results"),
            _ => body.get("results"),
        };
        let rows = rows
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let text = |row: &Value, keys: &[&str]| {
            keys.iter()
                .find_map(|k| row.get(*k).and_then(Value::as_str))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let n = rows.len().max(1) as f64;
        rows.iter()
            .filter(|r| {
                let url = text(r, &["url"]);
                url.starts_with("http://") || url.starts_with("https://")
            })
            .take(limit)
            .enumerate()
            .map(|(i, r)| {
                let url = text(r, &["url"]);
                let title = text(r, &["title"]);
                SearchHit {
                    title: if title.is_empty() { url.clone() } else { title },
                    url,
                    heading: String::new(),
                    snippet: strip_tags(&text(r, &["content", "description"])),
                    score: r
                        .get("score")
                        .and_then(Value::as_f64)
                        .unwrap_or(1.0 - i as f64 / n),
                }
            })
            .collect()
    }
}

/// Search snippets sometimes carry `<strong>` highlighting.
fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[async_trait]
impl SearchProvider for WebSearch {
    fn name(&self) -> &str {
        self.api.name()
    }

    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, String> {
        let hits = self.search_with_retries(query, limit).await;
        crate::count_search(self.api.name(), &hits);
        hits
    }
}

impl WebSearch {
    async fn search_with_retries(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<SearchHit>, String> {
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            let wait = match self.request(query, limit).send().await {
                Ok(resp) if resp.status().is_success() => {
                    let body: Value = resp.json().await.map_err(|e| {
                        format!("{} answered with unreadable JSON: {e}", self.api.name())
                    })?;
                    return Ok(self.hits(&body, limit));
                }
                Ok(resp) => {
                    let status = resp.status();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s.min(30)));
                    last = format!("{} answered HTTP {}", self.api.name(), status.as_u16());
                    if status.as_u16() == 429 || status.is_server_error() {
                        retry_after
                    } else if status.as_u16() == 403
                        && matches!(self.api, SearchApi::Searxng { .. })
                    {
                        // What SearxNG says when its settings do not allow format=json.
                        return Err(format!(
                            "{last}: SearxNG serves JSON only when its settings.yml lists json \
                             in search.formats (see configs/searxng/settings.yml)"
                        ));
                    } else {
                        // 4xx other than 429 (a bad key, a bad query) will not get better.
                        return Err(format!("{last}; check the search settings"));
                    }
                }
                Err(e) if e.is_timeout() => {
                    last = format!("{} timed out", self.api.name());
                    None
                }
                Err(e) => {
                    last = format!("cannot reach {}: {e}", self.api.name());
                    None
                }
            };
            if attempt < self.attempts {
                let backoff = self.backoff * 2u32.pow(attempt - 1);
                tokio::time::sleep(wait.unwrap_or(backoff).max(backoff)).await;
            }
        }
        Err(format!(
            "{last} ({} attempts); results from other queries are used",
            self.attempts
        ))
    }
}

/// Where `web_search` looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The local corpus (offline).
    Corpus,
    Searxng,
    Tavily,
    Brave,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Corpus => "corpus",
            Provider::Searxng => "searxng",
            Provider::Tavily => "tavily",
            Provider::Brave => "brave",
        }
    }
}

/// Where `web_search` looks and how `fetch_url` reads the web.
#[derive(Debug, Clone)]
pub struct WebConfig {
    pub provider: Provider,
    pub base_url: Option<String>,
    /// The environment variable holding the search API key (default: `PROVIDER_API_KEY`).
    pub api_key_env: Option<String>,
    pub search_timeout: Duration,
    pub fetch: fathom_fetch::FetchConfig,
}

impl WebConfig {
    /// Whether `web_search` reaches the web (a search API), not only the local corpus.
    pub fn reaches_web(&self) -> bool {
        self.provider != Provider::Corpus
    }
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            provider: Provider::Corpus,
            base_url: None,
            api_key_env: None,
            search_timeout: Duration::from_secs(15),
            fetch: fathom_fetch::FetchConfig::default(),
        }
    }
}

/// The two web tools: where `web_search` looks and how `fetch_url` reads.
pub struct WebTools {
    pub search: Arc<dyn SearchProvider>,
    pub fetcher: Arc<dyn Fetcher>,
}

/// The `web_search` and `fetch_url` tools the config asks for. The corpus, when given, serves
/// `file://` URLs and is the search provider for `provider: corpus`.
pub fn web_tools(config: &WebConfig, corpus: Option<Arc<Corpus>>) -> Result<WebTools, String> {
    let fetcher: Arc<dyn Fetcher> = Arc::new(WebFetcher::new(
        SafeFetcher::new(config.fetch.clone()),
        corpus.clone(),
    ));
    let provider = config.provider.as_str();
    let key = || -> Result<String, String> {
        let var = config
            .api_key_env
            .clone()
            .unwrap_or_else(|| format!("{}_API_KEY", provider.to_ascii_uppercase()));
        std::env::var(&var)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| format!("search.provider {provider} needs an API key in ${var}"))
    };
    let base = |default: &str| {
        config
            .base_url
            .clone()
            .unwrap_or_else(|| default.to_string())
    };
    let api = match config.provider {
        Provider::Corpus => {
            let corpus = corpus.ok_or("search.provider corpus needs a corpus folder")?;
            return Ok(WebTools {
                search: corpus,
                fetcher,
            });
        }
        Provider::Searxng => SearchApi::Searxng {
            base_url: config
                .base_url
                .clone()
                .ok_or("search.provider searxng needs search.base_url")?,
        },
        Provider::Tavily => SearchApi::Tavily {
            base_url: base("https://api.tavily.com"),
            api_key: key()?,
        },
        Provider::Brave => SearchApi::Brave {
            base_url: base("https://api.search.brave.com"),
            api_key: key()?,
        },
    };
    Ok(WebTools {
        search: Arc::new(WebSearch::new(api, config.search_timeout)?),
        fetcher,
    })
}
