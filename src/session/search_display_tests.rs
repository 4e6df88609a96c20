//! Examples and properties of `search_display.rs`.

use super::*;
use crate::session::events::SessionId;
use proptest::prelude::*;

/// The text of each range.
fn covered(text: &str, ranges: &[[usize; 2]]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    ranges
        .iter()
        .map(|[s, e]| chars[*s..*e].iter().collect())
        .collect()
}

/// The `[start, end)` character range of the first `word` in `text`.
fn range_of(text: &str, word: &str) -> [usize; 2] {
    let at = text.find(word).unwrap();
    let s = text[..at].chars().count();
    [s, s + word.chars().count()]
}

#[test]
fn markdown_is_stripped_and_highlights_follow_the_text() {
    let text = "## Plan\n- **hostels** in `Porto`, see [the list](http://x.y/z)\n> 1. book _early_";
    let ranges = [
        range_of(text, "hostels"),
        range_of(text, "Porto"),
        range_of(text, "list"),
        range_of(text, "early"),
    ];
    let (plain, moved) = strip_markdown(text, &ranges);
    assert_eq!(plain, "Plan\nhostels in Porto, see the list\nbook early");
    assert_eq!(
        covered(&plain, &moved),
        ["hostels", "Porto", "list", "early"]
    );
}

#[test]
fn fences_rules_images_and_escapes() {
    let text = "```rust\nlet a_b = 2 * 3;\n```\n---\n![alt text](p.png) \\*not bold\\* snake_case ~~gone~~";
    let (plain, _) = strip_markdown(text, &[]);
    assert_eq!(
        plain,
        "let a_b = 2 * 3;\nalt text *not bold* snake_case gone"
    );
}

#[test]
fn a_highlight_only_on_markup_disappears() {
    let text = "see [x](http://heron.org)";
    let (plain, moved) = strip_markdown(text, &[range_of(text, "heron")]);
    assert_eq!(plain, "see x");
    assert!(moved.is_empty());
}

#[test]
fn literals_are_highlighted_whole_and_their_letters_alone_are_not() {
    let snippet = "C is old; C++ and c++20 are newer, C# too";
    let c = range_of(snippet, "C");
    let cpp = [range_of(snippet, "C++")[0], range_of(snippet, "C++")[0] + 1];
    let lower = [
        range_of(snippet, "c++20")[0],
        range_of(snippet, "c++20")[0] + 1,
    ];
    let lits = vec!["c++".to_owned()];
    let fitted = fit_literals(snippet, &[c, cpp, lower], &lits, &[]);
    assert_eq!(covered(snippet, &fitted), ["C++", "c++"]);
    // A `c` another word asks for (`c C++`) stays highlighted.
    let kept = fit_literals(snippet, &[c, cpp], &lits, &["c".to_owned()]);
    assert_eq!(covered(snippet, &kept), ["C", "C++"]);
    // A phrase's range is no literal's letter: it stays.
    let mail = "an e-mail";
    let r = [range_of(mail, "e-mail")];
    assert_eq!(fit_literals(mail, &r, &lits, &[]), r);
}

fn hit(session: u128, seq: u64, snippet: &str) -> SearchHit {
    SearchHit {
        session_id: id(session),
        title: Some(format!("s{session}")),
        seq,
        kind: "user_message".into(),
        snippet: snippet.into(),
        highlights: vec![],
        created_at: "2026-12-07T10:00:00.000000Z".into(),
        abandoned: false,
        also_in: vec![],
    }
}

fn id(n: u128) -> SessionId {
    uuid::Uuid::from_u128(n).to_string().parse().unwrap()
}

#[test]
fn a_forks_copies_become_one_hit_in_the_source() {
    // 3 forked 1 through seq 4, 5 forked 3 through seq 2; 9 says the same at the same
    // time but is nobody's fork.
    let lineage: Lineage = [(id(3), (id(1), 4)), (id(5), (id(3), 2))].into();
    // Best first, the fork (3) came before its source (1); the fork of the fork (5) last.
    let hits = vec![
        hit(3, 2, "hostels"),
        hit(2, 4, "other"),
        hit(1, 2, "hostels"),
        hit(9, 2, "hostels"),
        hit(5, 2, "hostels"),
    ];
    let grouped = group_copies(hits, &lineage);
    let keys: Vec<(u128, u64)> = grouped
        .iter()
        .map(|h| (h.session_id.as_uuid().as_u128(), h.seq))
        .collect();
    assert_eq!(keys, [(1, 2), (2, 4), (9, 2)]);
    let copies: Vec<u128> = grouped[0]
        .also_in
        .iter()
        .map(|c| c.session_id.as_uuid().as_u128())
        .collect();
    assert_eq!(copies, [3, 5]);
    assert_eq!(grouped[0].also_in[0].title.as_deref(), Some("s3"));
    assert_eq!(
        maybe_copies(&[hit(3, 2, "a"), hit(1, 2, "a"), hit(2, 2, "b")]),
        [id(1), id(3)]
    );
    // Past the fork point it is the fork's own event; other text is another event.
    assert_eq!(
        group_copies(vec![hit(1, 5, "a"), hit(3, 5, "a")], &lineage).len(),
        2
    );
    assert_eq!(
        group_copies(vec![hit(1, 2, "a"), hit(3, 2, "b")], &lineage).len(),
        2
    );
}

/// A word wrapped in markdown, and the word.
fn decorated() -> impl Strategy<Value = (String, String)> {
    let word = "[a-zA-Z0-9]{1,8}";
    (word, 0..8usize).prop_map(|(w, how)| {
        let text = match how {
            0 => format!("**{w}**"),
            1 => format!("_{w}_"),
            2 => format!("`{w}`"),
            3 => format!("[{w}](http://e.x/{w})"),
            4 => format!("~~{w}~~"),
            5 => format!("\\*{w}"),
            6 => format!("*{w}*"),
            _ => w.clone(),
        };
        (text, w)
    })
}

proptest! {
    /// Whatever the text and ranges, the moved ranges are sorted, non-empty, disjoint and
    /// inside the stripped text.
    #[test]
    fn moved_ranges_stay_in_bounds(text in "\\PC{0,60}", cuts in proptest::collection::vec(0usize..70, 0..8)) {
        let n = text.chars().count();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(n)).collect();
        cuts.sort_unstable();
        let ranges: Vec<[usize; 2]> = cuts.chunks(2).filter_map(|p| match *p {
            [a, b] => Some([a, b]),
            _ => None,
        }).collect();
        let (plain, moved) = strip_markdown(&text, &ranges);
        let len = plain.chars().count();
        let mut prev = 0;
        for [s, e] in moved {
            prop_assert!(prev <= s && s < e && e <= len, "{s}..{e} of {len}");
            prev = e;
        }
    }

    /// A highlighted word inside markdown (bold, italics, code, a link's text, a list item
    /// or heading) is still exactly what its moved range covers.
    #[test]
    fn a_highlighted_word_survives_stripping(
        before in proptest::collection::vec(decorated(), 0..4),
        target in decorated(),
        after in proptest::collection::vec(decorated(), 0..4),
        prefix in prop::sample::select(vec!["", "# ", "- ", "> ", "3. ", "  * "]),
    ) {
        let mut text = prefix.to_owned();
        for (t, _) in &before {
            text.push_str(t);
            text.push(' ');
        }
        let start = text.chars().count() + target.0.find(&target.1).map_or(0, |b| target.0[..b].chars().count());
        text.push_str(&target.0);
        for (t, _) in &after {
            text.push(' ');
            text.push_str(t);
        }
        let range = [start, start + target.1.chars().count()];
        let (plain, moved) = strip_markdown(&text, &[range]);
        prop_assert_eq!(covered(&plain, &moved), vec![target.1.clone()]);
        prop_assert!(!plain.contains("**") && !plain.contains('`'), "{}", plain);
    }
}
