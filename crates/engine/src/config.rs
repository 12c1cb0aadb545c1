//! The `engine` section of Fathom's config file: how runs are driven, as written, checked and
//! turned into an [`EngineConfig`].

use std::time::Duration;

use serde::Deserialize;

use crate::executor::EngineConfig;

/// How runs are driven.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// A run whose owner stops renewing its lease this long is taken over by another process.
    pub lease_ttl_seconds: u64,
    /// How often idle workers and followers look for work and events other processes made.
    pub poll_interval_ms: u64,
    /// Runs one process drives at once; unset, the application decides (see
    /// [`EngineSection::to_config`]).
    pub max_concurrent_runs: Option<usize>,
    /// On SIGTERM or Ctrl-C, how long steps in flight may take to finish before they are
    /// cut off and their runs let go to another process.
    pub shutdown_grace_seconds: u64,
    /// How long a step's commit may wait for quick steps run after it on its event, to be
    /// committed with them; 0 commits every step alone.
    pub chain_wait_ms: u64,
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

impl EngineSection {
    /// The engine's config, checked. `max_concurrent_runs` is left at the default's: the
    /// caller sets it, from the section's when given, else from what its runs do.
    pub fn to_config(&self) -> Result<EngineConfig, String> {
        if self.lease_ttl_seconds == 0
            || self.poll_interval_ms < 10
            || self.max_concurrent_runs == Some(0)
        {
            return Err(
                "engine: lease_ttl_seconds and max_concurrent_runs must be at least 1, poll_interval_ms at least 10".into(),
            );
        }
        Ok(EngineConfig {
            lease_ttl: Duration::from_secs(self.lease_ttl_seconds),
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_seconds),
            chain_wait: Duration::from_millis(self.chain_wait_ms),
            ..EngineConfig::default()
        })
    }
}
