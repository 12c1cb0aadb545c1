//! The `fetch` section of Fathom's config file: how the web is read, as written, checked and
//! turned into a [`FetchConfig`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::FetchConfig;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchSection {
    pub allow_private_networks: bool,
    pub obey_robots: bool,
    pub max_bytes: u64,
    pub timeout_seconds: u64,
    pub per_host_interval_ms: u64,
    /// PEM files of private certificate authorities, relative to the config file's folder.
    pub ca_files: Vec<PathBuf>,
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

impl FetchSection {
    /// The fetcher's config, with the certificate authorities of `ca_files` (each path made
    /// whole by `in_base`) read and trusted.
    pub fn to_config(&self, in_base: &dyn Fn(&Path) -> PathBuf) -> Result<FetchConfig, String> {
        let mut config = FetchConfig {
            allow_private_networks: self.allow_private_networks,
            obey_robots: self.obey_robots,
            max_bytes: self.max_bytes as usize,
            total_timeout: Duration::from_secs(self.timeout_seconds.max(1)),
            per_host_interval: Duration::from_millis(self.per_host_interval_ms),
            ..FetchConfig::default()
        };
        for file in self.ca_files.iter().take(64) {
            let path = in_base(file);
            let pem = std::fs::read(&path)
                .map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
            config
                .trust_pem(&pem)
                .map_err(|e| format!("fetch.ca_files: {}: {e}", path.display()))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ca_files_are_read_relative_to_the_config_and_checked() {
        // The test certificates' folder stands for the config file's.
        let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
        let in_base = |p: &Path| tls.join(p);
        let config = |value: serde_json::Value| {
            let section: FetchSection = serde_json::from_value(value).unwrap();
            section.to_config(&in_base)
        };
        let trusted = config(json!({"ca_files": ["ca.pem"]})).unwrap();
        assert_eq!(trusted.extra_roots.len(), 1);
        for (value, expected) in [
            (
                json!({"ca_files": ["../../src/config.rs"]}),
                "src/config.rs: no PEM certificate",
            ),
            (json!({"ca_files": ["none.pem"]}), "none.pem: No such file"),
        ] {
            let err = config(value).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }
}
