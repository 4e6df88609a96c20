//! The schema before 0.32: `conversations` (`id`, `name`, `model`) and `responses` (one
//! exchange each: `prompt`, `system`, `response`, `model`, `conversation_id`,
//! `datetime_utc`, and in later versions `duration_ms`).

use jiff::{SignedDuration, Timestamp};
use rusqlite::{Connection, OptionalExtension};

use super::{datetime, sql, with_title};
use crate::import::{Conversation, Message, Role, Source, tree};

/// One legacy conversation (or a response without one): each response a prompt and its
/// answer, in a line, with a system message where the system prompt changes.
pub(super) fn read_legacy(conn: &Connection, id: &str) -> Result<Conversation, String> {
    let (name, conv_model): (Option<String>, Option<String>) = conn
        .query_row(
            "SELECT name, model FROM conversations WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql)?
        .unwrap_or_default();
    legacy_messages(conn, id, conv_model)
        .map_err(|e| with_title(name.as_deref(), e))
        .map(|messages| Conversation {
            source: Source::Llm,
            id: id.to_owned(),
            title: name,
            created_at: messages.first().and_then(|m| m.created_at),
            current: messages.last().map(|m| m.id.clone()),
            messages,
        })
}

/// The messages of one legacy conversation, in a line: per response, a system message
/// where the system prompt changes, the prompt (with its attachments counted) and the
/// answer.
fn legacy_messages(
    conn: &Connection,
    id: &str,
    conv_model: Option<String>,
) -> Result<Vec<Message>, String> {
    let q = responses_query(conn);
    let has_attachments = conn
        .prepare("SELECT response_id FROM prompt_attachments LIMIT 0")
        .is_ok();
    let mut stmt = conn.prepare(&q).map_err(sql)?;
    let rows = stmt.query_map([id], response_row).map_err(sql)?;
    let mut messages: Vec<Message> = Vec::new();
    let mut system_now: Option<String> = None;
    for row in rows {
        let (rid, prompt, system, response, model, at, duration_ms) = row.map_err(sql)?;
        let at = datetime(at.as_deref()).map_err(|e| format!("response {rid:?}: {e}"))?;
        let answered = at
            .zip(duration_ms)
            .and_then(|(t, ms)| t.checked_add(SignedDuration::from_millis(ms)).ok())
            .or(at);
        let system = system.filter(|s| !s.trim().is_empty());
        if system.is_some() && system != system_now {
            chain(
                &mut messages,
                format!("{rid}:system"),
                Role::System,
                system.clone().unwrap_or_default(),
                at,
                None,
            );
            system_now = system;
        }
        chain(
            &mut messages,
            format!("{rid}:prompt"),
            Role::User,
            prompt.unwrap_or_default(),
            at,
            None,
        );
        if has_attachments {
            let n = attachments(conn, &rid)?;
            if let (Some(m), true) = (messages.last_mut(), n > 0) {
                m.skipped.push(("attachment".into(), n.unsigned_abs()));
            }
        }
        let model = model.or_else(|| conv_model.clone());
        chain(
            &mut messages,
            format!("{rid}:response"),
            Role::Assistant,
            response.unwrap_or_default(),
            answered,
            model,
        );
    }
    tree::check(&messages, None)?;
    Ok(messages)
}

/// One row of `responses`: id, prompt, system, response, model, time, duration.
type ResponseRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

/// The query for a conversation's responses, in order; `duration_ms` only where this
/// version of the schema has it.
fn responses_query(conn: &Connection) -> String {
    let has_duration = conn
        .prepare("SELECT duration_ms FROM responses LIMIT 0")
        .is_ok();
    format!(
        "SELECT id, prompt, system, response, model, datetime_utc, {} FROM responses \
         WHERE coalesce(conversation_id, id) = ?1 ORDER BY datetime_utc, id",
        if has_duration { "duration_ms" } else { "NULL" }
    )
}

/// A [`ResponseRow`] from the query's columns.
fn response_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ResponseRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

/// How many attachments the response `rid`'s prompt had.
fn attachments(conn: &Connection, rid: &str) -> Result<i64, String> {
    conn.query_row(
        "SELECT count(*) FROM prompt_attachments WHERE response_id = ?1",
        [rid],
        |r| r.get(0),
    )
    .map_err(sql)
}

/// Appends a message whose parent is the one before it (legacy conversations are a line).
fn chain(
    messages: &mut Vec<Message>,
    id: String,
    role: Role,
    text: String,
    created_at: Option<Timestamp>,
    model: Option<String>,
) {
    let parent = messages.last().map(|m: &Message| m.id.clone());
    messages.push(Message {
        id,
        parent,
        role,
        text,
        created_at,
        model,
        tool_name: None,
        skipped: Vec::new(),
    });
}
