//! [`Tools`]: every tool brain can offer, and the MCP servers behind them, supervised.
//!
//! Each configured server has a supervisor thread (`supervisor`): it starts the server
//! (one try bounded by `START_TIMEOUT`), lists its tools, then watches it: a `tools/list_changed` lists them
//! again; a server that dies or fails to start is started again after a backoff
//! (`RETRY_FIRST` doubling up to `RETRY_MAX`), or at once when a call needs it.
//! [`Tools::start`] waits for the first starts at most [`START_WAIT`], so a slow server
//! never holds up `serve` beyond that; it keeps starting in the background (`starting`).
//!
//! Offered names must be unique: at startup two tools with one name stop startup with a
//! message naming both; a server that lists a colliding tool later (a late start, a
//! changed list) has that tool dropped, with a warning, never a crash.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

use super::config::{McpConfig, Transport};
use super::mcp::{Link, LinkOptions, McpError, Server};
use super::names::{self, Collision};
use super::supervisor::{Phase, Ready, Slot, cancelled, supervise};
use super::{
    BUILTIN_SERVER, Health, Mode, Policy, ServerState, ServerStatus, ToolOutcome, ToolSpec,
    ToolStatus, ToolsStatus, builtin,
};
use crate::session::Store;

/// How long `serve` waits for its servers to start (SPEC §13: each bounded by 10 s).
pub const START_WAIT: Duration = Duration::from_secs(10);
/// How long a stdio server has, after a call of it was cancelled or timed out, to show it
/// still listens (it answers a `ping`); else it is restarted (SPEC §13: a stdio server that
/// does not answer a cancel within 5 s). A server stuck in the abandoned call would
/// otherwise keep every later call waiting until its own timeout.
pub const CANCEL_ANSWER_WAIT: Duration = Duration::from_secs(5);

/// What [`Tools::start`] needs.
pub struct ToolsSetup {
    pub mode: Mode,
    /// `--mcp-config`, parsed.
    pub config: Option<McpConfig>,
    /// `--tool-timeout`: a call's limit when its server sets no `timeout_s`.
    pub tool_timeout: Duration,
    /// The history `search_history` searches.
    pub store: Option<Arc<Store>>,
    /// How long [`Tools::start`] waits for the servers ([`START_WAIT`]).
    pub start_wait: Duration,
    /// What every server's link runs with: the largest message read from it, and where a
    /// stdio server's process group is recorded.
    pub links: LinkOptions,
}

/// Why tools could not start.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    #[error("{0}")]
    Collision(#[from] Collision),
}

/// The tools and their servers. Shared behind an `Arc`; dropping the last one shuts the
/// servers down.
pub struct Tools {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// Offered at all (`--tools`, and a configuration for `auto`).
    pub(super) enabled: bool,
    pub(super) builtins: Vec<ToolSpec>,
    pub(super) store: Option<Arc<Store>>,
    pub(super) slots: Vec<Slot>,
    pub(super) tool_timeout: Duration,
    pub(super) links: LinkOptions,
    pub(super) stopping: AtomicBool,
    /// Held while a server's list is accepted, so two lists are checked against each
    /// other one at a time.
    pub(super) catalog: Mutex<()>,
}

/// `12 s`, `1.5 s`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

impl Tools {
    /// No tools: nothing offered, no server started.
    pub fn off() -> Tools {
        Tools {
            inner: Arc::new(Inner {
                enabled: false,
                builtins: Vec::new(),
                store: None,
                slots: Vec::new(),
                tool_timeout: super::DEFAULT_TOOL_TIMEOUT,
                links: LinkOptions::default(),
                stopping: AtomicBool::new(false),
                catalog: Mutex::new(()),
            }),
        }
    }

    /// Starts every configured server in parallel and waits for them at most
    /// `start_wait`; refuses when two of the tools listed by then would be offered under
    /// one name.
    pub fn start(setup: ToolsSetup) -> Result<Tools, ToolsError> {
        let (builtin, servers) = setup.mode.enables(setup.config.is_some());
        let configs = match setup.config {
            Some(c) if servers => c.servers,
            _ => Vec::new(),
        };
        let inner = Arc::new(Inner {
            enabled: builtin || servers,
            builtins: if builtin {
                vec![builtin::search_history_spec()]
            } else {
                Vec::new()
            },
            store: setup.store,
            slots: configs.into_iter().map(Slot::new).collect(),
            tool_timeout: setup.tool_timeout,
            links: setup.links,
            stopping: AtomicBool::new(false),
            catalog: Mutex::new(()),
        });
        for (i, slot) in inner.slots.iter().enumerate() {
            let me = Arc::clone(&inner);
            let spawned = std::thread::Builder::new()
                .name(format!("mcp-supervise-{i}"))
                .spawn(move || supervise(&me, i));
            if let Err(e) = spawned {
                let mut st = slot.state.lock();
                st.phase = Phase::Failed(format!("cannot start a thread for it: {e}"));
                st.starts += 1;
            }
        }
        let tools = Tools { inner };
        let until = Instant::now() + setup.start_wait;
        for slot in &tools.inner.slots {
            let mut st = slot.state.lock();
            while matches!(st.phase, Phase::Starting) && st.starts == 0 {
                if slot.wake.wait_until(&mut st, until).timed_out() {
                    log::warn!(
                        "MCP server {} is still starting; it keeps starting in the background",
                        slot.config.name
                    );
                    break;
                }
            }
        }
        if let Some(c) = tools.startup_collision() {
            tools.shutdown();
            return Err(c.into());
        }
        Ok(tools)
    }

    fn startup_collision(&self) -> Option<Collision> {
        let mut all: Vec<(String, String)> = self
            .inner
            .builtins
            .iter()
            .map(|b| (b.name.clone(), names::label(BUILTIN_SERVER, &b.tool)))
            .collect();
        for slot in &self.inner.slots {
            all.extend(slot.state.lock().listed.iter().cloned());
        }
        names::first_collision(all.iter().map(|(n, l)| (n.as_str(), l.as_str())))
    }

    /// What the model is offered: every tool not denied of the servers that have listed
    /// their tools, and the built-ins, sorted by name. A server that died or is
    /// restarting keeps its tools offered: the definitions stay byte-stable across turns
    /// (I3, the prompt cache), and calling one starts the server again (SPEC §13).
    pub fn offered(&self) -> Vec<ToolSpec> {
        let mut out = self.inner.builtins.clone();
        for slot in &self.inner.slots {
            let st = slot.state.lock();
            if !matches!(st.phase, Phase::Stopped) {
                out.extend(
                    st.tools
                        .iter()
                        .filter(|t| t.policy != Policy::Deny)
                        .cloned(),
                );
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// A tool that may be called, by its offered name (a server restarting keeps its
    /// tools: a call starts it).
    pub fn find(&self, name: &str) -> Option<ToolSpec> {
        if let Some(b) = self.inner.builtins.iter().find(|t| t.name == name) {
            return Some(b.clone());
        }
        self.inner.slots.iter().find_map(|slot| {
            slot.state
                .lock()
                .tools
                .iter()
                .find(|t| t.name == name && t.policy != Policy::Deny)
                .cloned()
        })
    }

    /// How long a call to this tool may run: its server's `timeout_s`, else
    /// `--tool-timeout`.
    pub fn timeout(&self, name: &str) -> Duration {
        self.find(name)
            .and_then(|t| self.slot(&t.server))
            .and_then(|s| s.config.timeout)
            .unwrap_or(self.inner.tool_timeout)
    }

    fn slot(&self, server: &str) -> Option<&Slot> {
        self.inner.slots.iter().find(|s| s.config.name == server)
    }

    /// Runs one call until it answers, `deadline` or the tool's own limit passes, or
    /// `cancel` is set. A server that died is started again first.
    pub fn call(
        &self,
        name: &str,
        args: &Value,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> ToolOutcome {
        let Some(spec) = self.find(name) else {
            return ToolOutcome::error(format!("there is no tool named {name:?}"));
        };
        if !args.is_object() {
            return ToolOutcome::error("the arguments must be a JSON object");
        }
        if spec.server == BUILTIN_SERVER {
            return builtin::search_history(self.inner.store.as_deref(), args);
        }
        let Some(slot) = self.slot(&spec.server) else {
            return ToolOutcome::error(format!("there is no tool named {name:?}"));
        };
        let started = Instant::now();
        let limit = slot.config.timeout.unwrap_or(self.inner.tool_timeout);
        let deadline = deadline.min(started + limit);
        let timed_out = || ToolOutcome {
            status: ToolStatus::Timeout,
            text: format!(
                "the tool did not answer in {}",
                seconds(deadline.saturating_duration_since(started))
            ),
        };
        let server = match slot.ready(deadline, cancel) {
            Ready::Up(s) => s,
            Ready::TimedOut => return timed_out(),
            Ready::Gave(outcome) => return outcome,
        };
        match server.call(&spec.tool, args.clone(), deadline, cancel) {
            Ok(r) if r.is_error => ToolOutcome::error(if r.text.trim().is_empty() {
                "the tool failed without saying why".to_owned()
            } else {
                r.text
            }),
            Ok(r) => {
                slot.state.lock().failures = 0;
                ToolOutcome::ok(r.text)
            }
            Err(McpError::Timeout(_)) => {
                restart_if_deaf(slot, server);
                timed_out()
            }
            Err(McpError::Cancelled) => {
                restart_if_deaf(slot, server);
                cancelled()
            }
            Err(e) => {
                // A dead server: its supervisor starts it again now.
                slot.wake.notify_all();
                ToolOutcome::error(format!("the MCP server {} failed: {e}", slot.config.name))
            }
        }
    }

    /// For `/health` and `GET /v1/tools`.
    pub fn status(&self) -> ToolsStatus {
        let mut tools = self.inner.builtins.clone();
        let mut servers = Vec::new();
        for slot in &self.inner.slots {
            let st = slot.state.lock();
            let (status, error) = match &st.phase {
                Phase::Up(s) => match s.broken() {
                    None => (ServerState::Ok, None),
                    Some(why) => (ServerState::Failed, Some(why)),
                },
                Phase::Starting => (ServerState::Starting, None),
                Phase::Failed(why) => (ServerState::Failed, Some(why.clone())),
                Phase::Stopped => (ServerState::Failed, Some("brain is shutting down".into())),
            };
            if status == ServerState::Ok {
                tools.extend(st.tools.iter().cloned());
            }
            servers.push(ServerStatus {
                name: slot.config.name.clone(),
                status,
                error,
                tools: st.tools.len(),
            });
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let health = if !self.inner.enabled {
            Health::Off
        } else if servers.iter().any(|s| s.status == ServerState::Failed) {
            Health::Degraded
        } else {
            Health::Ok
        };
        ToolsStatus {
            health,
            tools,
            servers,
        }
    }

    /// Closes every server (in parallel; each gets its grace to exit). Idempotent.
    pub fn shutdown(&self) {
        if self.inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut closing = Vec::new();
        for slot in &self.inner.slots {
            let mut st = slot.state.lock();
            let phase = std::mem::replace(&mut st.phase, Phase::Stopped);
            closing.push((phase, st.link.take()));
            drop(st);
            slot.wake.notify_all();
        }
        std::thread::scope(|s| {
            for (phase, link) in closing {
                s.spawn(move || {
                    if let Some(link) = link {
                        link.close();
                    }
                    drop(phase);
                });
            }
        });
    }
}

/// After a call was abandoned, checks in the background (the attempt does not wait) that
/// a stdio server still answers within [`CANCEL_ANSWER_WAIT`]; one that does not is
/// closed (its process group killed), and the next call starts it again.
fn restart_if_deaf(slot: &Slot, server: Arc<Server>) {
    if !matches!(slot.config.transport, Transport::Stdio(_)) {
        return;
    }
    let name = slot.config.name.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("mcp-cancel-{name}"))
        .spawn(move || {
            if let Err(McpError::Timeout(_)) = server.ping(Instant::now() + CANCEL_ANSWER_WAIT) {
                log::warn!(
                    "MCP server {name} did not answer within {CANCEL_ANSWER_WAIT:?} of a \
                     cancelled call; restarting it"
                );
                server.close();
            }
        });
    if let Err(e) = spawned {
        log::warn!(
            "MCP server {}: cannot check it after a cancel: {e}",
            slot.config.name
        );
    }
}

impl Drop for Tools {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("enabled", &self.inner.enabled)
            .field("servers", &self.inner.slots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(seconds(Duration::from_secs(60)), "60 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn modes_decide_what_is_offered() {
        assert_eq!(Mode::Auto.enables(false), (false, false));
        assert_eq!(Mode::Auto.enables(true), (true, true));
        assert_eq!(Mode::On.enables(false), (true, false));
        assert_eq!(Mode::Off.enables(true), (false, false));
        let off = Tools::off();
        assert!(off.offered().is_empty());
        assert_eq!(off.status().health, Health::Off);
        let on = Tools::start(ToolsSetup {
            mode: Mode::On,
            config: None,
            tool_timeout: Duration::from_secs(1),
            store: None,
            start_wait: START_WAIT,
            links: LinkOptions::default(),
        })
        .unwrap();
        let names: Vec<String> = on.offered().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["search_history"]);
        assert_eq!(on.status().health, Health::Ok);
        let bad = on.call(
            "search_history",
            &serde_json::json!([1]),
            Instant::now(),
            &AtomicBool::new(false),
        );
        assert_eq!(bad.status, ToolStatus::Error);
        let unknown = on.call(
            "nope",
            &serde_json::json!({}),
            Instant::now(),
            &AtomicBool::new(false),
        );
        assert!(
            unknown.text.contains("no tool named \"nope\""),
            "{unknown:?}"
        );
    }
}
