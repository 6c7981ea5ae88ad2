//! pRPC on top of any [`Transport`] (PeakFS §III-B, §III-D): a synchronous client with a
//! pipelining window (many requests in flight per connection, as the write pipeline needs) and
//! the reference server loop: an acceptor handing client *i* to communicating thread *i mod T*,
//! each thread a [`Poller`] answering requests inline. PeakFS's RingSched replaces the inline
//! handler with SPSC rings to worker threads; tests and the echo benchmark use this one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::frame::{ErrorCode, Header, Opcode};
use crate::transport::{
    Connection, Event, Frame, Listener, Outbox, Poller, PollerHandle, Received, Transport,
    TransportError,
};

/// A reply's header is a reply's, or an error's.
fn check_reply(header: &Header) -> Result<(), TransportError> {
    if header.is_reply() || header.opcode == Opcode::ERROR {
        Ok(())
    } else {
        Err(TransportError::UnexpectedFrame {
            expected: 0,
            got: *header,
        })
    }
}

/// A client over one connection: requests get consecutive ids, up to `window` may be in flight.
#[derive(Debug)]
pub struct RpcClient<C> {
    conn: C,
    next_id: u64,
    in_flight: usize,
    window: usize,
    timeout: Duration,
}

impl<C: Connection> RpcClient<C> {
    /// A client over `conn` allowing `window` (at least 1) requests in flight, each reply
    /// awaited at most `timeout`.
    pub fn new(conn: C, window: usize, timeout: Duration) -> Self {
        RpcClient {
            conn,
            next_id: 1,
            in_flight: 0,
            window: window.max(1),
            timeout,
        }
    }

    /// Queues a request and returns its id; it goes out with the next [`flush`](Self::flush) or
    /// when the client waits for a reply. Fails if the window is full.
    pub fn submit(&mut self, opcode: Opcode, payload: &[&[u8]]) -> Result<u64, TransportError> {
        if self.in_flight == self.window {
            return Err(TransportError::WindowFull {
                window: self.window,
            });
        }
        let id = self.next_id;
        self.conn.send(Header::request(opcode, id, 0), payload)?;
        self.next_id += 1;
        self.in_flight += 1;
        Ok(id)
    }

    /// Writes every queued request.
    pub fn flush(&mut self) -> Result<(), TransportError> {
        self.conn.flush()
    }

    /// Waits for the next reply (any id; [`Opcode::ERROR`] replies included, see
    /// [`Frame::error`]). Fails after the timeout, or if no request is in flight.
    pub fn next_reply(&mut self) -> Result<Frame<'_>, TransportError> {
        if self.in_flight == 0 {
            return Err(TransportError::Busy { in_flight: 0 });
        }
        let frame = self.conn.recv(self.timeout)?;
        check_reply(&frame.header)?;
        self.in_flight -= 1;
        Ok(frame)
    }

    /// As [`next_reply`](Self::next_reply), a reply that `own` wants in a buffer of its own
    /// perhaps received straight into one ([`Connection::recv_for`]).
    pub fn next_reply_for(
        &mut self,
        own: &dyn Fn(&Header) -> bool,
    ) -> Result<Received<'_>, TransportError> {
        if self.in_flight == 0 {
            return Err(TransportError::Busy { in_flight: 0 });
        }
        let received = self.conn.recv_for(self.timeout, own)?;
        check_reply(&received.frame().header)?;
        self.in_flight -= 1;
        Ok(received)
    }

    /// Sends one request and waits for its reply; an error reply becomes
    /// [`TransportError::Remote`]. Needs an idle connection.
    pub fn call(&mut self, opcode: Opcode, payload: &[&[u8]]) -> Result<Frame<'_>, TransportError> {
        if self.in_flight != 0 {
            return Err(TransportError::Busy {
                in_flight: self.in_flight,
            });
        }
        let id = self.submit(opcode, payload)?;
        let frame = self.next_reply()?;
        if let Some(error) = frame.error() {
            let (code, message) = error?;
            return Err(TransportError::Remote {
                code,
                message: message.to_owned(),
            });
        }
        if frame.header.request_id != id {
            return Err(TransportError::UnexpectedFrame {
                expected: id,
                got: frame.header,
            });
        }
        Ok(frame)
    }

    /// Requests awaiting replies.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The connection (to close it, or to send raw frames in tests).
    pub fn connection(&mut self) -> &mut C {
        &mut self.conn
    }
}

/// Answers one request of the reference server: fills the reply payload (an empty, reused
/// buffer) and returns `Ok`, or returns the error to reply with.
pub type Handler =
    dyn Fn(&Header, &[u8], &mut Vec<u8>) -> Result<(), (ErrorCode, String)> + Send + Sync;

/// A running reference server; stops (and joins its threads) on [`stop`](Self::stop) or drop.
pub struct Server {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), TransportError>>>,
    wake: Vec<Box<dyn Fn() + Send>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection and joins the threads; the first thread error
    /// is returned.
    pub fn stop(mut self) -> Result<(), TransportError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), TransportError> {
        self.stop.store(true, Ordering::Release);
        for wake in &self.wake {
            wake();
        }
        let mut result = Ok(());
        for thread in self.threads.drain(..) {
            let outcome = thread.join().unwrap_or_else(|_| {
                Err(TransportError::Io(std::io::Error::other(
                    "a server thread panicked",
                )))
            });
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::warn!(%error, "server stopped with an error");
        }
    }
}

/// How often the acceptor looks at the stop flag.
const ACCEPT_TICK: Duration = Duration::from_millis(50);

/// Serves `listener` with `threads` communicating threads. [`Opcode::ECHO`] is answered with
/// the request's payload, other transport opcodes with [`ErrorCode::UNKNOWN_OPCODE`], every
/// other request by `handler`. Malformed frames get an error reply and close their connection
/// only.
pub fn serve<T: Transport>(
    transport: &T,
    listener: T::Listener,
    threads: usize,
    handler: Arc<Handler>,
) -> Result<Server, TransportError> {
    let stop = Arc::new(AtomicBool::new(false));
    let local_addr = listener.local_addr();
    let mut handles: Vec<PollerHandle<T::Conn>> = Vec::new();
    let mut joins = Vec::new();
    let mut wake: Vec<Box<dyn Fn() + Send>> = Vec::new();
    for thread in 0..threads.max(1) {
        let poller = transport.poller()?;
        let handle = poller.handle();
        let waker = handle.clone();
        wake.push(Box::new(move || {
            let _ = waker.wake();
        }));
        handles.push(handle);
        let (stop, handler) = (Arc::clone(&stop), Arc::clone(&handler));
        joins.push(
            std::thread::Builder::new()
                .name(format!("fabric-comm-{thread}"))
                .spawn(move || communicate(poller, &stop, &*handler))?,
        );
    }
    let acceptor_stop = Arc::clone(&stop);
    joins.push(
        std::thread::Builder::new()
            .name("fabric-accept".into())
            .spawn(move || {
                let mut next = 0usize;
                while !acceptor_stop.load(Ordering::Acquire) {
                    if let Some(conn) = listener.accept(Some(ACCEPT_TICK))? {
                        handles[next % handles.len()].adopt(conn)?;
                        next += 1;
                    }
                }
                Ok(())
            })?,
    );
    Ok(Server {
        local_addr,
        stop,
        threads: joins,
        wake,
    })
}

/// The loop of one communicating thread of the reference server.
fn communicate<P: Poller>(
    mut poller: P,
    stop: &AtomicBool,
    handler: &Handler,
) -> Result<(), TransportError> {
    let mut reply = Vec::new();
    let mut open = Vec::new();
    while !stop.load(Ordering::Acquire) {
        poller.poll(None, |out: &mut dyn Outbox, event| match event {
            Event::Opened(conn) => open.push(conn),
            Event::Closed { conn, error } => {
                open.retain(|&id| id != conn);
                if let Some(error) = error {
                    tracing::debug!(?conn, %error, "connection closed");
                }
            }
            Event::Frame { conn, frame } => {
                let Header {
                    opcode, request_id, ..
                } = frame.header;
                let sent = if opcode == Opcode::ECHO {
                    out.send(conn, Header::reply(opcode, request_id, 0), &[frame.payload])
                } else if opcode.is_transport() {
                    let message = format!("opcode {opcode:?} is not served here");
                    out.send_error(conn, request_id, ErrorCode::UNKNOWN_OPCODE, &message)
                } else {
                    reply.clear();
                    match handler(&frame.header, frame.payload, &mut reply) {
                        Ok(()) => out.send(conn, Header::reply(opcode, request_id, 0), &[&reply]),
                        Err((code, message)) => out.send_error(conn, request_id, code, &message),
                    }
                };
                if let Err(error) = sent {
                    tracing::debug!(?conn, %error, "reply not sent");
                }
            }
        })?;
    }
    for conn in open.drain(..) {
        poller.close(conn);
    }
    // One last round flushes and reaps the connections just closed.
    poller.poll(Some(Duration::ZERO), |_, _| {})?;
    Ok(())
}
