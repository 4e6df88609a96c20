//! The OpenAI-compatible provider client (SPEC §9): streaming chat completions as typed
//! events, non-streaming completions for background work, and the model listing with
//! context windows.
//!
//! - [`sse`]: the incremental SSE parser (pure).
//! - [`think`]: a leading `<think>` block moved to reasoning (pure).
//! - [`wire`]: request bodies, chunks, usage, listings (pure).
//! - [`toolcalls`]: `delta.tool_calls` pieces assembled into whole calls (pure).
//! - [`toolless`]: models whose server refused `tools`, for a while (pure).
//! - [`state`]: what the client remembers: the listing and the last observation (pure).
//! - [`client`]: the HTTP side (ureq): completions, the listing, `/health`'s answer;
//!   `body`: bounded answer bodies and what a transport error means.
//! - [`stream`]: a streamed completion, its timeouts and cancellation.
//! - [`lanes`]: the chat first; background calls only while no chat waits, and
//!   cancelled when one arrives.
//!
//! **Architecture invariant:** `provider` knows nothing of sessions: it takes a system
//! prompt and messages and gives back events and errors. Usage is normalised here, once:
//! `input_tokens` excludes cache reads.

mod body;
pub mod client;
pub mod lanes;
pub mod sse;
pub mod state;
pub mod stream;
pub mod think;
pub mod toolcalls;
pub mod toolless;
pub mod wire;

use std::time::Duration;

use serde::Serialize;

pub use client::{Provider, ProviderConfig, window_in};
pub use lanes::{Background, Foreground, Lanes};
pub use stream::{ChatStream, Poll};

use crate::session::events::Usage;

/// Who says a message to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    User,
    Assistant,
}

/// One chat completion request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<(ChatRole, String)>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Offered as `tools`, in this order (the caller sorts them, I3); none: no `tools`.
    pub tools: Vec<ToolDef>,
    /// Sends `tool_choice: "none"` (the last step of a turn), when tools are offered.
    pub tool_choice_none: bool,
    /// The tool steps of this attempt so far, rendered after `messages`.
    pub steps: Vec<Step>,
}

/// A tool as the model is offered it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// The JSON schema of its arguments.
    pub parameters: serde_json::Value,
}

/// A call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// As the model sent it: usually a JSON object's text, but not always (the engine
    /// decides what to do with text that is not).
    pub arguments: String,
}

/// One step of an attempt that ended with tool calls: what the model said and asked for,
/// and what each call answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// The step's text (`content`), or none (`null`).
    pub text: Option<String>,
    pub calls: Vec<ToolCall>,
    /// (call id, the content sent back), one per call, in order.
    pub results: Vec<(String, String)>,
}

/// What a background call asks of the answer's form, beyond its request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shape {
    /// Strings that end the answer (`stop`): a title is one line.
    pub stop: Vec<String>,
    /// A JSON schema the answer must follow, sent as `response_format` (llama.cpp turns
    /// it into a grammar, so even a tiny model answers valid JSON).
    pub schema: Option<Schema>,
}

/// A named JSON schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    pub name: &'static str,
    pub schema: serde_json::Value,
}

/// What a stream yields, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Text(String),
    Reasoning(String),
    Usage(Usage),
    /// The calls the model asked for, once, when the stream ends with them (before
    /// `Finish`).
    ToolCalls(Vec<ToolCall>),
    Finish(String),
}

/// A whole (non-streamed) completion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Completion {
    pub text: String,
    pub reasoning: String,
    pub usage: Usage,
    pub finish_reason: Option<String>,
    /// The calls the model asked for, if any.
    pub tool_calls: Vec<ToolCall>,
}

/// One model of the listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    pub id: String,
    pub window: Option<u64>,
    /// Which field gave the window.
    pub window_source: Option<&'static str>,
}

/// A model's window and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub tokens: u64,
    pub source: &'static str,
}

/// How a provider call failed. `retryable` says whether trying again may help.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider is unreachable: {0}")]
    Unreachable(String),
    #[error("the provider answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("the provider sent a malformed stream: {0}")]
    Malformed(String),
    #[error("the provider reported an error: {0}")]
    Remote(String),
    #[error("the provider's stream was cut before its end: {0}")]
    Cut(String),
    #[error("no token from the provider within {0:?}")]
    FirstTokenTimeout(Duration),
    #[error("the provider's stream stalled for {0:?}")]
    IdleTimeout(Duration),
    #[error("the provider call took longer than {0:?}")]
    Timeout(Duration),
    #[error("the request was cancelled")]
    Cancelled,
    /// brain itself ran out of file descriptors (EMFILE/ENFILE) before reaching the
    /// provider: not the provider's fault, and not a cut stream.
    #[error("brain has too many open files to reach the provider: {0}")]
    NoDescriptors(String),
}

/// Whether an I/O error is the process (EMFILE) or the system (ENFILE) out of file
/// descriptors.
pub fn out_of_descriptors(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

impl ProviderError {
    /// The code recorded in `turn_failed` and sent in `error` frames.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Unreachable(_) => "provider_unreachable",
            ProviderError::Http { .. } => "provider_http_error",
            ProviderError::Malformed(_) => "provider_malformed",
            ProviderError::Remote(_) => "provider_error",
            ProviderError::Cut(_) => "provider_cut",
            ProviderError::FirstTokenTimeout(_) => "first_token_timeout",
            ProviderError::IdleTimeout(_) => "idle_timeout",
            ProviderError::Timeout(_) => "provider_timeout",
            ProviderError::Cancelled => "stopped",
            ProviderError::NoDescriptors(_) => "unavailable",
        }
    }

    /// Whether the same request may succeed if tried again.
    pub fn retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status == 429 || *status >= 500,
            ProviderError::Malformed(_) | ProviderError::Cancelled => false,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(unix)]
    fn running_out_of_descriptors_is_not_a_cut_stream() {
        for errno in [libc::EMFILE, libc::ENFILE] {
            let io = std::io::Error::from_raw_os_error(errno);
            let e = body::classify(ureq::Error::Io(io), Duration::from_secs(1));
            assert_eq!(e.code(), "unavailable", "{e}");
            assert!(e.to_string().contains("too many open files"), "{e}");
            assert!(e.retryable());
        }
    }
}
