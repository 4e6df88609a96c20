//! The steps of one attempt (SPEC §13): the model is offered the tools; when a step's
//! stream ends with tool calls, each is checked (JSON object arguments, a known name),
//! asked about when its policy says so ([`super::consent`]), run, and recorded as a
//! `tool_execution` event with a digest of its result; the next step's request is the
//! previous one plus that step's assistant message and one `tool` message per call (I3
//! within the attempt). The full results live only here, in memory, for the rest of the
//! attempt. At most `--max-tool-steps` steps; the last is sent with `tool_choice: "none"`.

use std::time::Instant;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::attempt::{Stopped, Streamed, stream};
use super::consent;
use super::engine::Inner;
use super::frames::{ActiveTurn, Frame, Phase};
use crate::provider::{ChatRequest, Step, ToolCall, ToolDef};
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
    out: &mut Streamed,
) -> Stopped {
    let offered = if inner.provider.offers_tools(model) {
        inner.tools.offered()
    } else {
        Vec::new()
    };
    request.tools = offered
        .iter()
        .map(|t| ToolDef {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        })
        .collect();
    let max_steps = inner.settings.tool_limits.max_tool_steps.max(1);
    loop {
        out.begin_step();
        request.tool_choice_none = !request.tools.is_empty() && out.steps >= max_steps;
        let stopped = stream(inner, turn, &request, out);
        let calls = std::mem::take(&mut out.step_calls);
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
        if let Err(e) = super::attempt::checkpoint(inner, turn, out) {
            return Stopped::Store(e);
        }
        let step = out.steps;
        let results = match run_calls(inner, turn, &offered, step, &calls) {
            Ok(r) => r,
            Err(stopped) => return stopped,
        };
        request.steps.push(Step {
            text: (!out.step_text.is_empty()).then(|| out.step_text.clone()),
            calls,
            results,
        });
        out.join_pending = true;
        out.finish_reason = None;
    }
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
        let seq = inner
            .store
            .append(turn.session_id, &Payload::ToolExecution(record.clone()))
            .map_err(Stopped::Store)?
            .seq;
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

fn run_one(
    inner: &Inner,
    turn: &ActiveTurn,
    spec: Option<&ToolSpec>,
    call: &ToolCall,
) -> Result<Ran, crate::session::StoreError> {
    let args = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(v @ Value::Object(_)) => v,
        // An empty string is how some models call a tool without arguments.
        _ if call.arguments.trim().is_empty() => Value::Object(Default::default()),
        Ok(_) => {
            return Ok(Ran::failed(
                status::ERROR,
                "the arguments are not a JSON object".into(),
            ));
        }
        Err(e) => {
            return Ok(Ran::failed(
                status::ERROR,
                format!("the arguments are not valid JSON: {e}"),
            ));
        }
    };
    let Some(spec) = spec else {
        return Ok(Ran::failed(
            status::ERROR,
            format!("there is no tool named {:?}", call.name),
        ));
    };
    match spec.policy {
        Policy::Deny => {
            return Ok(Ran::failed(status::DENIED, DENIED_NOTE.into()));
        }
        Policy::Allow => {}
        Policy::Ask => {
            if !inner
                .remembered
                .allows(&inner.store, turn.session_id, &spec.name)?
            {
                let timeout = inner.settings.tool_limits.permission_timeout;
                let answer = consent::ask(
                    inner,
                    turn,
                    &call.id,
                    &spec.name,
                    &cut_bytes(&call.arguments, MAX_ARGS_BYTES),
                    timeout,
                )?;
                if !answer.allow {
                    let cancelled = matches!(
                        answer.by,
                        crate::session::events::resolved_by::STOP
                            | crate::session::events::resolved_by::SHUTDOWN
                    );
                    return Ok(if cancelled {
                        Ran::failed(status::CANCELLED, CANCELLED_NOTE.into())
                    } else {
                        Ran::failed(status::DENIED, DENIED_NOTE.into())
                    });
                }
            }
        }
    }
    turn.push(Frame::Status { phase: Phase::Tool });
    let timeout = inner.tools.timeout(&spec.name);
    let outcome = inner.tools.call(
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

/// An error's text for the log: its first line, at most 500 characters.
fn short(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(500)
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
