//! The other way round: the tools of MCP servers named in the config, offered to Fathom's
//! researchers. A server is started (stdio) or reached (streamable HTTP) the first time a run
//! asks for the tools, after its plan is approved, and kept for later runs. Each tool is
//! offered under `<server>_<tool>` with its JSON Schema; one whose schema is not a valid JSON
//! Schema is left out with a note, and a server that cannot be reached is noted, not fatal.
//! Every call is bounded in time and in the size of what it returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fathom_research::tools::{ExternalTool, ExternalTools};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Mutex;

/// One MCP server the researchers may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Names the server's tools to the model (`<name>_<tool>`): letters, digits, `-`, `_`.
    pub name: String,
    /// A program and its arguments, started with the protocol on its stdin and stdout.
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment for the program, besides Fathom's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Or: the URL of its streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
}

impl ServerSpec {
    /// What is wrong with the spec, for the config loader.
    pub fn check(&self) -> Result<(), String> {
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.name.is_empty() || self.name.len() > 32 || !self.name.chars().all(valid) {
            return Err(format!(
                "'{}' is not a server name: 1-32 letters, digits, '-' or '_'",
                self.name
            ));
        }
        match (self.command.is_empty(), &self.url) {
            (false, None) | (true, Some(_)) => Ok(()),
            _ => Err(format!(
                "server '{}' needs a command or a url (one of them)",
                self.name
            )),
        }
    }
}

/// Bounds on the servers and their calls.
#[derive(Debug, Clone)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    /// Characters of a result handed to the model, at most.
    pub max_result_chars: usize,
}

type Client = RunningService<RoleClient, ()>;

/// A tool offered, and where it lives.
#[derive(Debug)]
struct Offered {
    tool: ExternalTool,
    server: usize,
    remote_name: String,
}

#[derive(Debug)]
struct Connected {
    clients: Vec<Option<Client>>,
    offered: Vec<Offered>,
    notes: Vec<String>,
}

/// The configured servers' tools, connected on first use.
#[derive(Debug)]
pub struct McpTools {
    servers: Vec<ServerSpec>,
    limits: Limits,
    state: Mutex<Option<Arc<Connected>>>,
}

impl McpTools {
    pub fn new(servers: Vec<ServerSpec>, limits: Limits) -> McpTools {
        McpTools {
            servers,
            limits,
            state: Mutex::new(None),
        }
    }

    async fn connected(&self) -> Arc<Connected> {
        let mut state = self.state.lock().await;
        if let Some(c) = &*state {
            return c.clone();
        }
        let mut clients = Vec::new();
        let mut offered = Vec::new();
        let mut notes = Vec::new();
        for (i, spec) in self.servers.iter().enumerate() {
            let client =
                match tokio::time::timeout(self.limits.connect_timeout, connect(spec)).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => {
                        notes.push(format!(
                        "MCP server '{}' could not be reached ({e}); its tools were not offered",
                        spec.name
                    ));
                        clients.push(None);
                        continue;
                    }
                    Err(_) => {
                        notes.push(format!(
                        "MCP server '{}' did not answer within {} s; its tools were not offered",
                        spec.name,
                        self.limits.connect_timeout.as_secs()
                    ));
                        clients.push(None);
                        continue;
                    }
                };
            let listed =
                tokio::time::timeout(self.limits.connect_timeout, client.list_all_tools()).await;
            match listed {
                Ok(Ok(tools)) => {
                    for t in tools.iter().take(MAX_TOOLS_PER_SERVER) {
                        let schema = Value::Object((*t.input_schema).clone());
                        if let Err(e) = jsonschema::validator_for(&schema) {
                            notes.push(format!(
                                "MCP tool '{}' of server '{}' was left out: its input schema is \
                                 not a valid JSON Schema ({e})",
                                t.name, spec.name
                            ));
                            continue;
                        }
                        offered.push(Offered {
                            tool: ExternalTool {
                                name: offered_name(&spec.name, &t.name),
                                description: t
                                    .description
                                    .as_deref()
                                    .unwrap_or("")
                                    .chars()
                                    .take(1000)
                                    .collect(),
                                parameters: schema,
                            },
                            server: i,
                            remote_name: t.name.to_string(),
                        });
                    }
                }
                Ok(Err(e)) => notes.push(format!(
                    "MCP server '{}' did not list its tools ({e}); none were offered",
                    spec.name
                )),
                Err(_) => notes.push(format!(
                    "MCP server '{}' did not list its tools within {} s; none were offered",
                    spec.name,
                    self.limits.connect_timeout.as_secs()
                )),
            }
            clients.push(Some(client));
        }
        let c = Arc::new(Connected {
            clients,
            offered,
            notes,
        });
        *state = Some(c.clone());
        c
    }
}

/// Tools of one server offered, at most.
const MAX_TOOLS_PER_SERVER: usize = 64;

/// `<server>_<tool>`, in the characters (and length) model APIs accept for a tool name.
fn offered_name(server: &str, tool: &str) -> String {
    format!("{server}_{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

async fn connect(spec: &ServerSpec) -> Result<Client, String> {
    if let Some(url) = &spec.url {
        let transport = StreamableHttpClientTransport::from_uri(url.as_str());
        return ().serve(transport).await.map_err(|e| e.to_string());
    }
    let (program, args) = spec.command.split_first().ok_or("no command")?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).envs(&spec.env);
    let transport =
        TokioChildProcess::new(cmd).map_err(|e| format!("cannot start {program}: {e}"))?;
    ().serve(transport).await.map_err(|e| e.to_string())
}

#[async_trait]
impl ExternalTools for McpTools {
    async fn list(&self) -> (Vec<ExternalTool>, Vec<String>) {
        let c = self.connected().await;
        (
            c.offered.iter().map(|o| o.tool.clone()).collect(),
            c.notes.clone(),
        )
    }

    async fn call(&self, name: &str, arguments: Value) -> Result<String, String> {
        let c = self.connected().await;
        let offered = c
            .offered
            .iter()
            .find(|o| o.tool.name == name)
            .ok_or_else(|| format!("no tool '{name}'"))?;
        let client = c.clients[offered.server]
            .as_ref()
            .ok_or_else(|| "its server is not reachable".to_string())?;
        let Value::Object(args) = arguments else {
            return Err("its arguments must be a JSON object".into());
        };
        let params = CallToolRequestParams::new(offered.remote_name.clone()).with_arguments(args);
        let limit = self.limits.call_timeout;
        let result = tokio::time::timeout(limit, client.call_tool(params))
            .await
            .map_err(|_| format!("no answer within {} s", limit.as_secs()))?
            .map_err(|e| e.to_string())?;
        let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
        let mut text: String = content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        if text.is_empty()
            && let Some(s) = &result.structured_content
        {
            text = s.to_string();
        }
        if text.chars().count() > self.limits.max_result_chars {
            text = text.chars().take(self.limits.max_result_chars).collect();
            text.push_str(" […cut]");
        }
        if result.is_error == Some(true) {
            return Err(if text.is_empty() {
                "the tool reported an error".into()
            } else {
                text
            });
        }
        Ok(text)
    }
}
