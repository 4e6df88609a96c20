//! Connections that die under brain (a database restart, a terminated backend, a network
//! cut), found and replaced, the work done again only when that cannot write twice.
//!
//! The pools do not test a connection when it is handed out (a round trip before every
//! statement), so after a restart every pooled connection is dead and looks alive until
//! used. Then:
//!
//! - **A read** is idempotent: one whose connection is lost runs once more on a fresh
//!   connection (not from the pool, which may hold more dead ones).
//! - **A write** sends `BEGIN` and takes its transaction id in one round trip
//!   ([`begin`]). Lost before `COMMIT` (at `BEGIN`, or while the closure ran), the
//!   transaction did not commit (the server rolls back what a lost connection leaves), so
//!   it runs once more on a fresh connection, if its closure may run twice
//!   ([`Rerun::Allowed`]; one that never ran always may).
//! - **Lost during `COMMIT`** the outcome is unknown: the transaction id is looked up on a
//!   fresh connection (`txid_status`, kept by the server across restarts). Committed: the
//!   write is done (its closure's answer stands). Aborted: as above. Still running or not
//!   known: [`StoreError::Unavailable`], never a second run that might write twice.
//! - A second loss, or no fresh connection to be had, is [`StoreError::Unavailable`]
//!   (503 `unavailable`): nothing acknowledged is lost, nothing is written twice.

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use postgres::{Client, SimpleQueryMessage};

use super::PgStore;
use super::write::PgWriter;
pub use crate::session::store::error::connection_lost;
use crate::session::store::error::{Result, StoreError, detail};
use crate::session::store::seam::{Rerun, Writer};

/// How long a lost `COMMIT` may still show as running before the write is given up as
/// unknown (a terminated backend's transaction ends at once; a network cut may keep it).
pub const COMMIT_STATUS_WAIT: Duration = Duration::from_secs(5);

/// Whether a failure on `client` means its connection is gone.
fn lost(e: &StoreError, client: &Client) -> bool {
    client.is_closed() || matches!(e, StoreError::Postgres(pg) if connection_lost(pg))
}

/// What one run of a write on one connection came to.
enum Outcome {
    Committed,
    /// Refused on a live connection (the closure's error, a commit refused): rolled back.
    Failed(StoreError),
    /// The connection was lost before `COMMIT` was sent: nothing committed. `ran` says
    /// whether the closure ran.
    NotCommitted {
        ran: bool,
        why: String,
    },
    /// The connection was lost during `COMMIT`: transaction `xid` may have committed.
    Unknown {
        xid: i64,
        why: String,
    },
}

impl PgStore {
    /// One write transaction (see [`crate::session::store::Backend::write`] and the
    /// module's notes): on a pooled connection, then at most once more on a fresh one.
    pub(super) fn write_retrying(
        &self,
        rerun: Rerun,
        f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut pooled = self.writes.get()?;
        let first = self.run_write(&mut pooled, f);
        drop(pooled);
        let again = match first {
            Outcome::Committed => return Ok(()),
            Outcome::Failed(e) => return Err(e),
            Outcome::NotCommitted { ran, why } => {
                if ran && rerun == Rerun::Never {
                    return Err(not_written(&why));
                }
                log::info!("a write lost its database connection ({why}); running it again");
                self.fresh_write()?
            }
            Outcome::Unknown { xid, why } => {
                let mut fresh = self.fresh_write()?;
                if settled(&mut fresh, xid, &why)? {
                    return Ok(());
                }
                if rerun == Rerun::Never {
                    return Err(not_written(&why));
                }
                log::info!("a write's commit was lost and rolled back ({why}); running it again");
                fresh
            }
        };
        let mut fresh = again;
        match self.run_write(&mut fresh, f) {
            Outcome::Committed => Ok(()),
            Outcome::Failed(e) => Err(e),
            Outcome::NotCommitted { why, .. } => Err(not_written(&why)),
            Outcome::Unknown { xid, why } => {
                if settled(&mut self.fresh_write()?, xid, &why)? {
                    Ok(())
                } else {
                    Err(not_written(&why))
                }
            }
        }
    }

    fn run_write(
        &self,
        client: &mut Client,
        f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>,
    ) -> Outcome {
        let xid = match begin(client) {
            Ok(xid) => xid,
            Err(e) if lost(&e, client) => {
                return Outcome::NotCommitted {
                    ran: false,
                    why: e.to_string(),
                };
            }
            Err(e) => return Outcome::Failed(e),
        };
        // A panic inside the closure (a bug, a failed assertion) must not leave its
        // transaction open on a connection the pool hands to the next write, which would
        // commit it: roll back, then let the panic go on.
        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
            f(&mut PgWriter::new(client, &self.clock))
        }));
        let ran = match ran {
            Ok(ran) => ran,
            Err(payload) => {
                if let Err(r) = client.batch_execute("ROLLBACK") {
                    log::warn!("a write's rollback after a panic failed: {}", detail(&r));
                }
                panic::resume_unwind(payload);
            }
        };
        if let Err(e) = ran {
            if lost(&e, client) {
                return Outcome::NotCommitted {
                    ran: true,
                    why: e.to_string(),
                };
            }
            // A connection that cannot roll back is lost: the pool drops it.
            if let Err(r) = client.batch_execute("ROLLBACK") {
                log::warn!("a write's rollback failed: {}", detail(&r));
            }
            return Outcome::Failed(e);
        }
        match client.batch_execute("COMMIT") {
            Ok(()) => Outcome::Committed,
            Err(e) if connection_lost(&e) || client.is_closed() => Outcome::Unknown {
                xid,
                why: detail(&e),
            },
            Err(e) => Outcome::Failed(StoreError::CommitFailed(detail(&e))),
        }
    }

    /// A read on a pooled connection, run once more on a fresh one when the connection
    /// was lost (reads are idempotent).
    pub(super) fn read_retrying<T>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<T>,
    ) -> Result<T> {
        let mut pooled = self.reads.get()?;
        let e = match f(&mut pooled) {
            Err(e) if lost(&e, &pooled) => e,
            other => return other,
        };
        drop(pooled);
        log::info!("a read lost its database connection ({e}); reading again");
        let mut fresh = connect_fresh(&self.fresh_reads, &self.tls)?;
        match f(&mut fresh) {
            Err(e) if lost(&e, &fresh) => Err(StoreError::Unavailable(format!(
                "the database connection was lost twice while reading: {e}"
            ))),
            other => other,
        }
    }

    fn fresh_write(&self) -> Result<Client> {
        connect_fresh(&self.fresh_writes, &self.tls)
    }
}

/// A new connection, outside the pool; one that cannot be had is
/// [`StoreError::Unavailable`].
fn connect_fresh(config: &postgres::Config, tls: &super::Tls) -> Result<Client> {
    config
        .connect(tls.clone())
        .map_err(|e| StoreError::Unavailable(format!("cannot reach the database: {}", detail(&e))))
}

/// Opens the transaction and takes its id, in one round trip.
fn begin(client: &mut Client) -> Result<i64> {
    let messages = client.simple_query("BEGIN; SELECT txid_current()")?;
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|x| x.parse().ok()),
            _ => None,
        })
        .ok_or_else(|| StoreError::Corrupt("BEGIN gave no transaction id".into()))
}

/// Whether transaction `xid`, whose `COMMIT` was lost, committed (`true`) or was rolled
/// back (`false`); [`StoreError::Unavailable`] when that cannot be told.
pub(super) fn settled(client: &mut Client, xid: i64, why: &str) -> Result<bool> {
    let until = Instant::now() + COMMIT_STATUS_WAIT;
    loop {
        let status: Option<String> = client
            .query_one("SELECT txid_status($1)", &[&xid])
            .map_err(|e| unknown(why, &detail(&e)))?
            .try_get(0)?;
        match status.as_deref() {
            Some("committed") => return Ok(true),
            Some("aborted") => return Ok(false),
            Some("in progress") if Instant::now() < until => {
                // The lost backend has not ended yet; it will, committed or not.
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return Err(unknown(why, &format!("its transaction is {other:?}"))),
        }
    }
}

fn not_written(why: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the database connection was lost before the write committed ({why}); nothing was \
         written, try again"
    ))
}

fn unknown(why: &str, then: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the database connection was lost while committing ({why}) and whether the write was \
         saved cannot be told ({then}); look before writing it again"
    ))
}
