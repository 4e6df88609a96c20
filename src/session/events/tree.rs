//! The payloads that make a conversation a tree (SPEC §14): `rewind` (an edit continues
//! the conversation from an earlier point) and `forked_from` on a fork's
//! `session_started`.

use serde::{Deserialize, Deserializer, Serialize};

/// A user edited an earlier message: the conversation continues from `to_seq`, and every
/// event with `to_seq < seq < ` this rewind's seq is an abandoned branch (SPEC §4 step 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewind {
    pub to_seq: u64,
    /// The `user_message` that was edited (`to_seq + 1`).
    pub edited_seq: u64,
}

/// Where a fork came from: the source session and the seq it was copied through.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The source's id as written; a string, so a fork of a session whose id this brain
    /// cannot parse still starts.
    pub session_id: String,
    pub seq: u64,
}

/// Where an imported session came from (SPEC §15): the source (`chatgpt`, `claude`, …)
/// and the source's id for the conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedFrom {
    pub source: String,
    pub id: String,
}

/// Decodes an optional field that must never make its event unreadable: a malformed value
/// reads as absent. (`session_started` carries the system prompt: losing it over a bad
/// `forked_from` would change every request of the session.)
pub(super) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}
