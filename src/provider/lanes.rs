//! Who may use a provider now: the chat first, background calls in what it leaves.
//!
//! A local model usually serves one request at a time, so a background call (a title, a
//! turn memory) that is running when a chat request arrives makes the chat wait for it.
//! [`Lanes`] keeps two lanes per provider: *foreground* holders (a chat attempt, a
//! compaction the next request needs) never wait here; *background* calls run only while
//! no foreground holder exists, at most `slots` at a time, and a foreground holder that
//! arrives sets the cancel flag of every running background call. What a cancelled call
//! does next (wait again, or give up) is its caller's choice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How often a background caller waiting for the lane asks whether it still wants it.
pub const LANE_POLL: Duration = Duration::from_millis(100);

/// The default number of background calls that may run at once on one provider.
pub const DEFAULT_BACKGROUND_SLOTS: usize = 1;

/// The lanes of one provider.
#[derive(Debug)]
pub struct Lanes {
    slots: usize,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    foreground: usize,
    next_id: u64,
    /// Running background calls and their cancel flags.
    running: Vec<(u64, Arc<AtomicBool>)>,
}

/// A foreground holder; the lane is free for background calls again when the last one
/// drops.
#[must_use = "the foreground lane is held only while this lives"]
pub struct Foreground<'a> {
    lanes: &'a Lanes,
}

/// A background call's permit; its slot is free again on drop.
#[must_use = "the background slot is held only while this lives"]
pub struct Background<'a> {
    lanes: &'a Lanes,
    id: u64,
    cancel: Arc<AtomicBool>,
}

impl Lanes {
    /// Lanes allowing `slots` background calls at once (at least one).
    pub fn new(slots: usize) -> Lanes {
        Lanes {
            slots: slots.max(1),
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the foreground lane at once, cancelling every running background call.
    pub fn foreground(&self) -> Foreground<'_> {
        let mut st = self.lock();
        st.foreground += 1;
        for (_, cancel) in &st.running {
            cancel.store(true, Ordering::SeqCst);
        }
        Foreground { lanes: self }
    }

    /// Waits until no foreground holder exists and a background slot is free, then takes
    /// the slot. `None` at `until`, or as soon as `give_up` says so (asked every
    /// [`LANE_POLL`] while waiting).
    pub fn background(&self, until: Instant, give_up: &dyn Fn() -> bool) -> Option<Background<'_>> {
        let mut st = self.lock();
        loop {
            if give_up() {
                return None;
            }
            if st.foreground == 0 && st.running.len() < self.slots {
                let id = st.next_id;
                st.next_id += 1;
                let cancel = Arc::new(AtomicBool::new(false));
                st.running.push((id, Arc::clone(&cancel)));
                return Some(Background {
                    lanes: self,
                    id,
                    cancel,
                });
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            st = self
                .changed
                .wait_timeout(st, (until - now).min(LANE_POLL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// (foreground holders, running background calls), for tests and logs.
    pub fn load(&self) -> (usize, usize) {
        let st = self.lock();
        (st.foreground, st.running.len())
    }
}

impl Drop for Foreground<'_> {
    fn drop(&mut self) {
        let mut st = self.lanes.lock();
        st.foreground = st.foreground.saturating_sub(1);
        drop(st);
        self.lanes.changed.notify_all();
    }
}

impl Background<'_> {
    /// Set when a foreground holder arrived: the call should end now.
    pub fn cancel_flag(&self) -> &AtomicBool {
        &self.cancel
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

impl Drop for Background<'_> {
    fn drop(&mut self) {
        let mut st = self.lanes.lock();
        st.running.retain(|(id, _)| *id != self.id);
        drop(st);
        self.lanes.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;

    const LONG: Duration = Duration::from_secs(30);

    fn never() -> bool {
        false
    }

    #[test]
    fn background_runs_alone_when_no_chat_is_active() {
        let lanes = Lanes::new(1);
        let first = lanes
            .background(Instant::now(), &never)
            .expect("idle lanes");
        assert!(
            lanes.background(Instant::now(), &never).is_none(),
            "one slot: a second call waits"
        );
        drop(first);
        assert!(lanes.background(Instant::now(), &never).is_some());
    }

    #[test]
    fn slots_allow_that_many_background_calls() {
        let lanes = Lanes::new(2);
        let a = lanes.background(Instant::now(), &never);
        let b = lanes.background(Instant::now(), &never);
        assert!(a.is_some() && b.is_some());
        assert!(lanes.background(Instant::now(), &never).is_none());
        assert_eq!(lanes.load(), (0, 2));
        assert_eq!(Lanes::new(0).slots, 1, "at least one");
    }

    #[test]
    fn a_chat_cancels_running_background_calls_and_holds_back_new_ones() {
        let lanes = Lanes::new(2);
        let running = lanes.background(Instant::now(), &never).unwrap();
        assert!(!running.cancelled());
        let chat = lanes.foreground();
        assert!(running.cancelled(), "the chat comes first");
        drop(running);
        assert!(
            lanes.background(Instant::now(), &never).is_none(),
            "no background call starts while a chat is active"
        );
        let second_chat = lanes.foreground();
        drop(chat);
        assert!(lanes.background(Instant::now(), &never).is_none());
        drop(second_chat);
        let next = lanes.background(Instant::now(), &never).unwrap();
        assert!(!next.cancelled(), "a new permit starts uncancelled");
    }

    #[test]
    fn a_waiting_background_call_starts_when_the_chat_ends() {
        let lanes = Arc::new(Lanes::new(1));
        let chat = lanes.foreground();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let lanes = Arc::clone(&lanes);
            thread::spawn(move || {
                let got = lanes.background(Instant::now() + LONG, &never).is_some();
                let _ = tx.send(got);
            })
        };
        drop(chat);
        assert_eq!(rx.recv_timeout(LONG), Ok(true));
        waiter.join().unwrap();
    }

    #[test]
    fn a_waiting_background_call_gives_up_when_told() {
        let lanes = Lanes::new(1);
        let _chat = lanes.foreground();
        let asked = AtomicBool::new(false);
        let give_up = || asked.swap(true, Ordering::SeqCst);
        assert!(
            lanes.background(Instant::now() + LONG, &give_up).is_none(),
            "asked again within a poll, then gave up"
        );
    }
}
