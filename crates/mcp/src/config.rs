//! The `mcp` section of Fathom's config file: the MCP servers whose tools the researchers are
//! offered, as written, checked and turned into [`McpTools`].

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::client::{Limits, McpTools, ServerSpec};

/// MCP servers whose tools the researchers are offered (with a model).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    pub servers: Vec<ServerSpec>,
    /// Bound on starting (or reaching) a server and listing its tools.
    pub connect_timeout_seconds: u64,
    /// Bound on one tool call.
    pub call_timeout_seconds: u64,
    /// Characters of a tool's result handed to the model, at most.
    pub max_result_chars: usize,
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

impl McpSection {
    /// The servers' tools, when servers are configured (connected when a run first asks).
    pub fn tools(&self) -> Result<Option<Arc<McpTools>>, String> {
        if self.servers.is_empty() {
            return Ok(None);
        }
        let mut names = std::collections::BTreeSet::new();
        for s in &self.servers {
            s.check().map_err(|e| format!("mcp.servers: {e}"))?;
            if !names.insert(s.name.as_str()) {
                return Err(format!("mcp.servers: '{}' is named twice", s.name));
            }
        }
        if self.connect_timeout_seconds == 0
            || self.call_timeout_seconds == 0
            || self.max_result_chars == 0
        {
            return Err("mcp: timeouts and max_result_chars must be at least 1".into());
        }
        Ok(Some(Arc::new(McpTools::new(
            self.servers.clone(),
            Limits {
                connect_timeout: Duration::from_secs(self.connect_timeout_seconds),
                call_timeout: Duration::from_secs(self.call_timeout_seconds),
                max_result_chars: self.max_result_chars,
            },
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn tools(servers: Value) -> Result<Option<Arc<McpTools>>, String> {
        let section: McpSection =
            serde_json::from_value(json!({ "servers": servers })).map_err(|e| e.to_string())?;
        section.tools()
    }

    #[test]
    fn mcp_servers_are_checked() {
        assert!(tools(json!([])).unwrap().is_none(), "none configured");
        assert!(
            tools(json!([{"name": "docs", "command": ["srv"]}]))
                .unwrap()
                .is_some()
        );
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
            let e = tools(servers).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
