//! `--one-slot`: one completion at a time, like llama.cpp with one slot, and pauses that
//! notice a client hanging up.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::options;

/// The one slot of `--one-slot`: busy or not, and who waits for it, in arrival order.
static SLOT: (Mutex<(bool, VecDeque<usize>)>, Condvar) =
    (Mutex::new((false, VecDeque::new())), Condvar::new());

/// Holds the slot; frees it on drop.
pub struct SlotHeld;

impl Drop for SlotHeld {
    fn drop(&mut self) {
        SLOT.0.lock().unwrap_or_else(PoisonError::into_inner).0 = false;
        SLOT.1.notify_all();
    }
}

/// Waits for the slot in arrival order; `None` when the client hung up meanwhile.
pub fn take_slot(stream: &TcpStream, ticket: usize) -> Option<SlotHeld> {
    let mut s = SLOT.0.lock().unwrap_or_else(PoisonError::into_inner);
    s.1.push_back(ticket);
    loop {
        if !s.0 && s.1.front() == Some(&ticket) {
            s.1.pop_front();
            s.0 = true;
            return Some(SlotHeld);
        }
        s = SLOT
            .1
            .wait_timeout(s, Duration::from_millis(20))
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if hung_up(stream) {
            s.1.retain(|t| *t != ticket);
            SLOT.1.notify_all();
            return None;
        }
    }
}

/// Whether the client closed its side (it sends nothing after its request).
fn hung_up(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let peeked = stream.peek(&mut byte);
    let _ = stream.set_nonblocking(false);
    match peeked {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Holds the connection open and silent (a hung server) until the client hangs up, which
/// is an error, as in [`pause`], so the request is recorded as `_cancelled`.
pub fn hold(stream: &TcpStream) -> std::io::Result<()> {
    let until = Instant::now() + Duration::from_secs(3600);
    while Instant::now() < until {
        if hung_up(stream) {
            return Err(std::io::Error::other("the client hung up"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Sleeps `d`, watching for a hang-up in `--one-slot` mode (the slot is freed at once).
pub fn pause(stream: &TcpStream, d: Duration) -> std::io::Result<()> {
    if !options().one_slot {
        thread::sleep(d);
        return Ok(());
    }
    let until = Instant::now() + d;
    while Instant::now() < until {
        if hung_up(stream) {
            return Err(std::io::Error::other("the client hung up"));
        }
        thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
    }
    Ok(())
}
