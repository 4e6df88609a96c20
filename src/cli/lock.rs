//! The database's owner lock (SPEC §12): one server or writing command at a time.
//!
//! An operating-system advisory lock on `<db>.lock` (`fs4`: `flock` on Unix, `LockFileEx` on
//! Windows), taken before the database is opened or migrated and held
//! as long as the [`DbLock`] lives, which for a command is the process's life. The kernel
//! releases it when the process dies, so a lock left by a killed brain never blocks and a
//! reused pid never matters: what the file *says* is only a note for humans and for
//! `brain chat` (the owner's URL), never evidence that anybody holds it.
//!
//! The file: line 1 the owner's URL (empty until a server has bound its socket), line 2 who
//! holds it (`brain serve, pid 1234`). It is removed by its owner on a clean exit. It is
//! opened without following a symlink and must be a regular file, so a link planted there
//! cannot make brain write through it.
//!
//! On Unix the database file itself is locked too (`flock`, which SQLite's own `fcntl`
//! locks do not see): the lock file is named after the path as given, so a symlink or
//! hard link to the same database, or a lock file deleted by hand, would otherwise let a
//! second writer in.

use std::fs::{File, OpenOptions};

use fs4::TryLockError;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How many times to retry when the lock file was replaced between opening and locking it
/// (its previous owner removed it on exit): each retry means another process made progress.
const LOCK_REOPEN_ATTEMPTS: usize = 16;

/// The most of a lock file read for its note (a URL and a line about its holder).
const MAX_NOTE_BYTES: u64 = 4096;

/// The lock file beside a database.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The database's lock, held until dropped.
#[derive(Debug)]
pub struct DbLock {
    /// `None` for a PostgreSQL database: several servers may share one (SPEC §16), and
    /// there is no file to put a lock beside.
    file: Option<File>,
    /// The database file, locked too (Unix), for as long as the note is.
    _database: Option<File>,
    path: PathBuf,
    who: String,
}

/// What the lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// The holding server's URL, once it has one.
    pub url: Option<String>,
    /// Who holds it (`brain serve, pid 1234`), when the file says.
    pub who: Option<String>,
}

impl Holder {
    fn parse(text: &str) -> Holder {
        let mut lines = text.lines().map(str::trim);
        let url = lines
            .next()
            .filter(|l| l.starts_with("http://") || l.starts_with("https://"))
            .map(str::to_owned);
        let who = lines.next().filter(|l| !l.is_empty()).map(str::to_owned);
        Holder { url, who }
    }

    /// The holder, as a sentence's subject.
    pub fn describe(&self) -> String {
        match (&self.url, &self.who) {
            (Some(url), _) => format!("the brain server at {url}"),
            (None, Some(who)) => who.clone(),
            (None, None) => "another brain process".into(),
        }
    }
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{} holds {} (lock file {})", holder.describe(), db.display(), lock.display())]
    Held {
        db: PathBuf,
        lock: PathBuf,
        holder: Holder,
    },
    #[error("cannot lock {}: {source}", lock.display())]
    Io {
        lock: PathBuf,
        source: std::io::Error,
    },
}

impl DbLock {
    /// Takes the lock of the database at `db` for `command` (`serve`, `chat`…), or says
    /// who holds it. Never waits.
    pub fn acquire(db: &Path, command: &str) -> Result<DbLock, LockError> {
        // A database server has no file to lock beside it (and one opened with a
        // name that is neither was refused before).
        if !matches!(crate::session::store::db_file(db), Ok(Some(_))) {
            return Ok(DbLock {
                file: None,
                _database: None,
                path: PathBuf::new(),
                who: format!("brain {command}, pid {}", std::process::id()),
            });
        }
        let path = lock_path(db);
        let io = |source| LockError::Io {
            lock: path.clone(),
            source,
        };
        for _ in 0..LOCK_REOPEN_ATTEMPTS {
            let file = open_note(&path).map_err(io)?;
            // Named in full: from Rust 1.89 std has an inherent `File::try_lock` too.
            match fs4::FileExt::try_lock(&file) {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Held {
                        db: db.to_owned(),
                        lock: path.clone(),
                        holder: read_holder(&file),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
            if !still_at(&file, &path) {
                // Its owner removed it after we opened it: that inode locks nothing.
                continue;
            }
            let database = match lock_database(db, &path, &file) {
                Ok(d) => d,
                Err(e) => {
                    // The note we made for nothing (we hold its lock, so it is still empty
                    // and ours) is not left behind.
                    if file.metadata().is_ok_and(|m| m.len() == 0) && still_at(&file, &path) {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Err(e);
                }
            };
            let mut lock = DbLock {
                file: Some(file),
                _database: database,
                path: path.clone(),
                who: format!("brain {command}, pid {}", std::process::id()),
            };
            lock.write_note(None).map_err(io)?;
            return Ok(lock);
        }
        Err(io(std::io::Error::other(
            "the lock file kept being replaced while it was being taken",
        )))
    }

    /// Records the owner's URL in the lock file, for `brain chat` and for the message a
    /// second server gets.
    pub fn set_url(&mut self, url: &str) -> Result<(), LockError> {
        self.write_note(Some(url)).map_err(|source| LockError::Io {
            lock: self.path.clone(),
            source,
        })
    }

    fn write_note(&mut self, url: Option<&str>) -> std::io::Result<()> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let note = format!("{}\n{}\n", url.unwrap_or(""), self.who);
        // One write from the start, then the length: a reader sees the old note or the new
        // one (and at worst, briefly, a stale tail after line 2, which it ignores).
        file.seek(SeekFrom::Start(0))?;
        file.write_all(note.as_bytes())?;
        file.set_len(note.len() as u64)?;
        file.flush()
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DbLock {
    fn drop(&mut self) {
        let Some(file) = &self.file else {
            return;
        };
        // Removed while still locked: whoever opened it meanwhile sees, once it gets the
        // lock, that the path no longer leads to this file, and opens a new one.
        // Only if the path still names our file: one deleted by hand and made again by
        // another process is not ours to remove.
        #[cfg(unix)]
        if still_at(file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
        #[cfg(not(unix))]
        let _ = file.set_len(0);
    }
}

/// Opens (or creates) the lock file: never through a symlink, and only a regular file.
fn open_note(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let file = options.open(path).map_err(|e| {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            std::io::Error::other("it is a symbolic link; remove it")
        } else {
            e
        }
    })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file; remove it"));
    }
    Ok(file)
}

/// Locks the database file itself (Unix; created empty if missing, as SQLite would), so
/// every path to it, and a removed lock file, meet the same lock.
#[cfg(unix)]
fn lock_database(db: &Path, lock: &Path, note: &File) -> Result<Option<File>, LockError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(db)
        .map_err(|source| LockError::Io {
            lock: db.to_owned(),
            source,
        })?;
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => {
            // The holder's note sits beside the database's real path, if it came that way.
            let mut holder = read_holder(note);
            if holder == Holder::default() {
                if let Some(real) = std::fs::canonicalize(db)
                    .ok()
                    .and_then(|real| File::open(lock_path(&real)).ok())
                {
                    holder = read_holder(&real);
                }
            }
            if holder == Holder::default() {
                holder.who = Some(
                    "another brain process (through another path to the database, or                      after its lock file was removed)"
                        .into(),
                );
            }
            Err(LockError::Held {
                db: db.to_owned(),
                lock: lock.to_owned(),
                holder,
            })
        }
        Err(TryLockError::Error(source)) => Err(LockError::Io {
            lock: db.to_owned(),
            source,
        }),
    }
}

/// Elsewhere the database file is not locked: Windows' byte-range locks would stop
/// SQLite's own connections.
#[cfg(not(unix))]
fn lock_database(_db: &Path, _lock: &Path, _note: &File) -> Result<Option<File>, LockError> {
    Ok(None)
}

/// Whether `path` still names the file `file` has open.
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Elsewhere an open file cannot be removed, so the path always names it.
#[cfg(not(unix))]
fn still_at(_file: &File, _path: &Path) -> bool {
    true
}

/// What a held lock file says about its holder (nothing, if it cannot be read).
fn read_holder(file: &File) -> Holder {
    let mut text = String::new();
    // A note is two short lines; a bigger file is not ours to trust.
    match Read::take(file, MAX_NOTE_BYTES).read_to_string(&mut text) {
        Ok(_) => Holder::parse(&text),
        Err(_) => Holder::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_gives_the_url_and_who_holds_it() {
        let h = Holder::parse("http://127.0.0.1:7420\nbrain serve, pid 12\n");
        assert_eq!(h.url.as_deref(), Some("http://127.0.0.1:7420"));
        assert_eq!(h.who.as_deref(), Some("brain serve, pid 12"));
        assert_eq!(h.describe(), "the brain server at http://127.0.0.1:7420");
        let h = Holder::parse("\nbrain chat, pid 3\n");
        assert_eq!(h.url, None);
        assert_eq!(h.describe(), "brain chat, pid 3");
        // The old format's pid line, or anything else, is not a URL.
        assert_eq!(Holder::parse("1\n").url, None);
        assert_eq!(Holder::parse("").describe(), "another brain process");
    }

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("brain.db");
        let mut first = DbLock::acquire(&db, "serve").unwrap();
        first.set_url("http://127.0.0.1:9").unwrap();
        match DbLock::acquire(&db, "migrate") {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder.url.as_deref(), Some("http://127.0.0.1:9"));
                assert!(holder.who.unwrap().starts_with("brain serve, pid "));
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        assert!(!lock_path(&db).exists(), "a clean exit removes the file");
        let second = DbLock::acquire(&db, "migrate").unwrap();
        assert!(second.path().exists());
    }

    #[test]
    fn a_left_over_file_naming_a_live_pid_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("brain.db");
        std::fs::write(
            lock_path(&db),
            format!("http://127.0.0.1:1\n{}\n", std::process::id()),
        )
        .unwrap();
        let lock = DbLock::acquire(&db, "serve").unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert!(text.starts_with("\nbrain serve, pid "), "{text:?}");
    }

    #[cfg(unix)]
    #[test]
    fn another_path_to_the_same_database_meets_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let mut first = DbLock::acquire(&db, "serve").unwrap();
        first.set_url("http://127.0.0.1:9").unwrap();
        let alias = dir.path().join("alias.db");
        std::os::unix::fs::symlink(&db, &alias).unwrap();
        let hard = dir.path().join("hard.db");
        std::fs::hard_link(&db, &hard).unwrap();
        for other in [&alias, &hard] {
            match DbLock::acquire(other, "serve") {
                Err(LockError::Held { .. }) => {}
                other => panic!("a second writer through {other:?}"),
            }
        }
        match DbLock::acquire(&alias, "serve") {
            Err(LockError::Held { holder, .. }) => {
                assert_eq!(holder.url.as_deref(), Some("http://127.0.0.1:9"), "named");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            !lock_path(&alias).exists(),
            "no empty note left beside the alias"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_lock_file_deleted_by_hand_lets_no_second_writer_in() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let first = DbLock::acquire(&db, "serve").unwrap();
        std::fs::remove_file(lock_path(&db)).unwrap();
        assert!(matches!(
            DbLock::acquire(&db, "migrate"),
            Err(LockError::Held { .. })
        ));
        // A note made meanwhile by someone else is not the first holder's to remove.
        std::fs::write(lock_path(&db), "someone else's").unwrap();
        drop(first);
        assert!(lock_path(&db).exists());
        assert!(DbLock::acquire(&db, "serve").is_ok(), "free once dropped");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_as_the_lock_file_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, lock_path(&db)).unwrap();
        let e = DbLock::acquire(&db, "migrate").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::create_dir(dir.path().join("d.db.lock")).unwrap();
        let e = DbLock::acquire(&dir.path().join("d.db"), "migrate").unwrap_err();
        assert!(e.to_string().contains("lock"), "{e}");
    }
}
