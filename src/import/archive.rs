//! The `.zip` ChatGPT and Claude send: told by its magic bytes whatever its name, its
//! `conversations.json` found (at the top, or the shallowest one in a folder) and read
//! through a bound on its uncompressed size, so a zip bomb ends in a clear error rather
//! than a full disk or memory. Nothing is ever written out, so the entries' names (`..`,
//! absolute paths) matter only as text: they are shown escaped.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The entry an export keeps its conversations in.
pub const CONVERSATIONS: &str = "conversations.json";

/// How many of a zip's names an error lists when none is `conversations.json`.
const NAMES_SHOWN: usize = 8;

/// Whether a file's first bytes are a zip's: a local file header, or the end record of an
/// empty archive.
pub fn is_zip(prefix: &[u8]) -> bool {
    prefix.starts_with(b"PK\x03\x04") || prefix.starts_with(b"PK\x05\x06")
}

/// Why a zip gave nothing to import.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArchiveError {
    #[error("the file starts like a zip but cannot be read as one: {0}")]
    Unreadable(String),
    #[error(
        "the zip holds no conversations.json (an export from ChatGPT or Claude has one); \
         inside: {0}"
    )]
    NoConversations(String),
    #[error("conversations.json in the zip cannot be read: {0}")]
    Entry(String),
    #[error(
        "the zip's directory lists {listed} entries but only {distinct} different names: a \
         name appears twice, so which file is meant is unclear (nothing was imported)"
    )]
    Duplicates { listed: u64, distinct: u64 },
    #[error(
        "conversations.json in the zip is over {limit} bytes uncompressed (the import limit, \
         --max-import-bytes)"
    )]
    TooLarge { limit: u64 },
}

/// The entry being read: a reader over its bytes (bounded) and its declared size.
pub struct Entry<'a> {
    pub reader: Box<dyn Read + Send + 'a>,
    /// Its uncompressed size as the zip declares it (for a progress bar; the bound does not
    /// trust it).
    pub size: u64,
    /// Set when the reader stopped at the bound: the import's error is then this one.
    pub over: Arc<AtomicBool>,
}

/// Opens the zip and calls `f` with its `conversations.json`, read no further than `limit`
/// uncompressed bytes (past it, the reader fails and `over` is set).
pub fn with_conversations<R: Read + Seek + Send, T>(
    input: R,
    limit: u64,
    f: impl FnOnce(Entry<'_>) -> T,
) -> Result<T, ArchiveError> {
    let mut input = input;
    let listed = listed_entries(&mut input).map_err(|e| ArchiveError::Unreadable(e.to_string()))?;
    input
        .seek(SeekFrom::Start(0))
        .map_err(|e| ArchiveError::Unreadable(e.to_string()))?;
    let mut zip =
        zip::ZipArchive::new(input).map_err(|e| ArchiveError::Unreadable(e.to_string()))?;
    // The zip crate keeps one entry per name (the later one): a second `conversations.json`
    // would be read in place of the one a person unzipping it sees first.
    let distinct = zip.len() as u64;
    if let Some(listed) = listed.filter(|&n| n != distinct) {
        return Err(ArchiveError::Duplicates { listed, distinct });
    }
    let names: Vec<String> = zip.file_names().map(str::to_owned).collect();
    let Some(name) = pick(&names) else {
        return Err(ArchiveError::NoConversations(listing(&names)));
    };
    let entry = zip
        .by_name(&name)
        .map_err(|e| ArchiveError::Entry(e.to_string()))?;
    let size = entry.size();
    if size > limit {
        return Err(ArchiveError::TooLarge { limit });
    }
    let over = Arc::new(AtomicBool::new(false));
    let reader = Bounded {
        inner: entry,
        left: limit,
        over: Arc::clone(&over),
    };
    Ok(f(Entry {
        reader: Box::new(reader),
        size,
        over,
    }))
}

/// The end-of-central-directory record's signature, and its size without the comment.
const EOCD: &[u8] = b"PK\x05\x06";
const EOCD_LEN: usize = 22;
const ZIP64_EOCD: &[u8] = b"PK\x06\x06";

/// How many entries the zip's own directory lists (its end record, or the zip64 one when
/// the end record says 0xFFFF); `None` when no end record is found (the zip reader then
/// says what is wrong).
fn listed_entries<R: Read + Seek>(input: &mut R) -> std::io::Result<Option<u64>> {
    let len = input.seek(SeekFrom::End(0))?;
    let tail_len = len.min((EOCD_LEN + u16::MAX as usize) as u64);
    input.seek(SeekFrom::Start(len - tail_len))?;
    let mut tail = Vec::new();
    input.take(tail_len).read_to_end(&mut tail)?;
    Ok(entries_in_tail(&tail))
}

/// The entry count of the last end record in `tail` whose comment runs exactly to the end.
fn entries_in_tail(tail: &[u8]) -> Option<u64> {
    let at = (0..=tail.len().checked_sub(EOCD_LEN)?).rev().find(|&i| {
        tail[i..].starts_with(EOCD) && {
            let comment = u16::from_le_bytes([tail[i + 20], tail[i + 21]]) as usize;
            i + EOCD_LEN + comment == tail.len()
        }
    })?;
    let count = u16::from_le_bytes([tail[at + 10], tail[at + 11]]);
    if count != u16::MAX {
        return Some(u64::from(count));
    }
    // Zip64: the count is a u64 at offset 32 of the zip64 end record, before the locator.
    let z = tail[..at].windows(4).rposition(|w| w == ZIP64_EOCD)?;
    let bytes: [u8; 8] = tail.get(z + 32..z + 40)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// The `conversations.json` to read: the one nearest the top (fewest folders), the first
/// of those in the zip's order.
fn pick(names: &[String]) -> Option<String> {
    names
        .iter()
        .filter(|n| {
            let file = n.rsplit(['/', '\\']).next().unwrap_or_default();
            file.eq_ignore_ascii_case(CONVERSATIONS)
        })
        .min_by_key(|n| n.matches(['/', '\\']).count())
        .cloned()
}

/// A few of the zip's names, escaped (a name is the zip author's text), for an error.
fn listing(names: &[String]) -> String {
    if names.is_empty() {
        return "nothing (an empty zip)".to_owned();
    }
    let shown: Vec<String> = names
        .iter()
        .take(NAMES_SHOWN)
        .map(|n| format!("{:?}", n.chars().take(120).collect::<String>()))
        .collect();
    let more = names.len().saturating_sub(NAMES_SHOWN);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// A reader that fails once more than `left` bytes would come out.
struct Bounded<R> {
    inner: R,
    left: u64,
    over: Arc<AtomicBool>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // One byte past the bound is asked for, to tell "exactly the bound" from "more".
        let want = buf.len().min(self.left.saturating_add(1) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            self.over.store(true, Ordering::Relaxed);
            return Err(std::io::Error::other(
                "conversations.json is over the import limit",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in entries {
            out.start_file(*name, options).unwrap();
            out.write_all(bytes).unwrap();
        }
        out.finish().unwrap().into_inner()
    }

    fn read(zip: Vec<u8>, limit: u64) -> Result<Result<Vec<u8>, bool>, ArchiveError> {
        with_conversations(Cursor::new(zip), limit, |mut e| {
            let mut all = Vec::new();
            match e.reader.read_to_end(&mut all) {
                Ok(_) => Ok(all),
                Err(_) => Err(e.over.load(Ordering::Relaxed)),
            }
        })
    }

    #[test]
    fn the_shallowest_conversations_json_is_read() {
        let zip = zip_of(&[
            ("a/b/conversations.json", b"deep"),
            ("chat.html", b"<html>"),
            ("export/Conversations.JSON", b"[]"),
        ]);
        assert!(is_zip(&zip));
        assert_eq!(read(zip, 100), Ok(Ok(b"[]".to_vec())));
    }

    #[test]
    fn a_name_listed_twice_is_refused_rather_than_one_picked() {
        // The writer refuses a duplicate name: one is renamed in the bytes afterwards.
        let mut zip = zip_of(&[
            ("conversations.json", b"[1]"),
            ("conversationX.json", b"[]"),
        ]);
        let (from, to) = (b"conversationX.json", b"conversations.json");
        while let Some(i) = zip.windows(from.len()).position(|w| w == from) {
            zip[i..i + to.len()].copy_from_slice(to);
        }
        let err = read(zip, 100).unwrap_err();
        assert_eq!(
            err,
            ArchiveError::Duplicates {
                listed: 2,
                distinct: 1
            }
        );
        assert!(err.to_string().contains("appears twice"), "{err}");
    }

    #[test]
    fn the_directorys_count_is_read_past_a_comment_and_absent_when_cut() {
        let mut zip = zip_of(&[("a", b"1"), ("b", b"2"), ("c", b"3")]);
        assert_eq!(entries_in_tail(&zip), Some(3));
        // A comment after the record: its length says where the record ends.
        let n = zip.len();
        zip[n - 2..].copy_from_slice(&5u16.to_le_bytes());
        zip.extend_from_slice(b"PK\x05\x06");
        zip.push(b'!');
        assert_eq!(entries_in_tail(&zip), Some(3));
        assert_eq!(entries_in_tail(&zip[..n - 4]), None);
        assert_eq!(entries_in_tail(b"PK"), None);
    }

    #[test]
    fn a_zip_without_it_lists_what_it_holds_escaped() {
        let zip = zip_of(&[("../../etc/passwd", b"x"), ("evil\x1b[2J.txt", b"y")]);
        let err = read(zip, 100).unwrap_err().to_string();
        assert!(err.contains("no conversations.json"), "{err}");
        assert!(err.contains("\"../../etc/passwd\""), "{err}");
        assert!(err.contains("\\u{1b}") && !err.contains('\x1b'), "{err}");
        let empty = zip_of(&[]);
        assert!(is_zip(&empty));
        assert!(
            read(empty, 100)
                .unwrap_err()
                .to_string()
                .contains("an empty zip")
        );
    }

    #[test]
    fn more_than_the_bound_stops_reading_whatever_the_header_says() {
        let big = vec![b' '; 10_000];
        let zip = zip_of(&[(CONVERSATIONS, &big)]);
        assert_eq!(read(zip.clone(), 10_000), Ok(Ok(big)));
        assert_eq!(
            read(zip, 9_999),
            Err(ArchiveError::TooLarge { limit: 9_999 })
        );
        // A lying header is caught by the reader itself.
        let mut inner = Bounded {
            inner: Cursor::new(vec![0u8; 50]),
            left: 49,
            over: Arc::new(AtomicBool::new(false)),
        };
        assert!(inner.read_to_end(&mut Vec::new()).is_err());
        assert!(inner.over.load(Ordering::Relaxed));
    }

    #[test]
    fn something_that_only_starts_like_a_zip_is_refused() {
        let mut bytes = b"PK\x03\x04".to_vec();
        bytes.extend_from_slice(&[7u8; 100]);
        let err = read(bytes, 100).unwrap_err();
        assert!(matches!(err, ArchiveError::Unreadable(_)), "{err}");
        assert!(!is_zip(b"[{\"mapping\""));
    }
}
