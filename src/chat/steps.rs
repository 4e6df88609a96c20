//! The steps of one attempt (SPEC §13): the model is offered the tools; when a step's
//! stream ends with tool calls, each is checked (JSON object arguments, a known name),
//! asked about when its policy says so ([`super::consent`]), run, and recorded as a
//! `tool_execution` event with a digest of its result; the next step's request is the
//! previous one plus that step's assistant message and one `tool` message per call (I3
//! within the attempt). The full results live only here, in memory, for the rest of the
//! attempt. At most `--max-tool-steps` steps; the last is sent with `tool_choice: "none"`.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::consent;
use super::frames::{ActiveTurn, Frame, Phase};
use super::state::Inner;
use super::stream::{Stopped, Streamed, stream};
use crate::provider::{ChatRequest, Step, ToolCall};
use crate::session::events::{
    MAX_ARGS_BYTES, MAX_PREVIEW_CHARS, Payload, ResultDigest, ToolExecution, cut_bytes, status,
};
use crate::tools::{Policy, ToolSpec, ToolStatus};

/// What the model is told for a call the user denied.
pub const DENIED_NOTE: &str = "[denied by the user]";
/// What the model is told for a call the stop or the shutdown cancelled.
pub const CANCELLED_NOTE: &str = "[cancelled]";

/// Runs the attempt's steps until the model answers without calls, the step limit, or a
/// stop; returns why the last step's stream stopped.
pub(super) fn run(
    inner: &Inner,
    turn: &ActiveTurn,
    mut request: ChatRequest,
    model: &str,
    offered: &[ToolSpec],
    limit_tokens: u64,
    out: &mut Streamed,
) -> Stopped {
    request.tools = super::budget::definitions(offered);
    let max_steps = inner.settings.tool_limits.max_tool_steps.max(1);
    let mut used_ids = HashSet::new();
    loop {
        out.begin_step();
        request.tool_choice_none = !request.tools.is_empty() && out.steps >= max_steps;
        let stopped = stream(inner, turn, &request, out);
        let calls = unique_ids(
            std::mem::take(&mut out.step_calls),
            out.steps,
            &mut used_ids,
        );
        let more = matches!(stopped, Stopped::Completed)
            && !calls.is_empty()
            && !request.tools.is_empty()
            && !request.tool_choice_none;
        if !more {
            return stopped;
        }
        // This step is over (its own ledger row); the attempt goes on.
        super::end::record_step(inner, turn, model, out);
        // Its text is made durable before the calls: a tool or a permission question may
        // take minutes, and a brain killed meanwhile keeps what was said (§6).
        if let Err(e) = super::stream::checkpoint(inner, turn, out) {
            return Stopped::Store(e);
        }
        let step = out.steps;
        let results = match run_calls(inner, turn, offered, step, &calls) {
            Ok(r) => r,
            Err(stopped) => return stopped,
        };
        request.steps.push(Step {
            text: (!out.step_text.is_empty()).then(|| out.step_text.clone()),
            calls,
            results,
        });
        fit_window(inner, &mut request, limit_tokens);
        out.join_pending = true;
        out.finish_reason = None;
    }
}

/// What replaces the part of a result the window has no room for.
const NO_ROOM_NOTE: &str = "[the rest of this result did not fit in the model's context window]";
/// Bytes per estimated token when cutting a result to fit (a low guess: cutting by it
/// leaves the request at or under its estimate).
const BYTES_PER_TOKEN_LOW: usize = 2;

/// Keeps the next step's request within the window (I4): when the newest step's results
/// push it over, each of them is cut to an equal share of the room left, with a note, so
/// the model still learns what each call did.
fn fit_window(inner: &Inner, request: &mut ChatRequest, limit_tokens: u64) {
    let size = |r: &ChatRequest| {
        inner
            .deps
            .estimator
            .count(&crate::provider::wire::request_body(r, true).to_string())
    };
    let total = size(request);
    if total <= limit_tokens {
        return;
    }
    let Some(step) = request.steps.last_mut() else {
        return;
    };
    let results_tokens: u64 = step
        .results
        .iter()
        .map(|(_, c)| inner.deps.estimator.count(c))
        .sum();
    let room = limit_tokens.saturating_sub(total.saturating_sub(results_tokens));
    let share = (room as usize / step.results.len().max(1)) * BYTES_PER_TOKEN_LOW;
    for (_, content) in &mut step.results {
        if content.len() <= share {
            continue;
        }
        let mut end = share.saturating_sub(NO_ROOM_NOTE.len() + 1);
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        *content = format!("{}\n{NO_ROOM_NOTE}", &content[..end]);
    }
}

/// The longest call id kept as the model sent it.
const MAX_CALL_ID_CHARS: usize = 64;

/// Call ids unique within the attempt and safe in a URL path segment: an answer to a
/// permission question names its call by id, so an id the model repeats in a later step
/// (some servers number calls `call_0` in every step), leaves empty, or fills with `/` or
/// control characters is replaced by `call_<step>_<n>`; the model is sent the new id with
/// its call and result, so its conversation stays consistent.
fn unique_ids(calls: Vec<ToolCall>, step: u32, used: &mut HashSet<String>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(n, mut call)| {
            let safe = !call.id.is_empty()
                && call.id.chars().count() <= MAX_CALL_ID_CHARS
                && call
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !safe || used.contains(&call.id) {
                let mut id = format!("call_{step}_{n}");
                let mut k = 0;
                while used.contains(&id) {
                    k += 1;
                    id = format!("call_{step}_{n}_{k}");
                }
                call.id = id;
            }
            used.insert(call.id.clone());
            call
        })
        .collect()
}

/// Runs one step's calls in order; the content sent back for each.
fn run_calls(
    inner: &Inner,
    turn: &ActiveTurn,
    offered: &[ToolSpec],
    step: u32,
    calls: &[ToolCall],
) -> Result<Vec<(String, String)>, Stopped> {
    let mut results = Vec::with_capacity(calls.len());
    for call in calls {
        if let Some(i) = turn.interrupt() {
            return Err(i.into());
        }
        let spec = offered.iter().find(|t| t.name == call.name);
        turn.push(Frame::ToolCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            server: spec.map(|t| t.server.clone()).unwrap_or_default(),
            args: cut_bytes(&call.arguments, MAX_ARGS_BYTES),
            step,
        });
        let started = Instant::now();
        let ran = run_one(inner, turn, spec, call).map_err(Stopped::Store)?;
        let digest = digest(&ran.result);
        let record = ToolExecution {
            turn: turn.turn,
            attempt: turn.attempt,
            step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            server: spec.map(|t| t.server.clone()).unwrap_or_default(),
            args: cut_bytes(&call.arguments, MAX_ARGS_BYTES),
            status: ran.status.to_owned(),
            result_digest: digest.clone(),
            error: ran.error.clone(),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        // I7 across servers: each of the attempt's appends only while the session is its own.
        if !turn.keep_claim(&inner.deps.store) {
            return Err(Stopped::ByUser);
        }
        let seq = turn
            .append(&inner.deps.store, &Payload::ToolExecution(record.clone()))
            .map_err(Stopped::Store)?
            .seq;
        turn.wrote(seq);
        turn.push(Frame::ToolResult {
            call_id: call.id.clone(),
            status: record.status.clone(),
            preview: digest.preview,
            duration_ms: record.duration_ms,
            seq: Some(seq),
        });
        results.push((call.id.clone(), ran.for_model(inner)));
        if let Some(i) = turn.interrupt() {
            return Err(i.into());
        }
    }
    Ok(results)
}

/// What one call came to.
struct Ran {
    status: &'static str,
    /// The full result (ok) or the error text, as the tool gave it.
    result: String,
    error: Option<String>,
    /// What the model is told instead of the result, when not the result itself.
    note: Option<String>,
}

impl Ran {
    fn failed(status: &'static str, why: String) -> Ran {
        Ran {
            status,
            result: String::new(),
            error: Some(why.clone()),
            note: Some(why),
        }
    }

    /// The `tool` message's content: the result cut at `--max-tool-result-bytes` with a
    /// marker, or what happened instead.
    fn for_model(&self, inner: &Inner) -> String {
        if let Some(note) = &self.note {
            return note.clone();
        }
        let max = inner.settings.tool_limits.max_tool_result_bytes;
        if self.result.len() <= max {
            return self.result.clone();
        }
        let mut end = max;
        while !self.result.is_char_boundary(end) {
            end -= 1;
        }
        format!(
            "{}\n[the result was cut at {max} of its {} bytes]",
            &self.result[..end],
            self.result.len()
        )
    }
}

/// A call's arguments as a JSON object (an empty string is how some models call a tool
/// without arguments), or the failure the model is told.
fn call_arguments(arguments: &str) -> Result<Value, Ran> {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ if arguments.trim().is_empty() => Ok(Value::Object(Default::default())),
        Ok(_) => Err(Ran::failed(
            status::ERROR,
            "the arguments are not a JSON object".into(),
        )),
        Err(e) => Err(Ran::failed(
            status::ERROR,
            format!("the arguments are not valid JSON: {e}"),
        )),
    }
}

/// Whether the call may run by its policy (I9): `None` when it may, else what the model
/// is told (denied by policy or by the user, or cancelled by a stop while asking).
fn refusal(
    inner: &Inner,
    turn: &ActiveTurn,
    spec: &ToolSpec,
    call_id: &str,
    canonical: &str,
) -> Result<Option<Ran>, crate::session::StoreError> {
    match spec.policy {
        Policy::Deny => Ok(Some(Ran::failed(status::DENIED, DENIED_NOTE.into()))),
        Policy::Allow => Ok(None),
        Policy::Ask => {
            if inner
                .remembered
                .allows(&inner.deps.store, turn.session_id, &spec.name)?
            {
                return Ok(None);
            }
            let timeout = inner.settings.tool_limits.permission_timeout;
            let answer = consent::ask(inner, turn, call_id, &spec.name, canonical, timeout)?;
            if answer.allow {
                return Ok(None);
            }
            let cancelled = matches!(
                answer.by,
                crate::session::events::resolved_by::STOP
                    | crate::session::events::resolved_by::SHUTDOWN
            );
            Ok(Some(if cancelled {
                Ran::failed(status::CANCELLED, CANCELLED_NOTE.into())
            } else {
                Ran::failed(status::DENIED, DENIED_NOTE.into())
            }))
        }
    }
}

fn run_one(
    inner: &Inner,
    turn: &ActiveTurn,
    spec: Option<&ToolSpec>,
    call: &ToolCall,
) -> Result<Ran, crate::session::StoreError> {
    let args = match call_arguments(&call.arguments) {
        Ok(args) => args,
        Err(refused) => return Ok(refused),
    };
    let Some(spec) = spec else {
        return Ok(Ran::failed(
            status::ERROR,
            format!("there is no tool named {:?}", call.name),
        ));
    };
    // What the user is asked about is exactly what the tool gets: the arguments as parsed
    // (a repeated key keeps its last value), whole. Arguments too long to show whole are
    // refused rather than shown cut (a cut could hide what the call really does).
    let canonical = args.to_string();
    if canonical.len() > MAX_ARGS_BYTES {
        return Ok(Ran::failed(
            status::ERROR,
            format!(
                "the arguments are {} bytes; at most {MAX_ARGS_BYTES} are accepted",
                canonical.len()
            ),
        ));
    }
    if let Some(refused) = refusal(inner, turn, spec, &call.id, &canonical)? {
        return Ok(refused);
    }
    turn.push(Frame::Status { phase: Phase::Tool });
    let timeout = inner.deps.tools.timeout(&spec.name);
    let outcome = inner.deps.tools.call(
        &spec.name,
        &args,
        Instant::now() + timeout,
        turn.stop_flag(),
    );
    Ok(match outcome.status {
        ToolStatus::Ok => Ran {
            status: status::OK,
            result: outcome.text,
            error: None,
            note: None,
        },
        ToolStatus::Error => Ran {
            status: status::ERROR,
            error: Some(short(&outcome.text)),
            note: None,
            result: outcome.text,
        },
        ToolStatus::Timeout => Ran::failed(
            status::TIMEOUT,
            format!("[the tool did not answer in {} s]", timeout.as_secs()),
        ),
        ToolStatus::Cancelled => Ran::failed(status::CANCELLED, CANCELLED_NOTE.into()),
    })
}

/// The most of a tool's error kept in `tool_execution.error` (the whole text still goes
/// to the model, within `--max-tool-result-bytes`).
const MAX_ERROR_CHARS: usize = 500;

/// An error's text for the log: its first line, at most [`MAX_ERROR_CHARS`].
fn short(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(MAX_ERROR_CHARS)
        .collect()
}

/// The digest kept in the log: size, SHA-256 and the first characters.
pub fn digest(result: &str) -> ResultDigest {
    let hash = Sha256::digest(result.as_bytes());
    ResultDigest {
        bytes: result.len() as u64,
        sha256: hash.iter().map(|b| format!("{b:02x}")).collect(),
        preview: result.chars().take(MAX_PREVIEW_CHARS).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn call_ids_are_unique_in_the_attempt_and_safe_in_a_path() {
        let mut used = HashSet::new();
        let one = unique_ids(vec![call("call_0"), call("a/b"), call("")], 1, &mut used);
        let ids: Vec<&str> = one.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_0", "call_1_1", "call_1_2"]);
        // A later step repeating an id gets a new one.
        let two = unique_ids(vec![call("call_0"), call("ok-id")], 2, &mut used);
        let ids: Vec<&str> = two.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_2_0", "ok-id"]);
        let long = unique_ids(vec![call(&"x".repeat(65))], 3, &mut used);
        assert_eq!(long[0].id, "call_3_0");
    }

    #[test]
    fn a_digest_has_the_size_the_hash_and_a_bounded_preview() {
        let d = digest("abc");
        assert_eq!(
            d.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!((d.bytes, d.preview.as_str()), (3, "abc"));
        let long = "é".repeat(MAX_PREVIEW_CHARS + 10);
        let d = digest(&long);
        assert_eq!(d.preview.chars().count(), MAX_PREVIEW_CHARS);
        assert_eq!(d.bytes, long.len() as u64);
    }
}
