//! # fathom-fetch: fetching from a hostile internet
//!
//! [`SafeFetcher::fetch`] reads one URL the way a research agent must when the URLs come from
//! search results and pages it does not control:
//! - only `http` and `https`, no userinfo;
//! - the host is resolved here and every address checked ([`address::refusal`]): loopback,
//!   private, link-local, CGNAT, multicast, unspecified, documentation and the IPv6 forms that
//!   embed such an IPv4 address are refused unless the config allows private networks or
//!   trusts that exact origin;
//! - the connection goes only to the checked addresses (pinned), with proxies off;
//! - redirects are followed by hand, at most `max_redirects`, each hop checked again;
//! - connect and total timeouts; the body is streamed and cut at `max_bytes` after
//!   decompression (gzip, deflate, br), so a decompression bomb stops at the cap;
//! - a content-type allow-list; robots.txt honoured (configurable); a minimum interval
//!   between requests to one host.

pub mod address;
pub mod config;
pub mod robots;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use url::{Host, Url};

pub use config::FetchSection;
pub use robots::Robots;

#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Lift the address check entirely (self-hosted sources on a private network).
    pub allow_private_networks: bool,
    /// Origins (`host:port`) trusted even though they resolve to private addresses.
    pub trusted_origins: Vec<String>,
    pub connect_timeout: Duration,
    pub total_timeout: Duration,
    /// Largest body accepted, after decompression.
    pub max_bytes: usize,
    pub max_redirects: usize,
    pub obey_robots: bool,
    /// Minimum time between two requests to one host.
    pub per_host_interval: Duration,
    pub user_agent: String,
    /// Media types accepted; an empty list accepts any.
    pub allowed_types: Vec<String>,
    /// Certificate authorities trusted besides the system's (a self-hosted source behind a
    /// private CA). Add them with [`FetchConfig::trust_pem`].
    pub extra_roots: Vec<reqwest::Certificate>,
}

impl FetchConfig {
    /// Trusts the certificates of a PEM bundle as extra roots.
    pub fn trust_pem(&mut self, pem: &[u8]) -> Result<usize, String> {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())?;
        if certs.is_empty() {
            return Err("no PEM certificate in it".into());
        }
        let n = certs.len();
        self.extra_roots.extend(certs);
        Ok(n)
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            allow_private_networks: false,
            trusted_origins: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(30),
            max_bytes: 20 * 1024 * 1024,
            max_redirects: 5,
            obey_robots: true,
            per_host_interval: Duration::from_millis(500),
            user_agent: format!(
                "fathom/{} (+https://github.com/fathom-research)",
                env!("CARGO_PKG_VERSION")
            ),
            allowed_types: [
                "text/html",
                "application/xhtml+xml",
                "text/plain",
                "text/markdown",
                "text/x-markdown",
                "application/pdf",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            ]
            .map(String::from)
            .to_vec(),
            extra_roots: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FetchError {
    #[error("'{0}' is not a valid URL")]
    BadUrl(String),
    #[error("only http and https URLs are fetched, not {0}:")]
    Scheme(String),
    #[error("URLs with a user name or password are not fetched")]
    Userinfo,
    #[error("{host} is {why} ({addr}); private addresses are not fetched")]
    Forbidden {
        host: String,
        addr: IpAddr,
        why: &'static str,
    },
    #[error("cannot resolve {0}: {1}")]
    Dns(String, String),
    #[error("robots.txt of {0} disallows {1}")]
    Robots(String, String),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("redirect without a usable Location header")]
    BadRedirect,
    #[error("HTTP {status} from {url}")]
    Status { status: u16, url: String },
    #[error("{url} is {content_type}, which is not fetched")]
    ContentType { url: String, content_type: String },
    #[error("{url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("{url} timed out after {secs} s")]
    Timeout { url: String, secs: u64 },
    #[error("cannot fetch {url}: {reason}")]
    Connect { url: String, reason: String },
}

impl FetchError {
    /// A short name for what went wrong, the same for every URL (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::BadUrl(_) | FetchError::Scheme(_) | FetchError::Userinfo => "bad_url",
            FetchError::Forbidden { .. } => "forbidden_address",
            FetchError::Dns(..) => "dns",
            FetchError::Robots(..) => "robots",
            FetchError::TooManyRedirects(_) | FetchError::BadRedirect => "redirect",
            FetchError::Status { .. } => "http_status",
            FetchError::ContentType { .. } => "content_type",
            FetchError::TooLarge { .. } => "too_large",
            FetchError::Timeout { .. } => "timeout",
            FetchError::Connect { .. } => "connect",
        }
    }
}

/// A fetched document.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The URL asked for.
    pub url: String,
    /// Where the body came from, after redirects.
    pub final_url: String,
    pub status: u16,
    /// The media type without parameters, lower-case ("" if none was sent).
    pub content_type: String,
    /// The `charset` parameter, if the server sent one.
    pub charset: Option<String>,
    pub bytes: Vec<u8>,
    pub redirects: Vec<String>,
}

/// The fetcher. Keeps robots.txt per origin and the time of the last request per host.
pub struct SafeFetcher {
    config: FetchConfig,
    robots: Mutex<HashMap<String, Robots>>,
    next_slot: Mutex<HashMap<String, Instant>>,
    /// Clients by host and the checked addresses they are pinned to: fetching a host again
    /// (its robots.txt, then its pages) reuses connections, while a host that now resolves
    /// elsewhere gets a new client pinned to its new, checked addresses.
    clients: Mutex<HashMap<(String, Vec<SocketAddr>), reqwest::Client>>,
}

/// Addresses a name may resolve to that we look at, at most.
const MAX_ADDRS: usize = 16;
/// robots.txt bodies are cut here.
const ROBOTS_MAX_BYTES: usize = 512 * 1024;
/// Hosts remembered (robots.txt, politeness slots) before the memory is cleared.
const MAX_HOSTS: usize = 10_000;
/// Pinned clients (each with its idle connections) kept before they are dropped.
const MAX_CLIENTS: usize = 256;

/// Installs the process-wide TLS provider (ring) that every reqwest client here needs;
/// repeated calls do nothing.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A reqwest client builder with TLS ready, for the HTTP clients that are not fetchers
/// (search APIs, tests, benchmarks).
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls();
    reqwest::Client::builder()
}

impl SafeFetcher {
    pub fn new(config: FetchConfig) -> SafeFetcher {
        install_tls();
        SafeFetcher {
            config,
            robots: Mutex::new(HashMap::new()),
            next_slot: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &FetchConfig {
        &self.config
    }

    /// Checks a URL's form: scheme, userinfo, host.
    pub fn check_url(url: &str) -> Result<Url, FetchError> {
        let parsed = Url::parse(url.trim()).map_err(|_| FetchError::BadUrl(url.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(FetchError::Scheme(parsed.scheme().to_string()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(FetchError::Userinfo);
        }
        if parsed.host().is_none() {
            return Err(FetchError::BadUrl(url.to_string()));
        }
        Ok(parsed)
    }

    /// Resolves the URL's host and checks every address; returns the addresses to pin.
    pub async fn resolve(&self, url: &Url) -> Result<Vec<SocketAddr>, FetchError> {
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url.host_str().unwrap_or_default().to_string();
        let addrs: Vec<SocketAddr> = match url.host() {
            Some(Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
            Some(Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
            _ => {
                let lookup = tokio::net::lookup_host((host.as_str(), port));
                tokio::time::timeout(self.config.connect_timeout, lookup)
                    .await
                    .map_err(|_| FetchError::Dns(host.clone(), "timed out".into()))?
                    .map_err(|e| FetchError::Dns(host.clone(), e.to_string()))?
                    .take(MAX_ADDRS)
                    .collect()
            }
        };
        if addrs.is_empty() {
            return Err(FetchError::Dns(host, "no addresses".into()));
        }
        let origin = format!("{host}:{port}");
        let trusted = self.config.allow_private_networks
            || self
                .config
                .trusted_origins
                .iter()
                .any(|o| o.eq_ignore_ascii_case(&origin));
        if !trusted {
            // Every address must pass: a name that also resolves to a private address is
            // refused whole, so a rebinding answer cannot slip through.
            for a in &addrs {
                if let Some(why) = address::refusal(a.ip()) {
                    return Err(FetchError::Forbidden {
                        host,
                        addr: a.ip(),
                        why,
                    });
                }
            }
        }
        Ok(addrs)
    }

    /// Waits until this host may be asked again.
    async fn polite(&self, host: &str) {
        let interval = self.config.per_host_interval;
        if interval.is_zero() {
            return;
        }
        let wait = {
            let mut slots = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if slots.len() >= MAX_HOSTS {
                slots.retain(|_, at| *at > now);
            }
            let at = slots.get(host).copied().unwrap_or(now).max(now);
            slots.insert(host.to_string(), at + interval);
            at - now
        };
        tokio::time::sleep(wait).await;
    }

    /// One request to a checked URL, pinned to its checked addresses, no redirects followed.
    async fn request(
        &self,
        url: &Url,
        deadline: Instant,
        max_bytes: usize,
    ) -> Result<(u16, reqwest::header::HeaderMap, Vec<u8>), FetchError> {
        let addrs = self.resolve(url).await?;
        let host = url.host_str().unwrap_or_default().to_string();
        self.polite(&host).await;
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout_err = || FetchError::Timeout {
            url: url.to_string(),
            secs: self.config.total_timeout.as_secs(),
        };
        if left.is_zero() {
            return Err(timeout_err());
        }
        let client = self
            .client_for(&host, addrs)
            .map_err(|e| FetchError::Connect {
                url: url.to_string(),
                reason: e.to_string(),
            })?;
        let connect_err = |e: reqwest::Error| {
            if e.is_timeout() {
                timeout_err()
            } else {
                FetchError::Connect {
                    url: url.to_string(),
                    reason: root_cause(&e),
                }
            }
        };
        let resp = client
            .get(url.as_str())
            .timeout(left)
            .send()
            .await
            .map_err(connect_err)?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let too_large = || FetchError::TooLarge {
            url: url.to_string(),
            limit: max_bytes,
        };
        if resp
            .content_length()
            .is_some_and(|n| n as usize > max_bytes)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        if !resp.status().is_redirection() {
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(connect_err)?;
                if body.len() + chunk.len() > max_bytes {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
        }
        Ok((status, headers, body))
    }

    /// The client pinned to `addrs` for `host`, made on first use.
    fn client_for(
        &self,
        host: &str,
        mut addrs: Vec<SocketAddr>,
    ) -> Result<reqwest::Client, reqwest::Error> {
        addrs.sort();
        let key = (host.to_string(), addrs);
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = reqwest::Client::builder()
            .resolve_to_addrs(host, &key.1)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.config.connect_timeout)
            .pool_max_idle_per_host(4)
            .user_agent(&self.config.user_agent)
            .tls_certs_merge(self.config.extra_roots.iter().cloned())
            .build()?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    async fn robots_for(&self, url: &Url, deadline: Instant) -> Robots {
        let origin = url.origin().ascii_serialization();
        if let Some(r) = self
            .robots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&origin)
        {
            return r.clone();
        }
        let Ok(robots_url) = url.join("/robots.txt") else {
            return Robots::allow_all();
        };
        let agent = self
            .config
            .user_agent
            .split('/')
            .next()
            .unwrap_or("fathom")
            .to_string();
        let robots = match self.request(&robots_url, deadline, ROBOTS_MAX_BYTES).await {
            Ok((200..=299, _, body)) => Robots::parse(&String::from_utf8_lossy(&body), &agent),
            Ok((500..=599, _, _)) => Robots::disallow_all(),
            // Missing, redirected or unreadable robots.txt: no rules.
            _ => Robots::allow_all(),
        };
        let mut cache = self.robots.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_HOSTS {
            cache.clear();
        }
        cache.insert(origin, robots.clone());
        robots
    }

    /// Fetches `url` under every rule above.
    pub async fn fetch(&self, url: &str) -> Result<Fetched, FetchError> {
        let fetched = self.fetch_checked(url).await;
        let outcome = fetched.as_ref().map_or_else(FetchError::kind, |_| "ok");
        metrics::counter!("fathom_fetch_total", "outcome" => outcome).increment(1);
        fetched
    }

    async fn fetch_checked(&self, url: &str) -> Result<Fetched, FetchError> {
        let deadline = Instant::now() + self.config.total_timeout;
        let mut current = Self::check_url(url)?;
        let mut redirects = Vec::new();
        loop {
            if self.config.obey_robots {
                let robots = self.robots_for(&current, deadline).await;
                let path = match current.query() {
                    Some(q) => format!("{}?{q}", current.path()),
                    None => current.path().to_string(),
                };
                if !robots.allows(&path) {
                    return Err(FetchError::Robots(
                        current.host_str().unwrap_or_default().to_string(),
                        path,
                    ));
                }
            }
            let (status, headers, bytes) = self
                .request(&current, deadline, self.config.max_bytes)
                .await?;
            if (300..400).contains(&status) && status != 304 {
                if redirects.len() >= self.config.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.config.max_redirects));
                }
                let location = headers
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or(FetchError::BadRedirect)?;
                let next = current
                    .join(location)
                    .map_err(|_| FetchError::BadRedirect)?;
                let next = Self::check_url(next.as_str())?;
                redirects.push(next.to_string());
                current = next;
                continue;
            }
            if !(200..300).contains(&status) {
                return Err(FetchError::Status {
                    status,
                    url: current.to_string(),
                });
            }
            let raw_type = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let mut params = raw_type.split(';');
            let content_type = params.next().unwrap_or("").trim().to_ascii_lowercase();
            let charset = params
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
                .map(|(_, v)| v.trim().trim_matches('"').to_string());
            if !content_type.is_empty()
                && !self.config.allowed_types.is_empty()
                && !self.config.allowed_types.contains(&content_type)
            {
                return Err(FetchError::ContentType {
                    url: current.to_string(),
                    content_type,
                });
            }
            return Ok(Fetched {
                url: url.to_string(),
                final_url: current.to_string(),
                status,
                content_type,
                charset,
                bytes,
                redirects,
            });
        }
    }
}

/// The innermost cause of a request error, which names what went wrong (refused, reset...).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
