//! Importing history from other tools (SPEC §15). Each reader turns its source into
//! [`Conversation`]s — a tree of messages with the branch the user last saw — streaming, one
//! conversation at a time, so memory is bounded by the largest conversation, not the file.
//! What follows is shared by every source: the tree becomes events (the path from the root
//! to `current` is the conversation; every other branch is a `rewind` and its messages,
//! abandoned, §14), timestamps are normalised and missing ones interpolated, and the store
//! compares with what an earlier import wrote (idempotent: unchanged → nothing, grown → the
//! new messages, diverged → a fork), all in one transaction per file.
//!
//! This module holds the model every reader produces. Readers live beside it:
//! `brain.rs` (this project's JSONL), `chatgpt.rs`, `claude.rs`, `openwebui.rs`, `llm.rs`.

use jiff::Timestamp;

/// The sources `--from` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Brain,
    ChatGpt,
    Claude,
    OpenWebUi,
    Llm,
}

impl Source {
    /// As written in `imported_from.source`, `--from`, and the ledger's `provider` of an
    /// imported answer.
    pub fn name(self) -> &'static str {
        match self {
            Source::Brain => "brain",
            Source::ChatGpt => "chatgpt",
            Source::Claude => "claude",
            Source::OpenWebUi => "openwebui",
            Source::Llm => "llm",
        }
    }
}

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    /// The first non-empty one becomes the session's system prompt; others are skipped
    /// (counted in the report).
    System,
    /// A tool's output (ChatGPT's `tool` nodes): kept as a `tool_execution` with status `ok`.
    Tool,
}

/// One message of a conversation's tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The source's id for it (unique within the conversation).
    pub id: String,
    /// Its parent's id; `None` for a root.
    pub parent: Option<String>,
    pub role: Role,
    /// Its text; parts that are not text are left out and counted in `skipped`.
    pub text: String,
    /// When the source says it was written.
    pub created_at: Option<Timestamp>,
    /// The model that wrote an assistant message, when the source says.
    pub model: Option<String>,
    /// For a tool message: the tool's name, when the source says.
    pub tool_name: Option<String>,
    /// Parts left out, by kind (`image`, `file`, `code_execution`, …), for the report.
    pub skipped: Vec<(String, u64)>,
}

/// One conversation as its source has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    pub source: Source,
    /// The source's id for it: with `source`, it makes the session's id (UUID v5).
    pub id: String,
    pub title: Option<String>,
    pub created_at: Option<Timestamp>,
    /// Every message, any order; the tree is `parent` links.
    pub messages: Vec<Message>,
    /// The message the user last saw (ChatGPT's `current_node`, Open WebUI's `currentId`,
    /// llm's tip); `None`: the newest leaf.
    pub current: Option<String>,
}

/// Why a source could not be read: the conversation (its index in the file and its id,
/// when known) and the reason, for an error that names it.
#[derive(Debug, thiserror::Error)]
#[error("conversation {index}{}: {reason}", id.as_deref().map(|i| format!(" ({i})")).unwrap_or_default())]
pub struct ReadError {
    pub index: usize,
    pub id: Option<String>,
    pub reason: String,
}

/// Counts `n` parts of `kind` left out of a message's text, beside those of that kind
/// already counted (none adds no entry).
fn count_skipped(skipped: &mut Vec<(String, u64)>, kind: &str, n: u64) {
    if n == 0 {
        return;
    }
    match skipped.iter_mut().find(|(k, _)| k == kind) {
        Some((_, c)) => *c += n,
        None => skipped.push((kind.to_owned(), n)),
    }
}

pub mod apply;
pub mod archive;
pub mod brain;
pub mod chatgpt;
pub mod claude;
pub mod convert;
pub mod detect;
pub mod file;
pub mod llm;
pub mod openwebui;
pub mod stream;
pub mod tree;
