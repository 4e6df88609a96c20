//! MCP over a child process's stdio: newline-delimited JSON-RPC on stdin/stdout, stderr
//! to brain's log. One reader thread hands each answer to the request waiting for its id;
//! the server's own requests (`ping`, `roots/list`) are answered there too. A line over
//! [`LinkOptions::max_message_bytes`] (never read further than that), a line that is not
//! JSON-RPC, or the end of stdout ends the connection: pending calls fail at once and the
//! process is killed (its owner restarts it on next use).
//!
//! Each server runs in its own process group, recorded in [`LinkOptions::groups`] while it
//! runs: closing kills the group (a wrapper's children too), and a brain killed before it
//! could close leaves the record for the next start to end ([`super::groups`]).

mod process;

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use serde_json::{Value, json};

use super::groups::{Groups, SEEN_EVERY};
use super::jsonrpc::{self, Incoming};
use super::{Link, LinkOptions, McpError};
use process::{exited, kill_group};

/// The only variables of brain's environment a server gets (the configuration adds more).
pub const INHERITED_ENV: &[&str] = &["PATH", "HOME"];
/// The most bytes queued for a server's stdin: past this it has stopped reading.
pub const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// How long a closing server gets to exit after its stdin closes, before it is killed.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How often a waiting request looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);
/// The longest stderr line logged (the rest is cut), and how many are kept for errors.
const MAX_STDERR_LINE_BYTES: usize = 4096;
const STDERR_TAIL_LINES: usize = 5;
/// How long a server whose stdout closed gets to finish writing its stderr.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

/// How to start a server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spawn {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

type Waiter = mpsc::Sender<Result<Value, McpError>>;

/// What the reader thread and the callers share.
struct Shared {
    name: String,
    pending: Mutex<HashMap<u64, Waiter>>,
    /// Why the connection ended, once it has.
    broken: Mutex<Option<String>>,
    /// Signalled when `broken` is set.
    ended: Condvar,
    tools_changed: AtomicBool,
    /// Lines for the writer thread, which alone touches the server's stdin: a server that
    /// stops reading blocks that thread, never a caller, the reader or `close`.
    outbox: Mutex<Option<mpsc::Sender<String>>>,
    /// Bytes queued in `outbox` and not yet written.
    queued: AtomicUsize,
    stderr_tail: Mutex<VecDeque<String>>,
    /// What it may send at most, per line, and what that is called in errors.
    limits: LinkOptions,
    /// Its pid, which is its group's id.
    pid: u32,
}

impl Shared {
    /// Ends the connection: every waiting call fails with `why`.
    fn fail(&self, why: String) {
        let mut broken = self.broken.lock();
        if broken.is_none() {
            log::warn!("MCP server {}: {why}", self.name);
            *broken = Some(why.clone());
        }
        drop(broken);
        self.ended.notify_all();
        self.outbox.lock().take();
        for (_, w) in self.pending.lock().drain() {
            let _ = w.send(Err(McpError::Closed(self.describe(&why))));
        }
    }

    /// `why`, with the server's last words on stderr when it left some.
    fn describe(&self, why: &str) -> String {
        let tail = self.stderr_tail.lock();
        match tail.back() {
            Some(last) => format!("{why} (its stderr: {last})"),
            None => why.to_owned(),
        }
    }

    /// Queues one line for the writer thread. A server that has let more than
    /// [`MAX_QUEUED_BYTES`] pile up unread has stopped reading: the connection ends.
    fn write_line(&self, line: &str) -> Result<(), McpError> {
        let outbox = self.outbox.lock();
        let Some(tx) = outbox.as_ref() else {
            let why = self
                .broken
                .lock()
                .clone()
                .unwrap_or_else(|| "closed".into());
            return Err(McpError::Closed(self.describe(&why)));
        };
        let size = line.len() + 1;
        if self.queued.load(Ordering::SeqCst) + size > MAX_QUEUED_BYTES {
            drop(outbox);
            let why = format!(
                "it stopped reading its input ({MAX_QUEUED_BYTES} bytes wait to be written)"
            );
            self.fail(why.clone());
            return Err(McpError::Closed(why));
        }
        self.queued.fetch_add(size, Ordering::SeqCst);
        let sent = tx.send(format!("{line}\n"));
        drop(outbox);
        sent.map_err(|_| McpError::Closed("its input is closed".into()))
    }

    /// The writer thread's failure to write: the process has usually exited, and the
    /// reader is about to say so with its last words, which say more than EPIPE.
    fn write_failed(&self, e: &std::io::Error) {
        let mut broken = self.broken.lock();
        if broken.is_none() {
            self.ended
                .wait_for(&mut broken, STDERR_SETTLE + CANCEL_POLL);
        }
        let why = broken
            .clone()
            .unwrap_or_else(|| format!("cannot write to it: {e}"));
        drop(broken);
        self.fail(why);
    }
}

/// The writer thread: the queued lines, in order, until the connection ends.
fn write_stdin(shared: &Shared, mut stdin: ChildStdin, lines: mpsc::Receiver<String>) {
    for line in lines {
        shared.queued.fetch_sub(line.len(), Ordering::SeqCst);
        if let Err(e) = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
        {
            shared.write_failed(&e);
            return;
        }
    }
}

/// A running server process.
pub struct StdioLink {
    shared: Arc<Shared>,
    child: Mutex<Option<Child>>,
    next_id: AtomicU64,
}

impl StdioLink {
    /// Starts the process and its reader threads. `name` is for the log.
    pub fn spawn(name: &str, how: &Spawn, opts: &LinkOptions) -> Result<StdioLink, McpError> {
        let mut child = process::command(how)
            .spawn()
            .map_err(|e| McpError::Spawn(format!("{}: {e}", how.command)))?;
        // Recorded before anything else can fail: every way out from here kills the group,
        // and a SIGKILL of brain leaves the record for the next start.
        if let Some(groups) = &opts.groups {
            groups.record(child.id());
        }
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_group(&mut child, opts.groups.as_deref());
            return Err(McpError::Spawn("its pipes could not be opened".into()));
        };
        let (outbox, lines) = mpsc::channel::<String>();
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            pending: Mutex::new(HashMap::new()),
            broken: Mutex::new(None),
            ended: Condvar::new(),
            tools_changed: AtomicBool::new(false),
            outbox: Mutex::new(Some(outbox)),
            queued: AtomicUsize::new(0),
            stderr_tail: Mutex::new(VecDeque::new()),
            limits: opts.clone(),
            pid: child.id(),
        });
        if let Err(e) = start_threads(name, &shared, (stdin, stdout, stderr), lines) {
            kill_group(&mut child, opts.groups.as_deref());
            return Err(McpError::Spawn(format!("cannot start a thread: {e}")));
        }
        Ok(StdioLink {
            shared,
            child: Mutex::new(Some(child)),
            next_id: AtomicU64::new(1),
        })
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().as_ref().map(Child::id)
    }
}

/// The connection's threads: the writer, the stdout reader, the stderr logger, and
/// (for a recorded group) the one vouching for it while it starts.
fn start_threads(
    name: &str,
    shared: &Arc<Shared>,
    (stdin, stdout, stderr): (ChildStdin, ChildStdout, ChildStderr),
    lines: mpsc::Receiver<String>,
) -> std::io::Result<()> {
    let reader = Arc::clone(shared);
    let logger = Arc::clone(shared);
    let writer = Arc::clone(shared);
    // Dropped when stderr ends, so a server that dies can be described by its last
    // words (they may arrive just after its stdout closes).
    let (stderr_open, stderr_done) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name(format!("mcp-{name}-in"))
        .spawn(move || write_stdin(&writer, stdin, lines))
        .and_then(|_| {
            std::thread::Builder::new()
                .name(format!("mcp-{name}"))
                .spawn(move || read_stdout(&reader, stdout, &stderr_done))
        })
        .and_then(|_| {
            std::thread::Builder::new()
                .name(format!("mcp-{name}-stderr"))
                .spawn(move || {
                    read_stderr(&logger, stderr);
                    drop(stderr_open);
                })
        });
    // A server slow to start (npx fetching its package) may start its real server
    // long after it was recorded: vouched for every second until it answers.
    spawned.and_then(|_| match shared.limits.groups.clone() {
        Some(groups) => {
            let starting = Arc::clone(shared);
            std::thread::Builder::new()
                .name(format!("mcp-{name}-start"))
                .spawn(move || vouch_while_starting(&starting, &groups))
                .map(drop)
        }
        None => Ok(()),
    })
}

/// While the server has not answered, tells `groups` every [`SEEN_EVERY`] that its group
/// is still brain's ([`Groups::starting`]), until it answers or the connection ends.
fn vouch_while_starting(shared: &Shared, groups: &Groups) {
    let mut broken = shared.broken.lock();
    while broken.is_none() && MutexGuard::unlocked(&mut broken, || groups.starting(shared.pid)) {
        shared.ended.wait_for(&mut broken, SEEN_EVERY);
    }
}

impl Link for StdioLink {
    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.shared.pending.lock().insert(id, tx);
        if let Some(why) = self.shared.broken.lock().clone() {
            self.shared.pending.lock().remove(&id);
            return Err(McpError::Closed(self.shared.describe(&why)));
        }
        self.shared
            .write_line(&jsonrpc::request(id, method, params))?;
        super::wait_for_answer(id, &rx, deadline, cancel, "the connection ended", &|note| {
            self.shared.pending.lock().remove(&id);
            let _ = self.shared.write_line(&note);
        })
    }

    fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        self.shared
            .write_line(&jsonrpc::notification(method, params))
    }

    fn take_tools_changed(&self) -> bool {
        self.shared.tools_changed.swap(false, Ordering::Relaxed)
    }

    fn broken(&self) -> Option<String> {
        self.shared.broken.lock().clone()
    }

    /// Closes stdin (MCP's shutdown for stdio), waits [`EXIT_GRACE`] for the process to
    /// leave, then kills its group.
    fn close(&self) {
        let Some(mut child) = self.child.lock().take() else {
            return;
        };
        self.shared.fail("closed by brain".into());
        let until = Instant::now() + EXIT_GRACE;
        while Instant::now() < until {
            if exited(&mut child) {
                break;
            }
            std::thread::sleep(CANCEL_POLL);
        }
        kill_group(&mut child, self.shared.limits.groups.as_deref());
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        self.close();
    }
}

/// The reader thread: dispatches every message until stdout ends or breaks the protocol.
fn read_stdout(shared: &Shared, stdout: impl Read, stderr_done: &mpsc::Receiver<()>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let max = shared.limits.max_message_bytes;
    let why = loop {
        match read_line(&mut reader, &mut line, max, false) {
            Ok(Line::Eof) => {
                let _ = stderr_done.recv_timeout(STDERR_SETTLE);
                break "it exited (its stdout closed)".to_owned();
            }
            Ok(Line::TooLong) => {
                // Not read further: the connection ends and the process is killed, so
                // whatever else it writes is never held in memory.
                break shared.limits.too_long("it wrote a message");
            }
            Err(e) => break format!("cannot read its stdout: {e}"),
            Ok(Line::Complete) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        match jsonrpc::parse(&text) {
            Ok(messages) => {
                for m in messages {
                    dispatch(shared, m);
                }
            }
            Err(e) => {
                let shown: String = text.chars().take(200).collect();
                break format!("it wrote something that is not JSON-RPC ({e}): {shown:?}");
            }
        }
    };
    shared.fail(why);
}

fn dispatch(shared: &Shared, m: Incoming) {
    match m {
        Incoming::Response { id, result } => {
            // What its group holds now is the server's own (see `groups`).
            if let Some(groups) = &shared.limits.groups {
                groups.heard(shared.pid);
            }
            if let Some(w) = shared.pending.lock().remove(&id) {
                let _ = w.send(result.map_err(McpError::Rpc));
            }
        }
        Incoming::Request { id, method, .. } => {
            let answer = match method.as_str() {
                "ping" => Ok(json!({})),
                "roots/list" => Ok(json!({"roots": []})),
                _ => Err((jsonrpc::METHOD_NOT_FOUND, "brain does not offer this")),
            };
            let _ = shared.write_line(&jsonrpc::response(&id, answer));
        }
        Incoming::Notification { method, .. } => {
            if method == "notifications/tools/list_changed" {
                shared.tools_changed.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// The server's stderr, line by line, to the log (and the last few kept for errors).
fn read_stderr(shared: &Shared, stderr: impl Read) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line, MAX_STDERR_LINE_BYTES, true) {
            Ok(Line::Eof) | Err(_) => return,
            Ok(Line::Complete | Line::TooLong) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if text.is_empty() {
            continue;
        }
        log::info!("MCP server {}: {text}", shared.name);
        let mut tail = shared.stderr_tail.lock();
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text);
    }
}

enum Line {
    Complete,
    /// Over the limit: `buf` holds the first `max` bytes and the rest of the line was
    /// skipped (stderr) or not read (stdout stops there).
    TooLong,
    Eof,
}

/// Reads one `\n`-terminated line into `buf` (without the newline), never holding more
/// than `max` bytes; past that, the rest of the line is skipped when `skip_rest`, else
/// reading stops there. A last line without a newline counts as a line.
fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
    skip_rest: bool,
) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        too_long |= take > room;
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
        if too_long && !skip_rest {
            return Ok(Line::TooLong);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn lines(input: &[u8], max: usize, skip_rest: bool) -> Vec<(String, &'static str)> {
        let mut r = BufReader::with_capacity(3, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let l = read_line(&mut r, &mut buf, max, skip_rest).unwrap();
            let kind = match l {
                Line::Eof => return out,
                Line::Complete => "ok",
                Line::TooLong => "long",
            };
            out.push((String::from_utf8_lossy(&buf).into_owned(), kind));
        }
    }

    /// A server that left holds its pid (its group's id) until `kill_group` has signalled
    /// the group: seen exited, it is not reaped, and the kill reaps it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_server_that_exits_keeps_its_groups_id_until_the_group_is_killed() {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("sh")
            .args(["-c", "exit 3"])
            .process_group(0)
            .spawn()
            .unwrap();
        let stat = format!("/proc/{}/stat", child.id());
        let until = Instant::now() + Duration::from_secs(10);
        while !exited(&mut child) {
            assert!(Instant::now() < until, "never exited");
            std::thread::sleep(CANCEL_POLL);
        }
        assert!(exited(&mut child), "still exited: not reaped by looking");
        let text = std::fs::read_to_string(&stat).unwrap();
        assert!(text.contains(") Z "), "a zombie holding its pid: {text}");
        kill_group(&mut child, None);
        assert!(
            !std::path::Path::new(&stat).exists(),
            "reaped after the kill"
        );
    }

    #[test]
    fn lines_are_read_whole_across_buffers_and_bounded() {
        assert_eq!(
            lines(b"abcdef\nxy\n\nlast", 100, true),
            [
                ("abcdef".into(), "ok"),
                ("xy".into(), "ok"),
                ("".into(), "ok"),
                ("last".into(), "ok")
            ]
        );
        assert_eq!(
            lines(b"0123456789\nok\n", 4, true),
            [("0123".into(), "long"), ("ok".into(), "ok")]
        );
        // Without skipping, reading stops at the limit (stdout is closed after it).
        assert_eq!(
            lines(b"0123456789\nok\n", 4, false)[0],
            ("0123".into(), "long")
        );
    }
}
