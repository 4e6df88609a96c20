//! How mock_llm answers a chat request: the scripted step streamed (or not) with its
//! faults (delays, cuts, garbage, hangs, endless bodies), and the text cut into chunks.

use super::*;

pub(super) fn serve(stream: &mut TcpStream, state: &Shared, body: Value) -> std::io::Result<()> {
    pause(stream, Duration::from_millis(options().service_ms))?;
    if options().refuse_response_format && body.get("response_format").is_some() {
        return respond(
            stream,
            400,
            &json!({"error": {"message": "response_format is not supported by this server",
                "code": 400}}),
        );
    }
    let (n, cached, prompt_len) = {
        let mut s = lock(state);
        s.chat_calls += 1;
        let tokens = prompt_tokens(&body);
        let cached = s
            .prompts
            .iter()
            .map(|p| p.iter().zip(&tokens).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        s.prompts.push(tokens.clone());
        (s.chat_calls, cached, tokens.len())
    };
    let step = next_step(state, &body, n);
    if tools::rejects(&step, &body) {
        // The same step answers the request sent again without tools.
        lock(state).script.push_front(step);
        return respond(stream, 400, &tools::rejection());
    }
    let calls = tools::calls(&step);
    let ms = |k: &str| Duration::from_millis(step[k].as_u64().unwrap_or(0));
    if step["hang_before_headers"] == true {
        return hold(stream);
    }
    if step["endless_chunks"] == true {
        return endless_chunks(stream);
    }
    if step["endless"] == true {
        let head = if body["stream"] == true {
            "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \""
        } else {
            "{\"choices\": [{\"index\": 0, \"message\": {\"content\": \""
        };
        return endless(stream, head);
    }
    pause(stream, ms("headers_delay_ms"))?;
    if let Some(status) = step["status"].as_u64() {
        let msg = step["text"].as_str().unwrap_or("scripted failure");
        return respond(
            stream,
            status as u16,
            &json!({"error": {"message": msg, "code": status}}),
        );
    }
    let mut text = match step["text"].as_str() {
        _ if tools::quotes(&step, &body) => tools::quote(&body),
        Some(t) => t.to_owned(),
        None if !calls.is_empty() => String::new(),
        None => format!("mock answer {n}"),
    };
    let default_finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut finish = step["finish_reason"]
        .as_str()
        .unwrap_or(default_finish)
        .to_owned();
    let stops = body["stop"].as_array().into_iter().flatten();
    if let Some(cut) = stops.filter_map(|s| text.find(s.as_str()?)).min() {
        text.truncate(cut);
        finish = "stop".into();
    }
    let limit = body["max_tokens"].as_u64().unwrap_or(u64::MAX) as usize;
    if options().weak && text.split_whitespace().count() > limit {
        text = text
            .split_whitespace()
            .take(limit)
            .collect::<Vec<_>>()
            .join(" ");
        finish = "length".into();
    }
    let reasoning = step["reasoning"].as_str().unwrap_or_default().to_owned();
    let think = step["think"] == true;
    let completion_tokens =
        (text.split_whitespace().count() + reasoning.split_whitespace().count()) as u64;
    let usage = json!({
        "prompt_tokens": prompt_len, "completion_tokens": completion_tokens,
        "total_tokens": prompt_len as u64 + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    });
    let content = if think && !reasoning.is_empty() {
        format!("<think>{reasoning}</think>\n\n{text}")
    } else {
        text.clone()
    };
    if body["stream"] != true {
        let mut message = json!({"role": "assistant", "content": content});
        if !think && !reasoning.is_empty() {
            message["reasoning_content"] = json!(reasoning);
        }
        if !calls.is_empty() {
            message["tool_calls"] = tools::whole(&calls);
            if content.is_empty() {
                message["content"] = Value::Null;
            }
        }
        let reply = json!({"object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage});
        return respond(stream, 200, &reply);
    }
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )?;
    stream.flush()?;
    if step["hang"] == true {
        return hold(stream);
    }
    pause(stream, ms("first_delay_ms"))?;
    let mut frames: Vec<Value> = Vec::new();
    if !think && !reasoning.is_empty() {
        frames.push(json!({"choices": [{"index": 0, "delta": {"reasoning_content": reasoning}}]}));
    }
    let pieces = split_text(&content, step["chunks"].as_u64());
    frames.extend(
        pieces
            .into_iter()
            .map(|p| json!({"choices": [{"index": 0, "delta": {"content": p}}]})),
    );
    frames.extend(tools::deltas(&step, &calls));
    frames.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    if step["no_usage"] != true {
        frames.push(json!({"choices": [], "usage": usage}));
    }
    let cut_after = step["cut_after"].as_u64();
    let garbage_after = step["garbage_after"].as_u64();
    for (i, frame) in frames.iter().enumerate() {
        if cut_after == Some(i as u64) {
            return stream.shutdown(std::net::Shutdown::Both);
        }
        if garbage_after == Some(i as u64) {
            write!(stream, "data: {{this is not json\n\n")?;
            stream.flush()?;
        }
        if i > 0 {
            pause(stream, ms("delay_ms"))?;
        }
        write!(stream, "data: {frame}\n\n")?;
        stream.flush()?;
    }
    write!(stream, "data: [DONE]\n\n")?;
    stream.flush()
}

/// A 200 whose body is `head` and then `x` without end, until the client hangs up.
pub(super) fn endless(stream: &mut TcpStream, head: &str) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{head}"
    )?;
    let block = vec![b'x'; 64 * 1024];
    loop {
        stream.write_all(&block)?;
    }
}

/// A stream of valid text chunks without end, until the client hangs up.
fn endless_chunks(stream: &mut TcpStream) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    )?;
    let frame = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(64 * 1024)}}]})
    );
    loop {
        stream.write_all(frame.as_bytes())?;
    }
}

/// Splits text into `chunks` pieces (by default one per word, spaces kept).
fn split_text(text: &str, chunks: Option<u64>) -> Vec<String> {
    match chunks {
        _ if text.is_empty() => vec![],
        None => text.split_inclusive(' ').map(str::to_owned).collect(),
        Some(n) => {
            let chars: Vec<char> = text.chars().collect();
            let size = chars.len().div_ceil(n.max(1) as usize);
            chars.chunks(size).map(|c| c.iter().collect()).collect()
        }
    }
}
