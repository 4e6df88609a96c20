//! The listener and the connections it owns (SPEC §12, I10).
//!
//! The connection model: one accept thread; each accepted connection gets its own thread
//! for its whole life (reading requests, answering, streaming), so a slow or stalled client
//! only ever holds its own connection. Every connection is registered in [`Connections`],
//! which caps how many are open (`--max-connections`, kept below the file-descriptor limit
//! with room for each connection's provider call, see [`fitting_cap`]) and knows each one's
//! state, so that at the cap an idle connection (then the oldest one still sending its
//! request) is closed to make room, and only when every open connection is busy answering
//! is a newcomer refused, at once, with a 503 it gets to read ([`super::refuse`]). The
//! accept loop never ends on an error: running out of file descriptors is logged and
//! retried after a pause, and a panic inside the loop restarts it.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Api, conn, refuse};

/// File descriptors kept free for everything that is not a client connection or its
/// turn's provider call: the database (the writer and the reader pool, each with its WAL
/// and shared-memory files), the provider client's idle pool and background calls (titles,
/// memories, summaries, health probes), MCP servers' pipes, the lock file, the listener,
/// standard streams and logs.
pub const FD_RESERVE: u64 = 64;

/// Descriptors one connection may need: its socket, and the provider connection of the
/// turn it streams.
pub const FDS_PER_CONNECTION: u64 = 2;

/// How long the accept loop pauses after running out of file descriptors (or another
/// accept error) before it tries again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The stack of a connection thread: requests parse into bounded buffers and the heavy
/// work (SQLite, JSON) is shallow, so 512 KiB is ample and 256 connections stay cheap.
pub const CONNECTION_STACK_BYTES: usize = 512 * 1024;

/// How long `stop_accepting` tries to reach its own listener to wake the accept loop.
const WAKE_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long `stop` gives open connections (streams writing their last frames) to end.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// How often `close` looks whether the connections have ended.
const CLOSE_POLL: Duration = Duration::from_millis(20);

/// A connection waiting for the first byte of a request.
pub const IDLE: u8 = 0;
/// A connection receiving a request's head or body.
pub const READING: u8 = 1;
/// A connection whose request is being answered (or streamed).
pub const BUSY: u8 = 2;
/// A connection inside one write of its answer (a write that lasts is a client that does
/// not read).
pub const WRITING: u8 = 3;
/// A connection closed to make room; its thread ends at its next step.
pub const EVICTED: u8 = 4;

/// An idle connection younger than this is closed to make room only when nothing else
/// can be: its request may be in the socket already, not yet read by its new thread.
pub const EVICT_MIN_IDLE_MS: u64 = 100;

/// A write blocked this long means a client that is not reading: at the cap, its
/// connection may be closed to make room (a stream's attempt goes on, I8).
pub const EVICT_STALLED_WRITE_MS: u64 = 500;

/// How often a newcomer waiting for room looks again.
const ROOM_POLL: Duration = Duration::from_millis(20);

/// How many closed-to-make-room connections may still hold their descriptor (their
/// threads not yet gone) before newcomers are refused: the cap bounds descriptors too.
pub const EVICTED_SLACK: usize = 16;

/// How long the accept loop waits for closed connections to let go of their descriptors
/// before it refuses a newcomer.
pub const EVICTED_WAIT: Duration = Duration::from_millis(200);

/// One open connection, shared by its thread and the registry.
pub struct Slot {
    pub stream: TcpStream,
    state: AtomicU8,
    since_ms: AtomicU64,
}

impl Slot {
    /// Moves from one state to another; false when the connection was evicted meanwhile.
    pub fn enter(&self, from: u8, to: u8, now_ms: u64) -> bool {
        let ok = self
            .state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if ok {
            self.since_ms.store(now_ms, Ordering::Release);
        }
        ok
    }

    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
}

/// The open connections, with the cap.
pub struct Connections {
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Signalled when a connection's thread has let go of its socket.
    gone: Condvar,
    next_id: AtomicU64,
    cap: usize,
    epoch: Instant,
}

impl Connections {
    pub fn new(cap: usize) -> Connections {
        Connections {
            slots: Mutex::new(HashMap::new()),
            gone: Condvar::new(),
            next_id: AtomicU64::new(0),
            cap: cap.max(1),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Milliseconds since the registry was made (a monotonic stamp for states).
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Registers a connection, closing another to make room at the cap (see
    /// [`evict_one`]); refused when none may be closed, or when closed ones still hold
    /// too many descriptors.
    fn register(&self, stream: TcpStream) -> Result<(u64, Arc<Slot>), TcpStream> {
        let mut slots = self.lock();
        // Closed connections whose threads have not yet let go: wait a moment for them
        // rather than hold more descriptors than the cap allows.
        let until = Instant::now() + EVICTED_WAIT;
        while slots.len() >= self.cap + EVICTED_SLACK && Instant::now() < until {
            let left = until.saturating_duration_since(Instant::now());
            slots = self
                .gone
                .wait_timeout(slots, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if slots.len() >= self.cap + EVICTED_SLACK {
            return Err(stream);
        }
        let (mut slots, room) = self.make_room(slots);
        if !room {
            return Err(stream);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            stream,
            state: AtomicU8::new(IDLE),
            since_ms: AtomicU64::new(self.now_ms()),
        });
        slots.insert(id, Arc::clone(&slot));
        Ok((id, slot))
    }

    /// Closes one connection to make room; when none may be closed yet but one is inside
    /// a write, waits (up to [`EVICT_STALLED_WRITE_MS`]) for that write to count as stalled
    /// or for a connection to end, so a newcomer is refused only when every connection is
    /// being answered promptly.
    fn make_room<'a>(
        &'a self,
        mut slots: MutexGuard<'a, HashMap<u64, Arc<Slot>>>,
    ) -> (MutexGuard<'a, HashMap<u64, Arc<Slot>>>, bool) {
        let until = Instant::now() + Duration::from_millis(EVICT_STALLED_WRITE_MS);
        loop {
            let live = slots.values().filter(|s| s.state() != EVICTED).count();
            if live < self.cap || evict_one(&slots, self.now_ms()) {
                return (slots, true);
            }
            let writing = slots.values().any(|s| s.state() == WRITING);
            let left = until.saturating_duration_since(Instant::now());
            if !writing || left.is_zero() {
                return (slots, false);
            }
            slots = self
                .gone
                .wait_timeout(slots, left.min(ROOM_POLL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
        self.gone.notify_all();
    }

    /// Closes one connection that may be closed, to free a descriptor.
    fn evict(&self) -> bool {
        evict_one(&self.lock(), self.now_ms())
    }

    /// Closes every connection in one of `states` (reads and writes on it fail at once).
    fn close_where(&self, states: &[u8]) {
        for slot in self.lock().values() {
            if states.contains(&slot.state()) {
                let _ = slot.stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Closes one connection to make room, in this order: the longest-idle one (idle at least
/// [`EVICT_MIN_IDLE_MS`]), the one whose write has been blocked longest (at least
/// [`EVICT_STALLED_WRITE_MS`]: a client that does not read), the one that has been
/// sending its request longest (a slow client), and only then the oldest of the newest
/// idle ones. Never one being answered promptly. The slot stays registered, as `EVICTED`,
/// until its thread has let go of the socket.
fn evict_one(slots: &HashMap<u64, Arc<Slot>>, now_ms: u64) -> bool {
    let rules = [
        (IDLE, EVICT_MIN_IDLE_MS),
        (WRITING, EVICT_STALLED_WRITE_MS),
        (READING, 0),
        (IDLE, 0),
    ];
    for (state, min_age_ms) in rules {
        let oldest = slots
            .values()
            .filter(|s| s.state() == state)
            .map(|s| (s.since_ms.load(Ordering::Acquire), s))
            .filter(|(since, _)| now_ms.saturating_sub(*since) >= min_age_ms)
            .min_by_key(|(since, _)| *since);
        if let Some((_, slot)) = oldest {
            if slot.enter(state, EVICTED, now_ms) {
                let _ = slot.stream.shutdown(Shutdown::Both);
                return true;
            }
        }
    }
    false
}

/// What the accept loop and the connection threads share.
pub struct Shared {
    pub api: Arc<Api>,
    pub connections: Connections,
    pub stopping: AtomicBool,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    pub refuser: refuse::Refuser,
}

/// A running server.
pub struct Running {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.connections.open()
    }

    /// The connection cap in force (the configured one, or lower under the fd limit).
    pub fn max_connections(&self) -> usize {
        self.shared.connections.cap()
    }

    /// Stops accepting and closes every connection that is not being answered; streams
    /// and answers in progress go on.
    pub fn stop_accepting(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        // An import's one transaction would hold the writer the attempts' ends need.
        self.shared.api.imports.stop();
        if let Some(acceptor) = self.acceptor.take() {
            // Wake the blocking accept with a connection of our own. Should that fail (no
            // descriptor left), the thread is left to the process's exit, not waited for.
            let woke = TcpStream::connect_timeout(&wake_addr(self.addr), WAKE_CONNECT_TIMEOUT);
            if woke.is_ok() {
                let _ = acceptor.join();
            }
        }
        self.shared.connections.close_where(&[IDLE, READING]);
    }

    /// Waits up to `grace` for the remaining connections (streams delivering their `end`
    /// frames) to finish, then closes whatever is still open.
    pub fn close(&mut self, grace: Duration) {
        self.stop_accepting();
        let until = Instant::now() + grace;
        while self.open_connections() > 0 && Instant::now() < until {
            thread::sleep(CLOSE_POLL);
        }
        self.shared
            .connections
            .close_where(&[IDLE, READING, BUSY, WRITING, EVICTED]);
    }

    /// Stops the server: no new connections, open ones closed after a short grace.
    pub fn stop(mut self) {
        self.close(STOP_GRACE);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.close(Duration::ZERO);
        }
    }
}

fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

/// Starts the accept loop on `listener`.
pub fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    addr: SocketAddr,
) -> Result<Running, String> {
    let s = Arc::clone(&shared);
    let acceptor = thread::Builder::new()
        .name("brain-accept".into())
        .spawn(move || supervise(&listener, &s))
        .map_err(|e| format!("cannot start the accept thread: {e}"))?;
    Ok(Running {
        shared,
        acceptor: Some(acceptor),
        addr,
    })
}

/// Runs the accept loop until the server stops, restarting it should it ever panic.
fn supervise(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        match catch_unwind(AssertUnwindSafe(|| accept_loop(listener, shared))) {
            Ok(()) => return,
            Err(_) => log::error!("the accept loop panicked; restarting it"),
        }
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        thread::sleep(ACCEPT_BACKOFF);
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut fd_warned_at: Option<Instant> = None;
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok((stream, _)) => admit(shared, stream),
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or worse: never stop listening. Free a
                // descriptor if an idle connection holds one, pause, and try again.
                if fd_warned_at.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    let what = if crate::provider::out_of_descriptors(&e) {
                        "too many open files"
                    } else {
                        "an error"
                    };
                    log::warn!("accepting connections failed ({what}: {e}); retrying");
                    fd_warned_at = Some(Instant::now());
                }
                shared.connections.evict();
                thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Errors about one connection (it went away before it was accepted), not the listener.
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    )
}

/// Registers a new connection and gives it its thread, or refuses it at once.
fn admit(shared: &Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let (id, slot) = match shared.connections.register(stream) {
        Ok(registered) => registered,
        Err(stream) => {
            let message = "too many connections are open; try again shortly";
            shared.refuser.refuse(stream, message);
            return;
        }
    };
    let s = Arc::clone(shared);
    let conn_slot = Arc::clone(&slot);
    let spawned = thread::Builder::new()
        .name("brain-conn".into())
        .stack_size(CONNECTION_STACK_BYTES)
        .spawn(move || {
            let served = catch_unwind(AssertUnwindSafe(|| conn::serve(&s, &conn_slot)));
            if served.is_err() {
                log::error!("a connection thread panicked (connection closed)");
            }
            let _ = conn_slot.stream.shutdown(Shutdown::Both);
            s.connections.remove(id);
        });
    if let Err(e) = spawned {
        log::warn!("cannot start a connection thread: {e}");
        shared.connections.remove(id);
        // The thread's share of the slot went with the closure: the socket is ours alone.
        if let Ok(slot) = Arc::try_unwrap(slot) {
            let message = "the server is at its thread limit; try again shortly";
            shared.refuser.refuse(slot.stream, message);
        }
    }
}

/// Raises the soft limit on open files to the hard limit and returns the connection cap
/// that fits under it (see [`fitting_cap`]), logging it.
pub fn connection_cap(configured: usize) -> usize {
    let limit = raise_fd_limit();
    let fitting = fitting_cap(limit);
    let cap = configured.min(fitting);
    let why = format!(
        "the open-file limit is {limit}: {FD_RESERVE} descriptors are kept for the \
         database, the provider's background calls, MCP servers and logs, and \
         {FDS_PER_CONNECTION} for each connection (its socket and its turn's provider call)"
    );
    if cap < configured {
        log::warn!(
            "serving at most {cap} connections, not {configured}: {why}; raise the limit \
             with `ulimit -n`"
        );
    } else {
        log::info!("serving at most {cap} connections ({why})");
    }
    cap
}

/// The most connections whose descriptors fit under an open-file limit of `limit`, with
/// [`FD_RESERVE`] kept, room for the connections closed but not yet let go
/// ([`EVICTED_SLACK`]) and those being refused ([`refuse::LINGERING_MAX`]).
pub fn fitting_cap(limit: u64) -> usize {
    let others = FD_RESERVE + (EVICTED_SLACK + refuse::LINGERING_MAX) as u64;
    let fitting = limit.saturating_sub(others) / FDS_PER_CONNECTION;
    usize::try_from(fitting).unwrap_or(usize::MAX).max(1)
}

#[cfg(unix)]
fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            log::warn!("cannot read or raise the open-file limit: {e}");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

#[cfg(not(unix))]
fn raise_fd_limit() -> u64 {
    u64::MAX
}
