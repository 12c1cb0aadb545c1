//! Research settings: defaults and a JSON Schema read from `configs/config.json`, overridable
//! per run, validated before a run starts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The config file shipped with Fathom, used when no other is given.
pub const EMBEDDED_CONFIG: &str = include_str!("../../../configs/config.json");

/// Everything one research run may be tuned with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Pause at the gate for a person's approval; false approves the plan as drafted.
    pub require_approval: bool,
    pub max_search_results_per_query: usize,
    /// At most this many documents are fetched and read.
    pub max_sources: usize,
    /// Upper bound, in characters, of one `update_report` change.
    pub max_report_update_size: usize,
    /// Wall-clock budget of the research phase; when it nears, the report is written from
    /// what was gathered.
    pub timeout_seconds: u64,
    pub sentences_per_section: usize,
    /// Pause between two fetches, for politeness towards servers.
    pub fetch_delay_ms: u64,
    /// How far the agent digs: `light`, `medium` or `extended` research steps.
    #[serde(default)]
    pub depth: Depth,
    /// Researchers the agent runs at once.
    #[serde(default = "default_parallel")]
    pub max_parallel_researchers: usize,
    /// Tokens the agent may spend in one run (prompt and completion); near it, research stops
    /// and the report is written from what was gathered.
    #[serde(default = "default_token_budget")]
    pub token_budget: u64,
}

fn default_parallel() -> usize {
    3
}

fn default_token_budget() -> u64 {
    400_000
}

/// How many research steps the agent may take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Depth {
    Light,
    #[default]
    Medium,
    Extended,
}

impl Depth {
    /// Research steps (rounds of researchers, each followed by a reflection) at most.
    pub fn max_steps(self) -> usize {
        match self {
            Depth::Light => 2,
            Depth::Medium => 4,
            Depth::Extended => 8,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config {path} is not valid JSON: {reason}")]
    Json { path: String, reason: String },
    #[error("config {path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// Settings a run was started with that break the schema: one message per bad field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid settings: {}", .0.join("; "))]
pub struct SettingsError(pub Vec<String>);

/// The research part of the config: where sessions are saved, the defaults, and the schema.
#[derive(Debug, Clone)]
pub struct ResearchConfig {
    pub deployment_name: String,
    pub research_collection: String,
    /// `research.corpus`: the folder `fathom serve` searches when `--corpus` is not given,
    /// relative to the config file's folder.
    pub corpus: Option<PathBuf>,
    /// `search` and `fetch`: where `web_search` looks and how `fetch_url` reads the web.
    pub web: WebConfig,
    /// `parse`: the limits PDFs are read under.
    pub pdf: crate::pdf::PdfLimits,
    /// `llm`: the model of each agent role, when the agent is configured.
    pub llm: LlmConfig,
    pub defaults: Map<String, Value>,
    /// The settings schema as written, with `$ref`s.
    pub schema: Value,
    /// The same schema with every local `$ref` replaced by its target.
    pub resolved_schema: Value,
    validator: std::sync::Arc<jsonschema::Validator>,
}

impl ResearchConfig {
    /// Loads the config file at `path`, or the embedded one.
    pub fn load(path: Option<&Path>) -> Result<ResearchConfig, ConfigError> {
        let (shown, text) = match path {
            Some(p) => (
                p.display().to_string(),
                std::fs::read_to_string(p).map_err(|e| ConfigError::Read {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                })?,
            ),
            None => ("(embedded)".to_string(), EMBEDDED_CONFIG.to_string()),
        };
        let json: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Json {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Self::from_json(&json, path.and_then(Path::parent)).map_err(|reason| ConfigError::Invalid {
            path: shown,
            reason,
        })
    }

    /// The config in `json`; relative paths in it (the corpus, CA files) are taken from
    /// `base`, the config file's folder.
    pub fn from_json(json: &Value, base: Option<&Path>) -> Result<ResearchConfig, String> {
        let in_base = |p: PathBuf| match base {
            Some(dir) => dir.join(p),
            None => p,
        };
        let str_at = |ptr: &str, default: &str| {
            json.pointer(ptr)
                .and_then(Value::as_str)
                .unwrap_or(default)
                .to_string()
        };
        let research = json
            .get("research")
            .ok_or("missing the \"research\" section")?;
        let defaults = research
            .get("defaults")
            .and_then(Value::as_object)
            .cloned()
            .ok_or("research.defaults must be an object")?;
        let schema = research
            .get("settings_schema")
            .cloned()
            .ok_or("missing research.settings_schema")?;
        let resolved_schema =
            resolve_refs(&schema).map_err(|e| format!("research.settings_schema: {e}"))?;
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| format!("research.settings_schema is not a valid schema: {e}"))?;
        let config = ResearchConfig {
            deployment_name: str_at("/agent_data/deployment_name", "_public"),
            research_collection: str_at("/agent_data/research_collection", "research-sessions"),
            web: WebConfig::from_json(json, &in_base)?,
            pdf: pdf_limits(json.get("parse").unwrap_or(&Value::Null))?,
            llm: LlmConfig::from_json(json.get("llm").unwrap_or(&Value::Null), &|k| {
                std::env::var(k).ok()
            })?,
            corpus: match research.get("corpus") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if !s.trim().is_empty() => {
                    Some(in_base(PathBuf::from(s.trim())))
                }
                Some(_) => return Err("research.corpus must be a folder path".into()),
            },
            defaults,
            schema,
            resolved_schema,
            validator: std::sync::Arc::new(validator),
        };
        config
            .settings(None)
            .map_err(|e| format!("research.defaults: {e}"))?;
        Ok(config)
    }

    /// The defaults with `overrides` applied, validated against the schema.
    pub fn settings(&self, overrides: Option<&Value>) -> Result<Settings, SettingsError> {
        let mut merged = self.defaults.clone();
        match overrides {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) => merged.extend(o.iter().map(|(k, v)| (k.clone(), v.clone()))),
            Some(other) => {
                return Err(SettingsError(vec![format!(
                    "settings must be a JSON object, not {other}"
                )]));
            }
        }
        let merged = Value::Object(merged);
        let mut problems: Vec<String> = self
            .validator
            .iter_errors(&merged)
            .map(|e| {
                let at = e
                    .instance_path()
                    .as_str()
                    .trim_start_matches('/')
                    .replace('/', ".");
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        problems.sort();
        problems.dedup();
        if !problems.is_empty() {
            return Err(SettingsError(problems));
        }
        serde_json::from_value(merged).map_err(|e| SettingsError(vec![e.to_string()]))
    }
}

/// Replaces every `{"$ref": "#/..."}` with the value it points at (like `jsonref.replace_refs`).
/// Remote references are refused, never fetched; cycles are reported.
pub fn resolve_refs(schema: &Value) -> Result<Value, String> {
    fn walk(root: &Value, v: &Value, depth: usize) -> Result<Value, String> {
        if depth > 64 {
            return Err("$ref chain too deep (a cycle?)".into());
        }
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    let Some(pointer) = r.strip_prefix('#') else {
                        return Err(format!("remote $ref \"{r}\" is not allowed"));
                    };
                    let target = root
                        .pointer(pointer)
                        .ok_or_else(|| format!("$ref \"{r}\" points nowhere"))?;
                    let mut out = walk(root, target, depth + 1)?;
                    // Siblings of $ref (a description, say) refine the target.
                    if let Value::Object(o) = &mut out {
                        for (k, val) in map.iter().filter(|(k, _)| *k != "$ref") {
                            o.insert(k.clone(), walk(root, val, depth + 1)?);
                        }
                    }
                    return Ok(out);
                }
                let mut out = Map::new();
                for (k, val) in map {
                    out.insert(k.clone(), walk(root, val, depth)?);
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items
                .iter()
                .map(|i| walk(root, i, depth))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }
    walk(schema, schema, 0)
}

/// A section's non-negative integer `key` (`default` when absent), named in errors.
fn count(section: &Value, name: &str, key: &str, default: u64) -> Result<u64, String> {
    match section.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x
            .as_u64()
            .ok_or_else(|| format!("{name}.{key} must be a non-negative integer")),
    }
}

/// The `parse` section: how long, how much memory and how many pages a PDF may take.
fn pdf_limits(parse: &Value) -> Result<crate::pdf::PdfLimits, String> {
    let d = crate::pdf::PdfLimits::default();
    let limits = crate::pdf::PdfLimits {
        timeout: std::time::Duration::from_secs(count(
            parse,
            "parse",
            "pdf_timeout_seconds",
            d.timeout.as_secs(),
        )?),
        memory_mib: count(parse, "parse", "pdf_memory_mib", d.memory_mib)?,
        max_pages: count(parse, "parse", "pdf_max_pages", d.max_pages as u64)?.min(u32::MAX as u64)
            as u32,
    };
    if limits.timeout.is_zero() || limits.memory_mib < 32 || limits.max_pages == 0 {
        return Err(
            "parse: pdf_timeout_seconds and pdf_max_pages must be at least 1, pdf_memory_mib at least 32"
                .into(),
        );
    }
    Ok(limits)
}

/// The model behind each agent role. All three or none: without a model the offline planner
/// and extractive writer run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmConfig {
    pub roles: Option<AgentRoles>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentRoles {
    pub planner: fathom_llm::ModelConfig,
    pub researcher: fathom_llm::ModelConfig,
    pub writer: fathom_llm::ModelConfig,
}

impl LlmConfig {
    /// The `llm` section, with the environment's `OPENAI_BASE_URL`, `OPENAI_API_KEY` and
    /// `OPENAI_MODEL` over its top-level values and each role's own values over both.
    pub fn from_json(
        llm: &Value,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LlmConfig, String> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let text = |v: &Value, k: &str| -> Result<Option<String>, String> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
                Some(_) => Err(format!("llm: {k} must be a string")),
            }
        };
        let secs = |k: &str, default: u64| -> Result<std::time::Duration, String> {
            Ok(std::time::Duration::from_secs(
                count(llm, "llm", k, default)?.max(1),
            ))
        };
        let (timeout, idle) = (
            secs("timeout_seconds", 300)?,
            secs("idle_timeout_seconds", 60)?,
        );
        let attempts = count(llm, "llm", "max_attempts", 4)?.clamp(1, 10) as u32;
        let role = |name: &str| -> Result<Option<fathom_llm::ModelConfig>, String> {
            let own = llm.get(name).unwrap_or(&Value::Null);
            if !(own.is_null() || own.is_object()) {
                return Err(format!("llm.{name} must be an object"));
            }
            let model = text(own, "model")?
                .or_else(|| env("OPENAI_MODEL"))
                .or(text(llm, "model")?);
            let Some(model) = model else {
                return Ok(None);
            };
            let base = text(own, "base_url")?
                .or_else(|| env("OPENAI_BASE_URL"))
                .or(text(llm, "base_url")?)
                .unwrap_or_else(|| "https://api.openai.com/v1".into());
            let key_var = text(own, "api_key_env")?
                .or(text(llm, "api_key_env")?)
                .unwrap_or_else(|| "OPENAI_API_KEY".into());
            let mut c = fathom_llm::ModelConfig::new(&base, &model, env(&key_var));
            c.timeout = timeout;
            c.idle_timeout = idle;
            c.max_attempts = attempts;
            Ok(Some(c))
        };
        match (role("planner")?, role("researcher")?, role("writer")?) {
            (Some(planner), Some(researcher), Some(writer)) => Ok(LlmConfig {
                roles: Some(AgentRoles {
                    planner,
                    researcher,
                    writer,
                }),
            }),
            (None, None, None) => Ok(LlmConfig::default()),
            _ => Err("llm: give every role (planner, researcher, writer) a model, or set llm.model or OPENAI_MODEL for all".into()),
        }
    }
}

/// The `search` and `fetch` sections of the config.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// `corpus`, `searxng`, `tavily` or `brave`.
    pub provider: String,
    pub base_url: Option<String>,
    /// The environment variable holding the search API key.
    pub api_key_env: Option<String>,
    pub search_timeout: std::time::Duration,
    pub fetch: fathom_fetch::FetchConfig,
}

impl WebConfig {
    fn from_json(json: &Value, in_base: &dyn Fn(PathBuf) -> PathBuf) -> Result<WebConfig, String> {
        let search = json.get("search").cloned().unwrap_or(Value::Null);
        let fetch = json.get("fetch").cloned().unwrap_or(Value::Null);
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let num = |v: &Value, k: &str, default: u64| -> Result<u64, String> {
            let name = if std::ptr::eq(v, &search) {
                "search"
            } else {
                "fetch"
            };
            count(v, name, k, default)
        };
        let flag = |v: &Value, k: &str, default: bool| -> Result<bool, String> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_bool()
                    .ok_or_else(|| format!("fetch.{k} must be true or false")),
            }
        };
        let provider = text(&search, "provider").unwrap_or_else(|| "corpus".into());
        if !matches!(provider.as_str(), "corpus" | "searxng" | "tavily" | "brave") {
            return Err(format!(
                "search.provider '{provider}' is not one of corpus, searxng, tavily, brave"
            ));
        }
        let defaults = fathom_fetch::FetchConfig::default();
        let mut extra = fathom_fetch::FetchConfig::default();
        match fetch.get("ca_files") {
            None | Some(Value::Null) => {}
            Some(Value::Array(files)) => {
                for f in files.iter().take(64) {
                    let path = in_base(PathBuf::from(
                        f.as_str().ok_or("fetch.ca_files must list file paths")?,
                    ));
                    let pem = std::fs::read(&path)
                        .map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
                    extra
                        .trust_pem(&pem)
                        .map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
                }
            }
            Some(_) => return Err("fetch.ca_files must list file paths".into()),
        }
        Ok(WebConfig {
            provider,
            base_url: text(&search, "base_url"),
            api_key_env: text(&search, "api_key_env"),
            search_timeout: std::time::Duration::from_secs(
                num(&search, "timeout_seconds", 15)?.max(1),
            ),
            fetch: fathom_fetch::FetchConfig {
                allow_private_networks: flag(&fetch, "allow_private_networks", false)?,
                obey_robots: flag(&fetch, "obey_robots", true)?,
                max_bytes: num(&fetch, "max_bytes", defaults.max_bytes as u64)? as usize,
                total_timeout: std::time::Duration::from_secs(
                    num(&fetch, "timeout_seconds", 30)?.max(1),
                ),
                per_host_interval: std::time::Duration::from_millis(num(
                    &fetch,
                    "per_host_interval_ms",
                    500,
                )?),
                extra_roots: extra.extra_roots,
                ..defaults
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> ResearchConfig {
        ResearchConfig::load(None).expect("embedded config is valid")
    }

    #[test]
    fn embedded_defaults_validate() {
        let s = config().settings(None).unwrap();
        assert!(s.require_approval);
        assert!(s.max_sources > 0);
    }

    #[test]
    fn corpus_is_relative_to_the_config_file() {
        assert_eq!(config().corpus, None);
        let dir = tempfile::tempdir().unwrap();
        let mut json: Value = serde_json::from_str(EMBEDDED_CONFIG).unwrap();
        json["research"]["corpus"] = json!("docs");
        let path = dir.path().join("config.json");
        std::fs::write(&path, json.to_string()).unwrap();
        let loaded = ResearchConfig::load(Some(&path)).unwrap();
        assert_eq!(loaded.corpus, Some(dir.path().join("docs")));
        json["research"]["corpus"] = json!(3);
        std::fs::write(&path, json.to_string()).unwrap();
        let err = ResearchConfig::load(Some(&path)).unwrap_err().to_string();
        assert!(
            err.contains("research.corpus must be a folder path"),
            "{err}"
        );
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
        let mut json: Value = serde_json::from_str(EMBEDDED_CONFIG).unwrap();
        json["fetch"]["ca_files"] = json!(["certs/ca.pem"]);
        json["parse"]["pdf_memory_mib"] = json!(256);
        std::fs::write(&path, json.to_string()).unwrap();
        let loaded = ResearchConfig::load(Some(&path)).unwrap();
        assert_eq!(loaded.web.fetch.extra_roots.len(), 1);
        assert_eq!(loaded.pdf.memory_mib, 256);
        assert_eq!(config().pdf, crate::pdf::PdfLimits::default());
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
                "parse.pdf_timeout_seconds must be a non-negative integer",
            ),
        ] {
            let mut bad = json.clone();
            bad[key] = value;
            std::fs::write(&path, bad.to_string()).unwrap();
            let err = ResearchConfig::load(Some(&path)).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    #[test]
    fn models_come_from_the_environment_and_per_role_config() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let none = LlmConfig::from_json(&Value::Null, &env(&[])).unwrap();
        assert_eq!(none.roles, None);
        let all = LlmConfig::from_json(
            &Value::Null,
            &env(&[
                ("OPENAI_MODEL", "gpt-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"),
                ("OPENAI_API_KEY", "sk-1"),
            ]),
        )
        .unwrap()
        .roles
        .unwrap();
        assert_eq!(all.writer.model, "gpt-x");
        assert_eq!(all.planner.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(all.researcher.api_key.as_deref(), Some("sk-1"));
        let mixed = LlmConfig::from_json(
            &json!({"model": "base", "timeout_seconds": 20,
                    "writer": {"model": "big", "base_url": "http://w/v1", "api_key_env": "W_KEY"}}),
            &env(&[("W_KEY", "sk-w")]),
        )
        .unwrap()
        .roles
        .unwrap();
        assert_eq!(
            (mixed.planner.model.as_str(), mixed.writer.model.as_str()),
            ("base", "big")
        );
        assert_eq!(mixed.writer.api_key.as_deref(), Some("sk-w"));
        assert_eq!(mixed.planner.api_key, None);
        assert_eq!(mixed.writer.timeout, std::time::Duration::from_secs(20));
        let partial = LlmConfig::from_json(&json!({"planner": {"model": "p"}}), &env(&[]));
        assert!(partial.unwrap_err().contains("every role"));
        let bad = LlmConfig::from_json(&json!({"model": 3}), &env(&[]));
        assert_eq!(bad.unwrap_err(), "llm: model must be a string");
    }

    #[test]
    fn overrides_apply_and_each_bad_field_is_named() {
        let c = config();
        let s = c.settings(Some(&json!({"max_sources": 3}))).unwrap();
        assert_eq!(s.max_sources, 3);
        let err = c
            .settings(Some(
                &json!({"max_sources": 0, "require_approval": "yes", "bogus": 1}),
            ))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("max_sources"), "{text}");
        assert!(text.contains("require_approval"), "{text}");
        assert!(text.contains("bogus"), "{text}");
    }

    #[test]
    fn refs_resolve_locally_and_remote_refs_are_refused() {
        let resolved = config().resolved_schema;
        assert!(!resolved.to_string().contains("$ref"));
        let remote = json!({"properties": {"a": {"$ref": "https://example.com/s.json"}}});
        assert!(resolve_refs(&remote).unwrap_err().contains("remote"));
        let cyclic = json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}});
        assert!(resolve_refs(&cyclic).is_err());
    }
}
