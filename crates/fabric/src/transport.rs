//! The transport abstraction under pRPC (PeakFS §III-B, §III-D): point-to-point connections that
//! carry [`frame`](crate::frame)s, a listener, and the multi-connection [`Poller`] a RingSched
//! *communicating thread* runs: it owns many connections, waits for any of them to become ready,
//! hands each decoded request to its handler, and sends replies that worker threads produced
//! (they reach it through SPSC rings; [`PollerHandle::wake`] interrupts its wait).
//!
//! Two implementations: [`tcp`](crate::tcp) (the default, runs everywhere) and `rdma` (verbs,
//! behind the `rdma` feature).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::frame::{ErrorCode, FrameError, Header, Opcode, encode_error};

/// Errors of connections, listeners, pollers and the RPC client.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// cannot resolve address {addr:?}: {source}
    #[error("cannot resolve address {addr:?}: {source}")]
    Resolve {
        /// The address as given.
        addr: String,
        /// Resolver error.
        source: io::Error,
    },
    /// connecting to {addr} failed: {source}
    #[error("connecting to {addr} failed: {source}")]
    Connect {
        /// Address tried last.
        addr: String,
        /// Last connect error (a timeout shows as `TimedOut`).
        source: io::Error,
    },
    /// listening on {addr} failed: {source}
    #[error("listening on {addr} failed: {source}")]
    Listen {
        /// Address to bind.
        addr: String,
        /// Bind or listen error.
        source: io::Error,
    },
    /// no frame arrived within {0:?}
    #[error("no frame arrived within {0:?}")]
    Timeout(Duration),
    /// the peer closed the connection{}
    #[error("the peer closed the connection{}", if *.mid_frame { " in the middle of a frame" } else { "" })]
    Closed {
        /// True if a partial frame was pending when the stream ended.
        mid_frame: bool,
    },
    /// the peer sent a malformed frame: {0}
    #[error("the peer sent a malformed frame: {0}")]
    Frame(#[from] FrameError),
    /// payload of {len} bytes exceeds the maximum {max}
    #[error("payload of {len} bytes exceeds the maximum {max}")]
    PayloadTooLarge {
        /// Total payload bytes given to `send`.
        len: usize,
        /// Configured maximum.
        max: u32,
    },
    /// connection {0:?} is not (or no longer) registered with this poller
    #[error("connection {0:?} is not (or no longer) registered with this poller")]
    UnknownConnection(ConnId),
    /// all {window} request slots of the pipelining window are in flight
    #[error("all {window} request slots of the pipelining window are in flight")]
    WindowFull {
        /// Configured window.
        window: usize,
    },
    /// a synchronous call needs an idle connection, but {in_flight} requests are in flight
    #[error("a synchronous call needs an idle connection, but {in_flight} requests are in flight")]
    Busy {
        /// Requests still awaiting replies.
        in_flight: usize,
    },
    /// expected the reply to request {expected}, got frame {got:?}
    #[error("expected the reply to request {expected}, got frame {got:?}")]
    UnexpectedFrame {
        /// Request id awaited.
        expected: u64,
        /// Header received instead.
        got: Header,
    },
    /// the server answered with error {code:?}: {message}
    #[error("the server answered with error {code:?}: {message}")]
    Remote {
        /// Error code of the reply.
        code: ErrorCode,
        /// Message of the reply.
        message: String,
    },
    /// no RDMA device found
    #[error("no RDMA device found")]
    NoDevice,
    /// RDMA verbs call {call} failed: {detail}
    #[error("RDMA verbs call {call} failed: {detail}")]
    Verbs {
        /// The verbs call.
        call: &'static str,
        /// What it reported.
        detail: String,
    },
    /// I/O error: {0}
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// A received frame; the payload borrows the connection's reusable receive buffer and is valid
/// until the next call on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The checked header.
    pub header: Header,
    /// The payload bytes.
    pub payload: &'a [u8],
}

impl Frame<'_> {
    /// The code and message if this is an [`Opcode::ERROR`] frame.
    pub fn error(&self) -> Option<Result<(ErrorCode, &str), FrameError>> {
        (self.header.opcode == Opcode::ERROR).then(|| crate::frame::decode_error(self.payload))
    }
}

/// A received frame: its payload borrowed from the connection's receive buffer, or read
/// straight into a buffer of its own ([`Connection::recv_for`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Received<'a> {
    /// As [`Connection::recv`] returns it.
    Borrowed(Frame<'a>),
    /// The checked header and the payload's own buffer.
    Owned(Header, Vec<u8>),
}

impl Received<'_> {
    /// The frame, borrowing the payload either way.
    pub fn frame(&self) -> Frame<'_> {
        match self {
            Received::Borrowed(frame) => *frame,
            Received::Owned(header, payload) => Frame {
                header: *header,
                payload,
            },
        }
    }

    /// The payload in a buffer of its own: the one it was received into, or a copy.
    pub fn into_payload(self) -> Vec<u8> {
        match self {
            Received::Borrowed(frame) => frame.payload.to_vec(),
            Received::Owned(_, payload) => payload,
        }
    }
}

/// One point-to-point connection, used from one thread at a time (a client, or a server before
/// it hands the connection to a [`Poller`]).
pub trait Connection: Send + fmt::Debug {
    /// Queues a frame. `header.payload_len` is ignored and set from `payload`, a list of slices
    /// sent back to back (the header and a large payload are written with one vectored write,
    /// without copying the payload; small frames are batched until [`flush`](Self::flush) or
    /// the next blocking [`recv`](Self::recv), so many frames go out in one system call).
    fn send(&mut self, header: Header, payload: &[&[u8]]) -> Result<(), TransportError>;
    /// Writes every queued frame.
    fn flush(&mut self) -> Result<(), TransportError>;
    /// Flushes queued frames, then waits up to `timeout` for the next frame.
    fn recv(&mut self, timeout: Duration) -> Result<Frame<'_>, TransportError>;
    /// As [`recv`](Self::recv), but a payload that `own` wants in a buffer of its own (it sees
    /// the frame's header) may be read into one straight from the transport, which saves
    /// the copy out of the receive buffer that [`Received::into_payload`] makes otherwise.
    /// TCP does so for payloads of at least [`crate::TcpConfig::zero_copy_threshold`] bytes
    /// that have not arrived whole yet; the default borrows, as `recv`.
    fn recv_for(
        &mut self,
        timeout: Duration,
        own: &dyn Fn(&Header) -> bool,
    ) -> Result<Received<'_>, TransportError> {
        let _ = own;
        self.recv(timeout).map(Received::Borrowed)
    }
    /// Sends [`Opcode::GOODBYE`] and closes the connection.
    fn close(&mut self) -> Result<(), TransportError>;
    /// The peer's address.
    fn peer_addr(&self) -> SocketAddr;
    /// Whether the peer is known to have closed or reset the connection, told without waiting
    /// and without taking anything from it: checked before an idle connection is used again,
    /// so that a request is not lost on a connection whose peer restarted. The default cannot
    /// tell.
    fn peer_closed(&self) -> bool {
        false
    }
}

/// Accepts incoming connections.
pub trait Listener: Send + fmt::Debug {
    /// Connection type produced.
    type Conn: Connection;
    /// Waits up to `timeout` (`None`: forever) for the next connection; `Ok(None)` if none came.
    fn accept(&self, timeout: Option<Duration>) -> Result<Option<Self::Conn>, TransportError>;
    /// Address bound (useful with port 0).
    fn local_addr(&self) -> SocketAddr;
}

/// Names a connection registered with a [`Poller`]; stale ids (of closed connections whose slot
/// was reused) are detected by the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    /// Slot in the poller.
    pub index: u32,
    /// Incremented each time the slot is reused.
    pub generation: u32,
}

/// What a [`Poller::poll`] hands its handler.
#[derive(Debug)]
pub enum Event<'a> {
    /// A connection was registered (directly, or adopted through a [`PollerHandle`]).
    Opened(ConnId),
    /// A request (or any non-transport frame) arrived; the payload borrows the receive buffer.
    Frame {
        /// Connection it came in on.
        conn: ConnId,
        /// The frame.
        frame: Frame<'a>,
    },
    /// The connection is gone: the peer closed it (`error: None`), said goodbye, sent a malformed
    /// frame (it got an error reply first), failed, or was closed through [`Outbox::close`].
    /// Delivered exactly once per connection.
    Closed {
        /// The connection, now unregistered.
        conn: ConnId,
        /// Why, if not a clean close.
        error: Option<TransportError>,
    },
}

/// Sends replies to connections of a poller (inside a handler, or from the communicating thread
/// when it drains replies that workers produced).
pub trait Outbox {
    /// Queues a frame to `conn` (see [`Connection::send`]); it goes out when the poller flushes
    /// (at the end of each [`Poller::poll`] round, batched with the round's other replies).
    fn send(
        &mut self,
        conn: ConnId,
        header: Header,
        payload: &[&[u8]],
    ) -> Result<(), TransportError>;
    /// Closes `conn` once its queued frames are flushed; a [`Event::Closed`] follows.
    fn close(&mut self, conn: ConnId);
    /// Queues an [`Opcode::ERROR`] reply to request `request_id`.
    fn send_error(
        &mut self,
        conn: ConnId,
        request_id: u64,
        code: ErrorCode,
        message: &str,
    ) -> Result<(), TransportError> {
        let mut payload = Vec::with_capacity(4 + message.len());
        encode_error(code, message, &mut payload);
        self.send(
            conn,
            Header::reply(Opcode::ERROR, request_id, 0),
            &[&payload],
        )
    }
}

/// The event loop of one communicating thread: many connections, one wait.
pub trait Poller: Outbox + Send + fmt::Debug {
    /// Connection type it accepts.
    type Conn: Connection;
    /// Registers a connection with this poller (already-buffered input is served too).
    fn register(&mut self, conn: Self::Conn) -> Result<ConnId, TransportError>;
    /// A handle other threads use to hand over connections and to wake the poller.
    fn handle(&self) -> PollerHandle<Self::Conn>;
    /// Waits up to `timeout` (`None`: until something happens or a wake) and hands every event
    /// to `handler`, which may reply through the given [`Outbox`]. Returns the number of events.
    fn poll<F>(&mut self, timeout: Option<Duration>, handler: F) -> Result<usize, TransportError>
    where
        F: FnMut(&mut dyn Outbox, Event<'_>);
    /// Number of registered connections.
    fn connections(&self) -> usize;
}

/// Connections handed to a poller and not yet registered.
#[derive(Debug)]
pub(crate) struct Adoptions<C> {
    conns: Mutex<Vec<C>>,
    /// Whether `conns` may hold any: the poller looks here every round and takes the lock only
    /// when a connection was handed over (no lock on the request path).
    queued: AtomicBool,
}

impl<C> Default for Adoptions<C> {
    fn default() -> Self {
        Adoptions {
            conns: Mutex::new(Vec::new()),
            queued: AtomicBool::new(false),
        }
    }
}

/// Cloneable, `Send` handle to a [`Poller`]: adopt connections into it from an acceptor thread,
/// or wake it after pushing replies into its rings.
pub struct PollerHandle<C> {
    pending: Arc<Adoptions<C>>,
    waker: Arc<mio::Waker>,
}

impl<C> PollerHandle<C> {
    /// A handle over a poller's adoption queue and waker.
    pub(crate) fn new(pending: Arc<Adoptions<C>>, waker: Arc<mio::Waker>) -> Self {
        PollerHandle { pending, waker }
    }

    /// Hands `conn` to the poller; it registers it in its next round and reports
    /// [`Event::Opened`].
    pub fn adopt(&self, conn: C) -> Result<(), TransportError> {
        let mut conns = self
            .pending
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        conns.push(conn);
        // Set before the wake below, so the woken poller finds the connection.
        self.pending.queued.store(true, Ordering::Release);
        drop(conns);
        self.wake()
    }

    /// Interrupts the poller's wait (replies are waiting in its rings, or it should stop).
    pub fn wake(&self) -> Result<(), TransportError> {
        Ok(self.waker.wake()?)
    }

    /// Moves the connections waiting for adoption into `into`.
    pub(crate) fn take_pending(&self, into: &mut Vec<C>) {
        if !self.pending.queued.load(Ordering::Acquire) {
            return;
        }
        let mut conns = self
            .pending
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        into.append(&mut conns);
        self.pending.queued.store(false, Ordering::Release);
    }
}

impl<C> Clone for PollerHandle<C> {
    fn clone(&self) -> Self {
        PollerHandle {
            pending: Arc::clone(&self.pending),
            waker: Arc::clone(&self.waker),
        }
    }
}

impl<C> fmt::Debug for PollerHandle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollerHandle").finish_non_exhaustive()
    }
}

/// A way to reach peers: connect, listen, and make pollers.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Connection type.
    type Conn: Connection + 'static;
    /// Listener type.
    type Listener: Listener<Conn = Self::Conn> + 'static;
    /// Poller type.
    type Poller: Poller<Conn = Self::Conn> + 'static;
    /// Connects to `addr` (`host:port`), failing after `timeout` if it does not answer.
    fn connect(&self, addr: &str, timeout: Duration) -> Result<Self::Conn, TransportError>;
    /// Listens on `addr` (`host:port`; port 0 picks one).
    fn listen(&self, addr: &str) -> Result<Self::Listener, TransportError>;
    /// A new, empty poller.
    fn poller(&self) -> Result<Self::Poller, TransportError>;
}
