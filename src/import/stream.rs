//! A JSON array read one element at a time, so memory is bounded by the largest element
//! (one conversation), not the file: the brackets and commas are read here, each element
//! by serde_json straight from the reader.

use std::io::BufRead;

use serde_json::Value;

use super::ReadError;

/// The elements of a top-level JSON array, each as a [`Value`] (kept whole so an error can
/// name the conversation's id and title), with its index.
pub struct ArrayStream<R> {
    input: R,
    index: usize,
    state: State,
}

#[derive(PartialEq)]
enum State {
    Start,
    First,
    Next,
    Done,
}

impl<R: BufRead> ArrayStream<R> {
    pub fn new(input: R) -> ArrayStream<R> {
        ArrayStream {
            input,
            index: 0,
            state: State::Start,
        }
    }

    fn fail(&mut self, reason: impl Into<String>) -> Option<Result<(usize, Value), ReadError>> {
        self.state = State::Done;
        Some(Err(ReadError {
            index: self.index,
            id: None,
            reason: reason.into(),
        }))
    }

    /// The next byte that is not white space (or a byte-order mark), not consumed.
    fn peek(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            let buf = self.input.fill_buf()?;
            let Some(&b) = buf.first() else {
                return Ok(None);
            };
            if b.is_ascii_whitespace() {
                self.input.consume(1);
            } else if buf.starts_with(b"\xEF\xBB\xBF") {
                self.input.consume(3);
            } else {
                return Ok(Some(b));
            }
        }
    }
}

impl<R: BufRead> Iterator for ArrayStream<R> {
    type Item = Result<(usize, Value), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match self.peek() {
            Ok(b) => b,
            Err(e) => return self.fail(format!("cannot read the file: {e}")),
        };
        match (&self.state, next) {
            (State::Done, _) => return None,
            (State::Start, Some(b'[')) => {
                self.input.consume(1);
                self.state = State::First;
                return self.next();
            }
            (State::Start, _) => return self.fail("the file is not a JSON array"),
            (State::First | State::Next, Some(b']')) => {
                self.input.consume(1);
                self.state = State::Done;
                return match self.peek() {
                    Ok(None) => None,
                    _ => self.fail("there is more after the array's end"),
                };
            }
            (State::Next, Some(b',')) => {
                self.input.consume(1);
            }
            (State::Next, Some(_)) => return self.fail("expected `,` or `]` after an element"),
            (_, None) => {
                let whole = self.index;
                return self.fail(format!(
                    "the file is truncated (it ends before the array's closing `]`; whole \
                     conversations before the cut: {whole})"
                ));
            }
            (State::First, Some(_)) => {}
        }
        self.state = State::Next;
        let mut de = serde_json::Deserializer::from_reader(&mut self.input);
        match serde::Deserialize::deserialize(&mut de) {
            Ok(Value::Object(o)) => {
                let index = self.index;
                self.index += 1;
                Some(Ok((index, Value::Object(o))))
            }
            Ok(_) => self.fail("it is not a JSON object"),
            Err(e) if e.is_eof() => {
                let whole = self.index;
                self.fail(format!(
                    "the file is truncated (it ends in the middle of this conversation; whole \
                     conversations before the cut: {whole})"
                ))
            }
            Err(e) => self.fail(format!("it is not valid JSON: {e}")),
        }
    }
}

/// A field of a conversation as a string, for naming it in an error.
pub fn text_field(v: &Value, names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| v.get(*n).and_then(Value::as_str).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<usize, String>> {
        ArrayStream::new(text.as_bytes())
            .map(|r| r.map(|(i, _)| i).map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn elements_come_one_by_one() {
        assert_eq!(
            read("\u{feff} [ {}, {\"a\": [1,2]} ,{} ]\n"),
            [Ok(0), Ok(1), Ok(2)]
        );
        assert_eq!(read("[]"), Vec::<Result<usize, String>>::new());
    }

    #[test]
    fn broken_arrays_say_where() {
        let last = |t: &str| read(t).pop().and_then(Result::err).unwrap_or_default();
        assert!(last("{}").contains("not a JSON array"));
        assert_eq!(
            last("[{}, {\"a\":"),
            "conversation 1: the file is truncated (it ends in the middle of this \
             conversation; whole conversations before the cut: 1)"
        );
        assert!(last("[{} {}]").contains("expected `,`"));
        assert!(last("[{}, 3]").contains("not a JSON object"));
        assert!(last("[{}").ends_with("before the cut: 1)"));
        assert!(last("[{}] x").contains("more after"));
    }
}
