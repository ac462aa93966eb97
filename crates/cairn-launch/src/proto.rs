//! The coordinator protocol's lines (`docs/coordinator.md`): `VERB key=value ...\n`, at most
//! [`MAX_LINE`] bytes, values percent-encoded; and the connection that carries them.
//!
//! This module is the only place that turns protocol lines into bytes and back; the root, the
//! sub-coordinators, the clients and the tests' fake processes all go through [`Msg`] and
//! [`Conn`].

use crate::error::{Error, ErrorKind, Result};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::str::FromStr;
use std::time::Duration;

/// The longest line, newline included.
pub const MAX_LINE: usize = 4096;

macro_rules! verbs {
    ($($v:ident = $s:literal),* $(,)?) => {
        /// Every verb of the protocol, in both directions.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Verb { $($v),* }

        impl Verb {
            pub fn as_str(self) -> &'static str {
                match self { $(Verb::$v => $s),* }
            }

            pub fn parse(s: &str) -> Option<Verb> {
                match s { $($s => Some(Verb::$v),)* _ => None }
            }
        }
    };
}

verbs! {
    // A process (or the restorer acting for it) and its node's sub-coordinator.
    Hello = "HELLO",
    Welcome = "WELCOME",
    Denied = "DENIED",
    Suspend = "SUSPEND",
    Suspended = "SUSPENDED",
    Write = "WRITE",
    Written = "WRITTEN",
    Image = "IMAGE",
    Failed = "FAILED",
    Resume = "RESUME",
    Resumed = "RESUMED",
    Bye = "BYE",
    Checkpoint = "CHECKPOINT",
    // A restored process connecting its connections to other hosts again (through its
    // node's sub-coordinator and the root), and a node's report of them at a checkpoint.
    Meet = "MEET",
    Listen = "LISTEN",
    Seek = "SEEK",
    Peer = "PEER",
    NoPeer = "NONE",
    Conn = "CONN",
    // A sub-coordinator and the root.
    Subcoord = "SUBCOORD",
    Ended = "ENDED",
    Kill = "KILL",
    // `cairn rsh` and its node's sub-coordinator, the sub-coordinator and the root, and a
    // node and the slot that runs the command (`--rsh`).
    Rsh = "RSH",
    Run = "RUN",
    // The root and a sub-coordinator's engine, and two sub-coordinators (`engines`).
    Engine = "ENGINE",
    Link = "LINK",
    Joined = "JOINED",
    Left = "LEFT",
    // A client (`cairn checkpoint`, `cairn status`) and the root.
    Client = "CLIENT",
    Progress = "PROGRESS",
    Done = "DONE",
    Job = "JOB",
    Proc = "PROC",
    Node = "NODE",
    Last = "LAST",
    End = "END",
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One protocol line: a verb and its `key=value` fields, in order, values decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub verb: Verb,
    pub fields: Vec<(String, String)>,
}

/// Bytes that stand for themselves in a value; every other byte is `%XX`.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._/:,-".contains(&b)
}

/// Percent-encodes `s`: bytes outside `[A-Za-z0-9._/:,-]` become `%XX` (upper-case hex).
pub fn encode_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a percent-encoded value. A `%` not followed by two hex digits, or a result that is
/// not UTF-8, is an error.
pub fn decode_value(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) => out.push(v),
                None => return Err(proto(format!("bad percent escape in {s:?}"))),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| proto(format!("value {s:?} is not UTF-8")))
}

fn proto(msg: String) -> Error {
    Error::new(ErrorKind::Protocol, msg)
}

impl Msg {
    pub fn new(verb: Verb) -> Msg {
        Msg {
            verb,
            fields: Vec::new(),
        }
    }

    /// Adds `key=value`.
    pub fn arg(mut self, key: &str, value: impl fmt::Display) -> Msg {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of `key` (the first, if repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, or a protocol error naming the line.
    pub fn req(&self, key: &str) -> Result<&str> {
        self.get(key)
            .ok_or_else(|| proto(format!("{} without {key}=", self.verb)))
    }

    /// The value of `key` parsed as a number (or anything `FromStr`).
    pub fn num<T: FromStr>(&self, key: &str) -> Result<T> {
        let v = self.req(key)?;
        v.parse()
            .map_err(|_| proto(format!("{} {key}={v:?}: not a valid number", self.verb)))
    }

    /// The line, newline included, never longer than [`MAX_LINE`]: if the fields do not fit,
    /// the longest value is cut (ending in `...`) until they do. Only free text (`why=`) is
    /// ever long enough for that.
    pub fn encode(&self) -> String {
        let mut fields = self.fields.clone();
        loop {
            let line = render(self.verb, &fields);
            if line.len() <= MAX_LINE {
                return line;
            }
            let excess = line.len() - MAX_LINE;
            let Some(longest) = (0..fields.len()).max_by_key(|&i| fields[i].1.len()) else {
                return line; // cannot happen: a bare verb is short
            };
            let v = &mut fields[longest].1;
            // An encoded byte takes at most three; cut enough raw bytes, at a char boundary.
            let mut keep = v.len().saturating_sub(excess.div_ceil(3) + 3);
            while !v.is_char_boundary(keep) {
                keep -= 1;
            }
            v.truncate(keep);
            v.push_str("...");
        }
    }

    /// The line, newline included, with every value whole; an error when it would be longer
    /// than [`MAX_LINE`]. For lines whose values must arrive as they are (a command to run),
    /// where [`Msg::encode`] would cut one.
    pub fn encode_whole(&self) -> Result<String> {
        let line = render(self.verb, &self.fields);
        if line.len() > MAX_LINE {
            return Err(proto(format!(
                "{} line of {} bytes (values percent-encoded) is longer than the protocol's \
                 {MAX_LINE}",
                self.verb,
                line.len()
            )));
        }
        Ok(line)
    }

    /// Parses one line (without its newline). An unknown verb is an error of its own, so the
    /// caller can say so before closing the connection.
    pub fn parse(line: &str) -> Result<Msg> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut words = line.split(' ').filter(|w| !w.is_empty());
        let Some(verb_s) = words.next() else {
            return Err(proto("empty line".into()));
        };
        let Some(verb) = Verb::parse(verb_s) else {
            return Err(proto(format!("unknown verb {:?}", shorten(verb_s))));
        };
        let mut fields = Vec::new();
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                return Err(proto(format!("{verb}: {:?} is not key=value", shorten(w))));
            };
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(proto(format!("{verb}: bad key {:?}", shorten(k))));
            }
            fields.push((k.to_string(), decode_value(v)?));
        }
        Ok(Msg { verb, fields })
    }
}

fn render(verb: Verb, fields: &[(String, String)]) -> String {
    let mut s = String::from(verb.as_str());
    for (k, v) in fields {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(&encode_value(v));
    }
    s.push('\n');
    s
}

/// At most 40 characters of something a peer sent, for messages.
fn shorten(s: &str) -> String {
    s.chars().take(40).collect()
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.encode().trim_end())
    }
}

/// Reads lines of at most [`MAX_LINE`] bytes from a stream.
pub struct LineReader<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: Read> LineReader<R> {
    pub fn new(r: R) -> LineReader<R> {
        LineReader {
            inner: BufReader::new(r),
            buf: Vec::with_capacity(MAX_LINE),
        }
    }

    /// The next message; `Ok(None)` at the end of the stream. A line longer than
    /// [`MAX_LINE`], one cut short by the end of the stream, or one that does not parse is a
    /// protocol error; the connection should then be closed.
    pub fn next_msg(&mut self) -> Result<Option<Msg>> {
        self.buf.clear();
        let n = (&mut self.inner)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| Error::io("read", e))?;
        if n == 0 {
            return Ok(None);
        }
        if self.buf.last() != Some(&b'\n') {
            return Err(proto(if n >= MAX_LINE {
                format!("line longer than {MAX_LINE} bytes")
            } else {
                "connection closed in the middle of a line".into()
            }));
        }
        let line = std::str::from_utf8(&self.buf).map_err(|_| proto("line is not UTF-8".into()))?;
        Msg::parse(line).map(Some)
    }

    pub fn get_ref(&self) -> &R {
        self.inner.get_ref()
    }
}

/// One protocol connection: a line reader and a writer over the same TCP stream, with
/// `TCP_NODELAY` set (every line is a small message someone waits for).
pub struct Conn {
    reader: LineReader<TcpStream>,
    writer: TcpStream,
}

/// How long a write may block before the peer counts as gone: lines are small, so a full
/// socket buffer means the peer stopped reading.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

impl Conn {
    pub fn new(stream: TcpStream) -> Result<Conn> {
        setup(&stream)?;
        let writer = stream
            .try_clone()
            .map_err(|e| Error::io("duplicate socket", e))?;
        Ok(Conn {
            reader: LineReader::new(stream),
            writer,
        })
    }

    pub fn send(&mut self, m: &Msg) -> Result<()> {
        send(&mut self.writer, m)
    }

    /// Sends `m` with every value whole, or fails if it does not fit a line.
    pub fn send_whole(&mut self, m: &Msg) -> Result<()> {
        send_whole(&mut self.writer, m)
    }

    pub fn recv(&mut self) -> Result<Option<Msg>> {
        self.reader.next_msg()
    }

    /// Like [`Conn::recv`], but the end of the stream is an error too.
    pub fn expect(&mut self, what: &str) -> Result<Msg> {
        self.recv()?.ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("connection closed while waiting for {what}"),
            )
        })
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<()> {
        self.writer
            .set_read_timeout(t)
            .map_err(|e| Error::io("set socket timeout", e))
    }

    /// The reader and the writer, for a reader thread and whoever writes.
    pub fn split(self) -> (LineReader<TcpStream>, TcpStream) {
        (self.reader, self.writer)
    }

    pub fn stream(&self) -> &TcpStream {
        &self.writer
    }
}

/// Sets `TCP_NODELAY` and the write timeout on a new stream.
pub fn setup(stream: &TcpStream) -> Result<()> {
    stream
        .set_nodelay(true)
        .map_err(|e| Error::io("set TCP_NODELAY", e))?;
    stream
        .set_write_timeout(Some(WRITE_TIMEOUT))
        .map_err(|e| Error::io("set socket timeout", e))
}

/// Writes one message in one `write` call, every value whole (an error if it does not fit
/// a line).
pub fn send_whole(w: &mut TcpStream, m: &Msg) -> Result<()> {
    w.write_all(m.encode_whole()?.as_bytes())
        .map_err(|e| Error::io(format_args!("send {}", m.verb), e))
}

/// Writes one message in one `write` call.
pub fn send(w: &mut TcpStream, m: &Msg) -> Result<()> {
    w.write_all(m.encode().as_bytes())
        .map_err(|e| Error::io(format_args!("send {}", m.verb), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkpoint library's names for the verbs (native/ckpt/proto.h) are this enum's:
    /// `CAIRN_V_<NAME>` spells the verb of the variant whose name is `<NAME>` in camel case.
    #[test]
    fn the_checkpoint_librarys_verbs_are_these() {
        let header = include_str!("../../../native/ckpt/proto.h");
        let mut seen = 0;
        for line in header.lines() {
            let Some(rest) = line.strip_prefix("#define CAIRN_V_") else {
                continue;
            };
            let (name, value) = rest.split_once(' ').expect("#define NAME VALUE");
            let spelled = value.trim().trim_matches('"');
            let verb = Verb::parse(spelled)
                .unwrap_or_else(|| panic!("proto.h's {name} is {spelled:?}, which is no verb"));
            let camel: String = name
                .split('_')
                .map(|w| w[..1].to_string() + &w[1..].to_lowercase())
                .collect();
            assert_eq!(format!("{verb:?}"), camel, "proto.h's CAIRN_V_{name}");
            seen += 1;
        }
        assert!(seen >= 17, "only {seen} verbs read from proto.h");
    }

    #[test]
    fn values_round_trip_through_percent_encoding() {
        for v in [
            "",
            "plain-1.2/x:y,z_",
            "a b=c%d\ne",
            "é and \u{1F600}",
            "/tmp/cairn images/v1/proc0.img",
        ] {
            let m = Msg::new(Verb::Failed).arg("why", v).arg("ckpt", 3);
            let line = m.encode();
            assert!(line.ends_with('\n'));
            assert_eq!(line.matches(' ').count(), 2, "{line:?}");
            assert_eq!(Msg::parse(&line).unwrap(), m);
        }
        assert_eq!(encode_value("a b"), "a%20b");
        assert_eq!(encode_value("x=1%"), "x%3D1%25");
    }

    #[test]
    fn parse_rejects_unknown_verbs_and_malformed_fields() {
        let e = Msg::parse("FROB x=1").unwrap_err();
        assert!(e.message().contains("unknown verb \"FROB\""), "{e}");
        assert!(Msg::parse("").is_err());
        assert!(Msg::parse("HELLO token").is_err());
        assert!(Msg::parse("HELLO =1").is_err());
        assert!(Msg::parse("HELLO a=%4").is_err());
        assert!(Msg::parse("HELLO a=%ZZ").is_err());
        assert!(Msg::parse("HELLO a=%FF").is_err(), "not UTF-8");
        let m = Msg::parse("HELLO  proc=3 future_key=whatever proc=4\r\n").unwrap();
        assert_eq!(m.num::<usize>("proc").unwrap(), 3);
        assert!(m.num::<usize>("pid").is_err());
        assert!(m.get("future_key").is_some());
    }

    #[test]
    fn long_values_are_cut_to_fit_a_line() {
        let why = "proc 7 did not answer; ".repeat(400);
        let m = Msg::new(Verb::Done).arg("ok", 0).arg("why", &why);
        let line = m.encode();
        assert!(
            line.len() <= MAX_LINE && line.len() > MAX_LINE - 100,
            "{}",
            line.len()
        );
        let back = Msg::parse(&line).unwrap();
        assert_eq!(back.get("ok"), Some("0"));
        assert!(back.get("why").unwrap().ends_with("..."));
        // Multi-byte characters are never split.
        let m = Msg::new(Verb::Done).arg("why", "é".repeat(3000));
        assert!(Msg::parse(&m.encode()).is_ok());
    }

    #[test]
    fn whole_lines_refuse_to_cut_a_value() {
        let cmd = "orted -mca ess \"env\" ".repeat(100);
        let m = Msg::new(Verb::Run).arg("cmd", &cmd);
        assert_eq!(Msg::parse(&m.encode_whole().unwrap()).unwrap(), m);
        let m = Msg::new(Verb::Run).arg("cmd", cmd.repeat(3));
        let e = m.encode_whole().unwrap_err();
        assert!(
            e.message().contains("longer than the protocol's 4096"),
            "{e}"
        );
    }

    #[test]
    fn reader_limits_line_length() {
        let mut data = Msg::new(Verb::End).encode().into_bytes();
        data.extend(b"BYE status=0\n");
        data.extend(vec![b'x'; MAX_LINE + 10]);
        let mut r = LineReader::new(&data[..]);
        assert_eq!(r.next_msg().unwrap().unwrap().verb, Verb::End);
        assert_eq!(r.next_msg().unwrap().unwrap().verb, Verb::Bye);
        let e = r.next_msg().unwrap_err();
        assert!(e.message().contains("longer than 4096"), "{e}");
        let mut r = LineReader::new(&b"BYE status=0"[..]);
        assert!(
            r.next_msg().is_err(),
            "a line cut short by the end of the stream"
        );
        let mut r = LineReader::new(&b""[..]);
        assert!(r.next_msg().unwrap().is_none());
        // Exactly MAX_LINE bytes with the newline is allowed.
        let mut line = b"END pad=".to_vec();
        line.resize(MAX_LINE - 1, b'a');
        line.push(b'\n');
        let mut r = LineReader::new(&line[..]);
        assert!(r.next_msg().unwrap().is_some());
    }
}
