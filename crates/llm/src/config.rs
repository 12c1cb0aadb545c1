//! The `llm` section of Fathom's config file: the model each agent role talks to, as written
//! and turned, with the environment, into a [`ModelConfig`] per role.

use std::time::Duration;

use serde::Deserialize;

use crate::ModelConfig;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSection {
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    pub max_attempts: u32,
    pub planner: RoleSection,
    pub researcher: RoleSection,
    pub writer: RoleSection,
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
pub struct RoleSection {
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
}

impl LlmSection {
    /// The model of `role` (one of this section's): the role's own values over the
    /// environment's `OPENAI_BASE_URL` and `OPENAI_MODEL` over the section's; None when none
    /// of them names a model. `env` gives the environment (blank values count as unset).
    pub fn model_config(
        &self,
        role: &RoleSection,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<ModelConfig> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let text = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let model = text(&role.model)
            .or_else(|| env("OPENAI_MODEL"))
            .or(text(&self.model))?;
        let base = text(&role.base_url)
            .or_else(|| env("OPENAI_BASE_URL"))
            .or(text(&self.base_url))
            .unwrap_or_else(|| "https://api.openai.com/v1".into());
        let key_var = text(&role.api_key_env)
            .or(text(&self.api_key_env))
            .unwrap_or_else(|| "OPENAI_API_KEY".into());
        let mut c = ModelConfig::new(&base, &model, env(&key_var));
        c.timeout = Duration::from_secs(self.timeout_seconds.max(1));
        c.idle_timeout = Duration::from_secs(self.idle_timeout_seconds.max(1));
        c.max_attempts = self.max_attempts.clamp(1, 10);
        Some(c)
    }
}
