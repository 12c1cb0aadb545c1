//! The application config: `configs/config.json` (or `--config FILE`, or the copy built into
//! the binary) read into typed sections, every key known (a misspelt key is an error naming
//! it and the file), checked once at start, and turned into what each part of Fathom runs
//! with. The research settings schema in it stays the single source for per-run settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use fathom_deliver::{Smtp, Webhook, WebhookConfig};
use fathom_engine::{EngineConfig, RetryPolicy};
use fathom_fetch::FetchConfig;
use fathom_llm::ModelConfig;
use fathom_parse::pdf::PdfLimits;
use fathom_research::agent::AgentRoles;
use fathom_research::tools::web::{Provider, WebConfig};
use fathom_research::{Delivery, ResearchConfig};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The config file shipped with Fathom, used when no other is given.
pub const EMBEDDED_CONFIG: &str = include_str!("../../../configs/config.json");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {reason}")]
    Read { path: String, reason: String },
    /// Not JSON, an unknown key or a value of the wrong type: the key is named.
    #[error("config {path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// The file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    engine: EngineSection,
    #[serde(default)]
    storage: StorageSection,
    #[serde(default)]
    agent_data: AgentDataSection,
    #[serde(default)]
    search: SearchSection,
    #[serde(default)]
    fetch: FetchSection,
    #[serde(default)]
    llm: LlmSection,
    #[serde(default)]
    parse: ParseSection,
    #[serde(default)]
    delivery: DeliverySection,
    #[serde(default)]
    mcp: McpSection,
    research: ResearchSection,
}

/// MCP servers whose tools the researchers are offered (with a model).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct McpSection {
    servers: Vec<fathom_mcp::client::ServerSpec>,
    /// Bound on starting (or reaching) a server and listing its tools.
    connect_timeout_seconds: u64,
    /// Bound on one tool call.
    call_timeout_seconds: u64,
    /// Characters of a tool's result handed to the model, at most.
    max_result_chars: usize,
}

impl Default for McpSection {
    fn default() -> Self {
        McpSection {
            servers: Vec::new(),
            connect_timeout_seconds: 15,
            call_timeout_seconds: 30,
            max_result_chars: 20_000,
        }
    }
}

/// How finished reports are delivered. The secrets (the webhook secret, the SMTP relay and
/// its password) come from the environment, never from this file or a run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DeliverySection {
    /// Webhook hosts (`name` or `name:port`) allowed although they resolve to loopback or
    /// private addresses.
    webhook_allow: Vec<String>,
    /// Bound on one attempt (a webhook POST, each SMTP command).
    timeout_seconds: u64,
    /// Attempts per channel, the first included.
    max_attempts: u32,
    initial_backoff_ms: u64,
    max_backoff_ms: u64,
}

impl Default for DeliverySection {
    fn default() -> Self {
        let d = Delivery::default();
        DeliverySection {
            webhook_allow: Vec::new(),
            timeout_seconds: d.timeout.as_secs(),
            max_attempts: d.retry.max_attempts,
            initial_backoff_ms: d.retry.initial_backoff.as_millis() as u64,
            max_backoff_ms: d.retry.max_backoff.as_millis() as u64,
        }
    }
}

/// The environment variables delivery reads.
pub const WEBHOOK_SECRET_ENV: &str = "FATHOM_WEBHOOK_SECRET";
pub const SMTP_URL_ENV: &str = "FATHOM_SMTP_URL";
pub const SMTP_FROM_ENV: &str = "FATHOM_SMTP_FROM";

/// How runs are driven.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct EngineSection {
    /// A run whose owner stops renewing its lease this long is taken over by another process.
    lease_ttl_seconds: u64,
    /// How often idle workers and followers look for work and events other processes made.
    poll_interval_ms: u64,
    /// Runs one process drives at once; unset, see [`default_concurrent_runs`].
    max_concurrent_runs: Option<usize>,
    /// On SIGTERM or Ctrl-C, how long steps in flight may take to finish before they are
    /// cut off and their runs let go to another process.
    shutdown_grace_seconds: u64,
    /// How long a step's commit may wait for quick steps run after it on its event, to be
    /// committed with them; 0 commits every step alone.
    chain_wait_ms: u64,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            lease_ttl_seconds: 30,
            poll_interval_ms: 250,
            max_concurrent_runs: None,
            shutdown_grace_seconds: 30,
            chain_wait_ms: 5,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct StorageSection {
    /// A SQLite path or `sqlite:` URL, or a `postgres://` URL; `--database-url` and
    /// `DATABASE_URL` win over it.
    database_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AgentDataSection {
    deployment_name: String,
    research_collection: String,
}

impl Default for AgentDataSection {
    fn default() -> Self {
        AgentDataSection {
            deployment_name: "_public".into(),
            research_collection: "research-sessions".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct SearchSection {
    provider: Provider,
    base_url: Option<String>,
    api_key_env: Option<String>,
    timeout_seconds: u64,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct FetchSection {
    allow_private_networks: bool,
    obey_robots: bool,
    max_bytes: u64,
    timeout_seconds: u64,
    per_host_interval_ms: u64,
    /// PEM files of private certificate authorities, relative to the config file's folder.
    ca_files: Vec<PathBuf>,
}

impl Default for FetchSection {
    fn default() -> Self {
        FetchSection {
            allow_private_networks: false,
            obey_robots: true,
            max_bytes: FetchConfig::default().max_bytes as u64,
            timeout_seconds: 30,
            per_host_interval_ms: 500,
            ca_files: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LlmSection {
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    timeout_seconds: u64,
    idle_timeout_seconds: u64,
    max_attempts: u32,
    planner: RoleSection,
    researcher: RoleSection,
    writer: RoleSection,
}

impl Default for LlmSection {
    fn default() -> Self {
        LlmSection {
            model: None,
            base_url: None,
            api_key_env: None,
            timeout_seconds: 300,
            idle_timeout_seconds: 60,
            max_attempts: 4,
            planner: RoleSection::default(),
            researcher: RoleSection::default(),
            writer: RoleSection::default(),
        }
    }
}

/// One agent role's own model, over the section's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RoleSection {
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ParseSection {
    pdf_timeout_seconds: u64,
    pdf_memory_mib: u64,
    pdf_max_pages: u32,
}

impl Default for ParseSection {
    fn default() -> Self {
        let d = PdfLimits::default();
        ParseSection {
            pdf_timeout_seconds: d.timeout.as_secs(),
            pdf_memory_mib: d.memory_mib,
            pdf_max_pages: d.max_pages,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResearchSection {
    /// The folder `fathom serve` searches when `--corpus` is not given, relative to the
    /// config file's folder.
    #[serde(default)]
    corpus: Option<PathBuf>,
    defaults: Map<String, Value>,
    settings_schema: Value,
}

/// The config, checked, as the parts of Fathom use it.
#[derive(Debug, Clone)]
pub struct AppConfig {
    pub engine: EngineConfig,
    /// `storage.database_url`, if set.
    pub database_url: Option<String>,
    pub research: ResearchConfig,
    /// `research.corpus`, resolved against the config file's folder.
    pub corpus: Option<PathBuf>,
    pub web: WebConfig,
    pub pdf: PdfLimits,
    /// The agent's models; None runs the offline planner and writer.
    pub agent: Option<AgentRoles>,
    /// How reports are delivered (webhook, email): the config's limits, the environment's
    /// secrets.
    pub delivery: Delivery,
    /// The tools of the configured MCP servers (connected when a run first asks).
    pub mcp: Option<Arc<fathom_mcp::client::McpTools>>,
}

impl AppConfig {
    /// The config at `path`, else `configs/config.json` when it exists, else the built-in one.
    /// A file may start from another, `"extends": "other.json"` (relative to it), and set
    /// only what differs: objects are merged key by key, anything else replaced.
    pub fn load(path: Option<&Path>) -> Result<AppConfig, ConfigError> {
        let default = Path::new("configs/config.json");
        let path = path.or_else(|| default.is_file().then_some(default));
        let (source, text) = match path {
            Some(p) => (p.display().to_string(), read_extended(p, 0)?.to_string()),
            None => ("(embedded)".to_string(), EMBEDDED_CONFIG.to_string()),
        };
        let base = path.and_then(Path::parent).map(Path::to_path_buf);
        Self::parse(&text, &source, base.as_deref(), &|k| std::env::var(k).ok())
    }

    /// The config in `text`; relative paths in it are taken from `base`, and `env` gives the
    /// environment (`OPENAI_*`, API keys).
    pub fn parse(
        text: &str,
        source: &str,
        base: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AppConfig, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            path: source.to_string(),
            reason,
        };
        let de = &mut serde_json::Deserializer::from_str(text);
        let file: ConfigFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            match at.as_str() {
                "." | "?" | "" => invalid(e.inner().to_string()),
                _ => invalid(format!("{at}: {}", e.inner())),
            }
        })?;
        let in_base = |p: &Path| match base {
            Some(dir) => dir.join(p),
            None => p.to_path_buf(),
        };
        let e = &file.engine;
        if e.lease_ttl_seconds == 0 || e.poll_interval_ms < 10 || e.max_concurrent_runs == Some(0) {
            return Err(invalid(
                "engine: lease_ttl_seconds and max_concurrent_runs must be at least 1, poll_interval_ms at least 10".into(),
            ));
        }
        let mut engine = EngineConfig {
            lease_ttl: Duration::from_secs(e.lease_ttl_seconds),
            poll_interval: Duration::from_millis(e.poll_interval_ms),
            shutdown_grace: Duration::from_secs(e.shutdown_grace_seconds),
            chain_wait: Duration::from_millis(e.chain_wait_ms),
            ..EngineConfig::default()
        };
        let p = &file.parse;
        if p.pdf_timeout_seconds == 0 || p.pdf_memory_mib < 32 || p.pdf_max_pages == 0 {
            return Err(invalid(
                "parse: pdf_timeout_seconds and pdf_max_pages must be at least 1, pdf_memory_mib at least 32".into(),
            ));
        }
        let pdf = PdfLimits {
            timeout: Duration::from_secs(p.pdf_timeout_seconds),
            memory_mib: p.pdf_memory_mib,
            max_pages: p.pdf_max_pages,
        };
        let research = ResearchConfig::new(
            &file.agent_data.deployment_name,
            &file.agent_data.research_collection,
            file.research.defaults,
            file.research.settings_schema,
        )
        .map_err(invalid)?;
        let corpus = file
            .research
            .corpus
            .filter(|c| !c.as_os_str().is_empty())
            .map(|c| in_base(&c));
        let web = web_config(&file.search, &file.fetch, &in_base).map_err(invalid)?;
        let agent = agent_roles(&file.llm, env).map_err(invalid)?;
        let mcp = mcp_tools(&file.mcp).map_err(invalid)?;
        let offline = agent.is_none() && web.provider == Provider::Corpus && mcp.is_none();
        engine.max_concurrent_runs = e
            .max_concurrent_runs
            .unwrap_or_else(|| default_concurrent_runs(offline));
        Ok(AppConfig {
            engine,
            database_url: file.storage.database_url.filter(|u| !u.trim().is_empty()),
            research,
            corpus,
            web,
            pdf,
            agent,
            delivery: delivery(&file.delivery, env).map_err(invalid)?,
            mcp,
        })
    }
}

/// Runs a process drives at once unless `engine.max_concurrent_runs` says: two per core when
/// research is offline (no model, the local corpus, no MCP server), else 16. Offline research
/// is CPU work from start to end, so a run driven beyond what the cores can run only queues
/// for them, and slows the runs under way with it. On 2 cores, 200 research runs by 50 users
/// (Postgres): with 4 runs at once 59-61 runs/s, approval to resume p50 7-9 ms, p99 52-59 ms;
/// with 16, 44-53 runs/s, p50 37-44 ms, p99 100-310 ms; the time to a plan is the same (the
/// runs beyond the slots wait either way). A run that waits for a model or the web mostly
/// waits, and many at once keep those busy.
fn default_concurrent_runs(offline: bool) -> usize {
    match offline {
        true => std::thread::available_parallelism().map_or(2, |n| n.get()) * 2,
        false => 16,
    }
}

/// The MCP servers' tools, when servers are configured.
fn mcp_tools(section: &McpSection) -> Result<Option<Arc<fathom_mcp::client::McpTools>>, String> {
    if section.servers.is_empty() {
        return Ok(None);
    }
    let mut names = std::collections::BTreeSet::new();
    for s in &section.servers {
        s.check().map_err(|e| format!("mcp.servers: {e}"))?;
        if !names.insert(s.name.as_str()) {
            return Err(format!("mcp.servers: '{}' is named twice", s.name));
        }
    }
    if section.connect_timeout_seconds == 0
        || section.call_timeout_seconds == 0
        || section.max_result_chars == 0
    {
        return Err("mcp: timeouts and max_result_chars must be at least 1".into());
    }
    Ok(Some(Arc::new(fathom_mcp::client::McpTools::new(
        section.servers.clone(),
        fathom_mcp::client::Limits {
            connect_timeout: Duration::from_secs(section.connect_timeout_seconds),
            call_timeout: Duration::from_secs(section.call_timeout_seconds),
            max_result_chars: section.max_result_chars,
        },
    ))))
}

/// Delivery as the config bounds it and the environment sets it up. A channel whose secret
/// is missing or unusable is kept with the reason, which a run asking for it is refused with.
fn delivery(
    section: &DeliverySection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Delivery, String> {
    let d = section;
    if d.timeout_seconds == 0 || d.max_attempts == 0 || d.max_attempts > 20 {
        return Err("delivery: timeout_seconds must be at least 1, max_attempts 1 to 20".into());
    }
    if d.webhook_allow.len() > 256 {
        return Err("delivery.webhook_allow: at most 256 hosts".into());
    }
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let timeout = Duration::from_secs(d.timeout_seconds);
    let webhook = match env(WEBHOOK_SECRET_ENV) {
        Some(secret) => Ok(Arc::new(Webhook::new(WebhookConfig {
            secret,
            allow: d.webhook_allow.clone(),
            timeout,
            user_agent: FetchConfig::default().user_agent,
        }))),
        None => Err(format!(
            "webhook delivery is not set up on this server: set {WEBHOOK_SECRET_ENV}"
        )),
    };
    let email = match (env(SMTP_URL_ENV), env(SMTP_FROM_ENV)) {
        (Some(url), Some(from)) => Smtp::new(&url, &from, timeout).map(Arc::new).map_err(|e| {
            format!("email delivery is not usable: {SMTP_URL_ENV} or {SMTP_FROM_ENV}: {e}")
        }),
        (None, _) => Err(format!(
            "email delivery is not set up on this server: set {SMTP_URL_ENV} and {SMTP_FROM_ENV}"
        )),
        (Some(_), None) => Err(format!(
            "email delivery is not set up on this server: set {SMTP_FROM_ENV} (the sender's address)"
        )),
    };
    Ok(Delivery {
        webhook,
        email,
        retry: RetryPolicy {
            max_attempts: d.max_attempts,
            initial_backoff: Duration::from_millis(d.initial_backoff_ms),
            max_backoff: Duration::from_millis(d.max_backoff_ms.max(d.initial_backoff_ms)),
        },
        timeout,
    })
}

fn web_config(
    search: &SearchSection,
    fetch: &FetchSection,
    in_base: &dyn Fn(&Path) -> PathBuf,
) -> Result<WebConfig, String> {
    let mut config = FetchConfig {
        allow_private_networks: fetch.allow_private_networks,
        obey_robots: fetch.obey_robots,
        max_bytes: fetch.max_bytes as usize,
        total_timeout: Duration::from_secs(fetch.timeout_seconds.max(1)),
        per_host_interval: Duration::from_millis(fetch.per_host_interval_ms),
        ..FetchConfig::default()
    };
    for file in fetch.ca_files.iter().take(64) {
        let path = in_base(file);
        let pem =
            std::fs::read(&path).map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
        config
            .trust_pem(&pem)
            .map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
    }
    Ok(WebConfig {
        provider: search.provider,
        base_url: search.base_url.clone().filter(|u| !u.trim().is_empty()),
        api_key_env: search.api_key_env.clone().filter(|k| !k.trim().is_empty()),
        search_timeout: Duration::from_secs(search.timeout_seconds.max(1)),
        fetch: config,
    })
}

/// The model of each role: the role's own values over the environment's `OPENAI_BASE_URL`
/// and `OPENAI_MODEL` over the section's. All three roles or none.
fn agent_roles(
    llm: &LlmSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<AgentRoles>, String> {
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let text = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let role = |own: &RoleSection| -> Option<ModelConfig> {
        let model = text(&own.model)
            .or_else(|| env("OPENAI_MODEL"))
            .or(text(&llm.model))?;
        let base = text(&own.base_url)
            .or_else(|| env("OPENAI_BASE_URL"))
            .or(text(&llm.base_url))
            .unwrap_or_else(|| "https://api.openai.com/v1".into());
        let key_var = text(&own.api_key_env)
            .or(text(&llm.api_key_env))
            .unwrap_or_else(|| "OPENAI_API_KEY".into());
        let mut c = ModelConfig::new(&base, &model, env(&key_var));
        c.timeout = Duration::from_secs(llm.timeout_seconds.max(1));
        c.idle_timeout = Duration::from_secs(llm.idle_timeout_seconds.max(1));
        c.max_attempts = llm.max_attempts.clamp(1, 10);
        Some(c)
    };
    match (role(&llm.planner), role(&llm.researcher), role(&llm.writer)) {
        (Some(planner), Some(researcher), Some(writer)) => Ok(Some(AgentRoles {
            planner,
            researcher,
            writer,
        })),
        (None, None, None) => Ok(None),
        _ => Err("llm: give every role (planner, researcher, writer) a model, or set llm.model or OPENAI_MODEL for all".into()),
    }
}

/// Files one config may extend in a chain; more is surely a loop.
const MAX_EXTENDS: usize = 8;

/// The JSON of the config file at `path`, with what it extends merged under it.
fn read_extended(path: &Path, depth: usize) -> Result<Value, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let invalid = |reason: String| ConfigError::Invalid {
        path: shown.clone(),
        reason,
    };
    let mut value: Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let Some(extends) = value.as_object_mut().and_then(|o| o.remove("extends")) else {
        return Ok(value);
    };
    let Value::String(parent) = extends else {
        return Err(invalid(
            "extends: must be the path of another config file".into(),
        ));
    };
    if depth >= MAX_EXTENDS {
        return Err(invalid(format!(
            "extends: more than {MAX_EXTENDS} files in a chain (a loop?)"
        )));
    }
    let parent = path.parent().unwrap_or(Path::new(".")).join(parent);
    let mut merged = read_extended(&parent, depth + 1)?;
    merge(&mut merged, value);
    Ok(merged)
}

/// Lays `over` on `base`: objects key by key, anything else replaced.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shipped() -> Value {
        serde_json::from_str(EMBEDDED_CONFIG).expect("the shipped config is JSON")
    }

    #[test]
    fn mcp_servers_are_checked() {
        let mut c = shipped();
        assert!(parse(&c, &[]).unwrap().mcp.is_none(), "none configured");
        c["mcp"]["servers"] = json!([{"name": "docs", "command": ["srv"]}]);
        assert!(parse(&c, &[]).unwrap().mcp.is_some());
        for (servers, why) in [
            (
                json!([{"name": "a b", "command": ["srv"]}]),
                "'a b' is not a server name",
            ),
            (json!([{"name": "docs"}]), "needs a command or a url"),
            (
                json!([{"name": "docs", "command": ["srv"], "url": "http://x/mcp"}]),
                "needs a command or a url",
            ),
            (
                json!([{"name": "d", "url": "http://x/mcp"}, {"name": "d", "url": "http://y"}]),
                "'d' is named twice",
            ),
            (
                json!([{"name": "d", "url": "http://x", "port": 1}]),
                "unknown field `port`",
            ),
        ] {
            c["mcp"]["servers"] = servers;
            let e = parse(&c, &[]).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_config_extends_another_and_sets_only_what_differs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.json"), EMBEDDED_CONFIG).unwrap();
        let child = dir.path().join("child.json");
        std::fs::write(
            &child,
            json!({"extends": "base.json", "search": {"provider": "searxng",
                   "base_url": "http://searxng:8080"}, "engine": {"max_concurrent_runs": 5}})
            .to_string(),
        )
        .unwrap();
        let merged = read_extended(&child, 0).unwrap();
        assert_eq!(merged["search"]["provider"], "searxng");
        // Keys the child does not name come from the base, in the objects it does name too.
        assert_eq!(
            merged["search"]["timeout_seconds"],
            shipped()["search"]["timeout_seconds"]
        );
        assert_eq!(merged["engine"]["max_concurrent_runs"], 5);
        assert_eq!(
            merged["engine"]["lease_ttl_seconds"],
            shipped()["engine"]["lease_ttl_seconds"]
        );
        assert_eq!(merged["research"], shipped()["research"]);
        let c = AppConfig::load(Some(&child)).unwrap();
        assert_eq!(c.engine.max_concurrent_runs, 5);

        // A loop, a missing parent and a key the loader does not know are each named.
        std::fs::write(dir.path().join("a.json"), r#"{"extends": "b.json"}"#).unwrap();
        std::fs::write(dir.path().join("b.json"), r#"{"extends": "a.json"}"#).unwrap();
        let e = AppConfig::load(Some(&dir.path().join("a.json")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a loop?"), "{e}");
        std::fs::write(&child, r#"{"extends": "gone.json"}"#).unwrap();
        let e = AppConfig::load(Some(&child)).unwrap_err().to_string();
        assert!(e.contains("gone.json"), "{e}");
        std::fs::write(
            &child,
            r#"{"extends": "base.json", "search": {"provder": "x"}}"#,
        )
        .unwrap();
        let e = AppConfig::load(Some(&child)).unwrap_err().to_string();
        assert!(e.contains("search.provder: unknown field"), "{e}");
    }

    fn parse(json: &Value, env: &[(&str, &str)]) -> Result<AppConfig, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        AppConfig::parse(&json.to_string(), "test.json", None, &|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_of_the_shipped_config_is_read() {
        let mut json = shipped();
        json["engine"] =
            json!({"lease_ttl_seconds": 7, "poll_interval_ms": 40, "max_concurrent_runs": 3});
        json["storage"]["database_url"] = json!("postgres://db/fathom");
        json["agent_data"]["research_collection"] = json!("notes");
        let c = parse(&json, &[]).unwrap();
        assert_eq!(c.engine.lease_ttl, Duration::from_secs(7));
        assert_eq!(c.engine.poll_interval, Duration::from_millis(40));
        assert_eq!(c.engine.max_concurrent_runs, 3);
        assert_eq!(c.database_url.as_deref(), Some("postgres://db/fathom"));
        assert_eq!(c.research.research_collection, "notes");
        let embedded = AppConfig::parse(EMBEDDED_CONFIG, "(embedded)", None, &|_| None).unwrap();
        assert!(embedded.research.settings(None).unwrap().require_approval);
        assert_eq!(embedded.web.provider, Provider::Corpus);
        assert!(embedded.agent.is_none());
    }

    #[test]
    fn runs_at_once_default_to_two_per_core_offline_and_16_with_a_model() {
        let cores = std::thread::available_parallelism().unwrap().get();
        let offline = parse(&shipped(), &[]).unwrap();
        assert_eq!(offline.engine.max_concurrent_runs, 2 * cores);
        let model = [
            ("OPENAI_MODEL", "gpt-x"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ];
        assert_eq!(
            parse(&shipped(), &model)
                .unwrap()
                .engine
                .max_concurrent_runs,
            16
        );
        let mut web = shipped();
        web["search"] = json!({"provider": "searxng", "base_url": "http://127.0.0.1:9"});
        assert_eq!(parse(&web, &[]).unwrap().engine.max_concurrent_runs, 16);
        let mut set = shipped();
        set["engine"]["max_concurrent_runs"] = json!(5);
        assert_eq!(parse(&set, &model).unwrap().engine.max_concurrent_runs, 5);
        set["engine"]["max_concurrent_runs"] = json!(0);
        assert!(
            parse(&set, &[])
                .unwrap_err()
                .contains("max_concurrent_runs")
        );
    }

    #[test]
    fn a_misspelt_key_and_a_wrong_type_are_named_with_the_file() {
        let mut json = shipped();
        json["engine"]["lease_ttl_secs"] = json!(10);
        let err = parse(&json, &[]).unwrap_err();
        assert!(
            err.starts_with(
                "config test.json: engine.lease_ttl_secs: unknown field `lease_ttl_secs`"
            ),
            "{err}"
        );
        let mut json = shipped();
        json["engine"]["poll_interval_ms"] = json!("fast");
        let err = parse(&json, &[]).unwrap_err();
        assert!(
            err.starts_with(
                "config test.json: engine.poll_interval_ms: invalid type: string \"fast\""
            ),
            "{err}"
        );
        let mut json = shipped();
        json["colour"] = json!("blue");
        let err = parse(&json, &[]).unwrap_err();
        assert!(err.contains("unknown field `colour`"), "{err}");
        let mut json = shipped();
        json["search"]["provider"] = json!("altavista");
        let err = parse(&json, &[]).unwrap_err();
        assert!(
            err.contains("search.provider: unknown variant `altavista`"),
            "{err}"
        );
        let err = AppConfig::parse("{", "broken.json", None, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config broken.json: EOF while parsing"),
            "{err}"
        );
    }

    #[test]
    fn corpus_is_relative_to_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut json = shipped();
        json["research"]["corpus"] = json!("docs");
        let path = dir.path().join("config.json");
        std::fs::write(&path, json.to_string()).unwrap();
        let loaded = AppConfig::load(Some(&path)).unwrap();
        assert_eq!(loaded.corpus, Some(dir.path().join("docs")));
        json["research"]["corpus"] = json!(3);
        std::fs::write(&path, json.to_string()).unwrap();
        let err = AppConfig::load(Some(&path)).unwrap_err().to_string();
        assert!(
            err.contains("research.corpus: invalid type: integer `3`"),
            "{err}"
        );
        assert!(err.contains(&path.display().to_string()), "{err}");
    }

    #[test]
    fn ca_files_and_pdf_limits_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("certs")).unwrap();
        std::fs::write(
            dir.path().join("certs/ca.pem"),
            include_bytes!("../../fetch/tests/tls/ca.pem"),
        )
        .unwrap();
        std::fs::write(dir.path().join("certs/junk.pem"), "junk").unwrap();
        let path = dir.path().join("config.json");
        let mut json = shipped();
        json["fetch"]["ca_files"] = json!(["certs/ca.pem"]);
        json["parse"]["pdf_memory_mib"] = json!(256);
        std::fs::write(&path, json.to_string()).unwrap();
        let loaded = AppConfig::load(Some(&path)).unwrap();
        assert_eq!(loaded.web.fetch.extra_roots.len(), 1);
        assert_eq!(loaded.pdf.memory_mib, 256);
        let embedded = AppConfig::parse(EMBEDDED_CONFIG, "(embedded)", None, &|_| None).unwrap();
        assert_eq!(embedded.pdf, PdfLimits::default());
        for (key, value, expected) in [
            (
                "fetch",
                json!({"ca_files": ["certs/junk.pem"]}),
                "certs/junk.pem: no PEM certificate",
            ),
            (
                "fetch",
                json!({"ca_files": ["certs/none.pem"]}),
                "certs/none.pem: No such file",
            ),
            (
                "parse",
                json!({"pdf_memory_mib": 8}),
                "pdf_memory_mib at least 32",
            ),
            (
                "parse",
                json!({"pdf_timeout_seconds": "soon"}),
                "parse.pdf_timeout_seconds: invalid type: string \"soon\"",
            ),
        ] {
            let mut bad = json.clone();
            bad[key] = value;
            std::fs::write(&path, bad.to_string()).unwrap();
            let err = AppConfig::load(Some(&path)).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn delivery_is_set_up_from_the_environment_and_bounded_by_the_config() {
        let c = parse(&shipped(), &[]).unwrap();
        let why = c.delivery.webhook.as_ref().err().unwrap();
        assert!(why.contains("FATHOM_WEBHOOK_SECRET"), "{why}");
        let why = c.delivery.email.as_ref().err().unwrap();
        assert!(
            why.contains("FATHOM_SMTP_URL and FATHOM_SMTP_FROM"),
            "{why}"
        );
        assert_eq!(c.delivery.retry.max_attempts, 5);
        let mut json = shipped();
        json["delivery"] = json!({"webhook_allow": ["127.0.0.1"], "max_attempts": 2,
                                  "initial_backoff_ms": 10, "max_backoff_ms": 20});
        let c = parse(
            &json,
            &[
                ("FATHOM_WEBHOOK_SECRET", "s"),
                ("FATHOM_SMTP_URL", "smtp://u:hunter2@127.0.0.1:2525"),
                ("FATHOM_SMTP_FROM", "Fathom <f@example.org>"),
            ],
        )
        .unwrap();
        assert!(c.delivery.webhook.is_ok() && c.delivery.email.is_ok());
        assert_eq!(c.delivery.retry.max_attempts, 2);
        assert!(!format!("{:?}", c.delivery).contains("hunter2"));
        // An unusable relay is kept with its reason (a run asking for email is refused with
        // it), never with its password.
        let c = parse(
            &shipped(),
            &[
                ("FATHOM_SMTP_URL", "mailto://u:hunter2@x"),
                ("FATHOM_SMTP_FROM", "f@example.org"),
            ],
        )
        .unwrap();
        let why = c.delivery.email.as_ref().err().unwrap();
        assert!(
            why.contains("not usable") && !why.contains("hunter2"),
            "{why}"
        );
        let c = parse(&shipped(), &[("FATHOM_SMTP_URL", "smtp://127.0.0.1:25")]).unwrap();
        assert!(
            c.delivery
                .email
                .as_ref()
                .err()
                .unwrap()
                .contains("set FATHOM_SMTP_FROM")
        );
        let mut bad = shipped();
        bad["delivery"] = json!({"max_attempts": 0});
        assert!(parse(&bad, &[]).unwrap_err().contains("max_attempts"));
        bad["delivery"] = json!({"retries": 3});
        assert!(
            parse(&bad, &[])
                .unwrap_err()
                .contains("unknown field `retries`")
        );
    }

    #[test]
    fn models_come_from_the_environment_and_per_role_config() {
        let llm = |v: Value| {
            let mut json = shipped();
            json["llm"] = v;
            json
        };
        assert!(parse(&llm(json!({})), &[]).unwrap().agent.is_none());
        let all = parse(
            &llm(json!({})),
            &[
                ("OPENAI_MODEL", "gpt-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"),
                ("OPENAI_API_KEY", "sk-1"),
            ],
        )
        .unwrap()
        .agent
        .unwrap();
        assert_eq!(all.writer.model, "gpt-x");
        assert_eq!(all.planner.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(all.researcher.api_key.as_deref(), Some("sk-1"));
        let mixed = parse(
            &llm(json!({"model": "base", "timeout_seconds": 20,
                    "writer": {"model": "big", "base_url": "http://w/v1", "api_key_env": "W_KEY"}})),
            &[("W_KEY", "sk-w")],
        )
        .unwrap()
        .agent
        .unwrap();
        assert_eq!(
            (mixed.planner.model.as_str(), mixed.writer.model.as_str()),
            ("base", "big")
        );
        assert_eq!(mixed.writer.api_key.as_deref(), Some("sk-w"));
        assert_eq!(mixed.planner.api_key, None);
        assert_eq!(mixed.writer.timeout, Duration::from_secs(20));
        let partial = parse(&llm(json!({"planner": {"model": "p"}})), &[]);
        assert!(partial.unwrap_err().contains("every role"));
        let bad = parse(&llm(json!({"model": 3})), &[]).unwrap_err();
        assert!(
            bad.contains("llm.model: invalid type: integer `3`"),
            "{bad}"
        );
    }
}
