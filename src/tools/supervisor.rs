//! A server's supervisor thread (see [`super::registry`]): start it (one try bounded by
//! [`START_TIMEOUT`]), list its tools and accept them (collisions dropped with a warning),
//! then watch it: a changed list is listed again, a dead or failed server starts again
//! after a backoff ([`RETRY_FIRST`] doubling up to [`RETRY_MAX`]), or at once when a call
//! needs it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::config::{ServerConfig, Transport};
use super::mcp::http::HttpLink;
use super::mcp::stdio::StdioLink;
use super::mcp::{Link, McpError, Server, ToolInfo};
use super::names;
use super::registry::Inner;
use super::{BUILTIN_SERVER, Policy, ToolOutcome, ToolSpec, ToolStatus};

/// How long one try to start a server (spawn, `initialize`, `tools/list`) may take in the
/// background before it counts as failed (`npx` may download the server first).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a changed tool list may take to arrive.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait before a failed server is started again; it doubles per failure.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two starts of a failing server.
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// How often a supervisor looks at its server (died? tools changed?).
pub(super) const WATCH_POLL: Duration = Duration::from_millis(200);

pub(super) struct Slot {
    pub(super) config: ServerConfig,
    pub(super) state: Mutex<State>,
    /// Signalled on every change of `state`, and to wake the supervisor.
    pub(super) wake: Condvar,
}

pub(super) struct State {
    pub(super) phase: Phase,
    /// Its tools as last listed and accepted, sorted by offered name.
    pub(super) tools: Vec<ToolSpec>,
    /// `(offered name, server/tool)` of every tool it listed that is not denied, dropped
    /// ones included: what startup checks for collisions.
    pub(super) listed: Vec<(String, String)>,
    /// The current process or connection, to close it even while it starts.
    pub(super) link: Option<Arc<dyn Link>>,
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
    /// A call wants it started now, whatever the backoff.
    pub(super) restart_now: bool,
    /// Starts finished (either way), so a waiting call knows one was tried.
    pub(super) starts: u64,
}

pub(super) enum Phase {
    Starting,
    Up(Arc<Server>),
    Failed(String),
    Stopped,
}

/// The most tools one server may offer, and the most bytes their definitions may take:
/// every request carries them, so a server listing thousands would fill the model's
/// window (and brain's memory) before a word is said.
pub const MAX_TOOLS_PER_SERVER: usize = 256;
pub const MAX_DEFINITION_BYTES_PER_SERVER: usize = 512 * 1024;

/// Refuses a listing past [`MAX_TOOLS_PER_SERVER`] or [`MAX_DEFINITION_BYTES_PER_SERVER`].
fn check_listing(tools: &[ToolInfo]) -> Result<(), McpError> {
    if tools.len() > MAX_TOOLS_PER_SERVER {
        return Err(McpError::Protocol(format!(
            "it lists {} tools; brain offers at most {MAX_TOOLS_PER_SERVER} per server \
             (deny the ones you do not need in its configuration)",
            tools.len()
        )));
    }
    let bytes: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
        .sum();
    if bytes > MAX_DEFINITION_BYTES_PER_SERVER {
        return Err(McpError::Protocol(format!(
            "its tool definitions take {bytes} bytes; brain offers at most \
             {MAX_DEFINITION_BYTES_PER_SERVER} per server"
        )));
    }
    Ok(())
}

/// The wait before start number `failures + 1`.
pub(super) fn backoff(failures: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(RETRY_MAX)
}

pub(super) fn cancelled() -> ToolOutcome {
    ToolOutcome {
        status: ToolStatus::Cancelled,
        text: "the call was cancelled".into(),
    }
}

pub(super) enum Ready {
    Up(Arc<Server>),
    TimedOut,
    Gave(ToolOutcome),
}

impl Slot {
    pub(super) fn new(config: ServerConfig) -> Slot {
        Slot {
            config,
            state: Mutex::new(State {
                phase: Phase::Starting,
                tools: Vec::new(),
                listed: Vec::new(),
                link: None,
                failures: 0,
                retry_at: None,
                restart_now: false,
                starts: 0,
            }),
            wake: Condvar::new(),
        }
    }

    /// The server once it is up: a dead or failed one is started now (once; a second
    /// failure is the answer).
    pub(super) fn ready(&self, deadline: Instant, cancel: &AtomicBool) -> Ready {
        let mut st = self.state.lock();
        let mut asked: Option<u64> = None;
        loop {
            match &st.phase {
                Phase::Up(s) if s.broken().is_none() => return Ready::Up(Arc::clone(s)),
                Phase::Stopped => {
                    return Ready::Gave(ToolOutcome::error("brain is shutting down"));
                }
                Phase::Failed(why) => {
                    if asked.is_some_and(|n| st.starts > n) {
                        return Ready::Gave(ToolOutcome::error(format!(
                            "the MCP server {} is not running: {why}",
                            self.config.name
                        )));
                    }
                    asked.get_or_insert(st.starts);
                    st.restart_now = true;
                    self.wake.notify_all();
                }
                Phase::Up(_) | Phase::Starting => {
                    asked.get_or_insert(st.starts);
                }
            }
            if cancel.load(Ordering::Relaxed) {
                return Ready::Gave(cancelled());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ready::TimedOut;
            }
            self.wake.wait_for(&mut st, WATCH_POLL.min(deadline - now));
        }
    }
}

impl Inner {
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Takes a server's new list: names, policies, and any tool whose name another
    /// already holds dropped with a warning (the tools it had before keep theirs).
    pub(super) fn accept(&self, i: usize, listed: &[ToolInfo]) {
        let _catalog = self.catalog.lock();
        let config = &self.slots[i].config;
        let mut taken: HashMap<String, String> = self
            .builtins
            .iter()
            .map(|b| (b.name.clone(), names::label(BUILTIN_SERVER, &b.tool)))
            .collect();
        for (j, other) in self.slots.iter().enumerate() {
            if j != i {
                for t in other.state.lock().tools.iter() {
                    if t.policy != Policy::Deny {
                        taken.insert(t.name.clone(), names::label(&t.server, &t.tool));
                    }
                }
            }
        }
        let before: HashSet<String> = self.slots[i]
            .state
            .lock()
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let mut ordered: Vec<&ToolInfo> = listed.iter().collect();
        ordered.sort_by_key(|t| !before.contains(&names::offered(&config.name, &t.name)));
        let mut tools = Vec::new();
        let mut raw = Vec::new();
        for t in ordered {
            let name = names::offered(&config.name, &t.name);
            let label = names::label(&config.name, &t.name);
            let policy = names::policy(config, &t.name, t.read_only);
            if policy != Policy::Deny {
                raw.push((name.clone(), label.clone()));
                if let Some(holder) = taken.get(&name) {
                    log::warn!(
                        "MCP tool {label} is not offered: its name {name:?} is already {holder}'s"
                    );
                    continue;
                }
                taken.insert(name.clone(), label);
            }
            tools.push(ToolSpec {
                name,
                server: config.name.clone(),
                tool: t.name.clone(),
                description: t.description.clone(),
                parameters: t.input_schema.clone(),
                policy,
                read_only: t.read_only,
            });
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let mut st = self.slots[i].state.lock();
        st.tools = tools;
        st.listed = raw;
    }

    /// Starts server `i` (bounded by [`START_TIMEOUT`]) and lists its tools.
    fn start(&self, i: usize) -> Result<(Server, Vec<ToolInfo>), McpError> {
        let slot = &self.slots[i];
        let deadline = Instant::now() + START_TIMEOUT;
        let link: Arc<dyn Link> = match &slot.config.transport {
            Transport::Stdio(how) => {
                Arc::new(StdioLink::spawn(&slot.config.name, how, &self.links)?)
            }
            Transport::Http { url, headers } => {
                Arc::new(HttpLink::new(url, headers.clone(), &self.links))
            }
        };
        {
            let mut st = slot.state.lock();
            if matches!(st.phase, Phase::Stopped) {
                drop(st);
                link.close();
                return Err(McpError::Closed("brain is shutting down".into()));
            }
            let old = st.link.replace(Arc::clone(&link));
            // Closing may wait for the old process: not under the lock.
            drop(st);
            drop(old);
        }
        let server = Server::initialize(Box::new(link), deadline)?;
        let tools = server.list_tools(deadline)?;
        check_listing(&tools)?;
        Ok((server, tools))
    }

    /// Watches a running or failed server until it must start again (`true`) or brain
    /// stops (`false`).
    fn watch(&self, i: usize) -> bool {
        let slot = &self.slots[i];
        let mut st = slot.state.lock();
        loop {
            if self.stopping() {
                return false;
            }
            let now = Instant::now();
            match &st.phase {
                Phase::Stopped => return false,
                Phase::Starting => return true,
                Phase::Up(server) => {
                    if let Some(why) = server.broken() {
                        st.failures += 1;
                        let wait = backoff(st.failures);
                        log::warn!(
                            "MCP server {} stopped ({why}); starting it again within {wait:?}",
                            slot.config.name
                        );
                        st.retry_at = Some(now + wait);
                        let old = std::mem::replace(&mut st.phase, Phase::Failed(why));
                        MutexGuard::unlocked(&mut st, || drop(old));
                        slot.wake.notify_all();
                        continue;
                    }
                    if server.take_tools_changed() {
                        let server = Arc::clone(server);
                        MutexGuard::unlocked(&mut st, || {
                            match server.list_tools(Instant::now() + LIST_TIMEOUT) {
                                Ok(listed) => {
                                    log::info!(
                                        "MCP server {}: its tools changed ({} now)",
                                        slot.config.name,
                                        listed.len()
                                    );
                                    self.accept(i, &listed);
                                }
                                Err(e) => log::warn!(
                                    "MCP server {}: cannot list its changed tools: {e}",
                                    slot.config.name
                                ),
                            }
                        });
                        continue;
                    }
                }
                Phase::Failed(_) => {
                    if st.restart_now || st.retry_at.is_none_or(|at| now >= at) {
                        st.restart_now = false;
                        st.phase = Phase::Starting;
                        return true;
                    }
                }
            }
            slot.wake.wait_for(&mut st, WATCH_POLL);
        }
    }
}

/// A server's supervisor: start, watch, start again, until brain stops.
pub(super) fn supervise(inner: &Inner, i: usize) {
    let slot = &inner.slots[i];
    loop {
        if inner.stopping() {
            return;
        }
        let outcome = inner.start(i);
        if let Ok((_, listed)) = &outcome {
            inner.accept(i, listed);
        }
        let mut st = slot.state.lock();
        if matches!(st.phase, Phase::Stopped) {
            // Shutdown came while it started: it closes with `outcome`.
            return;
        }
        st.starts += 1;
        let mut closing = None;
        match outcome {
            Ok((server, listed)) => {
                log::info!(
                    "MCP server {} is up ({} tools, protocol {})",
                    slot.config.name,
                    listed.len(),
                    server.protocol_version
                );
                st.phase = Phase::Up(Arc::new(server));
                st.retry_at = None;
            }
            Err(e) => {
                st.failures += 1;
                let wait = backoff(st.failures);
                log::warn!(
                    "MCP server {} cannot start: {e}; next try in {wait:?}",
                    slot.config.name
                );
                st.phase = Phase::Failed(e.to_string());
                st.retry_at = Some(Instant::now() + wait);
                closing = st.link.take();
            }
        }
        drop(st);
        drop(closing);
        slot.wake.notify_all();
        if !inner.watch(i) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_wait_up_to_the_longest() {
        assert_eq!(backoff(1), RETRY_FIRST);
        assert_eq!(backoff(2), RETRY_FIRST * 2);
        assert_eq!(backoff(3), RETRY_FIRST * 4);
        assert_eq!(backoff(40), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }
}
