//! The extractive digest: what a compaction keeps when no model could summarise (SPEC §5,
//! `method: "extractive"`). Pure and deterministic, so it needs no provider call and
//! cannot hang or fail: for each summarised message its speaker and first sentence (or
//! line), cut to a share of the budget, with the turn memories' findings in their place,
//! and never more tokens than its budget.

use crate::session::projection::{MEMORY_HEAD, Message, Role, SUMMARY_HEAD};
use crate::tokens::count;

/// The digest's first line, so the model knows it reads fragments, not a summary.
pub const DIGEST_HEAD: &str = "(No summary could be written, so here is the first sentence \
of each earlier message, in order.)";

/// What the summary message costs beyond the digest itself: [`SUMMARY_HEAD`], its newline
/// and the blank line joining the next message, with room for the tokenizer merging
/// differently across the joins.
pub const DIGEST_FRAMING_TOKENS: u64 = 16;

/// A message's lead shorter than this runs on to the next sentence ("Hi." says nothing).
pub const MIN_SENTENCE_CHARS: usize = 24;

/// The most characters a message's lead keeps, however large the budget.
pub const MAX_ENTRY_CHARS: usize = 320;

/// Below this, a lead is not cut further: older entries are dropped instead.
pub const MIN_ENTRY_CHARS: usize = 24;

/// The earlier summary (a previous compaction) may keep this many times a message's share:
/// it stands for everything before it.
pub const EARLIER_SHARE: usize = 4;

/// Characters a token holds at least, for the first guess at a message's share (the
/// budget is then checked with the real count).
const CHARS_PER_TOKEN_GUESS: u64 = 3;

/// The budget of a digest replacing `tokens_summarised` tokens of messages: at most half of
/// them once the framing is paid for (so a pass frees real room and the context shrinks),
/// at most `cap`. `None` when the messages are too small for a digest to free anything.
pub fn digest_budget(tokens_summarised: u64, cap: u64) -> Option<u64> {
    let room = tokens_summarised.saturating_sub(DIGEST_FRAMING_TOKENS) / 2;
    let budget = room.min(cap);
    (budget > 0).then_some(budget)
}

/// One line of the digest before cutting.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    label: &'static str,
    text: String,
    /// How many shares of the per-entry length this entry may use.
    shares: usize,
}

/// The digest of `messages` in at most `budget` tokens (by [`crate::tokens::count`]).
/// Empty only when `budget` is 0 or the messages hold no text.
pub fn digest(messages: &[Message], budget: u64) -> String {
    let entries = entries(messages);
    if budget == 0 || entries.is_empty() {
        return String::new();
    }
    // The head only when it costs little of the budget.
    let head = (count(DIGEST_HEAD) * 4 <= budget).then_some(DIGEST_HEAD);
    let shares: usize = entries.iter().map(|e| e.shares).sum();
    let guess = (budget * CHARS_PER_TOKEN_GUESS) as usize / shares.max(1);
    let mut per_share = guess.clamp(MIN_ENTRY_CHARS, MAX_ENTRY_CHARS);
    let mut first = 0;
    loop {
        let text = render(head, &entries[first..], per_share);
        if count(&text) <= budget {
            return text;
        }
        if per_share > MIN_ENTRY_CHARS {
            per_share = (per_share * 3 / 4).max(MIN_ENTRY_CHARS);
        } else if entries.len() - first > 1 {
            // Too many messages for the budget even cut short: the oldest go first.
            first += ((entries.len() - first) / 8).max(1);
        } else {
            // One entry too large for the budget: a token is at least a byte.
            return cut_bytes(&text, budget as usize);
        }
    }
}

/// What the digest keeps of each message, in order: its lead where its text begins, and
/// the findings of its turn-memory blocks where they stand.
fn entries(messages: &[Message]) -> Vec<Entry> {
    let mut out = Vec::new();
    for m in messages {
        let mut text = Vec::new();
        // Where the message's own text begins among the entries.
        let mut lead_at = None;
        for para in m.content.split("\n\n") {
            if let Some(block) = para.strip_prefix(MEMORY_HEAD) {
                out.extend(findings(block));
            } else {
                if lead_at.is_none() && !para.trim().is_empty() {
                    lead_at = Some(out.len());
                }
                text.push(para);
            }
        }
        if let (Some(at), Some(entry)) = (lead_at, lead_entry(m.role, &text.join("\n\n"))) {
            out.insert(at, entry);
        }
    }
    out
}

/// A turn memory's findings, one entry each.
fn findings(block: &str) -> impl Iterator<Item = Entry> + '_ {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("finding: "))
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| Entry {
            label: "Finding",
            text: f.to_owned(),
            shares: 1,
        })
}

/// A message's own text as one entry: a previous compaction's summary (or digest)
/// flattened to one line, else its lead.
fn lead_entry(role: Role, text: &str) -> Option<Entry> {
    if let Some(earlier) = text.trim_start().strip_prefix(SUMMARY_HEAD) {
        let earlier = earlier.trim_start();
        let earlier = earlier.strip_prefix(DIGEST_HEAD).unwrap_or(earlier);
        let flat = earlier.split_whitespace().collect::<Vec<_>>().join(" ");
        // A digest of a digest: one "Earlier" label, not one more per generation (the
        // labels would fill the share meant for what came before).
        let mut flat = flat.as_str();
        while let Some(rest) = flat.strip_prefix("Earlier:") {
            flat = rest.trim_start();
        }
        let flat = flat.to_owned();
        return (!flat.is_empty()).then_some(Entry {
            label: "Earlier",
            text: flat,
            shares: EARLIER_SHARE,
        });
    }
    let lead = lead(text);
    (!lead.is_empty()).then_some(Entry {
        label: match role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        },
        text: lead,
        shares: 1,
    })
}

/// The first non-blank line's first sentence (at least [`MIN_SENTENCE_CHARS`] long when
/// the line is), whitespace collapsed.
fn lead(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(line) = line else {
        return String::new();
    };
    let chars: Vec<char> = line.chars().collect();
    let end = (0..chars.len())
        .find(|&i| {
            matches!(chars[i], '.' | '!' | '?')
                && i + 1 >= MIN_SENTENCE_CHARS
                && chars.get(i + 1).is_none_or(|c| c.is_whitespace())
        })
        .map_or(chars.len(), |i| i + 1);
    let sentence: String = chars[..end].iter().collect();
    sentence.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn render(head: Option<&str>, entries: &[Entry], per_share: usize) -> String {
    let mut lines: Vec<String> = head.map(str::to_owned).into_iter().collect();
    for e in entries {
        let max = per_share.saturating_mul(e.shares);
        lines.push(format!("{}: {}", e.label, cut_chars(&e.text, max)));
    }
    lines.join("\n")
}

/// At most `max` characters (an ellipsis added when cut), cut at a word boundary when one
/// falls in the second half.
fn cut_chars(text: &str, max: usize) -> String {
    let Some((at, _)) = text.char_indices().nth(max) else {
        return text.to_owned();
    };
    let head = &text[..at];
    let head = match head.rfind(char::is_whitespace) {
        Some(space) if space >= at / 2 => &head[..space],
        _ => head,
    };
    format!("{}…", head.trim_end())
}

/// At most `max` bytes, cut on a character boundary.
fn cut_bytes(text: &str, max: usize) -> String {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn msg(role: Role, content: &str) -> Message {
        Message {
            role,
            content: content.into(),
            first_seq: 0,
            last_seq: 0,
        }
    }

    fn conversation() -> Vec<Message> {
        vec![
            msg(
                Role::User,
                "I promise to pay Alice Moreau 250 euros on 2026-12-01. Remind me in a week.",
            ),
            msg(
                Role::Assistant,
                "Noted: 250 euros to Alice Moreau by 2026-12-01. I will remind you.\nMore detail.",
            ),
            msg(
                Role::User,
                "[turn memory]\nfiles changed: a.rs\nfinding: the build needs rustc 1.85\n\nHi. What about the garden then, and the long walk home?",
            ),
            msg(
                Role::Assistant,
                "\n\n  The garden is fine!  Really fine.\nsecond line",
            ),
        ]
    }

    #[test]
    fn each_message_keeps_its_speaker_and_first_sentence_in_order_with_the_findings() {
        let d = digest(&conversation(), 1000);
        assert_eq!(
            d,
            [
                DIGEST_HEAD,
                "User: I promise to pay Alice Moreau 250 euros on 2026-12-01.",
                "Assistant: Noted: 250 euros to Alice Moreau by 2026-12-01.",
                "Finding: the build needs rustc 1.85",
                "User: Hi. What about the garden then, and the long walk home?",
                "Assistant: The garden is fine! Really fine.",
            ]
            .join("\n")
        );
    }

    #[test]
    fn it_is_deterministic_and_fits_a_small_budget_by_cutting_then_dropping_the_oldest() {
        let long = "word ".repeat(400);
        let mut ms = conversation();
        ms.push(msg(Role::User, &long));
        for budget in [1, 3, 10, 30, 60] {
            let d = digest(&ms, budget);
            assert_eq!(d, digest(&ms, budget));
            assert!(count(&d) <= budget, "{budget}: {d}");
            assert!(!d.is_empty());
        }
        let d = digest(&ms, 60);
        assert!(d.contains('…'), "the long message is cut: {d}");
        // Cut to fit, the newest entries stay.
        assert!(
            d.lines().last().unwrap().starts_with("User: word word"),
            "{d}"
        );
    }

    #[test]
    fn a_previous_summary_is_carried_as_one_earlier_line() {
        let ms = vec![
            msg(
                Role::User,
                &format!(
                    "{SUMMARY_HEAD}\n{DIGEST_HEAD}\nUser: first.\nAssistant: second.\n\nnext question here, please answer it"
                ),
            ),
            msg(Role::Assistant, "An answer."),
        ];
        let d = digest(&ms, 1000);
        assert_eq!(
            d.lines().nth(1),
            Some("Earlier: User: first. Assistant: second. next question here, please answer it")
        );
        assert_eq!(d.lines().count(), 3, "{d}");
    }

    #[test]
    fn nothing_to_digest_is_empty() {
        assert_eq!(digest(&[], 100), "");
        assert_eq!(digest(&conversation(), 0), "");
        assert_eq!(digest(&[msg(Role::User, " \n\n ")], 100), "");
    }

    #[test]
    fn the_budget_frees_room_or_declines() {
        assert_eq!(digest_budget(10, 100), None);
        assert_eq!(digest_budget(DIGEST_FRAMING_TOKENS + 2, 100), Some(1));
        assert_eq!(digest_budget(1016, 100), Some(100));
        assert_eq!(digest_budget(216, 1000), Some(100));
    }

    fn message() -> impl Strategy<Value = Message> {
        let text = prop_oneof![
            "[a-zA-Z0-9 .,!?]{0,200}",
            "[a-z ]{1,20}(\\.|\\n)[ -~\\n]{0,300}",
            "\\PC{0,120}",
            "[a-z ]{0,30}\\n\\n\\[turn memory\\]\\nfinding: [a-z ]{1,40}",
        ];
        (any::<bool>(), text).prop_map(|(user, content)| {
            let role = if user { Role::User } else { Role::Assistant };
            msg(role, &content)
        })
    }

    proptest! {
        /// Never over budget, deterministic, never empty when there is text and a budget;
        /// the entries kept are the newest ones, in message order.
        #[test]
        fn never_over_budget(ms in proptest::collection::vec(message(), 0..40), budget in 0u64..400) {
            let d = digest(&ms, budget);
            prop_assert!(count(&d) <= budget, "{} > {budget}: {d:?}", count(&d));
            prop_assert_eq!(&d, &digest(&ms, budget));
            let has_text = !entries(&ms).is_empty();
            prop_assert_eq!(d.is_empty(), budget == 0 || !has_text, "{:?}", d);
            // The entries kept are the newest, in order, each with its label (a line cut
            // inside its label, to fit a tiny budget, says nothing).
            let labels: Vec<&str> = entries(&ms).iter().map(|e| e.label).collect();
            let got: Vec<&str> = d
                .lines()
                .filter(|l| *l != DIGEST_HEAD)
                .filter_map(|l| l.split_once(": ").map(|(label, _)| label))
                .collect();
            prop_assert!(labels.ends_with(&got), "{:?} is not the end of {:?}", got, labels);
            // A line is cut by characters; text of 2+ tokens a character (rare scripts)
            // may still need the oldest line dropped, which the budget check above covers.
            let ascii = ms.iter().all(|m| m.content.is_ascii());
            if budget >= 200 && labels.len() <= 8 && ascii {
                prop_assert_eq!(got, labels);
            }
        }
    }

    #[test]
    fn a_digest_of_digests_keeps_one_earlier_label() {
        let text = format!("{SUMMARY_HEAD}\nEarlier: Earlier: Earlier: User: the first question.");
        let e = lead_entry(Role::User, &text).unwrap();
        assert_eq!(
            (e.label, e.text.as_str()),
            ("Earlier", "User: the first question.")
        );
    }
}
