//! The one way the chat layer takes a lock: a holder that panicked leaves plain
//! bookkeeping behind (registries, slots, sets), which is still right to use, so poison is
//! ignored rather than spread to every later request.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
