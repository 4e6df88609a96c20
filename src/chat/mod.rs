//! The chat layer: where sessions meet the provider. It composes the store, the
//! projections, compaction and the provider client; neither of those knows the other.
//!
//! - [`engine`]: the turn engine: one attempt per session at a time (I7), owned by the
//!   server and not by a connection (I8), durable at every step (I2, I5).
//! - `attempt`, `steps` and `end`: one attempt, from preparing its request through its
//!   tool steps to its ending.
//! - [`budget`]: the context budget of a turn, one computation for every caller.
//! - [`compact`]: compaction by hand.
//! - [`frames`]: what an attempt streams, kept for late subscribers.
//! - [`summarizer`]: the provider as compaction's summarizer.
//! - [`post_turn`]: distillation, post-persist compaction and the automatic title, after
//!   the chat and out of its way.
//! - [`residue`]: what an attempt's tool calls leave in its turn memory (pure).
//! - [`consent`]: a tool call waiting for the user's allow or deny (I9); `recovery`: at
//!   startup, the questions of attempts a kill left waiting are denied `by: restart`.
//! - [`coord`]: servers sharing one database (SPEC §16): claims across servers, `/stop`
//!   to another server; [`follow`]: `/live` of an attempt running on another server.
//! - [`breaker`]: a circuit breaker per (purpose, model) for background calls.

mod attempt;
pub mod breaker;
pub mod budget;
pub mod compact;
pub mod consent;
pub mod coord;
mod end;
pub mod engine;
pub mod follow;
pub mod frames;
mod locks;
pub mod post_turn;
mod recovery;
pub mod residue;
pub mod slot;
mod state;
pub(crate) mod steps;
mod stream;
pub mod summarizer;
