//! Work after an attempt ends, in the background (it may overlap the next turn): turn
//! memory (distillation), post-persist compaction, and the automatic title. Each has its
//! own deadline; a failure is logged, never fatal, and every provider call is in the
//! ledger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::engine::Inner;
use super::summarizer::summarizer;
use crate::provider::{ChatRequest, ChatRole, Completion, ProviderError};
use crate::session::SessionId;
use crate::session::compactor::{Bounds, Budget, CompactionError, Interrupt};
use crate::session::events::{Decoded, MemoryFailure, Payload, TitledBy, TurnMemory, Usage};
use crate::session::store::{CallStatus, LedgerEntry, Purpose};

/// Deadline of one distillation call.
pub const DISTILL_TIMEOUT: Duration = Duration::from_secs(65);
/// Distillation tries at most this many times to get valid JSON.
pub const DISTILL_ATTEMPTS: usize = 2;
/// Turn memory keeps at most this many findings.
pub const MAX_FINDINGS: usize = 5;
/// Deadline of the title call.
pub const TITLE_TIMEOUT: Duration = Duration::from_secs(15);
/// An automatic title has at most this many words…
pub const TITLE_MAX_WORDS: usize = 6;
/// …and at most this many characters.
pub const TITLE_MAX_CHARS: usize = 80;
/// The longest answer asked of the mini model (turn memory JSON, a title).
pub const BACKGROUND_MAX_TOKENS: u32 = 512;
/// How much of the exchange the mini model reads.
pub const EXCHANGE_EXCERPT_CHARS: usize = 4000;

const DISTILL_PROMPT: &str = "Extract a memory of the exchange below as strict JSON, with \
exactly these keys: {\"files_changed\": [string], \"failures\": [{\"what\": string, \"why\": \
string}], \"key_findings\": [string]} (at most 5 findings, each one short sentence). Use \
empty lists when there is nothing. Reply with the JSON object only.";

const TITLE_PROMPT: &str = "Write a title of at most six words for the conversation below. \
Reply with the title only: no quotes, no punctuation at the end.";

/// Starts the post-turn work of one attempt.
pub(super) fn spawn(
    inner: &Arc<Inner>,
    id: SessionId,
    turn: u64,
    attempt: u32,
    completed: bool,
    model: String,
    budget: Budget,
) {
    let job = Arc::clone(inner);
    let started = inner.spawn_background(move || {
        let exchange = if completed {
            exchange(&job, id, turn, attempt)
        } else {
            None
        };
        if let (Some(text), true) = (&exchange, job.settings.distill) {
            distill(&job, id, turn, attempt, text, &model);
        }
        let s = summarizer(&job, &model, budget.window);
        let interrupted = || job.shutting_down().then_some(Interrupt::Shutdown);
        match job.compactor.post_persist(
            id,
            budget,
            &s,
            &Bounds::within(job.settings.compaction_timeout, &interrupted),
        ) {
            Ok(_) => {}
            Err(
                CompactionError::BackingOff(_)
                | CompactionError::Refused(_)
                | CompactionError::Interrupted(_),
            ) => {}
            Err(e) => log::warn!("post-turn compaction of {id}: {e}"),
        }
        if let Some(text) = &exchange {
            auto_title(&job, id, text, &model);
        }
    });
    // Best-effort work: skipped (and said so) rather than failing anything.
    if let Err(why) = started {
        log::warn!("post-turn work of {id} skipped: {why}");
    }
}

/// "User: …\n\nAssistant: …" for the turn's user message and this attempt's answer.
fn exchange(inner: &Inner, id: SessionId, turn: u64, attempt: u32) -> Option<String> {
    let events = inner.store.events_for_context(id).ok()?;
    let mut question = None;
    let mut answer = None;
    for e in &events {
        match e.decode() {
            Decoded::Known(Payload::UserMessage(u)) if e.seq == turn => question = Some(u.text),
            Decoded::Known(Payload::AssistantTurn(a)) if a.turn == turn && a.attempt == attempt => {
                answer = Some(a.text)
            }
            _ => {}
        }
    }
    let text = format!("User: {}\n\nAssistant: {}", question?, answer?);
    Some(text.chars().take(EXCHANGE_EXCERPT_CHARS).collect())
}

fn mini_model(inner: &Inner, chat_model: &str) -> String {
    inner
        .settings
        .mini_model
        .clone()
        .unwrap_or_else(|| chat_model.to_owned())
}

/// One whole completion by the mini model, recorded in the ledger.
fn ask(
    inner: &Inner,
    id: SessionId,
    purpose: Purpose,
    model: &str,
    system: &str,
    text: &str,
    timeout: Duration,
) -> Result<Completion, ProviderError> {
    let req = ChatRequest {
        model: model.to_owned(),
        system: system.to_owned(),
        messages: vec![(ChatRole::User, text.to_owned())],
        max_tokens: Some(BACKGROUND_MAX_TOKENS),
        temperature: Some(0.0),
    };
    let started = Instant::now();
    let result = inner.provider.complete(&req, timeout);
    let entry = LedgerEntry {
        session_id: Some(id),
        purpose,
        provider: inner.provider.base_url().to_owned(),
        model: model.to_owned(),
        usage: result.as_ref().map_or(Usage::default(), |c| c.usage),
        latency_ms: started.elapsed().as_millis() as u64,
        status: if result.is_ok() {
            CallStatus::Ok
        } else {
            CallStatus::Error
        },
        error_code: result.as_ref().err().map(|e| e.code().to_owned()),
    };
    if let Err(e) = inner.store.record_call(&entry) {
        log::error!("could not record a {} call: {e}", purpose.as_str());
    }
    result
}

#[derive(Deserialize)]
struct MemoryJson {
    #[serde(default)]
    files_changed: Vec<String>,
    #[serde(default)]
    failures: Vec<MemoryFailure>,
    #[serde(default)]
    key_findings: Vec<String>,
}

/// The first JSON object in a reply (models like to wrap it in prose or fences).
fn parse_memory(reply: &str) -> Option<MemoryJson> {
    let start = reply.find('{')?;
    let end = reply.rfind('}')?;
    serde_json::from_str(reply.get(start..=end)?).ok()
}

fn distill(
    inner: &Inner,
    id: SessionId,
    turn: u64,
    attempt: u32,
    exchange: &str,
    chat_model: &str,
) {
    let model = mini_model(inner, chat_model);
    for _ in 0..DISTILL_ATTEMPTS {
        let reply = match ask(
            inner,
            id,
            Purpose::Distill,
            &model,
            DISTILL_PROMPT,
            exchange,
            DISTILL_TIMEOUT,
        ) {
            Ok(c) => c.text,
            Err(e) => {
                log::warn!("distilling turn {turn} of {id}: {e}");
                return;
            }
        };
        if let Some(m) = parse_memory(&reply) {
            let memory = Payload::TurnMemory(TurnMemory {
                turn,
                attempt,
                files_changed: m.files_changed,
                failures: m.failures,
                key_findings: m.key_findings.into_iter().take(MAX_FINDINGS).collect(),
            });
            if let Err(e) = inner.store.append(id, &memory) {
                log::error!("storing turn memory of {id}: {e}");
            }
            return;
        }
    }
    log::warn!("distilling turn {turn} of {id}: no valid JSON after {DISTILL_ATTEMPTS} tries");
}

/// A title from a model's reply: its first line, unquoted, at most 6 words and 80 chars.
pub fn clean_title(reply: &str) -> Option<String> {
    let line = reply.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .trim_start_matches(['#', '*', ' '])
        .trim_start_matches("Title:")
        .trim();
    let line = line
        .trim_matches(['"', '\'', '*', '`', ' '])
        .trim_end_matches(['.', '!', ':']);
    // A title is shown everywhere (lists, terminals, the page): no control or invisible
    // formatting characters from the model make it into the log.
    let line: String = line
        .chars()
        .map(|c| {
            if c.is_control() || is_format(c) {
                ' '
            } else {
                c
            }
        })
        .collect();
    let words: Vec<&str> = line.split_whitespace().take(TITLE_MAX_WORDS).collect();
    let title: String = words.join(" ").chars().take(TITLE_MAX_CHARS).collect();
    let title = title.trim().to_owned();
    (!title.is_empty()).then_some(title)
}

/// Invisible formatting characters (bidirectional controls, zero-width ones, the BOM).
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
    )
}

fn auto_title(inner: &Inner, id: SessionId, exchange: &str, chat_model: &str) {
    // Another job titling this session now will do (or has done) it.
    let Some(_claim) = inner.claim_title(id) else {
        return;
    };
    match inner.store.session(id) {
        Ok(s) if s.title.is_none() => {}
        _ => return,
    }
    let model = mini_model(inner, chat_model);
    let title = match ask(
        inner,
        id,
        Purpose::Title,
        &model,
        TITLE_PROMPT,
        exchange,
        TITLE_TIMEOUT,
    ) {
        Ok(c) => clean_title(&c.text),
        Err(e) => {
            log::warn!("titling {id}: {e}");
            None
        }
    };
    let Some(title) = title else { return };
    // Never over a title someone set meanwhile.
    let result = inner.store.write(|w| {
        if w.session(id)?.title.is_none() {
            w.rename(id, title, TitledBy::Auto)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        log::error!("titling {id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_lose_control_and_invisible_characters() {
        assert_eq!(
            clean_title("Re\u{1b}[2Jset \u{202e}the\u{200b} plan\u{9b}"),
            Some("Re [2Jset the plan".into())
        );
    }

    #[test]
    fn titles_are_cleaned_and_bounded() {
        assert_eq!(
            clean_title("\"Planning a Trip to Lisbon.\""),
            Some("Planning a Trip to Lisbon".into())
        );
        assert_eq!(
            clean_title("\n\nTitle: one two three four five six seven eight"),
            Some("one two three four five six".into())
        );
        assert_eq!(clean_title("**Bold**"), Some("Bold".into()));
        assert_eq!(clean_title("   \n"), None);
        let long = "a".repeat(200);
        assert_eq!(
            clean_title(&long).map(|t| t.chars().count()),
            Some(TITLE_MAX_CHARS)
        );
    }

    #[test]
    fn memory_json_is_found_inside_prose_and_fences() {
        let m = parse_memory(
            "Sure!\n```json\n{\"key_findings\": [\"a\"], \"files_changed\": [\"x.rs\"]}\n```",
        )
        .unwrap();
        assert_eq!(
            (m.key_findings, m.files_changed),
            (vec!["a".to_owned()], vec!["x.rs".to_owned()])
        );
        assert!(parse_memory("no json here").is_none());
        assert!(parse_memory("{broken").is_none());
    }
}
