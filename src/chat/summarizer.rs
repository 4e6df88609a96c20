//! A provider model as compaction's [`Summarizer`].
//!
//! The provider's whole-completion call blocks until it answers or its timeout passes, so
//! it runs on a short-lived thread of its own while the compaction's caller watches its
//! [`Bounds`]: a `/stop`, a shutdown or the compaction's deadline end the wait at once,
//! and cancel the call itself (its connection is closed, so a one-slot llama.cpp is free
//! for the next turn at once instead of finishing a summary nobody will read).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;

use super::state::{Inner, STOP_POLL};
use crate::provider::{ChatRequest, ChatRole, Completion, Provider, ProviderError, Shape};
use crate::session::compactor::{Bounds, Summarizer, SummaryError, SummaryInput, SummaryOutput};

/// The summarize model of a provider, with its window.
pub struct ProviderSummarizer {
    pub provider: Arc<Provider>,
    pub model: String,
    pub window: u64,
}

impl Summarizer for ProviderSummarizer {
    fn model(&self) -> String {
        self.model.clone()
    }

    fn provider(&self) -> String {
        self.provider.base_url().to_owned()
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn summarize(
        &self,
        input: &SummaryInput,
        bounds: &Bounds<'_>,
    ) -> Result<SummaryOutput, SummaryError> {
        let req = ChatRequest {
            model: self.model.clone(),
            system: input.system.clone(),
            messages: vec![(ChatRole::User, input.text.clone())],
            max_tokens: Some(u32::try_from(input.max_tokens).unwrap_or(u32::MAX)),
            temperature: None,
            tools: vec![],
            tool_choice_none: false,
            steps: vec![],
        };
        let timeout = bounds.left();
        if timeout.is_zero() {
            return Err(SummaryError::TimedOut);
        }
        let (tx, rx) = mpsc::channel();
        let provider = Arc::clone(&self.provider);
        // Whatever ends the wait below without an answer also ends the call.
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = Arc::clone(&cancel.0);
        thread::Builder::new()
            .name("brain-summarize".into())
            .spawn(move || {
                let answer = provider.complete_shaped(&req, &Shape::default(), timeout, &flag);
                // The receiver may be gone (the compaction was cut short): nothing to do.
                let _ = tx.send(answer);
            })
            .map_err(|e| SummaryError::Failed {
                code: "internal".into(),
                message: format!("cannot start the summarizer call: {e}"),
            })?;
        loop {
            if let Some(i) = bounds.interrupted() {
                return Err(SummaryError::Interrupted(i));
            }
            match rx.recv_timeout(STOP_POLL.min(bounds.left())) {
                Ok(answer) => return summary(answer),
                Err(RecvTimeoutError::Timeout) if bounds.left().is_zero() => {
                    return Err(SummaryError::TimedOut);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(SummaryError::Failed {
                        code: "internal".into(),
                        message: "the summarizer call ended without an answer".into(),
                    });
                }
            }
        }
    }
}

/// Sets its flag when dropped: the summarizer call is cancelled on every way out of the
/// wait (after an answer it no longer matters).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn summary(answer: Result<Completion, ProviderError>) -> Result<SummaryOutput, SummaryError> {
    match answer {
        Ok(c) => Ok(SummaryOutput {
            text: c.text,
            finish_reason: c.finish_reason,
            usage: c.usage,
        }),
        Err(ProviderError::Timeout(_)) => Err(SummaryError::TimedOut),
        Err(e) => Err(SummaryError::Failed {
            code: e.code().to_owned(),
            message: e.to_string(),
        }),
    }
}

/// The summarize model as compaction's summarizer; its window is the chat window when it
/// is the chat model.
pub(super) fn summarizer(inner: &Inner, chat_model: &str, chat_window: u64) -> ProviderSummarizer {
    let model = inner
        .settings
        .summarize_model
        .clone()
        .unwrap_or_else(|| chat_model.to_owned());
    let window = if model == chat_model {
        chat_window
    } else {
        inner.deps.provider.window(&model, None).tokens
    };
    ProviderSummarizer {
        provider: Arc::clone(&inner.deps.provider),
        model,
        window,
    }
}
