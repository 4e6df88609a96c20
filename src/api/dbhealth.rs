//! `/health`'s `"db"` from the last known state (SPEC §7: it answers within a second). The
//! check (a one-row listing) runs on a thread of its own, at most one at a time and at
//! most once per [`DB_CHECK_TTL`]; `/health` waits for a running check no longer than its
//! probe budget, then answers from what the last check saw. A database that stops
//! answering shows as not ok once the last good check is older than [`DB_CHECK_STALE`]
//! (the check in flight has taken that long), on either store.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A check younger than this is reused rather than run again.
pub const DB_CHECK_TTL: Duration = Duration::from_secs(1);

/// A good check older than this (its successor still running, or none started) no longer
/// says the database is ok.
pub const DB_CHECK_STALE: Duration = Duration::from_secs(5);

/// The last known state of the database.
pub struct DbHealth {
    shared: Arc<Shared>,
    ttl: Duration,
    stale: Duration,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// The last finished check: whether it passed, and when it started.
    last: Option<(bool, Instant)>,
    /// When the check in flight started.
    running: Option<Instant>,
}

impl Default for DbHealth {
    fn default() -> DbHealth {
        DbHealth::with_limits(DB_CHECK_TTL, DB_CHECK_STALE)
    }
}

impl DbHealth {
    /// A health with other limits than the defaults (tests).
    pub fn with_limits(ttl: Duration, stale: Duration) -> DbHealth {
        DbHealth {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                done: Condvar::new(),
            }),
            ttl,
            stale,
        }
    }

    /// Whether the database is ok: starts `check` on its own thread when the last one is
    /// older than the TTL and none runs, waits at most `wait` for a running one, then
    /// answers from the last finished check (not ok when none passed within the stale
    /// limit).
    pub fn ok(&self, wait: Duration, check: impl FnOnce() -> bool + Send + 'static) -> bool {
        let now = Instant::now();
        let mut st = self.lock();
        let due = st
            .last
            .is_none_or(|(_, at)| now.duration_since(at) >= self.ttl);
        if due && st.running.is_none() {
            st.running = Some(now);
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("db-health".into())
                .spawn(move || {
                    let passed = check();
                    let mut st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(started) = st.running.take() {
                        st.last = Some((passed, started));
                    }
                    shared.done.notify_all();
                });
            if spawned.is_err() {
                // No thread to check on: say what is known.
                st.running = None;
            }
        }
        let until = now + wait;
        while st.running.is_some() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .shared
                .done
                .wait_timeout(st, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        // Stale is "the database has not answered for this long": while a check runs,
        // counted from that check's start (an idle spell before it is not the database's
        // fault); else from the last check's.
        let since = st.running.or(st.last.map(|(_, at)| at));
        st.last.is_some_and(|(passed, _)| passed)
            && since.is_some_and(|at| at.elapsed() < self.stale)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const WAIT: Duration = Duration::from_millis(50);

    /// Second review #6: after an idle spell longer than the stale limit, the first check
    /// that took longer than the probe said "error" at once, though the database had been
    /// slow for only that long.
    #[test]
    fn a_slow_check_after_an_idle_spell_is_not_stale_at_once() {
        let stale = Duration::from_millis(200);
        let h = DbHealth::with_limits(Duration::from_millis(1), stale);
        assert!(h.ok(Duration::from_secs(5), || true));
        let idle_from = Instant::now();
        while idle_from.elapsed() <= stale {
            std::thread::yield_now();
        }
        let (release, held) = mpsc::channel::<()>();
        assert!(
            h.ok(WAIT, move || {
                let _ = held.recv();
                true
            }),
            "a check that has run for {WAIT:?} is not {stale:?} stale"
        );
        drop(release);
    }

    #[test]
    fn a_quick_check_is_answered_and_reused_within_its_ttl() {
        let h = DbHealth::with_limits(Duration::from_secs(60), Duration::from_secs(60));
        assert!(h.ok(Duration::from_secs(5), || true));
        // Within the TTL, no new check runs (this one would say not ok).
        assert!(h.ok(WAIT, || false));
    }

    /// Review #3: `/health` ran the listing inline and hung while the database did. A
    /// check that does not return is waited for no longer than the budget, and once the
    /// last good check is stale the database is not ok.
    #[test]
    fn a_hanging_check_answers_within_the_wait_then_goes_stale() {
        let h = DbHealth::with_limits(Duration::ZERO, Duration::from_millis(300));
        assert!(h.ok(Duration::from_secs(5), || true));
        let (release, blocked) = mpsc::channel::<()>();
        let started = Instant::now();
        let answer = h.ok(WAIT, move || {
            let _ = blocked.recv();
            true
        });
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(answer, "the last check is still fresh");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let started = Instant::now();
            let ok = h.ok(WAIT, || true);
            assert!(started.elapsed() < Duration::from_secs(1));
            if !ok {
                break;
            }
            assert!(Instant::now() < deadline, "never went stale");
        }
        // The database answers again: the next check after it passes.
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !h.ok(WAIT, || true) {
            assert!(Instant::now() < deadline, "never recovered");
        }
    }

    #[test]
    fn a_failed_check_is_not_ok() {
        let h = DbHealth::with_limits(Duration::ZERO, Duration::from_secs(60));
        assert!(!h.ok(Duration::from_secs(5), || false));
    }
}
