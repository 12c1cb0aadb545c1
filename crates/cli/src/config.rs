//! The application config: `configs/config.json` (or `--config FILE`, or the copy built into
//! the binary, and what each file `extends`) read into typed sections, every key known (a
//! misspelt key is an error naming it and the file), checked once at start, and assembled
//! into what each part of Fathom runs with. Each section, its defaults and its checks are
//! the crate's whose types it builds (`fathom_engine::EngineSection`, `fathom_store`,
//! `fathom_fetch`, `fathom_search`, `fathom_llm`, `fathom_parse`, `fathom_mcp`, and
//! `fathom_research`'s research, agent_data, delivery and the agent's roles); here are the
//! file, its sections by name, and what takes more than one section. The research settings
//! schema in it stays the single source for per-run settings.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fathom_engine::{EngineConfig, EngineSection};
use fathom_fetch::FetchSection;
use fathom_llm::LlmSection;
use fathom_mcp::McpSection;
use fathom_parse::ParseSection;
use fathom_parse::pdf::PdfLimits;
use fathom_research::agent::AgentRoles;
use fathom_research::config::agent_roles;
use fathom_research::tools::web::{Provider, WebConfig};
use fathom_research::{
    AgentDataSection, Delivery, DeliverySection, ResearchConfig, ResearchSection,
};
use fathom_search::SearchSection;
use fathom_store::StorageSection;
use serde::Deserialize;
use serde_json::Value;

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
        let mut engine = file.engine.to_config().map_err(invalid)?;
        let pdf = file.parse.pdf_limits().map_err(invalid)?;
        let corpus = file.research.corpus().map(in_base);
        let research = file
            .research
            .into_config(&file.agent_data)
            .map_err(invalid)?;
        let fetch = file.fetch.to_config(&in_base).map_err(invalid)?;
        let web = file.search.web_config(fetch);
        let agent = agent_roles(&file.llm, env).map_err(invalid)?;
        let mcp = file.mcp.tools().map_err(invalid)?;
        let offline = agent.is_none() && web.provider == Provider::Corpus && mcp.is_none();
        engine.max_concurrent_runs = file
            .engine
            .max_concurrent_runs
            .unwrap_or_else(|| default_concurrent_runs(offline));
        Ok(AppConfig {
            engine,
            database_url: file.storage.into_database_url(),
            research,
            corpus,
            web,
            pdf,
            agent,
            delivery: file.delivery.delivery(env).map_err(invalid)?,
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
    use std::time::Duration;

    use super::*;
    use serde_json::json;

    fn shipped() -> Value {
        serde_json::from_str(EMBEDDED_CONFIG).expect("the shipped config is JSON")
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
        // The sections' own rules are theirs (fathom_fetch and fathom_parse's config tests);
        // here: CA files are relative to the config file, and what is wrong names the file.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("certs")).unwrap();
        std::fs::write(
            dir.path().join("certs/ca.pem"),
            include_bytes!("../../fetch/tests/tls/ca.pem"),
        )
        .unwrap();
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
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
    }

    #[test]
    fn the_models_delivery_and_mcp_servers_come_from_their_sections() {
        // Each section's rules are its crate's (fathom_llm, fathom_research, fathom_mcp);
        // here: the environment reaches them, and what they refuse names the key and file.
        let model = [("OPENAI_MODEL", "gpt-x"), ("FATHOM_WEBHOOK_SECRET", "s")];
        let c = parse(&shipped(), &model).unwrap();
        assert_eq!(c.agent.unwrap().writer.model, "gpt-x");
        assert!(c.delivery.webhook.is_ok());
        assert!(c.mcp.is_none(), "none configured");
        let mut json = shipped();
        json["mcp"]["servers"] = json!([{"name": "docs", "command": ["srv"]}]);
        assert!(parse(&json, &[]).unwrap().mcp.is_some());
        for (key, value, expected) in [
            (
                "llm",
                json!({"model": 3}),
                "config test.json: llm.model: invalid type: integer `3`",
            ),
            (
                "llm",
                json!({"planner": {"model": "p"}}),
                "config test.json: llm: give every role",
            ),
            (
                "delivery",
                json!({"retries": 3}),
                "config test.json: delivery.retries: unknown field `retries`",
            ),
            (
                "mcp",
                json!({"servers": [{"name": "d", "url": "http://x"}, {"name": "d", "url": "http://y"}]}),
                "config test.json: mcp.servers: 'd' is named twice",
            ),
        ] {
            let mut bad = shipped();
            bad[key] = value;
            let err = parse(&bad, &[]).unwrap_err();
            assert!(err.starts_with(expected), "{expected}: {err}");
        }
    }
}
