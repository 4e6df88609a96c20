//! A provider model as compaction's [`Summarizer`].

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
