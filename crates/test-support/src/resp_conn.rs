//! A blocking RESP2 connection for tests that talk to redis-server directly (a cluster's nodes, to set
//! it up and read its state), with timeouts so a paused or killed server fails a call instead of
//! hanging the test.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a connect, a write or a reply may take before the call fails: long enough for a busy CI
/// machine, short enough that a paused server does not stall a test's polling loop.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A reply, as RESP2 carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...` (also `-MOVED`, `-CLUSTERDOWN`): a reply, not an I/O failure.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nabc`.
    Bulk(Vec<u8>),
    /// `*N`, its elements.
    Array(Vec<Reply>),
    /// `$-1` or `*-1`.
    Nil,
}

impl Reply {
    /// The text of a status or bulk reply (lossy UTF-8); `None` for the others.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// One connection to a redis-server.
#[derive(Debug)]
pub struct RespConn {
    /// Buffered reads of the replies; writes go to its inner stream.
    reader: BufReader<TcpStream>,
}

impl RespConn {
    /// Connects to `addr` (`127.0.0.1:port`), with a 2 s timeout on the connect and on every read and
    /// write.
    pub fn connect(addr: &str) -> io::Result<RespConn> {
        let sock = addr
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
        let stream = TcpStream::connect_timeout(&sock, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(RespConn {
            reader: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.send(args)?;
        read_reply(&mut self.reader)
    }

    /// [`RespConn::call`] with text arguments.
    pub fn call_str(&mut self, args: &[&str]) -> io::Result<Reply> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call(&args)
    }

    /// Sends one command without reading its reply (to pipeline: read them with [`RespConn::read`]).
    pub fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out)
    }

    /// Reads the next reply.
    pub fn read(&mut self) -> io::Result<Reply> {
        read_reply(&mut self.reader)
    }
}

/// An `InvalidData` error: the server sent something that is not RESP2.
fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Reads one RESP2 reply.
fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-reply",
        ));
    };
    let Some((&kind, rest)) = body.split_first() else {
        return Err(invalid("an empty reply line"));
    };
    let text = String::from_utf8_lossy(rest).into_owned();
    let number = || text.parse::<i64>().map_err(|_| invalid("a bad length"));
    match kind {
        b'+' => Ok(Reply::Status(text)),
        b'-' => Ok(Reply::Error(text)),
        b':' => Ok(Reply::Integer(number()?)),
        b'$' => match usize::try_from(number()?) {
            Err(_) => Ok(Reply::Nil),
            Ok(n) => {
                let mut data = vec![0; n + 2];
                r.read_exact(&mut data)?;
                data.truncate(n);
                Ok(Reply::Bulk(data))
            }
        },
        b'*' => match usize::try_from(number()?) {
            Err(_) => Ok(Reply::Nil),
            Ok(n) => (0..n)
                .map(|_| read_reply(r))
                .collect::<io::Result<_>>()
                .map(Reply::Array),
        },
        _ => Err(invalid("not a RESP2 reply")),
    }
}
