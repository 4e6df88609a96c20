//! Several servers on one PostgreSQL (SPEC §16): which server runs a session's attempt,
//! and how the others reach it.
//!
//! - **One turn at a time across servers (I7)**: a session-level advisory lock per claimed
//!   session (`pg_try_advisory_lock` on a key folded from the session id), held on a
//!   connection of its own for as long as the claim lives. A server that dies closes its
//!   connections and PostgreSQL releases their locks, so the session is free at once.
//!   One connection per held lock (not one per server) because a lock is then exactly as
//!   alive as its connection: a broken connection loses only its own lock, and re-entrant
//!   session-level locks on a shared connection cannot let a second local holder in by
//!   mistake. Connections of released locks are kept for reuse (up to
//!   [`IDLE_CONNECTIONS`]), so a send does not pay a connect.
//! - **Who holds what**: one query of `pg_locks` for a page of ids (granted advisory locks
//!   of this database): no lock is taken, so a look never makes a send fail.
//! - **`/stop` from another server**: `NOTIFY` on [`STOP_CHANNEL`] naming the attempt; every
//!   server LISTENs on a dedicated connection on a thread of its own, reconnecting with a
//!   backoff when it drops. A permission answer travels the same way on
//!   [`ANSWER_CHANNEL`]. A notification sent while a listener reconnects is lost to it:
//!   the server that sent a stop sends it again until the attempt lets go
//!   (`chat::coord`); an answer lost is given again (the question waits until its timeout).
//! - **An outage**: idle connections that died unseen are replaced on first use
//!   ([`Shared::run`]); a held lock whose connection died is taken again, if still free,
//!   when its attempt checks it ([`SessionLock::keep`]); the attempt then checks nobody
//!   wrote to the session meanwhile (`chat::frames::ActiveTurn::keep_claim`).
//!
//! Each connection comes from one connect function, so the caller decides TLS
//! ([`PgCoordinator::with_connector`]); [`PgCoordinator::from_url`] connects without TLS.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};

use crate::session::events::SessionId;
use crate::session::store::coord::{Claim, Coordinator, Held};
pub use crate::session::store::coord::{Kept, Note};
use crate::session::store::error::{Result, StoreError};

/// The channel `/stop` requests travel on; the payload is a [`Note::Stop`] as JSON.
pub const STOP_CHANNEL: &str = "brain_stop";
/// The channel permission answers travel on; the payload is a [`Note::Answer`] as JSON.
pub const ANSWER_CHANNEL: &str = "brain_answer";
/// Connections of released locks kept for the next claim.
pub const IDLE_CONNECTIONS: usize = 8;
/// How long the listener waits for a notification before it checks its connection and
/// whether it should end.
pub const LISTEN_WAIT: Duration = Duration::from_millis(500);
/// The listener's first and longest wait before reconnecting.
pub const RECONNECT_MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const RECONNECT_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Opens one connection to the database.
pub type Connector = Arc<dyn Fn() -> std::result::Result<Client, postgres::Error> + Send + Sync>;

/// The advisory-lock key of a session: its UUID's two halves XORed (a UUID v7's random
/// bits are spread over both). Lock keys live in their own space (the single-`bigint`
/// form), per database.
pub fn lock_key(id: SessionId) -> i64 {
    let v = id.as_uuid().as_u128();
    ((v >> 64) as u64 ^ v as u64) as i64
}

/// The coordination of the servers sharing one PostgreSQL database.
pub struct PgCoordinator {
    shared: Arc<Shared>,
}

struct Shared {
    connect: Connector,
    idle: Mutex<Vec<Client>>,
    /// Set when the coordinator is dropped: the listener ends.
    closed: AtomicBool,
    /// The listener's backend, once it listens (0 before).
    listener_pid: AtomicI32,
    /// How many times the listener has started listening (reconnects included).
    listens: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PgCoordinator {
    /// The coordinator of the database at `url`, connecting without TLS. Connects once to
    /// say now, not at the first send, when the database cannot be reached.
    pub fn from_url(url: &str) -> Result<PgCoordinator> {
        let url = url.to_owned();
        PgCoordinator::with_connector(Arc::new(move || Client::connect(&url, NoTls)))
    }

    /// The coordinator of the database `connect` opens connections to (with the store's
    /// TLS settings, when it has them).
    pub fn with_connector(connect: Connector) -> Result<PgCoordinator> {
        let first = connect()?;
        Ok(PgCoordinator {
            shared: Arc::new(Shared {
                connect,
                idle: Mutex::new(vec![first]),
                closed: AtomicBool::new(false),
                listener_pid: AtomicI32::new(0),
                listens: AtomicU64::new(0),
            }),
        })
    }

    /// Takes the session's lock unless another connection (another server, or another
    /// claim of this one) holds it: `None` then.
    pub fn try_lock(&self, id: SessionId) -> Result<Option<SessionLock>> {
        let key = lock_key(id);
        let (client, (got, pid)) = self.shared.run(|c| try_lock_on(c, key))?;
        if !got {
            self.shared.give_back(client);
            return Ok(None);
        }
        Ok(Some(SessionLock {
            shared: Arc::clone(&self.shared),
            client: Some(client),
            key,
            pid,
        }))
    }

    /// Which of `ids` some server holds the lock of now (this one included), in one query.
    pub fn locked(&self, ids: &[SessionId]) -> Result<HashSet<SessionId>> {
        if ids.is_empty() {
            return Ok(HashSet::new());
        }
        let keys: Vec<i64> = ids.iter().map(|id| lock_key(*id)).collect();
        // A bigint key k shows as classid = k >> 32, objid = its low half, objsubid = 1.
        let (client, rows) = self.shared.run(|c| {
            c.query(
                "SELECT DISTINCT (classid::bigint << 32) | objid::bigint FROM pg_locks
                 WHERE locktype = 'advisory' AND objsubid = 1 AND granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND ((classid::bigint << 32) | objid::bigint) = ANY($1)",
                &[&keys],
            )
        })?;
        self.shared.give_back(client);
        let held: HashSet<i64> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?;
        Ok(ids
            .iter()
            .copied()
            .filter(|id| held.contains(&lock_key(*id)))
            .collect())
    }

    /// Tells every server (the one running the session's attempt acts on it).
    pub fn notify(&self, note: &Note) -> Result<()> {
        let channel = match note {
            Note::Stop { .. } => STOP_CHANNEL,
            Note::Answer { .. } => ANSWER_CHANNEL,
        };
        let payload = serde_json::to_string(note)
            .map_err(|e| StoreError::Corrupt(format!("an unencodable note: {e}")))?;
        let (client, _) = self
            .shared
            .run(|c| c.execute("SELECT pg_notify($1, $2)", &[&channel, &payload]))?;
        self.shared.give_back(client);
        Ok(())
    }

    /// Starts the listener thread: `on_note` gets every note, from any server, until the
    /// coordinator is dropped.
    pub fn listen(&self, on_note: Box<dyn Fn(Note) + Send + Sync>) -> std::io::Result<()> {
        let shared = Arc::clone(&self.shared);
        thread::Builder::new()
            .name("brain-pg-listen".into())
            .spawn(move || shared.listen(&*on_note))?;
        Ok(())
    }

    /// The listener's backend process id, once it listens (for tests that cut it off).
    pub fn listener_pid(&self) -> Option<i32> {
        Some(self.shared.listener_pid.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    /// How many times the listener has started listening, reconnects included.
    pub fn listens(&self) -> u64 {
        self.shared.listens.load(Ordering::SeqCst)
    }
}

impl Drop for PgCoordinator {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
    }
}

impl Shared {
    /// Runs `work` on an idle connection, or a new one; the connection comes back with its
    /// answer. An idle connection may have died unseen (`is_closed` stays false for a
    /// backend the server ended: a restart, a network loss): when one fails, it and every
    /// other idle one (an outage takes them all) are dropped and `work` runs once more, on
    /// a new connection. Once: a new connection that fails means the database does.
    fn run<T>(
        &self,
        mut work: impl FnMut(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<(Client, T)> {
        let reused = lock(&self.idle).pop().filter(|c| !c.is_closed());
        if let Some(mut client) = reused {
            match work(&mut client) {
                Ok(answer) => return Ok((client, answer)),
                Err(e) => {
                    log::info!("dropped the idle database connections, one had broken: {e}");
                    lock(&self.idle).clear();
                }
            }
        }
        let mut client = (self.connect)()?;
        let answer = work(&mut client)?;
        Ok((client, answer))
    }

    fn give_back(&self, client: Client) {
        let mut idle = lock(&self.idle);
        if idle.len() < IDLE_CONNECTIONS && !client.is_closed() {
            idle.push(client);
        }
    }

    fn listen(&self, on_note: &(dyn Fn(Note) + Send + Sync)) {
        let mut backoff = RECONNECT_MIN_BACKOFF;
        while !self.closed.load(Ordering::SeqCst) {
            match self.listen_once(on_note) {
                Ok(()) => backoff = RECONNECT_MIN_BACKOFF,
                Err(e) => {
                    self.listener_pid.store(0, Ordering::SeqCst);
                    log::warn!("the stop listener lost its database connection: {e}");
                    thread::sleep(backoff);
                    backoff = (backoff * 2).min(RECONNECT_MAX_BACKOFF);
                }
            }
        }
    }

    /// Listens on one connection until it closes or the coordinator is dropped.
    fn listen_once(
        &self,
        on_note: &(dyn Fn(Note) + Send + Sync),
    ) -> std::result::Result<(), String> {
        let failed = |e: postgres::Error| e.to_string();
        let mut client = (self.connect)().map_err(failed)?;
        client
            .batch_execute(&format!("LISTEN {STOP_CHANNEL}; LISTEN {ANSWER_CHANNEL}"))
            .map_err(failed)?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .and_then(|r| r.try_get(0))
            .map_err(failed)?;
        self.listener_pid.store(pid, Ordering::SeqCst);
        self.listens.fetch_add(1, Ordering::SeqCst);
        while !self.closed.load(Ordering::SeqCst) {
            {
                let mut notes = client.notifications();
                let mut waiting = notes.timeout_iter(LISTEN_WAIT);
                while let Some(n) = waiting.next().map_err(failed)? {
                    match note(n.channel(), n.payload()) {
                        Some(note) => on_note(note),
                        None => log::warn!("ignored a notification {:?}", n.payload()),
                    }
                }
            }
            // A timeout and a lost connection look alike to the iterator.
            if client.is_closed() {
                return Err("the listening connection closed".into());
            }
        }
        Ok(())
    }
}

/// Tries to take the lock `key` on `client`: whether it did, and the backend holding it.
fn try_lock_on(client: &mut Client, key: i64) -> std::result::Result<(bool, i32), postgres::Error> {
    let row = client.query_one("SELECT pg_try_advisory_lock($1), pg_backend_pid()", &[&key])?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// A notification's note, unless it is not one.
fn note(channel: &str, payload: &str) -> Option<Note> {
    match channel {
        STOP_CHANNEL | ANSWER_CHANNEL => serde_json::from_str(payload).ok(),
        _ => None,
    }
}

/// A held session lock; released when dropped (the attempt, compaction or delete ended).
pub struct SessionLock {
    shared: Arc<Shared>,
    client: Option<Client>,
    key: i64,
    pid: i32,
}

impl SessionLock {
    /// The backend holding the lock (for tests that kill it).
    pub fn backend_pid(&self) -> i32 {
        self.pid
    }

    /// Whether the lock is still held: its connection answers a trivial query. When that
    /// connection broke (a terminated backend, a network loss) the lock went with it; it
    /// is taken again on a new connection unless someone holds it now ([`Kept::Lost`]).
    pub fn keep(&mut self) -> Result<Kept> {
        if let Some(client) = self.client.as_mut() {
            match client.batch_execute("SELECT 1") {
                Ok(_) => return Ok(Kept::Held),
                Err(e) => {
                    log::warn!("a session lock's connection broke (the lock went with it): {e}")
                }
            }
        }
        self.client = None;
        let mut client = (self.shared.connect)()?;
        let (got, pid) = try_lock_on(&mut client, self.key)?;
        if !got {
            self.shared.give_back(client);
            return Ok(Kept::Lost);
        }
        log::info!("a session lock was taken again on a new connection");
        self.client = Some(client);
        self.pid = pid;
        Ok(Kept::TakenAgain)
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        let Some(mut client) = self.client.take() else {
            return;
        };
        // Unlocked explicitly, not by closing: when this returns the lock is free, so a
        // client told the attempt ended may send the next message to any server at once.
        match client.query_one("SELECT pg_advisory_unlock($1)", &[&self.key]) {
            Ok(row) if row.try_get::<_, bool>(0).unwrap_or(false) => self.shared.give_back(client),
            Ok(_) => log::warn!("a session lock was already gone when released"),
            Err(e) => log::warn!("a session lock's connection broke (the lock went with it): {e}"),
        }
    }
}

impl Coordinator for PgCoordinator {
    fn shared(&self) -> bool {
        true
    }

    fn claim(&self, id: SessionId) -> Result<Option<Claim>> {
        Ok(self
            .try_lock(id)?
            .map(|l: SessionLock| Claim::holding(Box::new(l))))
    }

    fn claimed(&self, ids: &[SessionId]) -> Result<HashSet<SessionId>> {
        self.locked(ids)
    }

    fn notify(&self, note: &Note) -> Result<()> {
        PgCoordinator::notify(self, note)
    }

    fn listen(&self, on_note: Box<dyn Fn(Note) + Send + Sync>) -> std::io::Result<()> {
        PgCoordinator::listen(self, on_note)
    }
}

impl Held for SessionLock {
    fn keep(&mut self) -> Result<Kept> {
        SessionLock::keep(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Instant;

    use super::*;
    use crate::session::store::pg::testdb;

    const DEADLINE: Duration = Duration::from_secs(20);

    /// Waits for `ok` to hold, up to [`DEADLINE`].
    fn eventually(mut ok: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + DEADLINE;
        while Instant::now() < until {
            if ok() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn coordinator(db: &testdb::TestDb) -> PgCoordinator {
        PgCoordinator::from_url(&db.url).expect("connects to the test database")
    }

    fn terminate(db: &testdb::TestDb, pid: i32) {
        let mut admin = Client::connect(&db.url, NoTls).expect("admin connection");
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .expect("terminates the backend");
    }

    #[test]
    fn a_session_lock_excludes_every_other_holder_until_it_is_released() {
        let Some(db) = testdb::fresh("a_session_lock_excludes_every_other_holder") else {
            return;
        };
        let (here, there) = (coordinator(&db), coordinator(&db));
        let (id, other) = (SessionId::generate(), SessionId::generate());
        let held = here.try_lock(id).unwrap().expect("free at first");
        assert!(there.try_lock(id).unwrap().is_none(), "another server");
        assert!(here.try_lock(id).unwrap().is_none(), "another claim here");
        let other_held = there
            .try_lock(other)
            .unwrap()
            .expect("another session is free");
        let both = there.locked(&[id, other, SessionId::generate()]).unwrap();
        assert_eq!(both, HashSet::from([id, other]));
        drop(held);
        // Released synchronously: free at once, for everyone.
        let again = there.try_lock(id).unwrap().expect("free once released");
        assert_eq!(here.locked(&[id]).unwrap(), HashSet::from([id]));
        drop((again, other_held));
        assert!(here.locked(&[id, other]).unwrap().is_empty());
    }

    #[test]
    fn locks_of_another_database_on_the_same_server_do_not_count() {
        let (Some(a), Some(b)) = (testdb::fresh("locks_a"), testdb::fresh("locks_b")) else {
            return;
        };
        let id = SessionId::generate();
        let _held = coordinator(&a).try_lock(id).unwrap().expect("free");
        let elsewhere = coordinator(&b);
        assert!(elsewhere.locked(&[id]).unwrap().is_empty());
        assert!(elsewhere.try_lock(id).unwrap().is_some());
    }

    #[test]
    fn a_lock_goes_with_its_connection_when_the_server_holding_it_dies() {
        let Some(db) = testdb::fresh("a_lock_goes_with_its_connection") else {
            return;
        };
        let (dying, other) = (coordinator(&db), coordinator(&db));
        let id = SessionId::generate();
        let held = dying.try_lock(id).unwrap().expect("free");
        assert!(other.try_lock(id).unwrap().is_none());
        // What a killed server's connection looks like from the database.
        terminate(&db, held.backend_pid());
        assert!(
            eventually(|| other.try_lock(id).is_ok_and(|l| l.is_some())),
            "the lock was not released with its backend"
        );
        // Its holder finds out only when it lets go: logged, no panic.
        drop(held);
        // Dropping the connection (a process exit) releases it too.
        let id = SessionId::generate();
        let mut held = dying.try_lock(id).unwrap().expect("free");
        drop(held.client.take());
        assert!(eventually(|| other.try_lock(id).is_ok_and(|l| l.is_some())));
    }

    #[test]
    fn a_stop_request_reaches_the_listener_of_another_server_even_after_it_reconnects() {
        let Some(db) = testdb::fresh("a_stop_request_reaches_the_listener") else {
            return;
        };
        let (sender, listener) = (coordinator(&db), coordinator(&db));
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        listener
            .listen(Box::new(move |note| {
                let _ = lock(&tx).send(note);
            }))
            .unwrap();
        assert!(eventually(|| listener.listens() == 1), "never listened");
        let id = SessionId::generate();
        let stop = Note::Stop {
            session: id,
            turn: 2,
            attempt: 1,
        };
        sender.notify(&stop).unwrap();
        assert_eq!(rx.recv_timeout(DEADLINE), Ok(stop));
        let answer = Note::Answer {
            session: id,
            call_id: "call \"1\"".into(),
            allow: true,
            remember: false,
            answer_id: Some("a1".into()),
        };
        sender.notify(&answer).unwrap();
        assert_eq!(rx.recv_timeout(DEADLINE), Ok(answer));
        // Its connection is cut: it listens again on a new one, and hears the next one.
        let pid = listener.listener_pid().expect("listening");
        terminate(&db, pid);
        assert!(
            eventually(|| listener.listens() == 2 && listener.listener_pid().is_some()),
            "did not reconnect"
        );
        assert_ne!(listener.listener_pid(), Some(pid));
        let next = Note::Stop {
            session: SessionId::generate(),
            turn: 4,
            attempt: 3,
        };
        sender.notify(&next).unwrap();
        assert_eq!(rx.recv_timeout(DEADLINE), Ok(next));
    }

    /// Ends every connection to the test database but the caller's: an outage, or a
    /// database restart, as the servers see it.
    fn terminate_all(db: &testdb::TestDb) {
        let mut admin = Client::connect(&db.url, NoTls).expect("admin connection");
        let others = "SELECT pid FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()";
        admin
            .execute(
                &format!("SELECT pg_terminate_backend(pid) FROM ({others}) o"),
                &[],
            )
            .expect("terminates the backends");
        assert!(
            eventually(|| admin.query(others, &[]).is_ok_and(|r| r.is_empty())),
            "the backends did not end"
        );
    }

    #[test]
    fn after_an_outage_idle_connections_that_died_unseen_are_replaced() {
        let Some(db) = testdb::fresh("idle_connections_that_died_unseen") else {
            return;
        };
        let coord = coordinator(&db);
        let ids = [SessionId::generate(), SessionId::generate()];
        // Two idle connections, then every backend ends.
        drop(ids.map(|id| coord.try_lock(id).unwrap().expect("free")));
        terminate_all(&db);
        let held = coord.try_lock(ids[0]).expect("a claim after the outage");
        assert!(held.is_some());
        terminate_all(&db);
        assert_eq!(coord.locked(&ids).unwrap(), HashSet::new());
        terminate_all(&db);
        let stop = Note::Stop {
            session: ids[1],
            turn: 2,
            attempt: 1,
        };
        coord.notify(&stop).expect("a stop after the outage");
    }

    #[test]
    fn a_lock_whose_connection_died_is_taken_again_unless_someone_else_took_it() {
        let Some(db) = testdb::fresh("a_lock_whose_connection_died") else {
            return;
        };
        let (here, there) = (coordinator(&db), coordinator(&db));
        let id = SessionId::generate();
        let mut held = here.try_lock(id).unwrap().expect("free");
        assert_eq!(held.keep().unwrap(), Kept::Held, "alive");
        let pid = held.backend_pid();
        terminate(&db, pid);
        assert_eq!(
            held.keep().unwrap(),
            Kept::TakenAgain,
            "free, so taken again"
        );
        assert_ne!(held.backend_pid(), pid);
        assert!(there.try_lock(id).unwrap().is_none(), "held again");
        terminate(&db, held.backend_pid());
        let mut theirs = None;
        let taken = eventually(|| {
            theirs = there.try_lock(id).ok().flatten();
            theirs.is_some()
        });
        assert!(taken, "freed with its backend");
        assert_eq!(held.keep().unwrap(), Kept::Lost, "another holds it");
    }
}
