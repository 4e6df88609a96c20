//! Moves a leading `<think>…</think>` block of streamed content to reasoning (models
//! served without a reasoning parser put their thoughts there). Pure and incremental: the
//! tags may be split across deltas anywhere.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: a `<think>` may still start.
    #[default]
    Start,
    /// Inside the block.
    Thinking,
    /// After the block, or content that never had one: everything is text.
    Text,
}

/// Splits content deltas into (reasoning, text).
#[derive(Debug, Default)]
pub struct ThinkSplitter {
    state: State,
    /// Content held back while it could still be (part of) a tag.
    held: String,
    /// The block just closed: whitespace right after it is dropped.
    trim_next: bool,
}

/// What one delta turned into.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub text: String,
}

impl ThinkSplitter {
    pub fn new() -> ThinkSplitter {
        ThinkSplitter::default()
    }

    /// Feeds one content delta.
    pub fn push(&mut self, delta: &str) -> Split {
        let mut out = Split::default();
        self.held.push_str(delta);
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.held.trim_start();
                    if let Some(inside) = trimmed.strip_prefix(OPEN) {
                        self.held = inside.to_owned();
                        self.state = State::Thinking;
                    } else if OPEN.starts_with(trimmed) {
                        return out; // could still become "<think>"
                    } else {
                        self.state = State::Text;
                    }
                }
                State::Thinking => {
                    if let Some(at) = self.held.find(CLOSE) {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + CLOSE.len()..].to_owned();
                        self.state = State::Text;
                        self.trim_next = true;
                    } else {
                        // Keep back what could be the start of "</think>".
                        let keep = partial_suffix(&self.held, CLOSE);
                        let cut = self.held.len() - keep;
                        out.reasoning.push_str(&self.held[..cut]);
                        self.held.drain(..cut);
                        return out;
                    }
                }
                State::Text => {
                    let mut text = std::mem::take(&mut self.held);
                    if self.trim_next {
                        let t = text.trim_start();
                        if t.is_empty() {
                            return out;
                        }
                        text = t.to_owned();
                        self.trim_next = false;
                    }
                    out.text.push_str(&text);
                    return out;
                }
            }
        }
    }

    /// The stream ended: whatever is held is what it is (an unclosed block is reasoning;
    /// a lone `<thi` is text).
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking => Split {
                reasoning: held,
                text: String::new(),
            },
            State::Start | State::Text => Split {
                reasoning: String::new(),
                text: if self.trim_next {
                    held.trim_start().to_owned()
                } else {
                    held
                },
            },
        }
    }
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|n| {
            s.len() >= *n && s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(deltas: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new();
        let (mut r, mut t) = (String::new(), String::new());
        for d in deltas {
            let o = s.push(d);
            r.push_str(&o.reasoning);
            t.push_str(&o.text);
        }
        let o = s.finish();
        r.push_str(&o.reasoning);
        t.push_str(&o.text);
        (r, t)
    }

    #[test]
    fn a_leading_block_becomes_reasoning() {
        assert_eq!(
            run(&["<think>hmm, ", "let me see</think>\n\nThe answer."]),
            ("hmm, let me see".into(), "The answer.".into())
        );
        assert_eq!(
            run(&["  <th", "ink>x</th", "ink>y"]),
            ("x".into(), "y".into())
        );
    }

    #[test]
    fn content_without_a_leading_block_is_all_text() {
        assert_eq!(
            run(&["Hello <think>not</think>"]),
            (String::new(), "Hello <think>not</think>".into())
        );
        assert_eq!(
            run(&["<", "b>bold</b>"]),
            (String::new(), "<b>bold</b>".into())
        );
        assert_eq!(run(&["<thi"]), (String::new(), "<thi".into()));
        assert_eq!(run(&[]), (String::new(), String::new()));
    }

    #[test]
    fn an_unclosed_block_is_reasoning() {
        assert_eq!(
            run(&["<think>still thinking </"]),
            ("still thinking </".into(), String::new())
        );
    }

    proptest! {
        /// However the content is split into deltas, the result is the same.
        #[test]
        fn any_split_gives_the_same_result(
            thought in "[a-z <>/é]{0,20}",
            answer in "[a-z <>/🦓]{0,20}",
            think in any::<bool>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let content = if think { format!("<think>{}</think>{answer}", thought.replace("</think>", "")) } else { answer.clone() };
            let whole = run(&[&content]);
            let chars: Vec<char> = content.chars().collect();
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(chars.len() + 1)).collect();
            points.sort_unstable();
            let mut parts = Vec::new();
            let mut prev = 0;
            for p in points {
                parts.push(chars[prev..p].iter().collect::<String>());
                prev = p;
            }
            parts.push(chars[prev..].iter().collect());
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            prop_assert_eq!(run(&refs), whole);
        }
    }
}
