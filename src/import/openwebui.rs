//! Open WebUI's chat export ("Export All Chats", or one chat's "Export chat (.json)"): a
//! JSON array of chat records. Per record `id`, `title`, `created_at` (epoch seconds) and
//! `chat`, whose `history` is the message tree: `messages` (id → `{id, parentId,
//! childrenIds, role, content, timestamp, model, modelName, files, …}`) and `currentId`,
//! the message the user last saw. Open WebUI writes user timestamps in epoch seconds and
//! some assistant ones in milliseconds, so each is told apart by its size.
//!
//! The array is read one element at a time: memory is bounded by the largest chat.

use std::io::BufRead;

use jiff::Timestamp;
use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Conversation, Message, ReadError, Role, Source, count_skipped, tree};

/// An epoch number at or above this is in milliseconds: as seconds it would be past the
/// year 5000, as milliseconds it is after March 1973.
const MILLIS_FROM: f64 = 100_000_000_000.0;

/// The id given to the chat's system prompt, made the root above the history's roots so
/// that it is on every branch.
pub const SYSTEM_ID: &str = "openwebui:system";

/// Whether one element of a JSON array is shaped like an Open WebUI chat: a `chat` object
/// holding a `history` (ChatGPT's have `mapping`, Claude's `chat_messages`).
pub fn looks_like(element: &Value) -> bool {
    element
        .get("chat")
        .and_then(|c| c.get("history"))
        .is_some_and(Value::is_object)
}

/// The chats of an Open WebUI export, one at a time. After the first error it ends.
pub fn read<R: BufRead>(reader: R) -> Chats<R> {
    Chats {
        reader,
        index: 0,
        state: State::Start,
    }
}

/// The iterator [`read`] returns.
pub struct Chats<R> {
    reader: R,
    index: usize,
    state: State,
}

#[derive(PartialEq)]
enum State {
    Start,
    Elements,
    Done,
}

impl<R: BufRead> Iterator for Chats<R> {
    type Item = Result<Conversation, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.step().transpose()?;
        if item.is_err() {
            self.state = State::Done;
        }
        self.index += 1;
        Some(item)
    }
}

impl<R: BufRead> Chats<R> {
    fn fail(&self, reason: impl Into<String>) -> ReadError {
        ReadError {
            index: self.index,
            id: None,
            reason: reason.into(),
        }
    }

    /// The next chat, `None` at the end of the array.
    fn step(&mut self) -> Result<Option<Conversation>, ReadError> {
        match self.state {
            State::Done => return Ok(None),
            State::Start => {
                match self.next_byte()? {
                    Some(b'[') => {}
                    Some(b) => {
                        return Err(self.fail(format!(
                            "an Open WebUI export is a JSON array, but the file starts with {:?}",
                            b as char
                        )));
                    }
                    None => return Err(self.fail("the file is empty")),
                }
                self.state = State::Elements;
                if self.peek_byte()? == Some(b']') {
                    self.consume(1);
                    return self.finish();
                }
            }
            State::Elements => match self.next_byte()? {
                Some(b',') => {}
                Some(b']') => return self.finish(),
                Some(b) => {
                    return Err(self.fail(format!(
                        "expected `,` or `]` between chats, found {:?}",
                        b as char
                    )));
                }
                None => return Err(self.fail("the file ends inside the array (truncated?)")),
            },
        }
        // Only an object is parsed here: serde_json reads nothing past a closing `}`, so
        // the separator after it is still in the reader for the next call.
        match self.peek_byte()? {
            Some(b'{') => {}
            Some(_) => return Err(self.fail("a chat is not a JSON object")),
            None => return Err(self.fail("the file ends inside the array (truncated?)")),
        }
        let raw: Box<RawValue> =
            Deserialize::deserialize(&mut serde_json::Deserializer::from_reader(&mut self.reader))
                .map_err(|e| self.fail(format!("not valid JSON: {e}")))?;
        parse_chat(self.index, raw.get()).map(Some)
    }

    /// After `]`: only whitespace may follow.
    fn finish(&mut self) -> Result<Option<Conversation>, ReadError> {
        self.state = State::Done;
        match self.next_byte()? {
            None => Ok(None),
            Some(b) => Err(self.fail(format!(
                "unexpected {:?} after the end of the array",
                b as char
            ))),
        }
    }

    /// The next byte that is not JSON whitespace, left in the reader.
    fn peek_byte(&mut self) -> Result<Option<u8>, ReadError> {
        loop {
            let index = self.index;
            let buf = self.reader.fill_buf().map_err(|e| ReadError {
                index,
                id: None,
                reason: format!("reading: {e}"),
            })?;
            let Some(&b) = buf.first() else {
                return Ok(None);
            };
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                self.consume(1);
            } else {
                return Ok(Some(b));
            }
        }
    }

    fn next_byte(&mut self) -> Result<Option<u8>, ReadError> {
        let b = self.peek_byte()?;
        if b.is_some() {
            self.consume(1);
        }
        Ok(b)
    }

    fn consume(&mut self, n: usize) {
        self.reader.consume(n);
    }
}

#[derive(Deserialize)]
struct Record {
    id: Option<String>,
    title: Option<String>,
    created_at: Option<f64>,
    chat: Option<Chat>,
}

#[derive(Deserialize)]
struct Chat {
    title: Option<String>,
    /// Milliseconds, in the exports that carry it.
    timestamp: Option<f64>,
    history: Option<History>,
    /// The chat's system prompt lives here, not in the history (`params.system`; older
    /// versions: `system`).
    params: Option<Value>,
    system: Option<Value>,
}

#[derive(Deserialize)]
struct History {
    messages: Option<Messages>,
    #[serde(rename = "currentId")]
    current_id: Option<String>,
}

#[derive(Deserialize)]
struct RawMessage {
    id: Option<String>,
    #[serde(rename = "parentId")]
    parent_id: Option<String>,
    role: Option<String>,
    content: Option<Value>,
    timestamp: Option<f64>,
    model: Option<String>,
    #[serde(rename = "modelName")]
    model_name: Option<String>,
    files: Option<Vec<Value>>,
}

/// `history.messages` in file order, refusing a key that appears twice (a plain map would
/// keep the last one silently).
struct Messages(Vec<(String, RawMessage)>);

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Messages;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of messages by id")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Messages, A::Error> {
                let mut out: Vec<(String, RawMessage)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!(
                            "message id {key:?} appears twice"
                        )));
                    }
                    let value: RawMessage = map.next_value()?;
                    out.push((key, value));
                }
                Ok(Messages(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One chat record's text into a [`Conversation`], or an error naming it.
fn parse_chat(index: usize, json: &str) -> Result<Conversation, ReadError> {
    let record: Record = serde_json::from_str(json).map_err(|e| {
        let (id, title) = names_of(json);
        ReadError {
            index,
            id,
            reason: with_title(title.as_deref(), format!("not an Open WebUI chat: {e}")),
        }
    })?;
    let fail = |reason: String| ReadError {
        index,
        id: record.id.clone(),
        reason: with_title(record.title.as_deref(), reason),
    };
    let Some(id) = record.id.clone() else {
        return Err(fail("the chat has no `id`".into()));
    };
    let Some(chat) = record.chat else {
        return Err(fail("the chat has no `chat` object".into()));
    };
    let Some(history) = chat.history else {
        return Err(fail("the chat has no `chat.history`".into()));
    };
    let raw = history.messages.map(|m| m.0).unwrap_or_default();
    let mut messages = Vec::with_capacity(raw.len());
    for (key, m) in raw {
        messages.push(message(key, m).map_err(&fail)?);
    }
    let system = chat
        .params
        .as_ref()
        .and_then(|p| p.get("system"))
        .or(chat.system.as_ref())
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty());
    if let (Some(system), false) = (system, messages.is_empty()) {
        for m in messages.iter_mut().filter(|m| m.parent.is_none()) {
            m.parent = Some(SYSTEM_ID.to_owned());
        }
        messages.insert(
            0,
            Message {
                id: SYSTEM_ID.to_owned(),
                parent: None,
                role: Role::System,
                text: system.to_owned(),
                created_at: None,
                model: None,
                tool_name: None,
                skipped: Vec::new(),
            },
        );
    }
    tree::check(&messages, history.current_id.as_deref()).map_err(&fail)?;
    let created_at = match record.created_at {
        Some(s) => Some(epoch(s).map_err(|e| fail(format!("`created_at`: {e}")))?),
        None => chat
            .timestamp
            .map(epoch)
            .transpose()
            .map_err(|e| fail(format!("`chat.timestamp`: {e}")))?,
    };
    Ok(Conversation {
        source: Source::OpenWebUi,
        id,
        title: record.title.or(chat.title),
        created_at,
        messages,
        current: history.current_id,
    })
}

fn message(key: String, m: RawMessage) -> Result<Message, String> {
    if let Some(inner) = m.id.as_deref() {
        if inner != key {
            return Err(format!("message {key:?} says its id is {inner:?}"));
        }
    }
    let role = match m.role.as_deref() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        Some("tool") => Role::Tool,
        Some(other) => return Err(format!("message {key:?} has an unknown role {other:?}")),
        None => return Err(format!("message {key:?} has no role")),
    };
    let mut skipped: Vec<(String, u64)> = Vec::new();
    let text = match m.content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        // OpenAI-style parts, as some versions store a message with images.
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text") | None, Some(Value::String(t))) => text.push_str(t),
                    (kind, _) => count_skipped(&mut skipped, kind.unwrap_or("unknown"), 1),
                }
            }
            text
        }
        Some(_) => return Err(format!("message {key:?}: `content` is not text")),
    };
    for file in m.files.unwrap_or_default() {
        count_skipped(
            &mut skipped,
            file.get("type").and_then(Value::as_str).unwrap_or("file"),
            1,
        );
    }
    let created_at = m
        .timestamp
        .map(epoch)
        .transpose()
        .map_err(|e| format!("message {key:?}: `timestamp`: {e}"))?;
    let model = match role {
        Role::Assistant => [m.model, m.model_name]
            .into_iter()
            .flatten()
            .find(|s| !s.is_empty()),
        _ => None,
    };
    Ok(Message {
        id: key,
        parent: m.parent_id,
        role,
        text,
        created_at,
        model,
        tool_name: None,
        skipped,
    })
}

/// An epoch number in seconds or milliseconds (told apart by size; see [`MILLIS_FROM`]).
fn epoch(n: f64) -> Result<Timestamp, String> {
    if !n.is_finite() || n < 0.0 {
        return Err(format!("{n} is not a time"));
    }
    let millis = if n >= MILLIS_FROM { n } else { n * 1000.0 };
    // Past jiff's range (year 9999) the conversion fails rather than wrapping.
    Timestamp::from_millisecond(millis.round() as i64).map_err(|_| format!("{n} is out of range"))
}

fn with_title(title: Option<&str>, reason: String) -> String {
    match title {
        // As the conversion's errors name it.
        Some(t) => format!("“{t}”: {reason}"),
        None => reason,
    }
}

/// The `id` and `title` of a chat whose record did not parse, for the error, when they are
/// there.
fn names_of(json: &str) -> (Option<String>, Option<String>) {
    #[derive(Deserialize)]
    struct Names {
        id: Option<Value>,
        title: Option<Value>,
    }
    let Ok(v) = serde_json::from_str::<Names>(json) else {
        return (None, None);
    };
    let text = |v: Option<Value>| match v? {
        Value::String(s) => Some(s),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    (text(v.id), text(v.title))
}

#[cfg(test)]
mod tests;
