//! Work after an attempt ends (it may overlap the next turn): post-persist compaction,
//! turn memory (distillation) and the automatic title. Each has its own deadline; a
//! failure is logged, never fatal, and every provider call is in the ledger.
//!
//! The chat comes first. Post-persist compaction runs only when the context is over the
//! trigger; its summary is not needed for the next request to fit, so like distillation
//! and titles it is a background call, and yields to the next turn at once (it resumes
//! after it). Distillation and titles are background calls: they wait for
//! the provider's background lane (no chat active, one call at a time by default), ask for
//! little (a title is one line of at most [`TITLE_MAX_TOKENS`], a memory at most
//! [`MEMORY_MAX_TOKENS`] of schema-constrained JSON), are cancelled when a chat attempt
//! starts, and pause for a model that keeps failing them ([`super::breaker`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::residue;
use super::state::{Inner, lock};
use super::summarizer::summarizer;
use crate::provider::{ChatRequest, ChatRole, Completion, ProviderError, Schema, Shape};
use crate::session::SessionId;
use crate::session::compactor::{Bounds, Budget, CompactionError, Interrupt};
use crate::session::events::{
    Decoded, MemoryFailure, Payload, TitledBy, ToolExecution, TurnMemory, Usage,
};
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
/// The longest title asked for (`max_tokens`): a line, ended by a newline `stop`.
pub const TITLE_MAX_TOKENS: u32 = 24;
/// The longest turn memory asked for (`max_tokens`): a few short findings as JSON.
pub const MEMORY_MAX_TOKENS: u32 = 200;
/// Longest string the memory schema allows…
pub const MEMORY_MAX_STRING_CHARS: u64 = 60;
/// …and most items in each of its lists: a grammar-constrained tiny model tends to fill
/// every list to its bound, and all of it must fit in [`MEMORY_MAX_TOKENS`].
pub const MEMORY_MAX_ITEMS: usize = 3;
/// How much of the exchange the mini model reads.
pub const EXCHANGE_EXCERPT_CHARS: usize = 4000;
/// How long a background call waits for the provider's background lane.
pub const BACKGROUND_LANE_WAIT: Duration = Duration::from_secs(5 * 60);
/// How many times a background call cancelled by a chat attempt is asked again.
pub const BACKGROUND_MAX_DEFERRALS: usize = 3;

/// What distillation asks of the mini model.
pub const DISTILL_PROMPT: &str = "Extract a memory of the exchange below as strict JSON, with \
exactly these keys: {\"files_changed\": [string], \"failures\": [{\"what\": string, \"why\": \
string}], \"key_findings\": [string]} (at most 5 findings, each one short sentence). Use \
empty lists when there is nothing. Reply with the JSON object only.";

const TITLE_PROMPT: &str = "Write a title of at most six words for the conversation below. \
Reply with the title only: no quotes, no punctuation at the end.";

/// The shape of a distillation request: its JSON schema, no stop strings.
pub fn memory_shape() -> Shape {
    Shape {
        stop: vec![],
        schema: Some(memory_schema()),
    }
}

/// The turn memory's JSON schema, sent as `response_format`: llama.cpp turns it into a
/// grammar, so even a tiny model answers parseable, bounded JSON.
fn memory_schema() -> Schema {
    let text = json!({"type": "string", "maxLength": MEMORY_MAX_STRING_CHARS});
    let list = |items: serde_json::Value, max: usize| json!({"type": "array", "items": items, "maxItems": max});
    let failure = json!({
        "type": "object",
        "properties": {"what": text, "why": text},
        "required": ["what", "why"],
        "additionalProperties": false,
    });
    Schema {
        name: "turn_memory",
        schema: json!({
            "type": "object",
            "properties": {
                "files_changed": list(text.clone(), MEMORY_MAX_ITEMS),
                "failures": list(failure, MEMORY_MAX_ITEMS - 1),
                "key_findings": list(text.clone(), MEMORY_MAX_ITEMS),
            },
            "required": ["files_changed", "failures", "key_findings"],
            "additionalProperties": false,
        }),
    }
}

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
        // Read before compaction can cover the attempt.
        let done = if completed {
            exchange(&job, id, turn, attempt)
        } else {
            None
        };
        // First what the next request needs, then what can wait.
        compact_after(&job, id, budget, &model);
        if let Some(done) = &done {
            remember(&job, id, turn, attempt, done, &model);
        }
        if let (Some(done), true) = (&done, job.settings.titles) {
            auto_title(&job, id, &done.text, &model);
        }
    });
    // Best-effort work: skipped (and said so) rather than failing anything.
    if let Err(why) = started {
        log::warn!("post-turn work of {id} skipped: {why}");
    }
}

/// Post-persist compaction, when the context is over the trigger, so the next turn does
/// not wait for it. Its summary is not needed for the next request to fit, so it is a
/// background call (SPEC §5): it waits for the background lane and yields to a chat
/// attempt at once, its call cancelled (a one-slot server is free for the chat); it then
/// waits for the lane again, at most [`BACKGROUND_MAX_DEFERRALS`] times, and meanwhile a
/// turn's pre-send compacts only if its request does not fit without it.
fn compact_after(job: &Inner, id: SessionId, budget: Budget, model: &str) {
    for _ in 0..=BACKGROUND_MAX_DEFERRALS {
        match job.deps.compactor.estimate(id) {
            Ok((_, tokens)) if budget.over_trigger(tokens) => {}
            _ => return,
        }
        let until = Instant::now() + BACKGROUND_LANE_WAIT;
        let give_up = || job.shutting_down();
        let Some(permit) = job.deps.provider.lanes().background(until, &give_up) else {
            return;
        };
        let s = summarizer(job, model, budget.window);
        let interrupted = || {
            if job.shutting_down() {
                Some(Interrupt::Shutdown)
            } else {
                permit.cancelled().then_some(Interrupt::Stopped)
            }
        };
        let bounds = Bounds::within(job.settings.compaction_timeout, &interrupted);
        match job.deps.compactor.post_persist(id, budget, &s, &bounds) {
            // It yielded to a chat attempt: again once the lane is free.
            Err(CompactionError::Interrupted(Interrupt::Stopped)) => continue,
            Ok(_)
            | Err(
                CompactionError::BackingOff(_)
                | CompactionError::Refused(_)
                | CompactionError::Interrupted(_),
            ) => return,
            Err(e) => {
                log::warn!("post-turn compaction of {id}: {e}");
                return;
            }
        }
    }
}

/// A completed attempt, as its turn memory is made from it.
struct Done {
    /// "User: …\n\nAssistant: …": the turn's user message and this attempt's answer.
    text: String,
    /// The attempt's tool calls, in order.
    calls: Vec<ToolExecution>,
}

fn exchange(inner: &Inner, id: SessionId, turn: u64, attempt: u32) -> Option<Done> {
    let events = inner.deps.store.events_for_context(id).ok()?;
    let mut question = None;
    let mut answer = None;
    let mut calls = Vec::new();
    for e in &events {
        match e.decode() {
            Decoded::Known(Payload::UserMessage(u)) if e.seq == turn => question = Some(u.text),
            Decoded::Known(Payload::AssistantTurn(a)) if a.turn == turn && a.attempt == attempt => {
                answer = Some(a.text)
            }
            Decoded::Known(Payload::ToolExecution(t)) if t.turn == turn && t.attempt == attempt => {
                calls.push(t)
            }
            _ => {}
        }
    }
    let text = format!("User: {}\n\nAssistant: {}", question?, answer?);
    Some(Done {
        text: text.chars().take(EXCHANGE_EXCERPT_CHARS).collect(),
        calls,
    })
}

/// The attempt's turn memory: `files_changed` and `failures` from its calls (the same
/// with or without a mini model), `key_findings` from the mini model when `--distill on`.
/// Written when there is something to remember: always after a distillation that
/// answered; with `--distill off` (or a distillation that gave nothing) only when the
/// attempt made calls, so a tool-less turn writes none, as before tools.
fn remember(inner: &Inner, id: SessionId, turn: u64, attempt: u32, done: &Done, model: &str) {
    // Read-only-ness is the registry's (the event does not carry it), asked now: a tool
    // nobody knows any more counts as one that writes.
    let tools = &inner.deps.tools;
    let read_only = |name: &str| tools.find(name).is_some_and(|t| t.read_only);
    let residue = residue::residue(&done.calls, &read_only);
    let findings = if inner.settings.distill {
        let mut text = done.text.clone();
        if !done.calls.is_empty() {
            text.push_str("\n\nTool calls made for this answer:\n");
            text.push_str(&residue::calls_excerpt(&done.calls));
        }
        distill(inner, id, turn, attempt, &text, model)
    } else {
        None
    };
    if findings.is_none() && done.calls.is_empty() {
        return;
    }
    let memory = Payload::TurnMemory(TurnMemory {
        turn,
        attempt,
        files_changed: residue.files_changed,
        failures: residue.failures,
        key_findings: findings.unwrap_or_default(),
    });
    if let Err(e) = inner.deps.store.append(id, &memory) {
        log::error!("storing turn memory of {id}: {e}");
    }
}

fn mini_model(inner: &Inner, chat_model: &str) -> String {
    inner
        .settings
        .mini_model
        .clone()
        .unwrap_or_else(|| chat_model.to_owned())
}

/// One background call: what it asks and of whom.
struct Ask<'a> {
    id: SessionId,
    purpose: Purpose,
    model: &'a str,
    system: &'a str,
    text: &'a str,
    max_tokens: u32,
    shape: Shape,
    timeout: Duration,
}

/// Asks in the background lane: waits for it (while `wanted`), skips when the breaker
/// has paused the purpose for the model, and asks again when a chat attempt cancelled the
/// call (at most [`BACKGROUND_MAX_DEFERRALS`] times). `None` when nothing was answered.
/// The caller reports success or failure to the breaker.
fn ask_in_background(
    inner: &Inner,
    ask: &Ask<'_>,
    wanted: &dyn Fn() -> bool,
) -> Option<Result<Completion, ProviderError>> {
    let (purpose, model) = (ask.purpose, ask.model);
    for _ in 0..=BACKGROUND_MAX_DEFERRALS {
        if !lock(&inner.jobs.breakers).allow(purpose, model, Instant::now()) {
            return None;
        }
        let give_up = || inner.shutting_down() || !wanted();
        let until = Instant::now() + BACKGROUND_LANE_WAIT;
        let Some(permit) = inner.deps.provider.lanes().background(until, &give_up) else {
            lock(&inner.jobs.breakers).released(purpose, model);
            if !inner.shutting_down() && wanted() {
                log::info!(
                    "{} of {}: skipped, the provider was busy for {BACKGROUND_LANE_WAIT:?}",
                    purpose.as_str(),
                    ask.id
                );
            }
            return None;
        };
        match call(inner, ask, permit.cancel_flag()) {
            Err(ProviderError::Cancelled) => {
                lock(&inner.jobs.breakers).released(purpose, model);
                log::info!(
                    "{} of {}: deferred, a chat attempt started",
                    purpose.as_str(),
                    ask.id
                );
            }
            answer => return Some(answer),
        }
    }
    log::info!(
        "{} of {}: skipped after {BACKGROUND_MAX_DEFERRALS} deferrals",
        purpose.as_str(),
        ask.id
    );
    None
}

/// One whole completion by the mini model, cancellable, recorded in the ledger.
fn call(
    inner: &Inner,
    ask: &Ask<'_>,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Completion, ProviderError> {
    let req = ChatRequest {
        model: ask.model.to_owned(),
        system: ask.system.to_owned(),
        messages: vec![(ChatRole::User, ask.text.to_owned())],
        max_tokens: Some(ask.max_tokens),
        temperature: Some(0.0),
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    };
    let started = Instant::now();
    let result = inner
        .deps
        .provider
        .complete_shaped(&req, &ask.shape, ask.timeout, cancel);
    let entry = LedgerEntry {
        session_id: Some(ask.id),
        purpose: ask.purpose,
        provider: inner.deps.provider.base_url().to_owned(),
        model: ask.model.to_owned(),
        usage: result.as_ref().map_or(Usage::default(), |c| c.usage),
        latency_ms: started.elapsed().as_millis() as u64,
        status: if result.is_ok() {
            CallStatus::Ok
        } else {
            CallStatus::Error
        },
        error_code: result.as_ref().err().map(|e| e.code().to_owned()),
    };
    if let Err(e) = inner.deps.store.record_call(&entry) {
        log::error!("could not record a {} call: {e}", ask.purpose.as_str());
    }
    result
}

/// Tells the breaker how a call went; logs when this failure paused the purpose.
fn report(inner: &Inner, purpose: Purpose, model: &str, ok: bool) {
    let mut b = lock(&inner.jobs.breakers);
    if ok {
        b.succeeded(purpose, model);
    } else if b.failed(purpose, model, Instant::now()) {
        log::warn!(
            "{} paused for {model} for {:?}: {} failures in a row",
            purpose.as_str(),
            super::breaker::BREAKER_COOLDOWN,
            super::breaker::BREAKER_THRESHOLD
        );
    }
}

/// A turn memory as the model writes it.
#[derive(Deserialize)]
pub struct MemoryJson {
    #[serde(default)]
    pub files_changed: Vec<String>,
    #[serde(default)]
    pub failures: Vec<MemoryFailure>,
    #[serde(default)]
    pub key_findings: Vec<String>,
}

/// The first JSON object in a reply (models like to wrap it in prose or fences).
pub fn parse_memory(reply: &str) -> Option<MemoryJson> {
    let start = reply.find('{')?;
    let end = reply.rfind('}')?;
    serde_json::from_str(reply.get(start..=end)?).ok()
}

/// The mini model's key findings (at most [`MAX_FINDINGS`]); `None` when it gave no
/// usable answer. Its `files_changed` and `failures` are not used: the calls say those
/// ([`residue`]), and a model guessing them would only add noise.
fn distill(
    inner: &Inner,
    id: SessionId,
    turn: u64,
    attempt: u32,
    exchange: &str,
    chat_model: &str,
) -> Option<Vec<String>> {
    let model = mini_model(inner, chat_model);
    let ask = Ask {
        id,
        purpose: Purpose::Distill,
        model: &model,
        system: DISTILL_PROMPT,
        text: exchange,
        max_tokens: MEMORY_MAX_TOKENS,
        shape: memory_shape(),
        timeout: DISTILL_TIMEOUT,
    };
    // Memory that lands after the session moved on is left out of the context (I3): once
    // a newer turn or attempt started, the call is not worth the provider's time.
    let wanted = || !inner.moved_on(id, turn, attempt);
    for _ in 0..DISTILL_ATTEMPTS {
        let reply = match ask_in_background(inner, &ask, &wanted) {
            None => return None,
            Some(Ok(c)) => c.text,
            Some(Err(e)) => {
                report(inner, Purpose::Distill, &model, false);
                log::warn!("distilling turn {turn} of {id}: {e}");
                return None;
            }
        };
        let Some(m) = parse_memory(&reply) else {
            report(inner, Purpose::Distill, &model, false);
            continue;
        };
        report(inner, Purpose::Distill, &model, true);
        return Some(m.key_findings.into_iter().take(MAX_FINDINGS).collect());
    }
    log::warn!("distilling turn {turn} of {id}: no valid JSON after {DISTILL_ATTEMPTS} tries");
    None
}

/// A title from a model's reply: its first line, unquoted, at most 6 words and 80 chars.
pub fn clean_title(reply: &str) -> Option<String> {
    let line = reply.lines().map(str::trim).find(|l| !l.is_empty())?;
    // "Sure! Here is a title for this conversation:" announces a title, it is not one (a
    // weak model's preamble, cut at the newline `stop`): unusable, so the breaker counts it.
    if line.ends_with(':') {
        return None;
    }
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
    match inner.deps.store.session(id) {
        Ok(s) if s.title.is_none() => {}
        _ => return,
    }
    let model = mini_model(inner, chat_model);
    let ask = Ask {
        id,
        purpose: Purpose::Title,
        model: &model,
        system: TITLE_PROMPT,
        text: exchange,
        max_tokens: TITLE_MAX_TOKENS,
        shape: Shape {
            stop: vec!["\n".into()],
            schema: None,
        },
        timeout: TITLE_TIMEOUT,
    };
    let title = match ask_in_background(inner, &ask, &|| true) {
        None => return,
        Some(Ok(c)) => clean_title(&c.text),
        Some(Err(e)) => {
            log::warn!("titling {id}: {e}");
            None
        }
    };
    report(inner, Purpose::Title, &model, title.is_some());
    let Some(title) = title else { return };
    // Never over a title someone set meanwhile.
    let result = inner.deps.store.write(|w| {
        if w.session(id)?.title.is_none() {
            w.rename(id, title.clone(), TitledBy::Auto)?;
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
    fn a_preamble_is_not_a_title() {
        assert_eq!(
            clean_title("Sure! Here is a title for this conversation:"),
            None
        );
        assert_eq!(
            clean_title("Title: Boiling eggs"),
            Some("Boiling eggs".into())
        );
    }

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
