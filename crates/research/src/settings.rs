//! Per-run research settings: defaults and a JSON Schema (from `configs/config.json`),
//! overridable per run, validated before a run starts.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
    /// How the question is answered: the route asked for (`auto` lets the coordinator pick).
    #[serde(default)]
    pub mode: ModeSetting,
    /// When the report is done, POST the result to this http(s) URL, signed (empty: no
    /// webhook). The secret is the server's (`FATHOM_WEBHOOK_SECRET`), never the run's.
    #[serde(default)]
    pub deliver_webhook: String,
    /// When the report is done, email it (HTML body, PDF attached) to these addresses through
    /// the server's SMTP relay (`FATHOM_SMTP_URL`, `FATHOM_SMTP_FROM`).
    #[serde(default)]
    pub deliver_email: Vec<String>,
    /// The language the report is written in (ISO 639-1: `de`, `fr`, ...); empty: the
    /// question's, detected when the run starts (and then stored here).
    #[serde(default)]
    pub language: String,
    /// Where the research looks: the local corpus, the web, or both (ranked together). Empty:
    /// what this server has (its corpus, and the web when a web search provider is set);
    /// resolved when the run starts and stored here.
    #[serde(default)]
    pub sources: Vec<SourceKind>,
}

/// A kind of source a query searches.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// The server's local corpus (files, cited by path and page).
    Corpus,
    /// The web, through the configured search provider.
    Web,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Corpus => "corpus",
            SourceKind::Web => "web",
        }
    }

    pub fn parse(s: &str) -> Option<SourceKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "corpus" | "local" => Some(SourceKind::Corpus),
            "web" => Some(SourceKind::Web),
            _ => None,
        }
    }

    /// The kind of a source by its address: a corpus file (`file://`) or a web page.
    pub fn of_url(url: &str) -> SourceKind {
        if url.starts_with("file://") {
            SourceKind::Corpus
        } else {
            SourceKind::Web
        }
    }
}

impl Settings {
    /// The webhook the report goes to, if the run asked for one.
    pub fn webhook(&self) -> Option<&str> {
        Some(self.deliver_webhook.trim()).filter(|u| !u.is_empty())
    }

    /// The addresses the report is emailed to (blank entries left out).
    pub fn email_to(&self) -> Vec<String> {
        self.deliver_email
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// Whether the run asked for its report to be delivered anywhere.
    pub fn wants_delivery(&self) -> bool {
        self.webhook().is_some() || !self.email_to().is_empty()
    }
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

/// The `mode` setting: a route, or `auto` for the coordinator's choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeSetting {
    #[default]
    Auto,
    Simple,
    Web,
    Deep,
}

impl ModeSetting {
    /// The route asked for, if not left to the coordinator.
    pub fn forced(self) -> Option<Mode> {
        match self {
            ModeSetting::Auto => None,
            ModeSetting::Simple => Some(Mode::Simple),
            ModeSetting::Web => Some(Mode::Web),
            ModeSetting::Deep => Some(Mode::Deep),
        }
    }
}

/// How a question is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A few cited sentences from the best local passages: no plan, no gate, nothing leaves
    /// the machine.
    Simple,
    /// A one-step plan at light depth with a short deadline.
    Web,
    /// A full plan, the gate, research and a sectioned report.
    Deep,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Web => "web",
            Mode::Deep => "deep",
        }
    }
}

/// Settings a run was started with that break the schema: one message per bad field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid settings: {}", .0.join("; "))]
pub struct SettingsError(pub Vec<String>);

/// What the research workflows are configured with: where sessions are saved, the settings'
/// defaults, and the settings JSON Schema (the single source of per-run settings, also served
/// by `research-metadata`).
#[derive(Debug, Clone)]
pub struct ResearchConfig {
    pub deployment_name: String,
    pub research_collection: String,
    pub defaults: Map<String, Value>,
    /// The settings schema as written, with `$ref`s.
    pub schema: Value,
    /// The same schema with every local `$ref` replaced by its target.
    pub resolved_schema: Value,
    validator: std::sync::Arc<jsonschema::Validator>,
}

impl ResearchConfig {
    /// Checks the schema (local `$ref`s only) and that the defaults meet it.
    pub fn new(
        deployment_name: &str,
        research_collection: &str,
        defaults: Map<String, Value>,
        schema: Value,
    ) -> Result<ResearchConfig, String> {
        let resolved_schema =
            resolve_refs(&schema).map_err(|e| format!("research.settings_schema: {e}"))?;
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| format!("research.settings_schema is not a valid schema: {e}"))?;
        let config = ResearchConfig {
            deployment_name: deployment_name.to_string(),
            research_collection: research_collection.to_string(),
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
