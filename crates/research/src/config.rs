//! The sections of Fathom's config file that research runs with, as written, checked and
//! turned into its types: `research` and `agent_data` (the [`ResearchConfig`]: per-run
//! settings and where sessions are saved), the agent's models over fathom-llm's `llm` section
//! ([`AgentRoles`]), and `delivery` ([`Delivery`], whose secrets come from the environment).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fathom_deliver::{Smtp, Webhook, WebhookConfig};
use fathom_engine::RetryPolicy;
use fathom_fetch::FetchConfig;
use fathom_llm::LlmSection;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::agent::AgentRoles;
use crate::delivery::Delivery;
use crate::settings::ResearchConfig;

/// Where research sessions are saved in Agent Data.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentDataSection {
    pub deployment_name: String,
    pub research_collection: String,
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
#[serde(deny_unknown_fields)]
pub struct ResearchSection {
    /// The folder `fathom serve` searches when `--corpus` is not given, relative to the
    /// config file's folder.
    #[serde(default)]
    pub corpus: Option<PathBuf>,
    pub defaults: Map<String, Value>,
    pub settings_schema: Value,
}

impl ResearchSection {
    /// `corpus` as written, unless empty.
    pub fn corpus(&self) -> Option<&Path> {
        self.corpus.as_deref().filter(|c| !c.as_os_str().is_empty())
    }

    /// The research settings (defaults checked against the schema), saved where `agent_data`
    /// says.
    pub fn into_config(self, agent_data: &AgentDataSection) -> Result<ResearchConfig, String> {
        ResearchConfig::new(
            &agent_data.deployment_name,
            &agent_data.research_collection,
            self.defaults,
            self.settings_schema,
        )
    }
}

/// The model of each role (see [`LlmSection::model_config`]): all three roles or none. `env`
/// gives the environment (`OPENAI_*`, API keys).
pub fn agent_roles(
    llm: &LlmSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<AgentRoles>, String> {
    let role = |own| llm.model_config(own, env);
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

/// How finished reports are delivered. The secrets (the webhook secret, the SMTP relay and
/// its password) come from the environment, never from this file or a run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliverySection {
    /// Webhook hosts (`name` or `name:port`) allowed although they resolve to loopback or
    /// private addresses.
    pub webhook_allow: Vec<String>,
    /// Bound on one attempt (a webhook POST, each SMTP command).
    pub timeout_seconds: u64,
    /// Attempts per channel, the first included.
    pub max_attempts: u32,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
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

impl DeliverySection {
    /// Delivery as the config bounds it and the environment (`env`) sets it up. A channel
    /// whose secret is missing or unusable is kept with the reason, which a run asking for it
    /// is refused with.
    pub fn delivery(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Delivery, String> {
        let d = self;
        if d.timeout_seconds == 0 || d.max_attempts == 0 || d.max_attempts > 20 {
            return Err(
                "delivery: timeout_seconds must be at least 1, max_attempts 1 to 20".into(),
            );
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An environment of these variables alone.
    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    fn delivery(section: Value, env: &[(&str, &str)]) -> Result<Delivery, String> {
        let section: DeliverySection =
            serde_json::from_value(section).map_err(|e| e.to_string())?;
        section.delivery(&env_of(env))
    }

    fn roles(section: Value, env: &[(&str, &str)]) -> Result<Option<AgentRoles>, String> {
        let section: LlmSection = serde_json::from_value(section).map_err(|e| e.to_string())?;
        agent_roles(&section, &env_of(env))
    }

    #[test]
    fn delivery_is_set_up_from_the_environment_and_bounded_by_the_config() {
        let d = delivery(json!({}), &[]).unwrap();
        let why = d.webhook.as_ref().err().unwrap();
        assert!(why.contains("FATHOM_WEBHOOK_SECRET"), "{why}");
        let why = d.email.as_ref().err().unwrap();
        assert!(
            why.contains("FATHOM_SMTP_URL and FATHOM_SMTP_FROM"),
            "{why}"
        );
        assert_eq!(d.retry.max_attempts, 5);
        let d = delivery(
            json!({"webhook_allow": ["127.0.0.1"], "max_attempts": 2,
                   "initial_backoff_ms": 10, "max_backoff_ms": 20}),
            &[
                ("FATHOM_WEBHOOK_SECRET", "s"),
                ("FATHOM_SMTP_URL", "smtp://u:hunter2@127.0.0.1:2525"),
                ("FATHOM_SMTP_FROM", "Fathom <f@example.org>"),
            ],
        )
        .unwrap();
        assert!(d.webhook.is_ok() && d.email.is_ok());
        assert_eq!(d.retry.max_attempts, 2);
        assert!(!format!("{d:?}").contains("hunter2"));
        // An unusable relay is kept with its reason (a run asking for email is refused with
        // it), never with its password.
        let d = delivery(
            json!({}),
            &[
                ("FATHOM_SMTP_URL", "mailto://u:hunter2@x"),
                ("FATHOM_SMTP_FROM", "f@example.org"),
            ],
        )
        .unwrap();
        let why = d.email.as_ref().err().unwrap();
        assert!(
            why.contains("not usable") && !why.contains("hunter2"),
            "{why}"
        );
        let d = delivery(json!({}), &[("FATHOM_SMTP_URL", "smtp://127.0.0.1:25")]).unwrap();
        assert!(
            d.email
                .as_ref()
                .err()
                .unwrap()
                .contains("set FATHOM_SMTP_FROM")
        );
        let bad = delivery(json!({"max_attempts": 0}), &[]).unwrap_err();
        assert!(bad.contains("max_attempts"), "{bad}");
        let bad = delivery(json!({"retries": 3}), &[]).unwrap_err();
        assert!(bad.contains("unknown field `retries`"), "{bad}");
    }

    #[test]
    fn models_come_from_the_environment_and_per_role_config() {
        assert!(roles(json!({}), &[]).unwrap().is_none());
        let all = roles(
            json!({}),
            &[
                ("OPENAI_MODEL", "gpt-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"),
                ("OPENAI_API_KEY", "sk-1"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(all.writer.model, "gpt-x");
        assert_eq!(all.planner.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(all.researcher.api_key.as_deref(), Some("sk-1"));
        let mixed = roles(
            json!({"model": "base", "timeout_seconds": 20,
                   "writer": {"model": "big", "base_url": "http://w/v1", "api_key_env": "W_KEY"}}),
            &[("W_KEY", "sk-w")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (mixed.planner.model.as_str(), mixed.writer.model.as_str()),
            ("base", "big")
        );
        assert_eq!(mixed.writer.api_key.as_deref(), Some("sk-w"));
        assert_eq!(mixed.planner.api_key, None);
        assert_eq!(mixed.writer.timeout, Duration::from_secs(20));
        let partial = roles(json!({"planner": {"model": "p"}}), &[]);
        assert!(partial.unwrap_err().contains("every role"));
        let bad = roles(json!({"model": 3}), &[]).unwrap_err();
        assert!(bad.contains("invalid type: integer `3`"), "{bad}");
    }
}
