//! Socket options std does not offer, for what a connection may leave queued in the
//! kernel (unix; elsewhere the kernel's defaults stand).

use std::net::TcpStream;

/// The send buffer asked for on a streaming connection (Linux doubles it for its own
/// bookkeeping). Kernels grow a send buffer to megabytes for a client that reads slowly
/// or not at all; an SSE stream of chat text needs far less, and the bound keeps what a
/// stalled client leaves queued small (frames wait in the attempt's own log instead,
/// kept once for every subscriber).
pub const STREAM_SEND_BUFFER_BYTES: usize = 128 * 1024;

/// Caps the socket's send buffer at [`STREAM_SEND_BUFFER_BYTES`].
pub fn bound_send_buffer(stream: &TcpStream) {
    #[cfg(unix)]
    {
        let bytes = STREAM_SEND_BUFFER_BYTES as libc::c_int;
        set(stream, libc::SO_SNDBUF, &bytes);
    }
    #[cfg(not(unix))]
    let _ = stream;
}

/// Makes closing the socket reset the connection, dropping whatever is still queued for
/// a client that stopped reading (else the kernel keeps it and retries for minutes).
pub fn reset_on_close(stream: &TcpStream) {
    #[cfg(unix)]
    {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        set(stream, libc::SO_LINGER, &linger);
    }
    #[cfg(not(unix))]
    let _ = stream;
}

#[cfg(unix)]
fn set<T>(stream: &TcpStream, option: libc::c_int, value: &T) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is the stream's own, open for the borrow's length, and
    // `value` points at a `T` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        log::debug!(
            "setsockopt({option}) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}
