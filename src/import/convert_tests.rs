use proptest::prelude::*;

use super::*;
use crate::import::Source;
use crate::session::projection::{self, ItemBody, NO_ANSWER_NOTE, llm_context, ui_transcript};

fn at(s: i64) -> Option<Timestamp> {
    Timestamp::from_second(1_700_000_000 + s).ok()
}

fn msg(id: &str, parent: Option<&str>, role: Role, text: &str, t: Option<i64>) -> Message {
    Message {
        id: id.into(),
        parent: parent.map(Into::into),
        role,
        text: text.into(),
        created_at: t.and_then(at),
        model: (role == Role::Assistant).then(|| "gpt-4o".to_owned()),
        tool_name: None,
        skipped: Vec::new(),
    }
}

fn conv(messages: Vec<Message>, current: Option<&str>) -> Conversation {
    Conversation {
        source: Source::ChatGpt,
        id: "c-1".into(),
        title: Some("A title".into()),
        created_at: at(0),
        messages,
        current: current.map(Into::into),
    }
}

fn context(c: &Converted) -> Vec<(projection::Role, String)> {
    llm_context(&c.events)
        .messages
        .into_iter()
        .map(|m| (m.role, m.content))
        .collect()
}

use projection::Role as R;

#[test]
fn a_linear_conversation_is_its_messages_with_the_source_as_provider() {
    let c = conv(
        vec![
            msg("s", None, Role::System, "be terse", Some(1)),
            msg("u1", Some("s"), Role::User, "hi", Some(2)),
            msg("a1", Some("u1"), Role::Assistant, "hello", Some(3)),
        ],
        Some("a1"),
    );
    let out = convert(0, &c).unwrap();
    assert_eq!(out.id, session_id("chatgpt", "c-1"));
    assert_eq!(out.messages, 2);
    let ctx = llm_context(&out.events);
    assert_eq!(ctx.system, "be terse");
    assert_eq!(
        context(&out),
        vec![(R::User, "hi".into()), (R::Assistant, "hello".into())]
    );
    let started = &out.events[0];
    assert!(
        started
            .payload
            .contains(r#""imported_from":{"id":"c-1","source":"chatgpt"}"#)
    );
    assert_eq!(started.created_at, "2023-11-14T22:13:20.000000Z");
    assert!(out.events[2].payload.contains(r#""provider":"chatgpt""#));
    assert!(out.events[2].payload.contains(r#""model":"gpt-4o""#));
}

#[test]
fn the_id_is_deterministic_and_depends_on_source_and_id() {
    assert_eq!(session_id("chatgpt", "x"), session_id("chatgpt", "x"));
    assert_ne!(session_id("chatgpt", "x"), session_id("claude", "x"));
    assert_eq!(session_id("chatgpt", "x").as_uuid().get_version_num(), 5);
}

#[test]
fn a_branch_is_an_abandoned_rewind_and_the_current_path_is_the_context() {
    // u1 → a1 (regenerated as a2, current); u1 edited as u1b on another branch.
    let c = conv(
        vec![
            msg("u1", None, Role::User, "q", Some(1)),
            msg("a1", Some("u1"), Role::Assistant, "first answer", Some(2)),
            msg("a2", Some("u1"), Role::Assistant, "second answer", Some(3)),
            msg("u2", Some("a2"), Role::User, "more", Some(4)),
            msg("a3", Some("u2"), Role::Assistant, "done", Some(5)),
        ],
        Some("a3"),
    );
    let out = convert(0, &c).unwrap();
    let kinds: Vec<&str> = out.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "user_message",
            "assistant_turn",
            "rewind",
            "assistant_turn",
            "user_message",
            "assistant_turn"
        ]
    );
    assert!(out.events[3].payload.contains(r#""to_seq":2"#));
    assert!(out.events[4].payload.contains(r#""attempt":2"#));
    assert_eq!(
        context(&out),
        vec![
            (R::User, "q".into()),
            (R::Assistant, "second answer".into()),
            (R::User, "more".into()),
            (R::Assistant, "done".into())
        ]
    );
    let items = ui_transcript(&out.events, None);
    let abandoned: Vec<u64> = items
        .iter()
        .filter(|i| i.abandoned)
        .map(|i| i.seq)
        .collect();
    assert_eq!(abandoned, [3]);
}

#[test]
fn without_current_the_newest_leaf_is_the_conversation() {
    let c = conv(
        vec![
            msg("u1", None, Role::User, "old", Some(1)),
            msg("u2", None, Role::User, "new", Some(9)),
        ],
        None,
    );
    assert_eq!(
        context(&convert(0, &c).unwrap()),
        vec![(R::User, "new".into())]
    );
}

#[test]
fn tools_are_records_and_empty_nodes_are_transparent() {
    let mut tool = msg("t", Some("a1"), Role::Tool, "result text", Some(4));
    tool.tool_name = Some("python".into());
    let mut image = msg("u0", Some("e"), Role::User, "", Some(1));
    image.skipped = vec![("image".into(), 2)];
    let c = conv(
        vec![
            msg("e", None, Role::Assistant, "", None),
            image,
            msg("u1", Some("u0"), Role::User, "run it", Some(2)),
            msg("a1", Some("u1"), Role::Assistant, "calling", Some(3)),
            tool,
            msg("a2", Some("t"), Role::Assistant, "it printed 4", Some(5)),
        ],
        Some("a2"),
    );
    let out = convert(0, &c).unwrap();
    assert_eq!(out.skipped.get("image"), Some(&2));
    let items = ui_transcript(&out.events, None);
    let tool = items
        .iter()
        .find_map(|i| match &i.body {
            ItemBody::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!((tool.name.as_str(), tool.status.as_str()), ("python", "ok"));
    assert_eq!(tool.result_digest.preview, "result text");
    assert_eq!(
        context(&out),
        vec![
            (R::User, "[not imported: 2 image]".into()),
            (R::Assistant, NO_ANSWER_NOTE.into()),
            (R::User, "run it".into()),
            (R::Assistant, "calling\n\nit printed 4".into())
        ]
    );
}

#[test]
/// A missing time lies between its neighbours; a time the source gave is kept as given,
/// even one earlier than the message before it (u3 at 12 s after a2 at 16 s).
fn missing_times_are_interpolated_and_given_ones_kept() {
    let c = conv(
        vec![
            msg("u1", None, Role::User, "a", Some(10)),
            msg("a1", Some("u1"), Role::Assistant, "b", None),
            msg("u2", Some("a1"), Role::User, "c", None),
            msg("a2", Some("u2"), Role::Assistant, "d", Some(16)),
            msg("u3", Some("a2"), Role::User, "e", Some(12)),
        ],
        Some("u3"),
    );
    let out = convert(0, &c).unwrap();
    let times: Vec<&str> = out.events.iter().map(|e| &e.created_at[11..19]).collect();
    assert_eq!(
        times,
        [
            "22:13:20", "22:13:30", "22:13:32", "22:13:34", "22:13:36", "22:13:32"
        ]
    );
}

#[test]
fn no_time_at_all_is_the_epoch_not_the_clock() {
    let mut c = conv(vec![msg("u1", None, Role::User, "a", None)], None);
    c.created_at = None;
    let out = convert(0, &c).unwrap();
    assert!(
        out.events
            .iter()
            .all(|e| e.created_at == "1970-01-01T00:00:00.000000Z")
    );
}

#[test]
fn broken_trees_are_refused_naming_the_conversation() {
    let cases = [
        (
            vec![
                msg("a", None, Role::User, "x", None),
                msg("a", None, Role::User, "y", None),
            ],
            "two messages have the id",
        ),
        (
            vec![msg("a", Some("nope"), Role::User, "x", None)],
            "does not exist",
        ),
        (
            vec![
                msg("a", Some("b"), Role::User, "x", None),
                msg("b", Some("a"), Role::User, "y", None),
            ],
            "cycle",
        ),
    ];
    for (messages, why) in cases {
        let e = convert(3, &conv(messages, None)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("conversation 3 (c-1)"), "{text}");
        assert!(text.contains("A title") && text.contains(why), "{text}");
    }
    let e = convert(0, &conv(vec![], Some("ghost"))).unwrap_err();
    assert!(e.to_string().contains("current message"), "{e}");
}

/// A random tree: each message's parent is an earlier one (or none), roles random.
fn trees() -> impl Strategy<Value = (Vec<Message>, Option<usize>)> {
    (1usize..40)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec((any::<prop::sample::Index>(), 0u8..6, any::<bool>()), n),
                proptest::option::of(any::<prop::sample::Index>()),
            )
        })
        .prop_map(|(nodes, current)| {
            let messages: Vec<Message> = nodes
                .iter()
                .enumerate()
                .map(|(i, (p, role, timed))| {
                    let parent = (i > 0 && p.index(i + 1) < i).then(|| format!("m{}", p.index(i)));
                    let role = match role {
                        0 | 1 => Role::User,
                        2 | 3 => Role::Assistant,
                        4 => Role::Tool,
                        _ => Role::System,
                    };
                    let t = timed.then_some((i * 7 % 23) as i64);
                    msg(
                        &format!("m{i}"),
                        parent.as_deref(),
                        role,
                        &format!("text {i}"),
                        t,
                    )
                })
                .collect();
            let current = current.map(|c| c.index(messages.len()));
            (messages, current)
        })
}

/// What the model should see: the main path's user and assistant messages, with the
/// projection's rules (a note between two user messages, same roles merged).
fn expected(messages: &[Message], path: &[usize]) -> Vec<(R, String)> {
    let mut out: Vec<(R, String)> = Vec::new();
    let mut unanswered = false;
    let push = |out: &mut Vec<(R, String)>, role: R, text: String| match out.last_mut() {
        Some((r, t)) if *r == role => {
            t.push_str("\n\n");
            t.push_str(&text);
        }
        _ => out.push((role, text)),
    };
    for &i in path {
        let m = &messages[i];
        match m.role {
            Role::User => {
                if unanswered {
                    push(&mut out, R::Assistant, NO_ANSWER_NOTE.into());
                }
                push(&mut out, R::User, m.text.clone());
                unanswered = true;
            }
            Role::Assistant => {
                push(&mut out, R::Assistant, m.text.clone());
                unanswered = false;
            }
            _ => {}
        }
    }
    out
}

proptest! {
    #[test]
    fn any_tree_becomes_a_log_the_projections_accept((messages, current) in trees()) {
        let c = conv(messages.clone(), current.map(|i| format!("m{i}")).as_deref());
        let out = convert(0, &c).unwrap();
        for (i, e) in out.events.iter().enumerate() {
            prop_assert_eq!(e.seq, i as u64 + 1);
        }
        // Every time lies within the source's: given ones are kept, missing ones are
        // filled in between them (never from the clock of the import).
        let known: Vec<String> = messages
            .iter()
            .filter_map(|m| m.created_at)
            .chain(c.created_at)
            .map(crate::clock::format_timestamp)
            .collect();
        if let (Some(lo), Some(hi)) = (known.iter().min(), known.iter().max()) {
            for e in &out.events {
                prop_assert!(lo <= &e.created_at && &e.created_at <= hi, "{} not in {lo}..{hi}", e.created_at);
            }
        }
        let tree = Tree::build(&c.messages).unwrap();
        let path = tree.main_path(&c.messages, current);
        prop_assert_eq!(context(&out), expected(&messages, &path));
        // Every user message, answer and tool appears once in the transcript.
        let items = ui_transcript(&out.events, None);
        let shown = items
            .iter()
            .filter(|i| matches!(i.body, ItemBody::User { .. } | ItemBody::Assistant { .. } | ItemBody::Tool(_)))
            .count();
        let written = messages.iter().filter(|m| m.role != Role::System).count();
        prop_assert_eq!(shown, written);
        prop_assert_eq!(out.messages as usize, written);
        // Converting again gives the same bytes.
        prop_assert_eq!(convert(0, &c).unwrap(), out);
    }
}
