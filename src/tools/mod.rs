//! Tools a model can use inside a turn (SPEC §13).
//!
//! - [`mcp`]: the client for MCP servers (stdio and Streamable HTTP).
//! - [`config`]: `--mcp-config`, the file other MCP clients use (pure).
//! - [`names`]: offered names (`NAME__tool`), collisions and policy (pure).
//! - [`builtin`]: `search_history`, brain's own search as a tool.
//! - [`registry`]: [`Tools`], what is offered and called; `supervisor` keeps each
//!   server running.

pub mod builtin;
pub mod config;
pub mod mcp;
pub mod names;
pub mod registry;
mod supervisor;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use registry::{Tools, ToolsError, ToolsSetup};

/// The `server` of built-in tools.
pub const BUILTIN_SERVER: &str = "builtin";

/// Default for `--tool-timeout`: a call's limit when its server sets no `timeout_s`.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for `--max-tool-steps`.
pub const DEFAULT_MAX_TOOL_STEPS: u32 = 10;
/// Default for `--permission-timeout`.
pub const DEFAULT_PERMISSION_TIMEOUT: Duration = Duration::from_secs(300);
/// Default for `--max-tool-result-bytes`.
pub const DEFAULT_MAX_TOOL_RESULT_BYTES: usize = 64 * 1024;

/// Whether a tool may run without asking (SPEC §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Allow,
    Ask,
    Deny,
}

/// A tool as brain offers it to a model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// As offered: `NAME__tool`, or the built-in's bare name.
    pub name: String,
    /// The MCP server's name, or [`BUILTIN_SERVER`].
    pub server: String,
    /// The server's own name for it.
    pub tool: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: serde_json::Value,
    pub policy: Policy,
    pub read_only: bool,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Ok,
    Error,
    Timeout,
    Cancelled,
}

/// A call's result: the full text, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutcome {
    pub status: ToolStatus,
    pub text: String,
}

impl ToolOutcome {
    pub fn ok(text: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            status: ToolStatus::Ok,
            text: text.into(),
        }
    }

    pub fn error(text: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            status: ToolStatus::Error,
            text: text.into(),
        }
    }
}

/// `--tools`: whether tools are offered at all (SPEC §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Tools once an MCP configuration is given, the built-in with them.
    #[default]
    Auto,
    /// The built-in always, MCP servers when configured.
    On,
    /// Nothing offered, no server started.
    Off,
}

impl Mode {
    /// Whether the built-in is offered and whether servers start, given whether an MCP
    /// configuration was given.
    pub fn enables(self, configured: bool) -> (bool, bool) {
        match self {
            Mode::Off => (false, false),
            Mode::Auto => (configured, configured),
            Mode::On => (true, configured),
        }
    }
}

/// The limits a turn's tool loop runs under (`--max-tool-steps` and the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolLimits {
    /// A call's limit when its server sets no `timeout_s` (`--tool-timeout`).
    pub tool_timeout: Duration,
    pub max_tool_steps: u32,
    pub permission_timeout: Duration,
    pub max_tool_result_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> ToolLimits {
        ToolLimits {
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            max_tool_steps: DEFAULT_MAX_TOOL_STEPS,
            permission_timeout: DEFAULT_PERMISSION_TIMEOUT,
            max_tool_result_bytes: DEFAULT_MAX_TOOL_RESULT_BYTES,
        }
    }
}

/// `/health`'s `tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Ok,
    Degraded,
    Off,
}

/// A server's state for `/v1/tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    Ok,
    Starting,
    Failed,
}

/// One configured server, as `/v1/tools` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub status: ServerState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many tools it lists (denied ones included).
    pub tools: usize,
}

/// Everything `/health` and `/v1/tools` say about tools.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolsStatus {
    pub health: Health,
    /// Every known tool (denied ones included, with their policy), sorted by name.
    pub tools: Vec<ToolSpec>,
    pub servers: Vec<ServerStatus>,
}
