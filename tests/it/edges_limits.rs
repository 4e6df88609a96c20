//! The HTTP edge's limits, against `brain serve` as a real process and raw sockets: a
//! chunked body's lines are judged the same however their bytes arrive, trailers are
//! bounded, bare LFs are refused at once.

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
