//! A [`Conversation`] (a tree) becomes a session's events, purely: no clock, no database.
//!
//! The log is the tree walked depth first. At every node its children's subtrees follow one
//! after another, the one on the way to `current` last; before each later sibling comes a
//! `rewind` back to the node (SPEC §14), so the earlier siblings are an abandoned branch and
//! what the model sees at the end is exactly the path from the root to `current`. New
//! messages on that path land at the end of the log, which is what lets a grown export be
//! appended rather than re-imported.
//!
//! Sibling answers of one user message are attempts of its turn (the UI pages through
//! them); an answer after another answer or a tool is a turn of its own, so the model keeps
//! every step of the chain. Messages with no text and nothing left out (ChatGPT's empty
//! placeholder nodes) and system messages are transparent: their children hang where they
//! hang.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use uuid::Uuid;

use super::{Conversation, Message, ReadError, Role};
use crate::session::events::{
    AssistantTurn, Event, ImportedFrom, Rewind, SessionStarted, ToolExecution, Usage, UserMessage,
    status,
};
use crate::session::{Payload, SessionId};

/// The namespace of imported sessions' ids (UUID v5 of `<source>:<conversation id>`).
/// Fixed forever: changing it would make every re-import a duplicate.
pub const NAMESPACE: Uuid = Uuid::from_u128(0x6b72_6169_6e2d_4e00_8e00_696d_706f_7274);

/// The most messages one conversation may hold: a bound on what one element of a hostile
/// file can make the import hold.
pub const MAX_MESSAGES: usize = 1_000_000;

/// A conversation as the events of its session.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    pub id: SessionId,
    pub events: Vec<Event>,
    /// User messages, answers and tool records written (rewinds and the start not counted).
    pub messages: u64,
    /// Parts and messages left out, by kind.
    pub skipped: BTreeMap<String, u64>,
}

/// The session id of a conversation: the same for every import of it.
pub fn session_id(source: &str, conversation_id: &str) -> SessionId {
    id_of(&format!("{source}:{conversation_id}"))
}

/// A v5 id in brain's import namespace.
pub fn id_of(name: &str) -> SessionId {
    let uuid = Uuid::new_v5(&NAMESPACE, name.as_bytes());
    // A hyphenated UUID always parses.
    uuid.hyphenated()
        .to_string()
        .parse()
        .unwrap_or_else(|_| SessionId::generate())
}

/// The placeholder for a message whose every part was left out, so the turn still shows.
fn placeholder(skipped: &[(String, u64)]) -> String {
    let parts: Vec<String> = skipped.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("[not imported: {}]", parts.join(", "))
}

/// The conversation's events, or why its tree is not one (a duplicate id, a parent that
/// does not exist, a cycle, a `current` that is not a message).
pub fn convert(index: usize, c: &Conversation) -> Result<Converted, ReadError> {
    let fail = |reason: String| ReadError {
        index,
        id: Some(c.id.clone()),
        reason: match &c.title {
            Some(t) => format!("“{t}”: {reason}"),
            None => reason,
        },
    };
    if c.messages.len() > MAX_MESSAGES {
        return Err(fail(format!("more than {MAX_MESSAGES} messages")));
    }
    let tree = Tree::build(&c.messages).map_err(&fail)?;
    let current = match &c.current {
        Some(id) => Some(
            *tree
                .by_id
                .get(id.as_str())
                .ok_or_else(|| fail(format!("its current message {id:?} does not exist")))?,
        ),
        None => None,
    };
    let main = tree.main_path(&c.messages, current);
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for m in &c.messages {
        for (kind, n) in &m.skipped {
            *skipped.entry(kind.clone()).or_default() += n;
        }
    }
    let system = system_prompt(&c.messages, &main, &mut skipped);
    let mut walk = Walk::new(c, &tree, &main);
    walk.run();
    let times = timestamps(&walk.times, c.created_at);
    let source = c.source.name();
    let started = Payload::SessionStarted(SessionStarted {
        title: c.title.clone().filter(|t| !t.trim().is_empty()),
        system,
        forked_from: None,
        imported_from: Some(ImportedFrom {
            source: source.to_owned(),
            id: c.id.clone(),
        }),
    });
    let events = std::iter::once(started)
        .chain(walk.payloads)
        .zip(times)
        .enumerate()
        .map(|(i, (p, at))| Event {
            seq: i as u64 + 1,
            kind: p.kind().to_owned(),
            payload: p.to_json(),
            created_at: crate::clock::format_timestamp(at),
        })
        .collect();
    Ok(Converted {
        id: session_id(source, &c.id),
        events,
        messages: walk.messages,
        skipped,
    })
}

/// The first non-empty system message (on the main path first, then anywhere) is the
/// session's system prompt; the other non-empty ones are counted as skipped.
fn system_prompt(
    messages: &[Message],
    main: &[usize],
    skipped: &mut BTreeMap<String, u64>,
) -> String {
    let is_system = |m: &&Message| m.role == Role::System && !m.text.trim().is_empty();
    let chosen = main
        .iter()
        .map(|&i| &messages[i])
        .find(is_system)
        .or_else(|| messages.iter().find(is_system));
    let others = messages.iter().filter(is_system).count().saturating_sub(1);
    if others > 0 {
        *skipped.entry("system message".to_owned()).or_default() += others as u64;
    }
    chosen.map(|m| m.text.clone()).unwrap_or_default()
}

/// The parent links as a tree: children in a stable order (time, then file order).
struct Tree<'a> {
    by_id: HashMap<&'a str, usize>,
    /// Children of each message; `roots` for those with no parent.
    children: Vec<Vec<usize>>,
    roots: Vec<usize>,
}

impl<'a> Tree<'a> {
    fn build(messages: &'a [Message]) -> Result<Tree<'a>, String> {
        let mut by_id = HashMap::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            if by_id.insert(m.id.as_str(), i).is_some() {
                return Err(format!("two messages have the id {:?}", m.id));
            }
        }
        let mut parent = vec![None; messages.len()];
        let mut children = vec![Vec::new(); messages.len()];
        let mut roots = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            match &m.parent {
                None => roots.push(i),
                Some(p) => {
                    let &pi = by_id.get(p.as_str()).ok_or_else(|| {
                        format!("message {:?} has a parent {p:?} that does not exist", m.id)
                    })?;
                    parent[i] = Some(pi);
                    children[pi].push(i);
                }
            }
        }
        // Every message must reach a root: one that does not is on a cycle.
        let mut state = vec![0u8; messages.len()]; // 0 unknown, 1 on the walk, 2 reaches a root
        for start in 0..messages.len() {
            let mut walk = Vec::new();
            let mut at = Some(start);
            while let Some(i) = at {
                match state[i] {
                    2 => break,
                    1 => {
                        return Err(format!(
                            "message {:?} is its own ancestor (a cycle of parent links)",
                            messages[i].id
                        ));
                    }
                    _ => {
                        state[i] = 1;
                        walk.push(i);
                        at = parent[i];
                    }
                }
            }
            for i in walk {
                state[i] = 2;
            }
        }
        let order = |v: &mut Vec<usize>| v.sort_by_key(|&i| (messages[i].created_at, i));
        order(&mut roots);
        children.iter_mut().for_each(order);
        Ok(Tree {
            by_id,
            children,
            roots,
        })
    }

    /// The path from a root to `current`, or to the newest leaf when there is none.
    fn main_path(&self, messages: &[Message], current: Option<usize>) -> Vec<usize> {
        let parent_of: HashMap<usize, usize> = self
            .children
            .iter()
            .enumerate()
            .flat_map(|(p, cs)| cs.iter().map(move |&c| (c, p)))
            .collect();
        let tip = current.or_else(|| {
            (0..messages.len())
                .filter(|&i| self.children[i].is_empty())
                .max_by_key(|&i| (messages[i].created_at, i))
        });
        let mut path = Vec::new();
        let mut at = tip;
        while let Some(i) = at {
            path.push(i);
            at = parent_of.get(&i).copied();
        }
        path.reverse();
        path
    }
}

/// Whether a message writes no event: a system message (it is the prompt, or skipped), or
/// one with no text and nothing left out.
fn transparent(m: &Message) -> bool {
    m.role == Role::System || (m.text.is_empty() && m.skipped.is_empty())
}

/// Where the walk stands after a node: the seq to rewind to, and the user message an answer
/// here would answer.
#[derive(Clone, Copy)]
struct Place {
    anchor: u64,
    /// The seq of the user message just above (through transparent nodes only).
    user: Option<u64>,
    /// The newest turn on the path (for tool records).
    turn: u64,
}

/// One node whose children are being walked.
struct Frame {
    place: Place,
    children: Vec<usize>,
    next: usize,
    /// The end of the main path: what was written below it is abandoned too.
    tip: bool,
}

/// The depth-first walk, iterative (a conversation is a chain as deep as it is long).
struct Walk<'a> {
    c: &'a Conversation,
    tree: &'a Tree<'a>,
    on_main: Vec<bool>,
    tip: Option<usize>,
    /// The payloads after `session_started`, and each one's time when the source says it.
    payloads: Vec<Payload>,
    times: Vec<Option<Timestamp>>,
    attempts: HashMap<u64, u32>,
    steps: HashMap<u64, u32>,
    messages: u64,
}

impl<'a> Walk<'a> {
    fn new(c: &'a Conversation, tree: &'a Tree<'a>, main: &[usize]) -> Walk<'a> {
        let mut on_main = vec![false; c.messages.len()];
        for &i in main {
            on_main[i] = true;
        }
        Walk {
            c,
            tree,
            on_main,
            tip: main.last().copied(),
            payloads: Vec::new(),
            times: vec![None],
            attempts: HashMap::new(),
            steps: HashMap::new(),
            messages: 0,
        }
    }

    fn last_seq(&self) -> u64 {
        self.payloads.len() as u64 + 1
    }

    /// Children in walk order: the one on the main path last.
    fn ordered(&self, children: &[usize]) -> Vec<usize> {
        let mut v: Vec<usize> = children.to_vec();
        v.sort_by_key(|&i| self.on_main[i]);
        v
    }

    fn run(&mut self) {
        let root = Place {
            anchor: 1,
            user: None,
            turn: 0,
        };
        let mut stack = vec![Frame {
            place: root,
            children: self.ordered(&self.tree.roots),
            next: 0,
            tip: false,
        }];
        while let Some(top) = stack.last_mut() {
            let Some(&child) = top.children.get(top.next) else {
                let (tip, anchor) = (top.tip, top.place.anchor);
                stack.pop();
                // `current` has replies the user moved away from: hide them.
                if tip && self.last_seq() > anchor {
                    self.rewind(anchor);
                }
                continue;
            };
            top.next += 1;
            let place = top.place;
            // A later sibling: whatever the earlier ones wrote becomes an abandoned branch.
            if self.last_seq() > place.anchor {
                self.rewind(place.anchor);
            }
            let after = self.emit(child, place);
            let children = self.ordered(&self.tree.children[child]);
            stack.push(Frame {
                place: after,
                children,
                next: 0,
                tip: self.tip == Some(child),
            });
        }
    }

    fn rewind(&mut self, to_seq: u64) {
        self.push(
            Payload::Rewind(Rewind {
                to_seq,
                edited_seq: to_seq + 1,
            }),
            None,
        );
    }

    fn push(&mut self, p: Payload, at: Option<Timestamp>) -> u64 {
        self.payloads.push(p);
        self.times.push(at);
        self.last_seq()
    }

    /// Writes one message's event (if it has one) and says where the walk stands after it.
    fn emit(&mut self, i: usize, place: Place) -> Place {
        let m = &self.c.messages[i];
        if transparent(m) {
            return place;
        }
        let text = if m.text.is_empty() {
            placeholder(&m.skipped)
        } else {
            m.text.clone()
        };
        self.messages += 1;
        match m.role {
            Role::User => {
                let seq = self.push(Payload::UserMessage(UserMessage { text }), m.created_at);
                Place {
                    anchor: seq,
                    user: Some(seq),
                    turn: seq,
                }
            }
            Role::Assistant => {
                let next = self.last_seq() + 1;
                let turn = place.user.unwrap_or(next);
                let attempt = self.attempts.entry(turn).or_default();
                *attempt += 1;
                let attempt = *attempt;
                let seq = self.push(
                    Payload::AssistantTurn(AssistantTurn {
                        turn,
                        attempt,
                        text,
                        reasoning: None,
                        provider: self.c.source.name().to_owned(),
                        model: m.model.clone().unwrap_or_default(),
                        finish_reason: None,
                        usage: Usage::default(),
                        duration_ms: 0,
                        ledger_id: None,
                        steps: 1,
                    }),
                    m.created_at,
                );
                Place {
                    anchor: seq,
                    user: None,
                    turn: place.turn,
                }
            }
            Role::Tool | Role::System => {
                let step = self.steps.entry(place.turn).or_default();
                *step += 1;
                let step = *step;
                let attempt = self.attempts.get(&place.turn).copied().unwrap_or(1);
                let seq = self.push(
                    Payload::ToolExecution(ToolExecution {
                        turn: place.turn,
                        attempt,
                        step,
                        call_id: m.id.clone(),
                        name: m.tool_name.clone().unwrap_or_else(|| "tool".to_owned()),
                        server: self.c.source.name().to_owned(),
                        args: String::new(),
                        status: status::OK.to_owned(),
                        result_digest: crate::chat::steps::digest(&text),
                        error: None,
                        duration_ms: 0,
                    }),
                    m.created_at,
                );
                Place {
                    anchor: seq,
                    user: None,
                    turn: place.turn,
                }
            }
        }
    }
}

/// Every event's time: the source's where it says one, missing ones spread evenly between
/// their known neighbours (or equal to the one known side), then made non-decreasing in
/// seq order so the log reads in time order. `session_started` (the first) is the
/// conversation's time, but never after its first message. Nothing known at all: the Unix
/// epoch, so the result never depends on when the import ran.
fn timestamps(raw: &[Option<Timestamp>], created: Option<Timestamp>) -> Vec<Timestamp> {
    let mut us: Vec<Option<i64>> = raw.iter().map(|t| t.map(|t| t.as_microsecond())).collect();
    let earliest = us.iter().skip(1).flatten().copied().min();
    us[0] = match (created.map(|t| t.as_microsecond()), earliest) {
        (Some(c), Some(e)) => Some(c.min(e)),
        (c, e) => c.or(e),
    };
    let known: Vec<usize> = (0..us.len()).filter(|&i| us[i].is_some()).collect();
    let mut out = vec![0i64; us.len()];
    if known.is_empty() {
        return out.into_iter().map(micros).collect();
    }
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = match us[i] {
            Some(t) => t,
            None => {
                let before = known.partition_point(|&k| k < i);
                match (before.checked_sub(1).map(|b| known[b]), known.get(before)) {
                    (Some(a), Some(&b)) => {
                        let (ta, tb) = (us[a].unwrap_or(0), us[b].unwrap_or(0));
                        if tb <= ta {
                            ta
                        } else {
                            let span = i128::from(tb - ta);
                            let step = span * (i - a) as i128 / (b - a) as i128;
                            ta + step as i64
                        }
                    }
                    (Some(a), None) => us[a].unwrap_or(0),
                    (None, Some(&b)) => us[b].unwrap_or(0),
                    (None, None) => 0,
                }
            }
        };
    }
    // A time the source gave is kept as given (SPEC §15), even when an abandoned branch
    // written before it in the log is newer; only a filled-in time is kept from going
    // back past the event before it.
    for i in 1..out.len() {
        if us[i].is_none() {
            out[i] = out[i].max(out[i - 1]);
        }
    }
    out.into_iter().map(micros).collect()
}

fn micros(us: i64) -> Timestamp {
    Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
