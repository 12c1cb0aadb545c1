//! The deployment as `llamactl` reads it from `pyproject.toml`: its name (the `{name}` in
//! `/deployments/{name}`) and the workflows it serves. A workflow entry names a workflow of
//! this engine as `"fathom:<workflow>"`.

use std::collections::BTreeMap;
use std::path::Path;

/// The deployment description built into the binary: `pyproject-compat/pyproject.toml`.
pub const EMBEDDED_PYPROJECT: &str = include_str!("../../../pyproject-compat/pyproject.toml");

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid TOML: {reason}")]
    Toml { path: String, reason: String },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub name: String,
    /// Public workflow name (as in `/workflows/{name}`) to the engine's workflow name.
    pub workflows: BTreeMap<String, String>,
}

impl Deployment {
    /// Reads `path`, or the embedded description when `None`.
    pub fn load(path: Option<&Path>) -> Result<Deployment, DeploymentError> {
        match path {
            None => Deployment::parse(EMBEDDED_PYPROJECT, "embedded pyproject.toml"),
            Some(p) => {
                let shown = p.display().to_string();
                let text = std::fs::read_to_string(p).map_err(|source| DeploymentError::Read {
                    path: shown.clone(),
                    source,
                })?;
                Deployment::parse(&text, &shown)
            }
        }
    }

    /// `[tool.llamaagents]` wins over `[tool.llamadeploy]`, as in llamactl; the name falls back
    /// to `[project].name`, then `"default"`.
    pub fn parse(text: &str, path: &str) -> Result<Deployment, DeploymentError> {
        let invalid = |reason: String| DeploymentError::Invalid {
            path: path.to_string(),
            reason,
        };
        let doc: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| DeploymentError::Toml {
                    path: path.to_string(),
                    reason: e.message().to_string(),
                })?;
        let tool = doc.get("tool").and_then(|t| t.as_table());
        let (section, table) = ["llamaagents", "llamadeploy"]
            .iter()
            .find_map(|k| Some((*k, tool?.get(*k)?.as_table()?)))
            .ok_or_else(|| invalid("no [tool.llamaagents] or [tool.llamadeploy] table".into()))?;
        let name = table
            .get("name")
            .and_then(|v| v.as_str())
            .or_else(|| doc.get("project")?.get("name")?.as_str())
            .unwrap_or("default")
            .to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(invalid(format!(
                "deployment name '{name}' is not URL-safe (letters, digits, '-', '_', '.')"
            )));
        }
        let entries = table
            .get("workflows")
            .and_then(|w| w.as_table())
            .ok_or_else(|| invalid(format!("[tool.{section}.workflows] is missing")))?;
        let mut workflows = BTreeMap::new();
        for (public, target) in entries {
            let target = target
                .as_str()
                .ok_or_else(|| invalid(format!("workflow '{public}' must be a string")))?;
            let engine_name = target
                .strip_prefix("fathom:")
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    invalid(format!(
                        "workflow '{public}' = '{target}': Fathom serves its own workflows, \
                         written \"fathom:<workflow>\""
                    ))
                })?;
            workflows.insert(public.clone(), engine_name.to_string());
        }
        if workflows.is_empty() {
            return Err(invalid(format!("[tool.{section}.workflows] is empty")));
        }
        Ok(Deployment { name, workflows })
    }

    /// The engine workflow served as `public`.
    pub fn engine_name(&self, public: &str) -> Option<&str> {
        self.workflows.get(public).map(String::as_str)
    }

    /// The public name of an engine workflow (the first, if served under several).
    pub fn public_name<'a>(&'a self, engine_name: &'a str) -> &'a str {
        self.workflows
            .iter()
            .find(|(_, e)| e.as_str() == engine_name)
            .map_or(engine_name, |(p, _)| p.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_description_names_both_workflows() {
        let d = Deployment::load(None).unwrap();
        assert_eq!(d.name, "deep-research");
        assert_eq!(d.engine_name("deep-research"), Some("deep-research"));
        assert_eq!(
            d.engine_name("research-metadata"),
            Some("research-metadata")
        );
    }

    #[test]
    fn llamaagents_wins_and_bad_entries_are_named() {
        let text = r#"
            [project]
            name = "proj"
            [tool.llamadeploy.workflows]
            old = "fathom:old"
            [tool.llamaagents.workflows]
            research = "fathom:deep-research"
        "#;
        let d = Deployment::parse(text, "p.toml").unwrap();
        assert_eq!(d.name, "proj");
        assert_eq!(d.engine_name("research"), Some("deep-research"));
        assert_eq!(d.engine_name("old"), None);
        assert_eq!(d.public_name("deep-research"), "research");

        let err = Deployment::parse(
            "[tool.llamadeploy.workflows]\nx = \"pkg.mod:workflow\"",
            "p.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("fathom:<workflow>"), "{err}");
        let err = Deployment::parse("[tool.other]\n", "p.toml").unwrap_err();
        assert!(err.to_string().contains("no [tool.llamaagents]"), "{err}");
        let err = Deployment::parse("name = ", "p.toml").unwrap_err();
        assert!(err.to_string().contains("not valid TOML"), "{err}");
    }
}
