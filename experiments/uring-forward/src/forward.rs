//! The forwarding data path, written once over [`Runtime`]: what `--io epoll` and `--io uring` both run.
//!
//! Its shape is the real proxy's: every client's requests are parsed as they arrive, routed, and queued on
//! the one pipelined connection of their server; that connection's writer sends everything queued in one
//! write; replies are framed in order and handed back; each client gets its answers in request order,
//! as many as are ready in one write.
//!
//! One difference, for io_uring's sake: every connection is served by two tasks, one reading and one
//! writing, where the real proxy has one task `select!`ing over both. A read in flight on io_uring cannot
//! be dropped by a `select!` without cancelling it in the kernel (and losing the bytes it may have
//! received), so each half waits on its own. The epoll variant runs the same two tasks, so the comparison
//! is of runtimes and not of code; the real proxy runs in the same benchmark as the reference.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::{mpsc, oneshot};

use crate::io::{ReadHalf, Runtime, WriteHalf};
use crate::protocol::{self, ReplyKind};
use crate::route::backend_for;

/// The most answers one client may have on their way; past it the proxy stops reading from that client
/// until some are written, which bounds each client's memory.
const MAX_PIPELINE: usize = 256;
/// Write out once this many bytes are ready, even if more are ready too.
const MAX_WRITE_BATCH: usize = 1 << 20;
/// Bytes a read may fill at least (a buffer with less room grows first).
const MIN_READ: usize = 4096;
/// What a buffer starts at, and grows by.
const BUFFER: usize = 16 << 10;

/// What a client gets when its server's connection failed before the reply came.
const LOST: &[u8] = b"SERVER_ERROR backend connection lost\r\n";

/// A request for a server connection.
#[derive(Debug)]
struct Job {
    /// The request's bytes, as the client sent them.
    frame: Vec<u8>,
    /// How to frame its reply.
    kind: ReplyKind,
    /// Where the reply goes; dropped unsent when the connection fails.
    reply: oneshot::Sender<Vec<u8>>,
}

/// A request written (or about to be) that awaits its reply.
#[derive(Debug)]
struct InFlight {
    /// How to frame the reply.
    kind: ReplyKind,
    /// Where it goes.
    reply: oneshot::Sender<Vec<u8>>,
}

/// The queues to every backend's connection, shared by all clients.
#[derive(Debug, Clone)]
pub(crate) struct Links(Rc<[mpsc::UnboundedSender<Job>]>);

impl Links {
    /// Starts one connection task per backend (connecting on first use, reconnecting after a failure).
    pub(crate) fn start<R: Runtime>(backends: &[SocketAddr]) -> Links {
        Links(
            backends
                .iter()
                .map(|&addr| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    R::spawn(server_link::<R>(addr, rx));
                    tx
                })
                .collect(),
        )
    }
}

/// What one server connection's writer and reader share.
#[derive(Debug, Default)]
struct Link {
    /// Requests written, oldest first: replies come back in this order.
    in_flight: RefCell<VecDeque<InFlight>>,
    /// Set by the reader when the connection ended; the writer then reconnects.
    dead: Cell<bool>,
}

impl Link {
    /// Ends the connection: every request in flight gets [`LOST`] (its sender is dropped).
    fn fail(&self) {
        self.dead.set(true);
        self.in_flight.borrow_mut().clear();
    }
}

/// A server connection's writer: connects on the first request, then writes each batch of queued
/// requests in one write, until every client is gone.
async fn server_link<R: Runtime>(addr: SocketAddr, mut rx: mpsc::UnboundedReceiver<Job>) {
    let mut wbuf = Vec::with_capacity(BUFFER);
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let (rd, mut wr) = match R::connect(addr).await {
            Ok(halves) => halves,
            Err(e) => {
                // Everything queued fails now: a burst toward a dead server is answered at once.
                eprintln!("connect {addr}: {e}");
                drop(first);
                while rx.try_recv().is_ok() {}
                continue;
            }
        };
        let link = Rc::new(Link::default());
        R::spawn(server_reader::<R>(rd, Rc::clone(&link)));
        next = Some(first);
        loop {
            let job = match next.take() {
                Some(job) => job,
                None => match rx.recv().await {
                    Some(job) => job,
                    None => {
                        wr.shutdown().await;
                        return;
                    }
                },
            };
            if link.dead.get() {
                // The reader saw the connection end: this job starts the next one.
                next = Some(job);
                break;
            }
            let queue = |job: Job, wbuf: &mut Vec<u8>| {
                wbuf.extend_from_slice(&job.frame);
                link.in_flight.borrow_mut().push_back(InFlight {
                    kind: job.kind,
                    reply: job.reply,
                });
            };
            queue(job, &mut wbuf);
            // Let the other ready tasks (clients woken by the same events) queue theirs first, so one
            // write carries many requests: an event loop's batching.
            R::yield_now().await;
            while wbuf.len() < MAX_WRITE_BATCH {
                match rx.try_recv() {
                    Ok(job) => queue(job, &mut wbuf),
                    Err(_) => break,
                }
            }
            let (written, buf) = wr.write_all(wbuf).await;
            wbuf = buf;
            wbuf.clear();
            if written.is_err() || link.dead.get() {
                link.fail();
                wr.shutdown().await;
                break;
            }
        }
    }
}

/// A server connection's reader: frames the replies in order and hands each to its request, until the
/// connection ends or sends something that is not a reply.
async fn server_reader<R: Runtime>(mut rd: R::Reader, link: Rc<Link>) {
    let mut rbuf = Vec::with_capacity(BUFFER);
    loop {
        if rbuf.capacity() - rbuf.len() < MIN_READ {
            rbuf.reserve(BUFFER);
        }
        let (read, buf) = rd.read(rbuf).await;
        rbuf = buf;
        if !matches!(read, Ok(n) if n > 0) {
            break;
        }
        let mut at = 0;
        let mut broken = false;
        {
            let mut in_flight = link.in_flight.borrow_mut();
            while let Some(front) = in_flight.front() {
                match protocol::reply_len(&rbuf[at..], front.kind) {
                    Ok(None) => break,
                    Ok(Some(n)) => {
                        if let Some(f) = in_flight.pop_front() {
                            let _ = f.reply.send(rbuf[at..at + n].to_vec());
                        }
                        at += n;
                    }
                    Err(_) => {
                        broken = true;
                        break;
                    }
                }
            }
            // Bytes nobody asked for: the stream is out of step.
            broken |= in_flight.is_empty() && at < rbuf.len();
        }
        rbuf.drain(..at);
        if broken {
            eprintln!("a backend sent something that is not a reply: reconnecting");
            break;
        }
    }
    link.fail();
}

/// An answer on its way to a client, in request order.
#[derive(Debug)]
enum Answer {
    /// A server's reply, when it comes.
    Reply(oneshot::Receiver<Vec<u8>>),
    /// The request could not be forwarded: this, then the connection closes.
    Refused(protocol::Malformed),
}

/// Serves one client until it closes, fails, or sends what cannot be forwarded.
pub(crate) async fn serve_client<R: Runtime>(rd: R::Reader, wr: R::Writer, links: Links) {
    let (tx, rx) = mpsc::channel(MAX_PIPELINE);
    R::spawn(client_writer::<R>(wr, rx));
    client_reader::<R>(rd, tx, links).await;
}

/// Reads requests, queues each on its server, and passes where its answer will come to the writer.
async fn client_reader<R: Runtime>(mut rd: R::Reader, tx: mpsc::Sender<Answer>, links: Links) {
    let mut rbuf = Vec::with_capacity(BUFFER);
    loop {
        let mut at = 0;
        loop {
            match protocol::parse_request(&rbuf[at..]) {
                Ok(None) => break,
                Ok(Some(req)) => {
                    let frame = &rbuf[at..at + req.len];
                    let server = backend_for(&frame[req.key.clone()], links.0.len());
                    let (reply, answer) = oneshot::channel();
                    let job = Job {
                        frame: frame.to_vec(),
                        kind: req.kind,
                        reply,
                    };
                    // A send fails only when the link task is gone; the dropped sender answers LOST.
                    let _ = links.0[server].send(job);
                    if tx.send(Answer::Reply(answer)).await.is_err() {
                        return;
                    }
                    at += req.len;
                }
                Err(why) => {
                    let _ = tx.send(Answer::Refused(why)).await;
                    return;
                }
            }
        }
        rbuf.drain(..at);
        if rbuf.capacity() - rbuf.len() < MIN_READ {
            rbuf.reserve(BUFFER);
        }
        let (read, buf) = rd.read(rbuf).await;
        rbuf = buf;
        if !matches!(read, Ok(n) if n > 0) {
            // End of stream or an error: the writer sends what is still on its way, then closes.
            return;
        }
    }
}

/// An answer that has arrived, as the client will see it.
#[derive(Debug)]
enum Arrived {
    /// The server's reply.
    Reply(Vec<u8>),
    /// The server connection failed first: [`LOST`].
    Lost,
    /// Refused: a `CLIENT_ERROR`, and the connection closes after it.
    Refused(protocol::Malformed),
}

/// Appends what the client sees of `answer` to `out`; true when the connection closes after it.
fn append(out: &mut Vec<u8>, answer: Arrived) -> bool {
    match answer {
        Arrived::Reply(reply) => out.extend_from_slice(&reply),
        Arrived::Lost => out.extend_from_slice(LOST),
        Arrived::Refused(why) => {
            out.extend_from_slice(format!("CLIENT_ERROR {why}\r\n").as_bytes());
            return true;
        }
    }
    false
}

/// Waits for the oldest answer, writes it together with every later one already in, and so on; shuts the
/// connection down when the reader is done and every answer is out.
async fn client_writer<R: Runtime>(mut wr: R::Writer, mut rx: mpsc::Receiver<Answer>) {
    let mut out = Vec::with_capacity(BUFFER);
    // An answer taken from the queue that had not arrived yet: the next to wait for.
    let mut head = None;
    loop {
        let oldest = match head.take() {
            Some(a) => a,
            None => match rx.recv().await {
                Some(a) => a,
                None => break,
            },
        };
        let mut close = append(
            &mut out,
            match oldest {
                Answer::Reply(r) => r.await.map_or(Arrived::Lost, Arrived::Reply),
                Answer::Refused(why) => Arrived::Refused(why),
            },
        );
        while !close && out.len() < MAX_WRITE_BATCH {
            let arrived = match rx.try_recv() {
                Ok(Answer::Reply(mut r)) => match r.try_recv() {
                    Ok(reply) => Arrived::Reply(reply),
                    Err(oneshot::error::TryRecvError::Closed) => Arrived::Lost,
                    Err(oneshot::error::TryRecvError::Empty) => {
                        head = Some(Answer::Reply(r));
                        break;
                    }
                },
                Ok(Answer::Refused(why)) => Arrived::Refused(why),
                Err(_) => break,
            };
            close = append(&mut out, arrived);
        }
        let (written, buf) = wr.write_all(out).await;
        out = buf;
        out.clear();
        if written.is_err() || close {
            break;
        }
    }
    wr.shutdown().await;
}
