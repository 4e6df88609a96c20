//! Files only this user can have written: a record says what to SIGKILL.

use std::io::Write;
use std::path::Path;

/// Makes `dir` (0700) unless it exists, then checks it is private.
pub(super) fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    check_private(dir)
}

/// Whether `dir` is a directory of this user's (not a link) that no one else may write in.
pub(super) fn check_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid(2) reads the process's credentials; no memory is touched.
    let me = unsafe { libc::geteuid() };
    let private = m.is_dir() && m.uid() == me && m.mode() & 0o022 == 0;
    if private {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a private directory (another user's, a link, or writable by others)",
        ))
    }
}

/// Writes `path` whole, 0600, never through a link.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .write_all(bytes)
}

/// Opens `path` to read if it is a regular file: not through a link, and without waiting
/// on a FIFO.
pub(super) fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if file.metadata()?.is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ))
    }
}
