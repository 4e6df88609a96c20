//! A provider model as compaction's [`Summarizer`].

use super::engine::Inner;
use crate::provider::{ChatRequest, ChatRole, Provider};
use crate::session::compactor::run::{SUMMARY_TIMEOUT, SummaryOutput};
use crate::session::compactor::{Summarizer, SummaryInput};

/// The summarize model of a provider, with its window.
pub struct ProviderSummarizer<'a> {
    pub provider: &'a Provider,
    pub model: String,
    pub window: u64,
}

impl Summarizer for ProviderSummarizer<'_> {
    fn model(&self) -> String {
        self.model.clone()
    }

    fn provider(&self) -> String {
        self.provider.base_url().to_owned()
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn summarize(&self, input: &SummaryInput) -> Result<SummaryOutput, (String, String)> {
        let req = ChatRequest {
            model: self.model.clone(),
            system: input.system.clone(),
            messages: vec![(ChatRole::User, input.text.clone())],
            max_tokens: Some(u32::try_from(input.max_tokens).unwrap_or(u32::MAX)),
            temperature: None,
        };
        self.provider
            .complete(&req, SUMMARY_TIMEOUT)
            .map(|c| SummaryOutput {
                text: c.text,
                finish_reason: c.finish_reason,
                usage: c.usage,
            })
            .map_err(|e| (e.code().to_owned(), e.to_string()))
    }
}

/// The summarize model as compaction's summarizer; its window is the chat window when it
/// is the chat model.
pub(super) fn summarizer<'a>(
    inner: &'a Inner,
    chat_model: &str,
    chat_window: u64,
) -> ProviderSummarizer<'a> {
    let model = inner
        .settings
        .summarize_model
        .clone()
        .unwrap_or_else(|| chat_model.to_owned());
    let window = if model == chat_model {
        chat_window
    } else {
        inner.provider.window(&model, None).tokens
    };
    ProviderSummarizer {
        provider: &inner.provider,
        model,
        window,
    }
}
