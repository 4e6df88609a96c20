//! The HTTP edge under hostile clients (SPEC §12, I10), against `brain serve` as a real
//! process and raw sockets: every spelling of a path meets the token, ambiguous framing is
//! refused and the connection closed, stalled and idle clients never stop `/health` or
//! shutdown, the connection cap and the file-descriptor limit never silence the listener.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{Brain, agent, call, new_session, wait_for};
use crate::support::*;

/// One answer read off a raw socket, and whether the server closed the connection after it.
pub struct Exchange {
    pub status: u16,
    pub head: String,
    pub body: String,
    pub closed: bool,
}

/// Sends `bytes`, reads one answer (by its Content-Length), then looks whether the server
/// closes the connection within `close_wait`.
pub fn exchange(addr: &str, bytes: &[u8], close_wait: Duration) -> Exchange {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    read_answer(&mut s, close_wait)
}

pub fn read_answer(s: &mut TcpStream, close_wait: Duration) -> Exchange {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, body_start) = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break (String::from_utf8_lossy(&buf[..i]).into_owned(), i + 4);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => {
                return Exchange {
                    status: 0,
                    head: String::from_utf8_lossy(&buf).into_owned(),
                    body: String::new(),
                    closed: true,
                };
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < body_start + length {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let end = buf.len().min(body_start + length);
    let body = String::from_utf8_lossy(&buf[body_start..end]).into_owned();
    s.set_read_timeout(Some(close_wait)).unwrap();
    let closed = matches!(s.read(&mut chunk), Ok(0))
        || matches!(s.read(&mut chunk), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Exchange {
        status,
        head,
        body,
        closed,
    }
}

/// `/health` over a fresh connection must answer 200 within a second (I10: a deadline
/// with slack for a request that takes a millisecond, not a benchmark).
fn health_within_a_second(b: &Brain, when: &str) {
    let started = Instant::now();
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "GET /health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        b.addr
    );
    s.write_all(req.as_bytes()).unwrap();
    let x = read_answer(&mut s, Duration::from_secs(1));
    let took = started.elapsed();
    assert_eq!(x.status, 200, "{when}: {} {}", x.head, x.body);
    assert!(
        took < Duration::from_secs(1),
        "{when}: /health took {took:?}"
    );
}

pub fn raise_own_fd_limit() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
}

#[test]
fn no_spelling_of_a_path_gets_past_the_token() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--api-token", "s3cret"]);
    let authed = |method: &str, path: &str, body: Option<Value>| -> (u16, Value) {
        let url = format!("{}{path}", b.url);
        let a = agent();
        let r = match method {
            "GET" => a.get(&url).header("Authorization", "Bearer s3cret").call(),
            _ => a
                .post(&url)
                .header("Authorization", "Bearer s3cret")
                .header("Content-Type", "application/json")
                .send(body.unwrap_or(json!({})).to_string()),
        }
        .unwrap();
        let status = r.status().as_u16();
        let text = r.into_body().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    };
    let (status, created) = authed("POST", "/v1/sessions", None);
    assert_eq!(
        status, 201,
        "the lower-case scheme is a valid bearer: {created}"
    );
    let id = created["id"].as_str().unwrap().to_owned();

    let port = b.addr.rsplit(':').next().unwrap().to_owned();
    let routes = [
        "v1/sessions".to_owned(),
        format!("v1/sessions/{id}"),
        format!("v1/sessions/{id}/messages"),
        format!("v1/sessions/{id}/events"),
        "v1/search?q=a".to_owned(),
        "v1/usage".to_owned(),
        "v1/models".to_owned(),
    ];
    let mut tried = 0;
    for route in &routes {
        let encoded = route.replacen("v1", "%76%31", 1);
        let targets = [
            format!("x/{route}"),
            format!("//{route}"),
            format!("/v1/../{route}"),
            format!("/./{route}"),
            format!("http://127.0.0.1:{port}/{route}"),
            format!("/{encoded}"),
            format!("/{route}#frag"),
            format!("/{route}?#/../health"),
            format!("/health/../{route}"),
            format!("/{route}/."),
            "*".to_owned(),
        ];
        for target in &targets {
            for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] {
                let body = "{\"title\": \"bypass\", \"message\": \"hi\"}";
                let req = format!(
                    "{method} {target} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    b.addr,
                    body.len()
                );
                let x = exchange(&b.addr, req.as_bytes(), Duration::from_secs(2));
                assert!(
                    x.status == 400 || x.status == 401,
                    "{method} {target}: {} {}",
                    x.head,
                    x.body
                );
                tried += 1;
            }
        }
    }
    assert!(tried > 500, "{tried}");
    let (_, list) = authed("GET", "/v1/sessions", None);
    assert_eq!(
        list["sessions"].as_array().map(Vec::len),
        Some(1),
        "nothing got through: {list}"
    );
    let (_, events) = authed("GET", &format!("/v1/sessions/{id}/events"), None);
    assert_eq!(
        events["events"].as_array().map(Vec::len),
        Some(1),
        "no message was sent"
    );
    // The scheme is case-insensitive (RFC 7235).
    let lower = agent()
        .get(&format!("{}/v1/sessions", b.url))
        .header("Authorization", "bearer s3cret")
        .call()
        .unwrap();
    assert_eq!(lower.status().as_u16(), 200, "`bearer` is a valid scheme");
}

#[test]
fn ambiguous_framing_is_refused_with_json_and_the_connection_closed() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let host = format!("Host: {}\r\n", b.addr);
    let smuggled = format!("GET /v1/sessions HTTP/1.1\r\n{host}\r\n");
    let post = |headers: &str, body: &str| -> Vec<u8> {
        format!(
            "POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\n{headers}\r\n{body}"
        )
        .into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "Content-Length with Transfer-Encoding",
            post(
                "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                &format!("0\r\n\r\n{smuggled}"),
            ),
        ),
        (
            "two different Content-Lengths",
            post("Content-Length: 2\r\nContent-Length: 40\r\n", "{}"),
        ),
        ("Content-Length abc", post("Content-Length: abc\r\n", "{}")),
        ("Content-Length -1", post("Content-Length: -1\r\n", "{}")),
        ("Content-Length +2", post("Content-Length: +2\r\n", "{}")),
        (
            "Content-Length 2^64",
            post("Content-Length: 18446744073709551616\r\n", "{}"),
        ),
        (
            "an unknown Transfer-Encoding",
            post("Transfer-Encoding: gzip\r\n", "{}"),
        ),
        (
            "two Host headers",
            format!("GET /health HTTP/1.1\r\n{host}Host: evil.example\r\n\r\n").into_bytes(),
        ),
        (
            "obs-fold",
            format!("GET /health HTTP/1.1\r\n{host}X-A: a\r\n b\r\n\r\n").into_bytes(),
        ),
        (
            "bare LF",
            format!("GET /health HTTP/1.1\n{}\n\n", host.trim_end()).into_bytes(),
        ),
        (
            "HTTP/2.0 request line",
            format!("GET /health HTTP/2.0\r\n{host}\r\n").into_bytes(),
        ),
        (
            "a TLS ClientHello",
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\xde\xad\xbe\xef\r\n\r\n".to_vec(),
        ),
        ("binary garbage", vec![0u8, 255, 1, 2, 13, 10, 13, 10]),
        (
            "a bad chunk size",
            post("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"),
        ),
        (
            "a bare LF hidden in a chunk extension",
            post(
                "Transfer-Encoding: chunked\r\n",
                &format!("2;\nxx\r\n62\r\n0\r\n\r\n{smuggled}"),
            ),
        ),
        (
            "a bare LF in the trailer",
            post(
                "Transfer-Encoding: chunked\r\n",
                &format!("2\r\n{{}}\r\n0\r\n\n{smuggled}"),
            ),
        ),
        (
            "a chunk size padded with a no-break space",
            post(
                "Transfer-Encoding: chunked\r\n",
                "2\u{a0}\r\n{}\r\n0\r\n\r\n",
            ),
        ),
        (
            "Content-Length after a no-break space",
            post("Content-Length: \u{a0}2\r\n", "{}"),
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            format!(
                "POST /v1/sessions HTTP/1.0\r\n{host}Connection: keep-alive\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
                 2\r\n{{}}\r\n0\r\n\r\n{smuggled}"
            )
            .into_bytes(),
        ),
        (
            "two Authorization headers",
            format!(
                "GET /v1/sessions HTTP/1.1\r\n{host}Authorization: Bearer a\r\n\
                 Authorization: Bearer b\r\n\r\n"
            )
            .into_bytes(),
        ),
    ];
    for (what, bytes) in &cases {
        let x = exchange(&b.addr, bytes, Duration::from_secs(3));
        assert_eq!(x.status, 400, "{what}: {} {}", x.head, x.body);
        let v: Value = serde_json::from_str(&x.body)
            .unwrap_or_else(|_| panic!("{what}: not JSON: {:?}", x.body));
        assert_eq!(v["error"], "bad_request", "{what}");
        assert!(x.closed, "{what}: the connection must be closed");
    }
    let (_, list) = call(&b, "GET", "/v1/sessions", None);
    assert_eq!(
        list["sessions"].as_array().map(Vec::len),
        Some(0),
        "no refused request created a session: {list}"
    );

    // What is well framed works: a chunked body, and a client waiting for 100 Continue.
    let x = exchange(
        &b.addr,
        &post(
            "Transfer-Encoding: chunked\r\nConnection: close\r\n",
            "5\r\n{\"tit\r\n0a;ext=1\r\nle\": \"ok\"}\r\n0\r\nX-Trailer: t\r\n\r\n",
        ),
        Duration::from_secs(3),
    );
    assert_eq!(x.status, 201, "{} {}", x.head, x.body);
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = "{\"title\": \"continued\"}";
    s.write_all(
        format!(
            "POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut interim = [0u8; 25];
    s.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).unwrap();
    let x = read_answer(&mut s, Duration::from_secs(3));
    assert_eq!(x.status, 201, "{} {}", x.head, x.body);
}

#[test]
fn stalled_and_idle_clients_never_stop_health_or_shutdown() {
    raise_own_fd_limit();
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let host = format!("Host: {}\r\n", b.addr);
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut s = TcpStream::connect(&b.addr).unwrap();
        s.write_all(format!("GET /health HTTP/1.1\r\n{host}X-Slow: ").as_bytes())
            .unwrap();
        held.push(s);
    }
    health_within_a_second(&b, "64 stalled mid-headers");
    for _ in 0..64 {
        let mut s = TcpStream::connect(&b.addr).unwrap();
        s.write_all(
            format!(
                "POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
                 Content-Length: 50000\r\n\r\n{{\"ti"
            )
            .as_bytes(),
        )
        .unwrap();
        held.push(s);
    }
    health_within_a_second(&b, "and 64 stalled mid-body");
    for i in 0..300 {
        held.push(TcpStream::connect(&b.addr).unwrap());
        if i % 100 == 99 {
            health_within_a_second(&b, &format!("and {} idle sockets", i + 1));
        }
    }
    health_within_a_second(&b, "with everything open");
    let (status, _) = call(&b, "GET", "/v1/sessions", None);
    assert_eq!(status, 200, "the API answers too");

    // An answer streaming when SIGTERM comes: it still ends with its record and its `end`
    // frame, whatever the stalled clients do (attempts end before connections close).
    let id = new_session(&b);
    mock.script(slow_big(200, 100));
    let body = json!({"message": "a long answer, please"}).to_string();
    let mut streaming = TcpStream::connect(&b.addr).unwrap();
    streaming
        .write_all(
            format!(
                "POST /v1/sessions/{id}/messages HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    streaming
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\"type\":\"chunk\"") {
        let mut chunk = [0u8; 4096];
        let n = streaming.read(&mut chunk).unwrap();
        assert!(n > 0, "the stream ended before its first chunk");
        seen.extend_from_slice(&chunk[..n]);
    }
    let started = Instant::now();
    b.signal("-TERM");
    let mut b = b;
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < until,
            "SIGTERM with 428 hostile connections open must exit within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?} after {:?}", started.elapsed());
    let _ = streaming.read_to_end(&mut seen);
    let text = String::from_utf8_lossy(&seen);
    let end = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|f| f["type"] == "end");
    assert_eq!(
        end.map(|e| e["status"].clone()),
        Some(json!("interrupted")),
        "the stream got its end frame"
    );
    drop(held);
}

#[test]
fn slow_clients_get_408_and_idle_keep_alive_connections_close() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--request-timeout", "1"]);
    let host = format!("Host: {}\r\n", b.addr);
    // Headers that never finish, and a body that never arrives: 408 with the JSON shape.
    for partial in [
        format!("GET /health HTTP/1.1\r\n{host}X-Slow: "),
        format!(
            "POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
             Content-Length: 50\r\n\r\n{{\"t"
        ),
    ] {
        let x = exchange(&b.addr, partial.as_bytes(), Duration::from_secs(3));
        assert_eq!(x.status, 408, "{partial:?}: {} {}", x.head, x.body);
        let v: Value = serde_json::from_str(&x.body).unwrap();
        assert_eq!(v["error"], "timeout");
        assert!(x.closed);
    }
    // A trickle of one byte at a time cannot stretch the deadline.
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    for byte in format!("GET /health HTTP/1.1\r\n{host}X-Trickle: ")
        .bytes()
        .cycle()
    {
        if s.write_all(&[byte]).is_err() {
            break;
        }
        let mut chunk = [0u8; 512];
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no 408 for a trickle"
        );
    }
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn head_and_body_share_one_deadline_and_a_huge_head_is_refused() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--request-timeout", "2"]);
    let host = format!("Host: {}\r\n", b.addr);
    // A slow client (not a synchronisation): 1.5 s for the head, 1 s more for the body.
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST ").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    s.write_all(
        format!(
            "/v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let _ = s.write_all(b"{}");
    let x = read_answer(&mut s, Duration::from_secs(2));
    assert_eq!(x.status, 408, "{} {}", x.head, x.body);

    let long = "a".repeat(40_000);
    let x = exchange(
        &b.addr,
        format!("GET /health?x={long} HTTP/1.1\r\n{host}\r\n").as_bytes(),
        Duration::from_secs(2),
    );
    assert_eq!(x.status, 431, "{} {}", x.head, x.body);
    assert!(x.closed);
}

#[test]
fn clients_that_never_read_their_answers_cannot_lock_others_out() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--max-connections", "8"]);
    // Eight connections pipelining requests for the biggest file and never reading: the
    // server's writes to them block, so each would hold its slot for good.
    let request = format!(
        "GET /assets/vendor/marked.umd.js HTTP/1.1\r\nHost: {}\r\n\r\n",
        b.addr
    );
    let mut held = Vec::new();
    for _ in 0..8 {
        let s = TcpStream::connect(&b.addr).unwrap();
        let mut w = s.try_clone().unwrap();
        let request = request.clone();
        std::thread::spawn(move || {
            for _ in 0..3000 {
                if w.write_all(request.as_bytes()).is_err() {
                    return;
                }
            }
        });
        held.push(s);
    }
    for i in 0..5 {
        wait_for("/health past the non-readers", || {
            exchange(
                &b.addr,
                format!(
                    "GET /health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    b.addr
                )
                .as_bytes(),
                Duration::from_millis(100),
            )
            .status
                == 200
        });
        health_within_a_second(&b, &format!("non-readers at the cap, probe {i}"));
    }
    drop(held);
}

#[test]
fn idle_keep_alive_connections_do_not_delay_a_fresh_client_and_are_closed() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let host = format!("Host: {}\r\n", b.addr);
    // Sixteen idle keep-alive connections: a fresh client is served at once, and the idle
    // ones are closed after the keep-alive idle timeout.
    let mut idle = Vec::new();
    for _ in 0..16 {
        let mut s = TcpStream::connect(&b.addr).unwrap();
        s.write_all(format!("GET /health HTTP/1.1\r\n{host}\r\n").as_bytes())
            .unwrap();
        let x = read_answer(&mut s, Duration::from_millis(50));
        assert_eq!(x.status, 200);
        assert!(!x.closed, "kept alive");
        idle.push(s);
    }
    health_within_a_second(&b, "16 idle keep-alive connections");
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut chunk = [0u8; 16];
        assert!(
            matches!(s.read(&mut chunk), Ok(0)),
            "an idle keep-alive connection is closed by the server"
        );
    }
}

#[test]
fn at_the_cap_idle_connections_make_room_and_busy_ones_are_never_dropped() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &["--max-connections", "4"]);
    // Four idle sockets fill the cap; a newcomer closes the oldest of them and is served.
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&b.addr).unwrap())
        .collect();
    health_within_a_second(&b, "four idle sockets at a cap of 4");
    drop(idle);

    // Four slow answers streaming: every connection is busy, so a newcomer is refused at
    // once with 503, and the streams go on.
    let ids: Vec<String> = (0..4).map(|_| new_session(&b)).collect();
    let mut streams = Vec::new();
    for id in &ids {
        let body = json!({"message": format!("[[mock {}]]", slow_big(20, 100))}).to_string();
        let mut s = TcpStream::connect(&b.addr).unwrap();
        send_message(&mut s, &b.addr, id, &body);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = [0u8; 12];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        streams.push(s);
    }
    let x = exchange(
        &b.addr,
        format!("GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", b.addr).as_bytes(),
        Duration::from_secs(2),
    );
    assert_eq!(x.status, 503, "{} {}", x.head, x.body);
    assert_eq!(
        serde_json::from_str::<Value>(&x.body).unwrap()["error"],
        "unavailable"
    );
    for mut s in streams {
        let mut all = String::new();
        let _ = s.read_to_string(&mut all);
        assert!(all.contains("\"type\":\"end\""), "each stream completes");
    }
    health_within_a_second(&b, "after the streams ended");
}

/// Writes a `POST /v1/sessions/{id}/messages` with the JSON `body` on a raw socket.
pub fn send_message(s: &mut TcpStream, addr: &str, id: &str, body: &str) {
    s.write_all(
        format!(
            "POST /v1/sessions/{id}/messages HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
}

/// A mock step streaming `chunks` pieces of ~4 KiB, `delay_ms` apart.
fn slow_big(chunks: u32, delay_ms: u32) -> Value {
    json!({"kind": "stream", "text": "y".repeat(chunks as usize * 4096), "chunks": chunks,
           "delay_ms": delay_ms})
}

#[test]
fn a_client_that_never_reads_its_stream_blocks_no_other_session() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let stalled = new_session(&b);
    // Four megabytes of answer to a client that never reads: far more than the socket
    // buffers hold, so the server's writes to it block.
    mock.script(json!({"kind": "stream", "text": "z".repeat(4 << 20), "chunks": 256}));
    let body = json!({"message": "a long one, please"}).to_string();
    let mut s = TcpStream::connect(&b.addr).unwrap();
    send_message(&mut s, &b.addr, &stalled, &body);
    wait_for("the long answer to be asked for", || {
        !mock.requests().is_empty()
    });
    // Another session's turn runs to its end meanwhile.
    let other = new_session(&b);
    let (status, _, frames) = crate::server::stream(
        &b,
        &format!("/v1/sessions/{other}/messages"),
        json!({"message": "hello"}),
    );
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap()["status"], "completed", "{frames:?}");
    // And the stalled session's own turn completes in the log (I8).
    wait_for("the unread turn to complete", || {
        let (_, s) = call(&b, "GET", &format!("/v1/sessions/{stalled}?limit=5"), None);
        s["session"]["turn_active"] == false
            && s["items"]
                .as_array()
                .is_some_and(|i| i.iter().any(|i| i["kind"] == "assistant"))
    });
    drop(s);
}

#[test]
fn running_out_of_file_descriptors_never_silences_the_listener() {
    raise_own_fd_limit();
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let brain = env!("CARGO_BIN_EXE_brain");
    let b = Brain::spawn(Command::new("sh").arg("-c").arg(format!(
        "ulimit -n 256 && exec {brain} --db {} --sync normal serve --listen 127.0.0.1:0 \
         --distill off --provider-url {}",
        db.path().display(),
        mock.url
    )));
    // 400 connections against 256 descriptors: some are refused or closed, none may kill
    // the listener.
    let mut held = Vec::new();
    for _ in 0..400 {
        if let Ok(s) = TcpStream::connect_timeout(&b.addr.parse().unwrap(), Duration::from_secs(2))
        {
            held.push(s);
        }
    }
    health_within_a_second(&b, "400 connections under ulimit -n 256");
    drop(held);
    wait_for("a new client to be served", || {
        call(&b, "GET", "/health", None).0 == 200
    });
    let (status, _) = call(&b, "POST", "/v1/sessions", Some(json!({})));
    assert_eq!(status, 201, "the database still works");
}

/// Starts a server command with its standard error piped: the server, and its log lines.
pub fn spawn_logged(cmd: &mut Command) -> (Brain, std::sync::mpsc::Receiver<String>) {
    cmd.stderr(std::process::Stdio::piped());
    let (mut child, url) = spawn_serve(cmd);
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let addr = url.trim_start_matches("http://").to_owned();
    (Brain { child, url, addr }, rx)
}

#[test]
fn the_log_has_levels_timestamps_and_a_line_per_request_at_debug() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let mut cmd = serve_command(&db, &mock.url);
    cmd.env("RUST_LOG", "debug")
        .stderr(std::process::Stdio::piped());
    let (b, rx) = spawn_logged(&mut cmd);
    let (status, _) = call(&b, "GET", "/v1/sessions?limit=3", None);
    assert_eq!(status, 200);
    let wanted = |needle: &str, rx: &std::sync::mpsc::Receiver<String>| -> String {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(_) => panic!("no log line with {needle:?}"),
            }
        }
    };
    let request = wanted("GET /v1/sessions?limit=3 -> 200", &rx);
    assert!(request.contains("DEBUG"), "{request}");
    // `[2026-11-30T16:51:05.123456Z DEBUG brain::api::conn] …`
    let stamp = request
        .trim_start_matches('[')
        .split_whitespace()
        .next()
        .unwrap();
    assert!(
        stamp.parse::<jiff::Timestamp>().is_ok(),
        "a timestamp leads the line: {request}"
    );
    b.signal("-TERM");
    let shutdown = wanted("SIGTERM received", &rx);
    assert!(shutdown.contains("INFO"), "{shutdown}");
}
