//! The HTTP edge's limits, against `brain serve` as a real process and raw sockets: a
//! chunked body's lines are judged the same however their bytes arrive, trailers are
//! bounded, bare LFs are refused at once; a stream to a client that stops reading is cut
//! at the write deadline while its turn goes on; under a low open-file limit turns still
//! complete and refused clients read their 503.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::edges::{Exchange, exchange, read_answer};
use crate::server::Brain;
use crate::support::*;

/// A POST creating a session with the chunked `body`.
fn chunked_post(b: &Brain, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        b.addr
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// Sends `parts` one write each, a moment apart (so they arrive as separate reads), and
/// reads the answer.
fn exchange_in_parts(addr: &str, parts: &[&[u8]]) -> Exchange {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    for p in parts {
        let _ = s.write_all(p);
        let _ = s.flush();
        // Not waiting for a condition: only making separate segments likely (either way
        // the verdict must be the same, which is the point).
        std::thread::sleep(Duration::from_millis(50));
    }
    read_answer(&mut s, Duration::from_secs(2))
}

fn refused_400(x: &Exchange, case: &str) {
    assert_eq!(x.status, 400, "{case}: {} {}", x.head, x.body);
    let body: Value = serde_json::from_str(&x.body).unwrap_or_default();
    assert_eq!(body["error"], "bad_request", "{case}: {}", x.body);
    assert!(x.closed, "{case}: the connection is closed");
}

#[test]
fn a_long_chunk_line_is_refused_however_its_bytes_arrive() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    // A 2,000-byte chunk-size line (its extension is padding): over the 1,024-byte limit.
    let line = format!("2;x={}\r\n", "a".repeat(1994));
    let whole = chunked_post(&b, format!("{line}{{}}\r\n0\r\n\r\n").as_bytes());
    refused_400(
        &exchange(&b.addr, &whole, Duration::from_secs(2)),
        "one write",
    );
    let head = chunked_post(&b, b"");
    let (first, second) = line.as_bytes().split_at(1000);
    let split = exchange_in_parts(&b.addr, &[&head, first, second, b"{}\r\n0\r\n\r\n"]);
    refused_400(&split, "split across writes");
    // A line right at the limit is fine, in one write or split.
    let fits = format!("2;x={}\r\n", "a".repeat(1024 - 4));
    let ok = chunked_post(&b, format!("{fits}{{}}\r\n0\r\n\r\n").as_bytes());
    let x = exchange(&b.addr, &ok, Duration::from_secs(2));
    assert_eq!(x.status, 201, "{} {}", x.head, x.body);
}

#[test]
fn trailers_are_bounded() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let trailers: String = (0..400)
        .map(|i| format!("X-T{i}: {}\r\n", "v".repeat(40)))
        .collect();
    let big = chunked_post(&b, format!("2\r\n{{}}\r\n0\r\n{trailers}\r\n").as_bytes());
    refused_400(
        &exchange(&b.addr, &big, Duration::from_secs(2)),
        "20 KB of trailers",
    );
    // And endless trailer lines are cut when the bound is reached, not at the deadline.
    let started = Instant::now();
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&chunked_post(&b, b"2\r\n{}\r\n0\r\n")).unwrap();
    let line = format!("X-T: {}\r\n", "v".repeat(100));
    for _ in 0..200 {
        if s.write_all(line.as_bytes()).is_err() {
            break;
        }
    }
    let x = read_answer(&mut s, Duration::from_secs(2));
    refused_400(&x, "endless trailers");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at the bound, not at the 30 s deadline"
    );
    // A few small trailers pass.
    let fine = chunked_post(&b, b"2\r\n{}\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n");
    let x = exchange(&b.addr, &fine, Duration::from_secs(2));
    assert_eq!(x.status, 201, "{} {}", x.head, x.body);
}

#[test]
fn bare_lf_in_a_chunked_body_is_refused_at_once() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    for (case, body) in [
        ("bare LF after the size", &b"2\n{}\n0\n\n"[..]),
        ("bare LF after the data", b"2\r\n{}\n0\r\n\r\n"),
        ("bare LF ending a trailer", b"2\r\n{}\r\n0\r\nX-A: 1\n\r\n"),
    ] {
        let started = Instant::now();
        let x = exchange(&b.addr, &chunked_post(&b, body), Duration::from_secs(2));
        refused_400(&x, case);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{case}: refused at once, not at the 30 s deadline"
        );
    }
}

/// The state of a client socket in the kernel (`TCP_ESTABLISHED` is 1), read without
/// consuming a byte of what is queued for it.
#[cfg(target_os = "linux")]
fn tcp_state(s: &TcpStream) -> u8 {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the borrow; `info` is a tcp_info of the size
    // passed, which the kernel fills at most.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
        info.tcpi_state
    }
}

/// The send queue (bytes written, not yet acknowledged) of the local TCP socket from
/// `local_port` to `remote_port`, from `/proc/net/tcp`.
#[cfg(target_os = "linux")]
fn send_queue(local_port: u16, remote_port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let ours = port(f.get(1)?)? == local_port && port(f.get(2)?)? == remote_port;
        let tx = f.get(4)?.split(':').next()?;
        ours.then(|| u64::from_str_radix(tx, 16).ok())?
    })
}

/// A line of `/proc/PID/status` in kB (`VmHWM`: the peak resident set).
#[cfg(target_os = "linux")]
fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

#[cfg(target_os = "linux")]
#[test]
fn a_client_that_stops_reading_its_stream_is_cut_at_the_write_deadline() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    // The write deadline is the request timeout: 5 s here, so the test is short.
    let b = Brain::start(&db, &mock.url, &["--request-timeout", "5"]);
    let id = crate::server::new_session(&b);
    // Six megabytes streamed as fast as the mock can: far more than any socket buffer the
    // server should keep for one client (the answer stays under the 8 MiB answer limit).
    let text = "word ".repeat((6 << 20) / 5);
    mock.script(serde_json::json!({"kind": "stream", "text": text, "chunks": 96}));
    let mut s = TcpStream::connect(&b.addr).unwrap();
    // A client with a small receive window that will read nothing past the head.
    let rcvbuf: libc::c_int = 32 * 1024;
    // SAFETY: the descriptor is open; the value is a c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    let body = serde_json::json!({"message": "a long one, please"}).to_string();
    crate::edges::send_message(&mut s, &b.addr, &id, &body);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "the stream's head");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    let stopped_reading = Instant::now();
    // The turn goes on without its reader and ends with its record (I8).
    let answered = || -> bool {
        let kinds: Vec<String> = {
            let conn = db.raw();
            let mut q = conn
                .prepare("SELECT kind FROM session_events WHERE session_n = (SELECT n FROM sessions WHERE id = ?1)")
                .unwrap();
            q.query_map([&id], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        kinds.iter().any(|k| k == "assistant_turn")
    };
    // Meanwhile, what the server's kernel holds for this client: its socket's send queue.
    let (server_port, client_port) = (
        b.addr.rsplit(':').next().unwrap().parse::<u16>().unwrap(),
        s.local_addr().unwrap().port(),
    );
    let mut queued_max = 0;
    wait_for(
        "the unread turn's assistant_turn",
        Duration::from_secs(30),
        || {
            queued_max = queued_max.max(send_queue(server_port, client_port).unwrap_or(0));
            answered()
        },
    );
    for _ in 0..50 {
        queued_max = queued_max.max(send_queue(server_port, client_port).unwrap_or(0));
    }
    assert!(
        queued_max < 1 << 20,
        "the server's socket held {queued_max} bytes for a client that reads nothing"
    );
    // The server cuts the connection once a frame has waited the deadline (5 s), with
    // slack for a loaded machine, not at 30 s or later.
    wait_for(
        "the server to cut the stalled stream",
        Duration::from_secs(25),
        || tcp_state(&s) != 1,
    );
    let took = stopped_reading.elapsed();
    assert!(took < Duration::from_secs(25), "cut after {took:?}");
    // And its memory stayed that of a 6 MB answer (a debug build keeps ~180 MB at its
    // peak whether the client reads or not), not frames piling up for the socket.
    let peak_kb = proc_status_kb(b.child.id(), "VmHWM");
    assert!(peak_kb < 400 * 1024, "brain's peak RSS {peak_kb} kB");
    // And the server serves others as before.
    assert_eq!(crate::server::call(&b, "GET", "/health", None).0, 200);
}

/// `brain serve` under an open-file limit of `limit` (soft and hard: it cannot raise it),
/// its standard error collected line by line.
#[cfg(target_os = "linux")]
fn serve_under_fd_limit(
    db: &TempDb,
    provider: &str,
    limit: u64,
) -> (Brain, std::sync::mpsc::Receiver<String>) {
    use std::os::unix::process::CommandExt;
    let mut cmd = serve_command(db, provider);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    crate::edges::spawn_logged(&mut cmd)
}

#[cfg(target_os = "linux")]
#[test]
fn under_a_low_open_file_limit_turns_complete_and_refusals_read_503() {
    use std::io::Read;
    crate::edges::raise_own_fd_limit();
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let (b, log) = serve_under_fd_limit(&db, &mock.url, 256);
    // The cap is derived from the limit and said at start.
    let line = std::iter::from_fn(|| log.recv_timeout(Duration::from_secs(10)).ok())
        .find(|l| l.contains("serving at most"))
        .expect("the connection cap in the log at start");
    let cap: usize = line
        .split("serving at most ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no cap in {line:?}"));
    assert!((8..=128).contains(&cap), "{line}");
    // Hundreds of idle connections held open: the server closes them to make room.
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            TcpStream::connect_timeout(&b.addr.parse().unwrap(), Duration::from_secs(2)).ok()
        })
        .collect();
    assert!(idle.len() > cap, "{} idle connections", idle.len());
    // As many slow turns as the cap, all at once: each holds a connection and a provider
    // connection, and every one must complete.
    let ids: Vec<String> = (0..cap).map(|_| crate::server::new_session(&b)).collect();
    let step = serde_json::json!({"kind": "stream", "text": "slow words ".repeat(40),
                                  "chunks": 40, "delay_ms": 100});
    let body = serde_json::json!({"message": format!("[[mock {step}]]")}).to_string();
    let mut streams = Vec::new();
    for id in &ids {
        let mut s = TcpStream::connect(&b.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        crate::edges::send_message(&mut s, &b.addr, id, &body);
        let mut first = [0u8; 12];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200", "a turn is accepted");
        streams.push(s);
    }
    // Every connection is busy now: newcomers are refused, and read why, even one that
    // sends its request (a large one) only after the refusal arrived: the server reads it
    // and drops it instead of resetting the connection under the client's feet.
    for i in 0..20 {
        let mut s = TcpStream::connect(&b.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = [0u8; 1];
        s.peek(&mut first)
            .expect("the refusal arrives before the request is sent");
        let body = "x".repeat(1 << 20);
        let req = format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            b.addr,
            body.len()
        );
        if let Err(e) = s.write_all(req.as_bytes()) {
            panic!("newcomer {i}: the refused connection was reset under its request: {e}");
        }
        let x = read_answer(&mut s, Duration::from_secs(2));
        assert_eq!(x.status, 503, "newcomer {i}: {} {}", x.head, x.body);
        let v: Value = serde_json::from_str(&x.body).unwrap();
        assert_eq!(v["error"], "unavailable", "{}", x.body);
    }
    for (i, mut s) in streams.into_iter().enumerate() {
        let mut all = String::new();
        let _ = s.read_to_string(&mut all);
        assert!(
            all.contains("\"status\":\"completed\""),
            "turn {i} of {cap} did not complete: {}",
            all.lines()
                .filter(|l| l.contains("error"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    drop(idle);
    wait_for("a new client to be served", Duration::from_secs(10), || {
        crate::server::call(&b, "GET", "/health", None).0 == 200
    });
}
