//! `brain sessions show`: one session as its transcript, the model's context, or its
//! raw events.

use std::io::Write;

use serde_json::{Value, json};

use super::session_json;
use crate::api::views;
use crate::cli::term::{count, json_text, printable};
use crate::cli::{CliError, decided_words};
use crate::session::events::{AttemptEnd, ToolExecution, Usage, method};
use crate::session::projection::{Item, ItemBody, Role, llm_context, ui_transcript};
use crate::session::{SessionId, SessionRow, Store};
use crate::tokens::Estimator;

/// The session's title line and its dates, above any view of it.
fn session_header(session: &SessionRow, out: &mut dyn Write) -> Result<(), CliError> {
    writeln!(
        out,
        "{}  {}{}",
        session.id,
        printable(session.title.as_deref().unwrap_or("(untitled)")),
        if session.archived { "  [archived]" } else { "" }
    )?;
    writeln!(
        out,
        "created {}, updated {}\n",
        session.created_at, session.updated_at
    )?;
    Ok(())
}

/// `show`: the transcript a person reads, item by item.
pub(super) fn show_transcript(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let items = ui_transcript(&store.events(id, 0, None)?, None);
    if as_json {
        let items = serde_json::to_value(&items).unwrap_or(Value::Null);
        writeln!(
            out,
            "{}",
            json_text(&json!({"session": session_json(&session), "items": items}))
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    for item in &items {
        write_item(item, out)?;
    }
    Ok(())
}

/// One transcript item as text: a header line, then its text indented.
fn write_item(item: &Item, out: &mut dyn Write) -> Result<(), CliError> {
    let at = &item.created_at;
    let (head, body) = item_text(&item.body);
    // An earlier version stays in the history, marked (SPEC §14).
    let head = if item.abandoned {
        format!("[earlier version] {head}")
    } else {
        head
    };
    // The head quotes titles, models and error messages: untrusted too.
    writeln!(out, "#{} {at}  {}", item.seq, printable(&head))?;
    if let Some(text) = body {
        for line in printable(text).lines() {
            writeln!(out, "    {line}")?;
        }
    }
    writeln!(out)?;
    Ok(())
}

/// An item's header (before any `[earlier version]` mark) and the text shown under it,
/// for the kinds that have one.
fn item_text(body: &ItemBody) -> (String, Option<&str>) {
    match body {
        ItemBody::User { text } => ("you".into(), Some(text)),
        ItemBody::Assistant {
            turn,
            attempt,
            model,
            usage,
            duration_ms,
            finish_reason,
            ..
        } => (
            assistant_head((*turn, *attempt), model, usage, *duration_ms, finish_reason),
            body.shown_text(),
        ),
        ItemBody::Interrupted {
            turn,
            attempt,
            ended,
            ..
        } => (
            format!(
                "interrupted (turn {turn}, attempt {attempt}): {}",
                interrupted_why(ended.as_ref())
            ),
            body.shown_text(),
        ),
        ItemBody::Streaming { turn, attempt, .. } => (
            format!("answering (turn {turn}, attempt {attempt}): the answer so far"),
            body.shown_text(),
        ),
        // Before the calls it made, where it was written.
        ItemBody::Step {
            turn,
            attempt,
            step,
            text,
            ..
        } => (
            format!(
                "assistant (turn {turn}, attempt {attempt}, step {step}), before its tool calls"
            ),
            Some(text),
        ),
        ItemBody::Error {
            turn,
            attempt,
            code,
            message,
            ..
        } => (
            format!("failed (turn {turn}, attempt {attempt}): {code}: {message}"),
            None,
        ),
        ItemBody::Compaction {
            summary,
            replaces_through_seq,
            tokens_before,
            tokens_after,
            method: how,
        } => (
            compaction_head(*replaces_through_seq, (*tokens_before, *tokens_after), how),
            Some(summary),
        ),
        ItemBody::Title { title, by } => (format!("renamed to {title:?} ({by:?})"), None),
        ItemBody::Tool(t) => (tool_head(t), Some(&t.result_digest.preview)),
        ItemBody::Permission {
            call_id,
            name,
            decision,
            by,
            ..
        } => (permission_head(name, call_id, decision, by), None),
        ItemBody::Rewind { to_seq, edited_seq } => (
            format!("── edited #{edited_seq}: the conversation goes on from #{to_seq} ──"),
            None,
        ),
        ItemBody::Unreadable { event_kind } => (format!("unreadable {event_kind} event"), None),
    }
}

/// A finished answer's header: its attempt, model, tokens, time and finish reason.
fn assistant_head(
    (turn, attempt): (u64, u32),
    model: &str,
    usage: &Usage,
    duration_ms: u64,
    finish_reason: &Option<String>,
) -> String {
    // An imported answer knows no usage or time: none is shown rather than zeros.
    let tokens = if usage.input_tokens + usage.output_tokens > 0 {
        format!(
            "{} in, {} cached, {} out; ",
            usage.input_tokens, usage.cache_read_tokens, usage.output_tokens
        )
    } else {
        String::new()
    };
    let took = if duration_ms > 0 {
        format!("{duration_ms} ms; ")
    } else {
        String::new()
    };
    format!(
        "assistant (turn {turn}, attempt {attempt}; {model}; {tokens}{took}{})",
        finish_reason.as_deref().unwrap_or("no finish reason")
    )
}

/// Why a cut-off answer stopped, in words; `None` when brain never recorded an end.
fn interrupted_why(ended: Option<&AttemptEnd>) -> String {
    match ended.map(|e| (e.code.as_str(), e)) {
        None => "brain stopped before the answer finished".to_owned(),
        Some(("stopped", _)) => "stopped by the user".to_owned(),
        Some(("shutdown", _)) => "the server stopped while answering".to_owned(),
        Some((code, e)) => format!("cut off ({code}: {})", e.message),
    }
}

/// A compaction's rule line: what it replaced, how, and the tokens before and after.
fn compaction_head(
    replaces_through_seq: u64,
    (tokens_before, tokens_after): (u64, u64),
    how: &str,
) -> String {
    let done = if how == method::LLM {
        "summarised".to_owned()
    } else {
        format!("condensed to an {how} digest (no summary could be written)")
    };
    format!(
        "── compacted: #{replaces_through_seq} and before {done}, \
         {tokens_before} → {tokens_after} tokens ──"
    )
}

/// A tool call's header: name, call id, step, status, time and any error.
fn tool_head(t: &ToolExecution) -> String {
    format!(
        "tool {} ({}, step {}): {}, {} ms{}",
        t.name,
        t.call_id,
        t.step,
        t.status,
        t.duration_ms,
        t.error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    )
}

/// A permission question's header: its answer and who gave it, or that it still waits.
fn permission_head(
    name: &str,
    call_id: &str,
    decision: &Option<String>,
    by: &Option<String>,
) -> String {
    match (decision, by) {
        (Some(d), Some(by)) => {
            format!(
                "permission for {name} ({call_id}): {}",
                decided_words(d, by)
            )
        }
        _ => format!("permission for {name} ({call_id}): waiting for an answer"),
    }
}

/// `show --llm`: what the model would be sent next, with token counts.
pub(super) fn show_llm(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let ctx = llm_context(&store.events_for_context(id)?);
    let tokens = Estimator::new().context(&ctx);
    if as_json {
        let messages: Vec<Value> = ctx
            .messages
            .iter()
            .zip(&tokens.messages)
            .map(|(m, t)| {
                json!({"role": m.role, "content": m.content, "tokens": t,
                                 "first_seq": m.first_seq, "last_seq": m.last_seq})
            })
            .collect();
        writeln!(
            out,
            "{}",
            json_text(
                &json!({"system": ctx.system, "system_tokens": tokens.system,
                   "messages": messages, "tokens": tokens.total})
            )
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    writeln!(out, "system ({})", count(tokens.system, "token"))?;
    for line in printable(&ctx.system).lines() {
        writeln!(out, "    {line}")?;
    }
    for (m, t) in ctx.messages.iter().zip(&tokens.messages) {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        writeln!(
            out,
            "\n{role} (#{}..#{}, {})",
            m.first_seq,
            m.last_seq,
            count(*t, "token")
        )?;
        for line in printable(&m.content).lines() {
            writeln!(out, "    {line}")?;
        }
    }
    writeln!(out, "\ntotal: {}", count(tokens.total, "token"))?;
    Ok(())
}

/// `show --events`: the raw event log.
pub(super) fn show_events(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let events = store.events(id, 0, None)?;
    if as_json {
        let events: Vec<Value> = events.iter().map(views::event).collect();
        let mut s = session_json(&session);
        s["system"] = json!(session.system);
        writeln!(
            out,
            "{}",
            json_text(&json!({"session": s, "events": events}))
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    for e in &events {
        writeln!(
            out,
            "#{:<5} {}  {:<18} {}",
            e.seq,
            printable(&e.created_at),
            printable(&e.kind),
            printable(&e.payload)
        )?;
    }
    Ok(())
}
