//! The chat layer: where sessions meet the provider. It composes the store, the
//! projections, compaction and the provider client; neither of those knows the other.
//!
//! - [`summarizer`]: the provider as compaction's summarizer.

pub mod summarizer;
