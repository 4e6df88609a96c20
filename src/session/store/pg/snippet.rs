//! PostgreSQL search's words and snippets, as pure functions (SPEC §7, §16).
//!
//! **Words.** SQLite's FTS5 `unicode61` tokenizer makes a token of every run of letters
//! and digits and splits at everything else, so `example` finds `alice@example.com`.
//! PostgreSQL's default parser keeps emails, hosts, URLs, paths, versions and tags whole;
//! so the search column (migrations/postgres V9) first replaces every run of
//! [separators](is_separator) with a space, and queries are cleaned the same way
//! ([`clean`]). What counts as a separator is spelled out by code point (the same class in
//! V9's SQL and here) rather than asked of the database's locale: a database created with
//! `LC_CTYPE=C` would call every non-ASCII letter a separator. The class is ASCII
//! punctuation and symbols, Latin-1's, and the Unicode blocks of punctuation, symbols,
//! arrows, box drawing, dingbats and emoji; every other character is part of a word.
//! Known differences from `unicode61`: diacritics are kept (`zebre` does not find `zèbre`:
//! PostgreSQL's core has no `unaccent`), and a few letter-like symbols in those blocks
//! (`ª`, `µ`, `²`, `½`) separate here.
//!
//! **Snippets.** Computed here from the hit's text, never by `ts_headline` (which re-parses
//! the whole document, 16 s for 100 hits of 200 KB, and alters the text: tags become
//! spaces). As FTS5's `snippet()`: a window of [`SNIPPET_TOKENS`] tokens holding the most
//! distinct query terms, centred on its hits; the text from its first token to its last
//! (or to the text's start or end when it reaches them), with `…` where it was cut.
//! Highlights are `[start, end)` character ranges over the query's terms in the snippet.

use crate::session::store::list::SNIPPET_TOKENS;

/// The ellipsis a snippet cut out of a longer text starts or ends with, as FTS5's.
pub const ELLIPSIS: &str = "…";

/// The separators beyond ASCII, as inclusive code point ranges (V9's SQL class holds the
/// same ranges; a test checks the two agree).
const SEPARATOR_RANGES: [(u32, u32); 17] = [
    (0x80, 0xBF),       // Latin-1 controls, punctuation and symbols
    (0xD7, 0xD7),       // ×
    (0xF7, 0xF7),       // ÷
    (0x2000, 0x206F),   // general punctuation (spaces, dashes, quotes)
    (0x20A0, 0x20CF),   // currency
    (0x2190, 0x245F),   // arrows, mathematical and technical symbols
    (0x2500, 0x2BFF),   // box drawing, shapes, miscellaneous symbols, dingbats
    (0x3000, 0x3004),   // CJK spaces and marks
    (0x3008, 0x3020),   // CJK brackets
    (0xFE10, 0xFE1F),   // vertical forms
    (0xFE30, 0xFE6F),   // CJK compatibility forms, small forms
    (0xFF00, 0xFF0F),   // fullwidth punctuation
    (0xFF1A, 0xFF20),   // fullwidth punctuation
    (0xFF3B, 0xFF40),   // fullwidth punctuation
    (0xFF5B, 0xFF65),   // fullwidth punctuation
    (0xFFF0, 0xFFFF),   // specials (U+FFFD among them)
    (0x1F000, 0x1FAFF), // emoji and pictographs
];

/// Whether `c` separates words (see the module's documentation).
pub fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_alphanumeric();
    }
    let u = u32::from(c);
    SEPARATOR_RANGES
        .iter()
        .any(|&(lo, hi)| (lo..=hi).contains(&u))
}

/// `text` with every run of separators replaced by one space, as V9 cleans a document.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_gap = false;
    for c in text.chars() {
        if is_separator(c) {
            if !in_gap {
                out.push(' ');
            }
            in_gap = true;
        } else {
            out.push(c);
            in_gap = false;
        }
    }
    out
}

/// The words of `text`: byte ranges of its runs of non-separators.
pub fn tokens(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (is_separator(c), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
    out
}

/// A query term: one word's tokens, lower-cased, matched as a phrase (one token, or
/// `e-mail`'s `e` then `mail`).
pub type Term = Vec<String>;

/// A plain query's terms: each word's tokens, the words without a token dropped, each
/// term once, in the order typed.
pub fn plain_terms(words: &[String]) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for w in words {
        let term: Term = tokens(w)
            .into_iter()
            .map(|(s, e)| w[s..e].to_lowercase())
            .collect();
        if !term.is_empty() && !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

/// The most nodes (terms and operators) a query may have: PostgreSQL's ranking and the
/// phrase matching grow with them, and a person's query is far below this.
pub const MAX_QUERY_NODES: usize = 255;

/// `terms` cut to the first ones that fit in [`MAX_QUERY_NODES`] (a term of `k` tokens is
/// `2k - 1` nodes, and each `&` between terms one more). A pasted paragraph of a plain
/// query then searches for its first distinct words (about 128 of them) instead of being
/// refused: SQLite answers it, so PostgreSQL answers too, with at most more hits.
pub fn capped(terms: Vec<Term>) -> Vec<Term> {
    let mut out = Vec::new();
    let mut nodes = 0;
    for mut term in terms {
        let join = usize::from(!out.is_empty());
        let room = MAX_QUERY_NODES.saturating_sub(nodes + join);
        if room == 0 {
            break;
        }
        // A word of more parts than fit (`x-x-x-…`) keeps its first ones.
        term.truncate(room.div_ceil(2));
        nodes += join + 2 * term.len() - 1;
        out.push(term);
    }
    out
}

/// An FTS (`websearch_to_tsquery`) query with its words split as documents are: the
/// syntax it reads (`"` quotes, a leading `-`, `or`, spaces) stays; every other
/// separator becomes a space.
pub fn clean_websearch(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        let word_start = i == 0 || chars[i - 1].is_whitespace() || chars[i - 1] == '"';
        let keep = c == '"'
            || c.is_whitespace() && !c.is_control()
            || !is_separator(c)
            || c == '-' && word_start && chars.get(i + 1).is_some_and(|&n| !is_separator(n));
        out.push(if keep { c } else { ' ' });
    }
    out
}

/// The terms of a tsquery's text (`'a' & !'b' & 'c' <-> 'd'`) that a hit can hold: each
/// lexeme a one-token term, a `<->` chain one phrase (highlighted whole, as FTS5 does),
/// those under a `!` left out.
pub fn tsquery_terms(tsquery: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut current: Option<(Term, bool)> = None;
    let mut between = String::new();
    let mut chars = tsquery.chars().peekable();
    let flush = |current: Option<(Term, bool)>, out: &mut Vec<Term>| {
        if let Some((term, negated)) = current {
            if !negated && !out.contains(&term) {
                out.push(term);
            }
        }
    };
    while let Some(c) = chars.next() {
        if c != '\'' {
            between.push(c);
            continue;
        }
        let mut lexeme = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    lexeme.push('\'');
                }
                '\'' => break,
                '\\' => lexeme.extend(chars.next()),
                other => lexeme.push(other),
            }
        }
        let lexeme = lexeme.to_lowercase();
        let op = between.trim();
        match current.as_mut() {
            Some((term, _)) if op == "<->" => term.push(lexeme),
            _ => {
                flush(current.take(), &mut out);
                let negated = op.trim_end_matches(['(', ' ']).ends_with('!');
                current = Some((vec![lexeme], negated));
            }
        }
        between.clear();
    }
    flush(current, &mut out);
    out
}

/// The snippet of `text` for `terms` and its highlight ranges (characters of the
/// snippet), as FTS5's `snippet()` with [`SNIPPET_TOKENS`] tokens.
pub fn snippet(text: &str, terms: &[Term]) -> (String, Vec<[usize; 2]>) {
    snippet_by(text, terms, |a, b| a == b)
}

/// [`snippet`] with `same` deciding whether a lower-cased token of the text is a query's
/// token ([`stem_equal`] for a stemmed search).
pub fn snippet_by(
    text: &str,
    terms: &[Term],
    same: fn(&str, &str) -> bool,
) -> (String, Vec<[usize; 2]>) {
    let toks = tokens(text);
    let lower: Vec<String> = toks
        .iter()
        .map(|&(s, e)| text[s..e].to_lowercase())
        .collect();
    // Every occurrence of a term: (first token, last token, which term).
    let mut hits: Vec<(usize, usize, usize)> = Vec::new();
    for i in 0..lower.len() {
        for (t, term) in terms.iter().enumerate() {
            let end = i + term.len();
            if end <= lower.len() && lower[i..end].iter().zip(term).all(|(a, b)| same(a, b)) {
                hits.push((i, end - 1, t));
            }
        }
    }
    let n = usize::try_from(SNIPPET_TOKENS).unwrap_or(16).max(1);
    let first = best_window(&hits, terms.len(), n, toks.len());
    let last = (first + n).min(toks.len()).saturating_sub(1);
    let start = if first == 0 { 0 } else { toks[first].0 };
    let end = if last + 1 >= toks.len() {
        text.len()
    } else {
        toks[last].1
    };
    let mut out = String::new();
    let mut offset = 0; // characters before `start` in the snippet (the leading ellipsis)
    if start > 0 {
        out.push_str(ELLIPSIS);
        offset = ELLIPSIS.chars().count();
    }
    out.push_str(&text[start..end]);
    if end < text.len() {
        out.push_str(ELLIPSIS);
    }
    // Ranges in characters, merged where hits overlap or touch.
    let mut ranges: Vec<[usize; 2]> = Vec::new();
    for &(a, b, _) in hits.iter().filter(|h| h.0 >= first && h.1 <= last) {
        let (bs, be) = (toks[a].0, toks[b].1);
        if bs < start || be > end {
            continue;
        }
        let cs = offset + text[start..bs].chars().count();
        let ce = cs + text[bs..be].chars().count();
        match ranges.last_mut() {
            Some(r) if cs <= r[1] => r[1] = r[1].max(ce),
            _ => ranges.push([cs, ce]),
        }
    }
    (out, ranges)
}

/// Whether two lower-cased tokens share a stem, for a stemmed search's highlights only
/// (PostgreSQL decided the match): English inflections (`hostels`, `parties`, `passed`,
/// `running`) come off both before comparing. A Snowball stem this misses leaves its
/// word unhighlighted, never a hit out.
pub fn stem_equal(a: &str, b: &str) -> bool {
    a == b || light_stem(a) == light_stem(b)
}

fn light_stem(word: &str) -> String {
    if let Some(stem) = word.strip_suffix("ies").filter(|s| s.chars().count() >= 2) {
        return format!("{stem}y");
    }
    for suffix in ["es", "s", "ing", "ed", "ly"] {
        let Some(stem) = word.strip_suffix(suffix) else {
            continue;
        };
        if stem.chars().count() < 3 || word.ends_with("ss") {
            continue;
        }
        let stem = stem.strip_suffix('e').unwrap_or(stem);
        // `running`: a doubled last consonant is one.
        let mut last = stem.chars().rev();
        return match (last.next(), last.next()) {
            (Some(x), Some(y)) if x == y && !"aeiouls".contains(x) => {
                stem[..stem.len() - x.len_utf8()].to_owned()
            }
            _ => stem.to_owned(),
        };
    }
    let bare = word.strip_suffix('e').filter(|s| s.chars().count() >= 3);
    bare.unwrap_or(word).to_owned()
}

/// The first token of the best window of `n` tokens (of `len`), as FTS5 scores one: a
/// window starting at each hit scores 1000 per distinct term in it and 1 per repeat; the
/// best (the first of equals) is then moved to centre its hits.
fn best_window(hits: &[(usize, usize, usize)], terms: usize, n: usize, len: usize) -> usize {
    let mut best = (0u64, 0usize);
    for (k, &(at, _, _)) in hits.iter().enumerate() {
        let mut seen = vec![false; terms];
        let mut score = 0u64;
        let mut last = at;
        for &(a, b, t) in hits[k..].iter().take_while(|h| h.0 < at + n) {
            if b >= at + n || a < at {
                continue;
            }
            score += if seen[t] { 1 } else { 1000 };
            seen[t] = true;
            last = last.max(b);
        }
        if score > best.0 {
            let spread = last - at + 1;
            let mut start = at.saturating_sub(n.saturating_sub(spread) / 2);
            if start + n > len {
                start = len.saturating_sub(n);
            }
            best = (score, start);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn terms(words: &[&str]) -> Vec<Term> {
        plain_terms(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
    }

    fn marked(snippet: &str, ranges: &[[usize; 2]]) -> String {
        let chars: Vec<char> = snippet.chars().collect();
        let mut out = String::new();
        for (i, c) in chars.iter().enumerate() {
            if ranges.iter().any(|r| r[0] == i) {
                out.push('[');
            }
            out.push(*c);
            if ranges.iter().any(|r| r[1] == i + 1) {
                out.push(']');
            }
        }
        out
    }

    #[test]
    fn words_split_at_every_separator_as_unicode61_does() {
        let text =
            "alice@example.com docs.rust-lang.org v3.14.15 <b>bold</b> a_b C++ naïve 日本語 “q”";
        let words: Vec<&str> = tokens(text).iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(
            words,
            [
                "alice",
                "example",
                "com",
                "docs",
                "rust",
                "lang",
                "org",
                "v3",
                "14",
                "15",
                "b",
                "bold",
                "b",
                "a",
                "b",
                "C",
                "naïve",
                "日本語",
                "q"
            ]
        );
        assert_eq!(clean("<b>x</b>!"), " b x b ");
    }

    #[test]
    fn a_short_text_is_its_own_snippet_with_its_terms_highlighted() {
        let (s, r) = snippet(
            "Mail alice@example.com, <b>bold</b>.",
            &terms(&["example", "b"]),
        );
        assert_eq!(s, "Mail alice@example.com, <b>bold</b>.");
        assert_eq!(marked(&s, &r), "Mail alice@[example].com, <[b]>bold</[b]>.");
        let (s, r) = snippet("an e-mail and e mail", &terms(&["e-mail"]));
        assert_eq!(marked(&s, &r), "an [e-mail] and [e mail]");
    }

    #[test]
    fn a_long_text_is_cut_around_its_hits_with_ellipses() {
        let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let text = words.join(" ") + ".";
        let (s, r) = snippet(&text, &terms(&["w50"]));
        assert!(s.starts_with(ELLIPSIS) && s.ends_with(ELLIPSIS), "{s}");
        assert_eq!(s.trim_matches('…').split(' ').count(), 16, "{s}");
        assert_eq!(marked(&s, &r).matches("[w50]").count(), 1, "{s}");
        // The start is no cut: no leading ellipsis; the end keeps the text's last `.`.
        let (s, _) = snippet(&text, &terms(&["w0"]));
        assert!(s.starts_with("w0 ") && s.ends_with(ELLIPSIS), "{s}");
        let (s, _) = snippet(&text, &terms(&["w99"]));
        assert!(s.starts_with(ELLIPSIS) && s.ends_with("w99."), "{s}");
    }

    #[test]
    fn the_window_prefers_distinct_terms_to_repeats() {
        let mut text = "alpha ".repeat(40);
        text.push_str("filler filler alpha beta end");
        text.push_str(&" tail".repeat(30));
        let (s, r) = snippet(&text, &terms(&["alpha", "beta"]));
        assert!(marked(&s, &r).contains("[alpha] [beta]"), "{s}");
    }

    #[test]
    fn a_long_plain_query_keeps_its_first_words() {
        let words: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
        let terms = capped(plain_terms(&words));
        assert_eq!(terms.len(), 128);
        assert_eq!(terms[0], ["w0"]);
        let parts = vec!["x".to_owned(); 300];
        assert_eq!(capped(vec![parts]).len(), 1);
        let one = capped(vec![vec!["x".to_owned(); 300]]);
        assert_eq!(2 * one[0].len() - 1, MAX_QUERY_NODES);
    }

    #[test]
    fn fts_queries_keep_their_syntax_and_lose_other_separators() {
        assert_eq!(
            clean_websearch("\"alice@example.com\" -spam or e-mail"),
            "\"alice example com\" -spam or e mail"
        );
        let t = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Term>();
        assert_eq!(
            tsquery_terms("'alice' <-> 'example' & !'spam' | 'it''s' & !( 'a' <-> 'b' ) & 'c'"),
            [t(&["alice", "example"]), t(&["it's"]), t(&["c"])]
        );
        let (s, r) = snippet("an e-mail, an e", &tsquery_terms("'e' <-> 'mail'"));
        assert_eq!(marked(&s, &r), "an [e-mail], an e");
    }

    proptest! {
        #[test]
        fn a_snippet_is_the_text_it_came_from_and_highlights_only_terms(
            text in "[a-c \\-.<>é日😀\u{0}]{0,300}",
            words in proptest::collection::vec("[a-cé日\\-]{1,3}", 1..4),
        ) {
            let terms = plain_terms(&words);
            let (s, ranges) = snippet(&text, &terms);
            let inner = s.strip_prefix(ELLIPSIS).unwrap_or(&s);
            let inner = inner.strip_suffix(ELLIPSIS).unwrap_or(inner);
            prop_assert!(text.contains(inner), "{s:?} not in {text:?}");
            let chars: Vec<char> = s.chars().collect();
            let mut previous = 0;
            for r in &ranges {
                prop_assert!(r[0] < r[1] && r[1] <= chars.len() && r[0] >= previous);
                previous = r[1];
                let covered: String = chars[r[0]..r[1]].iter().collect();
                let covered_terms: Vec<String> = tokens(&covered)
                    .iter()
                    .map(|&(a, b)| covered[a..b].to_lowercase())
                    .collect();
                // Each token highlighted belongs to a term of the query.
                prop_assert!(covered_terms.iter().all(|t| terms.iter().any(|term| term.contains(t))));
                prop_assert!(!covered_terms.is_empty());
            }
        }
    }
}
