//! `brain tools list|call` (SPEC §13): the tools a configuration gives, started as `serve`
//! starts them, for checking it from the terminal.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{CliError, ToolsArgs, ToolsCommand, db_path, open_read_only};
use crate::session::SyncMode;
use crate::session::store::OlderSchema;
use crate::tools::mcp::LinkOptions;
use crate::tools::mcp::groups::Groups;
use crate::tools::{Health, ToolStatus, Tools, ToolsSetup, config};

impl ToolsArgs {
    /// Starts the tools these flags give (servers up, or failed, within their bound);
    /// `store` is what `search_history` searches, `links` what every server runs with.
    pub fn start(
        &self,
        store: Option<Arc<crate::session::Store>>,
        links: LinkOptions,
    ) -> Result<Tools, CliError> {
        self.start_with(store, None, links)
    }

    /// As [`Self::start`], the server at `url` (`--mcp-url`) standing for a configuration.
    fn start_with(
        &self,
        store: Option<Arc<crate::session::Store>>,
        url: Option<&str>,
        links: LinkOptions,
    ) -> Result<Tools, CliError> {
        let mode: crate::tools::Mode = self.mode.into();
        let config = match (&self.mcp_config, url) {
            // `off` starts nothing, so it reads nothing either.
            _ if mode == crate::tools::Mode::Off => None,
            (_, Some(url)) => Some(url_config(url)),
            (Some(path), None) => {
                Some(config::load(path).map_err(|e| CliError::Tools(e.to_string()))?)
            }
            (None, None) => None,
        };
        Tools::start(ToolsSetup {
            mode,
            config,
            tool_timeout: Duration::from_secs(self.tool_timeout),
            store,
            start_wait: crate::tools::registry::START_WAIT,
            links,
        })
        .map_err(|e| CliError::Tools(format!("cannot start the tools: {e}")))
    }
}

/// Where the process groups of the stdio MCP servers of a brain on `db` are recorded: beside a
/// SQLite database (named after it, as its lock is), in the data directory for PostgreSQL.
fn groups_dir(db: &Path) -> Option<PathBuf> {
    match crate::session::store::db_file(db).ok()? {
        Some(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".mcp-groups");
            Some(PathBuf::from(name))
        }
        None => crate::config::default_db_path()?
            .parent()
            .map(|d| d.join("mcp-groups")),
    }
}

/// The record of this process's MCP servers' process groups (`serve`, or a `chat` that
/// runs its own engine), after the groups a killed
/// brain left running were ended (SPEC §12: they end with the server). Without one, the
/// servers still run (brain kills their groups when it closes them); only a SIGKILL of
/// brain would leave their children behind.
pub(super) fn server_groups(db: &Path) -> Option<Arc<Groups>> {
    let groups = Groups::open(&groups_dir(db)?)?;
    let killed = groups.reap_left_behind();
    if killed > 0 {
        log::warn!("ended {killed} MCP server process groups a killed brain left running");
    }
    Some(Arc::new(groups))
}

pub fn run(
    db: Option<PathBuf>,
    sync: SyncMode,
    cmd: ToolsCommand,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (args, url) = match &cmd {
        ToolsCommand::List { tools, mcp_url, .. } | ToolsCommand::Call { tools, mcp_url, .. } => {
            (tools, mcp_url.as_deref())
        }
    };
    let db = db_path(db);
    // Nothing to check given: what the running server offers is what the user means.
    if let (
        ToolsCommand::List {
            json, api_token, ..
        },
        Ok(path),
        None,
        None,
    ) = (&cmd, &db, &args.mcp_config, url)
        && args.mode == super::args::ToolsArg::Auto
        && let Some(server) = serving(path)
    {
        return list_on_server(&server, api_token.as_deref(), *json, out);
    }
    // The history, read only, when there is one: without it only search_history fails.
    let store = db
        .as_ref()
        .map_err(|e| log::info!("search_history will not work here: {e}"))
        .ok()
        .and_then(|p| {
            open_read_only(p, sync, OlderSchema::Refuse)
                .map_err(|e| log::info!("search_history will not work here: {e}"))
                .ok()
        })
        .map(Arc::new);
    // Recorded as `serve` records them: a SIGKILL here must not leave `npx`'s `node`.
    let link = LinkOptions {
        groups: db.as_deref().ok().and_then(server_groups),
        ..LinkOptions::default()
    };
    let tools = args.start_with(store, url, link)?;
    match cmd {
        ToolsCommand::List { json, .. } => list(&tools, json, out),
        ToolsCommand::Call {
            name, arguments, ..
        } => call(&tools, &name, &arguments, out),
    }
}

/// The server `--mcp-url` names: `mcp`, over Streamable HTTP, with the usual policies.
fn url_config(url: &str) -> config::McpConfig {
    config::McpConfig {
        servers: vec![config::ServerConfig {
            name: URL_SERVER.into(),
            transport: config::Transport::Http {
                url: url.to_owned(),
                headers: Vec::new(),
            },
            allow: Vec::new(),
            deny: Vec::new(),
            timeout: None,
        }],
    }
}

/// The name of the server `--mcp-url` gives (its tools are `mcp__NAME`).
pub const URL_SERVER: &str = "mcp";

fn list(tools: &Tools, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let status = tools.status();
    let view = crate::api::views::tools(&status);
    if json {
        writeln!(out, "{view}")?;
        return Ok(());
    }
    if status.health == Health::Off {
        writeln!(
            out,
            "tools are off (give --mcp-config PATH, or --tools on for the built-in; no \
             server holds the database)"
        )?;
        return Ok(());
    }
    print_view(&view, out)
}

/// The URL of the brain server holding the SQLite database at `db`, if one does (its
/// lock is tried and let go at once: a free one means no server).
fn serving(db: &Path) -> Option<String> {
    match super::lock::DbLock::acquire(db, "tools") {
        Err(super::lock::LockError::Held {
            holder: super::lock::Holder { url: Some(url), .. },
            ..
        }) => Some(url),
        _ => None,
    }
}

/// How long the running server may take to say what it offers.
const SERVER_LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET /v1/tools` of the server at `url`, printed as a local list is.
fn list_on_server(
    url: &str,
    token: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(SERVER_LIST_TIMEOUT))
        .build()
        .new_agent();
    let mut request = agent.get(&format!("{}/v1/tools", url.trim_end_matches('/')));
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let failed = |e: &dyn std::fmt::Display| {
        CliError::Serve(format!(
            "the brain server at {url} holds the database, but: {e}"
        ))
    };
    let resp = request.call().map_err(|e| failed(&e))?;
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().map_err(|e| failed(&e))?;
    let view: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if status != 200 {
        let why = view["message"].as_str().unwrap_or("it refused").to_owned();
        return Err(failed(&why));
    }
    if json {
        writeln!(out, "{view}")?;
        return Ok(());
    }
    writeln!(
        out,
        "{}",
        super::term::printable(&format!("the server at {url} offers:"))
    )?;
    print_view(&view, out)
}

/// A `/v1/tools` view as lines: each tool (name, server, policy), then each server.
fn print_view(view: &serde_json::Value, out: &mut dyn Write) -> Result<(), CliError> {
    let empty = Vec::new();
    let tools = view["tools"].as_array().unwrap_or(&empty);
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let width = tools
        .iter()
        .map(|t| text(&t["name"]).len())
        .max()
        .unwrap_or(0);
    for t in tools {
        let read_only = t["read_only"].as_bool().unwrap_or(false);
        let line = format!(
            "{:width$}  {:12}  {:5}{}",
            text(&t["name"]),
            text(&t["server"]),
            text(&t["policy"]),
            if read_only { "  read-only" } else { "" },
        );
        // Names come from servers: never let them drive the terminal.
        writeln!(out, "{}", super::term::printable(&line))?;
    }
    for s in view["servers"].as_array().unwrap_or(&empty) {
        let state = match s["status"].as_str().unwrap_or_default() {
            "ok" => format!("ok, {} tools", s["tools"].as_u64().unwrap_or(0)),
            "failed" => format!("failed: {}", s["error"].as_str().unwrap_or("?")),
            other => other.to_owned(),
        };
        let line = format!("server {}: {state}", text(&s["name"]));
        writeln!(out, "{}", super::term::printable(&line))?;
    }
    Ok(())
}

fn call(tools: &Tools, name: &str, arguments: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let args: serde_json::Value = serde_json::from_str(arguments)
        .map_err(|e| CliError::Tools(format!("the arguments are not JSON: {e}")))?;
    let never = AtomicBool::new(false);
    let outcome = tools.call(name, &args, Instant::now() + tools.timeout(name), &never);
    match outcome.status {
        ToolStatus::Ok => {
            writeln!(out, "{}", outcome.text)?;
            Ok(())
        }
        other => Err(CliError::Tools(format!(
            "{name} ended {}: {}",
            serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            outcome.text
        ))),
    }
}
