//! Sessions: the event log and what is computed from it.
//!
//! - [`events`]: event kinds and payloads (pure types).
//! - [`cursor`]: the session list's keyset cursor and archived filter (pure).
//! - [`search`]: plain-text queries and highlighted snippets (pure).
//! - [`search_display`]: what a hit shows: markdown stripped, forks grouped (pure).
//! - [`store`]: the event log on SQLite or PostgreSQL (where brain's SQL is issued).
//!
//! **Architecture invariant:** nothing in `session` knows about HTTP or providers.

pub mod compactor;
pub mod cursor;
pub mod events;
pub mod projection;
pub mod search;
pub mod search_display;
pub mod store;
#[cfg(test)]
pub(crate) mod testlog;

pub use events::{Decoded, Event, Payload, SessionId};
pub use store::{SessionRow, Store, StoreError, StoreOptions, SyncMode};
