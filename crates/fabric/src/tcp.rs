//! The TCP transport (PeakFS §III-D, pRPC without RDMA): the default, runs everywhere.
//!
//! Lean on the echo path: TCP_NODELAY; one reusable receive buffer per connection, frames handed
//! out as borrowed slices; small frames staged in a reusable send buffer and written together
//! (many frames per `write`), large payloads written straight from the caller's slices with one
//! vectored write (zero copy; only a tail the socket refuses is staged). Client connections are
//! blocking with connect, read and write timeouts, so a dead server never hangs a client.
//! [`TcpPoller`] is the nonblocking epoll loop (via `mio`) of a communicating thread.

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::mem;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::{Interest, Token};

use crate::frame::{self, DEFAULT_MAX_PAYLOAD, Decoded, ErrorCode, HEADER_LEN, Header, Opcode};
use crate::transport::{
    ConnId, Connection, Event, Frame, Listener, Outbox, Poller, PollerHandle, Received, Transport,
    TransportError,
};

/// Knobs of the TCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Largest payload accepted from a peer (and allowed in `send`).
    pub max_payload: u32,
    /// Payloads of at least this many bytes are written from the caller's slices (vectored)
    /// instead of being copied into the send buffer.
    pub zero_copy_threshold: usize,
    /// Initial receive buffer per connection; it grows up to one maximal frame.
    pub recv_buffer: usize,
    /// Bound on a blocking write (a peer that stops reading fails the sender after this).
    pub write_timeout: Duration,
    /// How long a blocking connection polls its socket for a reply before it sleeps in the
    /// kernel (zero: it sleeps at once). A reply that arrives within it costs the waiting
    /// thread no wake-up, which on virtual machines is most of a loopback round trip; the
    /// price is a core kept busy meanwhile (as RDMA clients poll their completions).
    pub reply_poll: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_payload: DEFAULT_MAX_PAYLOAD,
            zero_copy_threshold: 16 * 1024,
            recv_buffer: 64 * 1024,
            write_timeout: Duration::from_secs(10),
            reply_poll: Duration::ZERO,
        }
    }
}

impl TcpConfig {
    /// Total payload length of `payload`, checked against the maximum.
    fn payload_len(&self, payload: &[&[u8]]) -> Result<u32, TransportError> {
        let len: usize = payload.iter().map(|part| part.len()).sum();
        match u32::try_from(len) {
            Ok(n) if n <= self.max_payload => Ok(n),
            _ => Err(TransportError::PayloadTooLarge {
                len,
                max: self.max_payload,
            }),
        }
    }
}

/// The TCP [`Transport`].
#[derive(Debug, Clone, Default)]
pub struct TcpTransport {
    config: TcpConfig,
}

impl TcpTransport {
    /// A transport with `config`.
    pub fn new(config: TcpConfig) -> Self {
        TcpTransport { config }
    }

    /// Its configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.config
    }
}

impl Transport for TcpTransport {
    type Conn = TcpConnection;
    type Listener = TcpListener;
    type Poller = TcpPoller;

    fn connect(&self, addr: &str, timeout: Duration) -> Result<TcpConnection, TransportError> {
        let targets = addr
            .to_socket_addrs()
            .map_err(|source| TransportError::Resolve {
                addr: addr.to_owned(),
                source,
            })?;
        let deadline = Instant::now() + timeout;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for target in targets {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last = io::Error::new(io::ErrorKind::TimedOut, format!("no answer in {timeout:?}"));
                break;
            }
            match TcpStream::connect_timeout(&target, left) {
                Ok(stream) => return TcpConnection::new(stream, self.config),
                Err(error) => last = error,
            }
        }
        Err(TransportError::Connect {
            addr: addr.to_owned(),
            source: last,
        })
    }

    fn listen(&self, addr: &str) -> Result<TcpListener, TransportError> {
        let listen_error = |source| TransportError::Listen {
            addr: addr.to_owned(),
            source,
        };
        let inner = std::net::TcpListener::bind(addr).map_err(listen_error)?;
        inner.set_nonblocking(true).map_err(listen_error)?;
        let local_addr = inner.local_addr().map_err(listen_error)?;
        let mut inner = mio::net::TcpListener::from_std(inner);
        let poll = mio::Poll::new()?;
        poll.registry()
            .register(&mut inner, Token(0), Interest::READABLE)?;
        Ok(TcpListener {
            inner,
            poll: Mutex::new(poll),
            local_addr,
            config: self.config,
        })
    }

    fn poller(&self) -> Result<TcpPoller, TransportError> {
        TcpPoller::new(self.config)
    }
}

/// Reusable receive buffer: bytes `start..end` of `buf` are received but not yet consumed.
#[derive(Default)]
struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes still missing for the frame at `start` (from the last decode).
    need: usize,
}

impl RecvBuf {
    fn with_capacity(bytes: usize) -> Self {
        RecvBuf {
            buf: vec![0; bytes.max(HEADER_LEN)],
            start: 0,
            end: 0,
            need: HEADER_LEN,
        }
    }

    /// Decodes the next whole frame, if there is one, and consumes it; the payload is at the
    /// returned range of `buf` until the next [`spare`](Self::spare).
    fn next(&mut self, max_payload: u32) -> Result<Option<(Header, Range<usize>)>, TransportError> {
        match frame::decode(&self.buf[self.start..self.end], max_payload)? {
            Decoded::Need(need) => {
                self.need = need;
                Ok(None)
            }
            Decoded::Frame {
                header, consumed, ..
            } => {
                let payload = self.start + HEADER_LEN..self.start + consumed;
                self.start += consumed;
                Ok(Some((header, payload)))
            }
        }
    }

    /// The header of the frame at `start` if it is buffered, its payload has at least
    /// `threshold` bytes and it has not all arrived (checked as [`Self::next`] checks it).
    fn large_partial_head(
        &self,
        max_payload: u32,
        threshold: usize,
    ) -> Result<Option<Header>, TransportError> {
        let buffered = &self.buf[self.start..self.end];
        let Some(head) = buffered.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        // The length first: small frames, the common case, skip the header check here.
        let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
        if len < threshold || buffered.len() >= HEADER_LEN + len {
            return Ok(None);
        }
        Ok(Some(Header::decode(head, max_payload)?))
    }

    /// Consumes the frame at `start`, whose `header` [`Self::large_partial_head`] returned:
    /// its payload bytes buffered so far, in a buffer with room for all of it.
    fn take_partial(&mut self, header: &Header) -> Vec<u8> {
        let mut payload = Vec::with_capacity(header.payload_len as usize);
        payload.extend_from_slice(&self.buf[self.start + HEADER_LEN..self.end]);
        self.start = self.end;
        self.need = HEADER_LEN;
        payload
    }

    /// True if bytes of an incomplete frame are buffered.
    fn mid_frame(&self) -> bool {
        self.start != self.end
    }

    /// Free space to read into, at least `need` bytes (compacting, then growing, if needed).
    fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end < self.need {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() - self.end < self.need {
                self.buf.resize(self.end + self.need, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of the spare space as received.
    fn filled(&mut self, n: usize) {
        self.end += n;
    }
}

/// The deadline of one receive call.
#[derive(Debug)]
struct Wait {
    timeout: Duration,
    deadline: Instant,
    first_read: bool,
}

impl Wait {
    fn new(timeout: Duration) -> Self {
        Wait {
            timeout,
            deadline: Instant::now() + timeout,
            first_read: true,
        }
    }

    /// Time left, or [`TransportError::Timeout`] if none.
    fn left(&self) -> Result<Duration, TransportError> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(TransportError::Timeout(self.timeout))
        } else {
            Ok(left)
        }
    }
}

impl fmt::Debug for RecvBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RecvBuf({} of {} bytes buffered)",
            self.end - self.start,
            self.buf.len()
        )
    }
}

/// Reusable send buffer: bytes `pos..` of `buf` are staged but not yet written.
#[derive(Default)]
struct SendBuf {
    buf: Vec<u8>,
    pos: usize,
}

impl fmt::Debug for SendBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendBuf({} bytes staged)", self.buf.len() - self.pos)
    }
}

/// Most payload slices written with one vectored write; more are staged (copied).
const MAX_VECTORED_PARTS: usize = 6;

impl SendBuf {
    fn pending(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Bytes staged and not yet written.
    fn staged(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn stage(&mut self, head: &[u8], payload: &[&[u8]]) {
        if !self.pending() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.len() / 2 {
            // A peer that never drains completely must not make the buffer grow forever.
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(head);
        for part in payload {
            self.buf.extend_from_slice(part);
        }
    }

    /// Writes the staged bytes. `Ok(false)`: the socket would block (nonblocking) or its write
    /// timeout expired (blocking) with bytes left.
    fn flush(&mut self, stream: &mut impl Write) -> io::Result<bool> {
        while self.pending() {
            match stream.write(&self.buf[self.pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.pos += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if would_block(&error) => return Ok(false),
                Err(error) => return Err(error),
            }
        }
        Ok(true)
    }

    /// Sends the staged bytes, `head` and `payload` with vectored writes, copying nothing unless
    /// the socket refuses part of it: that tail is staged. `Ok(false)` as for `flush`.
    fn send_vectored(
        &mut self,
        stream: &mut impl Write,
        head: &[u8],
        payload: &[&[u8]],
    ) -> io::Result<bool> {
        if payload.len() > MAX_VECTORED_PARTS {
            self.stage(head, payload);
            return self.flush(stream);
        }
        let mut storage = [IoSlice::new(&[]); MAX_VECTORED_PARTS + 2];
        storage[0] = IoSlice::new(&self.buf[self.pos..]);
        storage[1] = IoSlice::new(head);
        for (slot, part) in storage[2..].iter_mut().zip(payload) {
            *slot = IoSlice::new(part);
        }
        let mut slices = &mut storage[..payload.len() + 2];
        let mut written = 0usize;
        let complete = loop {
            if slices.iter().all(|slice| slice.is_empty()) {
                break true;
            }
            match stream.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
                    IoSlice::advance_slices(&mut slices, n);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if would_block(&error) => break false,
                Err(error) => return Err(error),
            }
        };
        // Rebuild the unwritten tail from the original pieces: staged, head, payload.
        let staged = self.buf.len() - self.pos;
        if written >= staged {
            self.buf.clear();
            self.pos = 0;
            let mut skip = written - staged;
            for part in std::iter::once(head).chain(payload.iter().copied()) {
                let taken = skip.min(part.len());
                skip -= taken;
                self.buf.extend_from_slice(&part[taken..]);
            }
        } else {
            self.pos += written;
            self.buf.extend_from_slice(head);
            for part in payload {
                self.buf.extend_from_slice(part);
            }
        }
        Ok(complete)
    }
}

/// True for the errors a nonblocking socket (or an expired socket timeout) reports.
fn would_block(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Queues `payload` behind `header` on a send buffer: staged if small, written at once from the
/// caller's slices if large (what the socket refuses is staged).
fn enqueue(
    config: &TcpConfig,
    send: &mut SendBuf,
    stream: &mut impl Write,
    mut header: Header,
    payload: &[&[u8]],
) -> Result<(), TransportError> {
    header.payload_len = config.payload_len(payload)?;
    let head = header.encode();
    if header.payload_len as usize >= config.zero_copy_threshold {
        send.send_vectored(stream, &head, payload)?;
    } else {
        send.stage(&head, payload);
    }
    Ok(())
}

/// A blocking TCP connection (client side, or accepted before it goes to a poller).
#[derive(Debug)]
pub struct TcpConnection {
    stream: TcpStream,
    peer: SocketAddr,
    recv: RecvBuf,
    send: SendBuf,
    config: TcpConfig,
    /// Read timeout currently set on the socket (set again only when it changes).
    read_timeout: Option<Duration>,
}

impl TcpConnection {
    /// Wraps a connected stream: TCP_NODELAY, blocking, write timeout from `config`.
    pub fn new(stream: TcpStream, config: TcpConfig) -> Result<Self, TransportError> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(config.write_timeout))?;
        let peer = stream.peer_addr()?;
        Ok(TcpConnection {
            stream,
            peer,
            recv: RecvBuf::with_capacity(config.recv_buffer),
            send: SendBuf::default(),
            config,
            read_timeout: None,
        })
    }

    /// Copies the bytes that have arrived into `buf` without consuming them and without
    /// waiting: `None` when nothing has arrived yet, `Some(0)` when the peer closed. An acceptor
    /// looks at a connection's first frame this way before it picks the poller that will
    /// receive it.
    pub fn peek_now(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.stream.set_nonblocking(true)?;
        let peeked = self.stream.peek(buf);
        self.stream.set_nonblocking(false)?;
        match peeked {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The underlying stream (RDMA uses TCP only as its setup side channel).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let timeout = Some(timeout.max(Duration::from_micros(1)));
        if self.read_timeout != timeout {
            self.stream.set_read_timeout(timeout)?;
            self.read_timeout = timeout;
        }
        Ok(())
    }

    /// Reads what the socket holds without sleeping, trying for up to `span`: `Some(n)` bytes
    /// received (0: the peer closed), `None` if nothing came.
    fn poll_read(&mut self, span: Duration) -> io::Result<Option<usize>> {
        let until = Instant::now() + span;
        let fd = self.stream.as_raw_fd();
        loop {
            let spare = self.recv.spare();
            // SAFETY: `spare` is writable memory of `spare.len()` bytes that this connection
            // owns and nothing else touches during the call; `fd` is its open socket.
            let n = unsafe {
                libc::recv(
                    fd,
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if let Ok(n) = usize::try_from(n) {
                return Ok(Some(n));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::WouldBlock
                && error.kind() != io::ErrorKind::Interrupted
            {
                return Err(error);
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// The next whole frame in the receive buffer, if there is one: its header and where its
    /// payload lies; the peer's GOODBYE is [`TransportError::Closed`].
    fn next_buffered(&mut self) -> Result<Option<(Header, Range<usize>)>, TransportError> {
        match self.recv.next(self.config.max_payload)? {
            Some((header, _)) if header.opcode == Opcode::GOODBYE => {
                Err(TransportError::Closed { mid_frame: false })
            }
            next => Ok(next),
        }
    }

    /// Waits for more bytes in the receive buffer (sending what is queued first): some
    /// arrived, or an interrupted wait; an error when `wait` runs out or the peer closed.
    fn receive_more(&mut self, wait: &mut Wait) -> Result<(), TransportError> {
        self.flush()?;
        let left = wait.left()?;
        if !self.config.reply_poll.is_zero() {
            match self.poll_read(self.config.reply_poll.min(left))? {
                Some(0) => {
                    return Err(TransportError::Closed {
                        mid_frame: self.recv.mid_frame(),
                    });
                }
                Some(n) => {
                    self.recv.filled(n);
                    return Ok(());
                }
                None => {}
            }
        }
        // The first read of a call waits the whole timeout, which is usually set already (no
        // system call in steady state); later reads of the call wait what is left of it.
        self.set_read_timeout(if wait.first_read { wait.timeout } else { left })?;
        wait.first_read = false;
        match self.stream.read(self.recv.spare()) {
            Ok(0) => Err(TransportError::Closed {
                mid_frame: self.recv.mid_frame(),
            }),
            Ok(n) => {
                self.recv.filled(n);
                Ok(())
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted || would_block(&error) => {
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Reads the rest of a payload of `len` bytes from the socket straight into `payload`
    /// (which has the capacity), within what is left of `wait`.
    fn receive_rest(
        &mut self,
        payload: &mut Vec<u8>,
        len: usize,
        wait: &Wait,
    ) -> Result<(), TransportError> {
        let fd = self.stream.as_raw_fd();
        while payload.len() < len {
            let left = wait.left()?;
            self.set_read_timeout(left)?;
            let want = len - payload.len();
            let spare = &mut payload.spare_capacity_mut()[..want];
            // SAFETY: `spare` is memory of `spare.len()` bytes that `payload` owns and nothing
            // else touches during the call; `fd` is this connection's open socket.
            let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
            match usize::try_from(n) {
                Ok(0) => return Err(TransportError::Closed { mid_frame: true }),
                Ok(n) => {
                    // SAFETY: the kernel wrote `n` (at most `spare.len()`) bytes after the
                    // payload's end, so they are initialized and within the capacity.
                    unsafe { payload.set_len(payload.len() + n) };
                }
                Err(_) => {
                    let error = io::Error::last_os_error();
                    if !(error.kind() == io::ErrorKind::Interrupted || would_block(&error)) {
                        return Err(error.into());
                    }
                }
            }
        }
        Ok(())
    }

    fn write_timeout(&self) -> TransportError {
        TransportError::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("peer took nothing for {:?}", self.config.write_timeout),
        ))
    }
}

impl Connection for TcpConnection {
    fn send(&mut self, header: Header, payload: &[&[u8]]) -> Result<(), TransportError> {
        enqueue(
            &self.config,
            &mut self.send,
            &mut self.stream,
            header,
            payload,
        )?;
        // A large payload the socket did not take at once is finished now (the caller's slices
        // are only borrowed); staged small frames are capped so they cannot pile up unboundedly.
        let large = is_large(&self.config, payload);
        if self.send.pending() && (large || self.send.buf.len() >= self.config.recv_buffer) {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        if self.send.flush(&mut self.stream)? {
            Ok(())
        } else {
            Err(self.write_timeout())
        }
    }

    fn recv(&mut self, timeout: Duration) -> Result<Frame<'_>, TransportError> {
        let mut wait = Wait::new(timeout);
        loop {
            if let Some((header, payload)) = self.next_buffered()? {
                return Ok(Frame {
                    header,
                    payload: &self.recv.buf[payload],
                });
            }
            self.receive_more(&mut wait)?;
        }
    }

    fn recv_for(
        &mut self,
        timeout: Duration,
        own: &dyn Fn(&Header) -> bool,
    ) -> Result<Received<'_>, TransportError> {
        let mut wait = Wait::new(timeout);
        loop {
            if let Some(header) = self
                .recv
                .large_partial_head(self.config.max_payload, self.config.zero_copy_threshold)?
                .filter(|h| own(h))
            {
                let mut payload = self.recv.take_partial(&header);
                self.receive_rest(&mut payload, header.payload_len as usize, &wait)?;
                return Ok(Received::Owned(header, payload));
            }
            if let Some((header, payload)) = self.next_buffered()? {
                return Ok(Received::Borrowed(Frame {
                    header,
                    payload: &self.recv.buf[payload],
                }));
            }
            self.receive_more(&mut wait)?;
        }
    }

    fn close(&mut self) -> Result<(), TransportError> {
        self.send(Header::request(Opcode::GOODBYE, 0, 0), &[])?;
        let flushed = self.flush();
        // Shutting down a socket the peer already reset is not worth reporting.
        let _ = self.stream.shutdown(Shutdown::Both);
        flushed
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn peer_closed(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: `recv` peeks at most one byte into `byte`, a local this call owns, from this
        // connection's open socket; MSG_PEEK leaves the byte in the socket.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                (&raw mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => true,
            n if n > 0 => false,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }
}

/// True if `payload` goes out zero-copy (it is at least the threshold).
fn is_large(config: &TcpConfig, payload: &[&[u8]]) -> bool {
    payload.iter().map(|part| part.len()).sum::<usize>() >= config.zero_copy_threshold
}

/// A TCP listener; `accept` blocks on an epoll of its own.
#[derive(Debug)]
pub struct TcpListener {
    inner: mio::net::TcpListener,
    poll: Mutex<mio::Poll>,
    local_addr: SocketAddr,
    config: TcpConfig,
}

impl Listener for TcpListener {
    type Conn = TcpConnection;

    fn accept(&self, timeout: Option<Duration>) -> Result<Option<TcpConnection>, TransportError> {
        let mut poll = self
            .poll
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut events = mio::Events::with_capacity(4);
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            match self.inner.accept() {
                Ok((stream, _)) => {
                    let stream = TcpStream::from(stream);
                    return TcpConnection::new(stream, self.config).map(Some);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                // The peer gave up between SYN and accept: not the listener's failure.
                Err(error) if error.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(error) => return Err(error.into()),
            }
            let left = deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return Ok(None);
            }
            match poll.poll(&mut events, left) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Token of the poller's waker.
const WAKER: Token = Token(usize::MAX);

/// How far a poller reads a readable connection in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadUntil {
    /// Until the socket would block: no event announces bytes that are already there (a
    /// connection handed over or left in the backlog), nor a close that came with the data.
    WouldBlock,
    /// Until a read comes back short (it took everything the socket held): with
    /// edge-triggered events, Linux raises a new one when the next bytes arrive, so the read
    /// that would only say "would block" is saved, one system call per request.
    ShortRead,
}

/// Reads per connection and round before the poller moves on to others (fairness).
const READS_PER_ROUND: usize = 16;

/// A connection owned by a [`TcpPoller`].
#[derive(Debug)]
struct Polled {
    stream: mio::net::TcpStream,
    recv: RecvBuf,
    send: SendBuf,
    /// In the dirty list (has staged output to flush this round).
    dirty: bool,
    /// To be removed at the end of the round (after a last flush).
    closing: bool,
    /// Not read from while its peer leaves too many replies unread (backpressure).
    paused: bool,
    /// Why it closes, if not cleanly.
    error: Option<TransportError>,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    conn: Option<Polled>,
}

/// The connections of a poller, addressed by [`ConnId`].
#[derive(Debug, Default)]
struct Conns {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Connections with staged output.
    dirty: Vec<u32>,
    /// Connections to remove at the end of the round.
    closing: Vec<u32>,
    /// Connections to read from without waiting for an event: they used up their read budget,
    /// were just registered, or were paused and can take requests again.
    backlog: Vec<u32>,
    live: usize,
    config: TcpConfig,
}

impl Conns {
    fn id(&self, index: u32) -> ConnId {
        ConnId {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    fn get(&mut self, id: ConnId) -> Option<&mut Polled> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.conn.as_mut()
    }

    fn mark_closing(&mut self, index: u32, error: Option<TransportError>) {
        if let Some(conn) = self.slots[index as usize].conn.as_mut()
            && !conn.closing
        {
            conn.closing = true;
            conn.error = error;
            self.closing.push(index);
        }
    }

    /// Staged output above which a connection is not read from until its peer catches up.
    fn output_limit(&self) -> usize {
        (self.config.max_payload as usize)
            .saturating_mul(4)
            .max(1 << 20)
    }

    /// Writes what connection `index` has staged (what the socket refuses waits for the next
    /// writable event) and resumes reading from it once its backlog of replies is small again.
    fn flush(&mut self, index: u32) {
        let limit = self.output_limit();
        let Some(conn) = self.slots[index as usize].conn.as_mut() else {
            return;
        };
        conn.dirty = false;
        match conn.send.flush(&mut conn.stream) {
            Err(error) => self.mark_closing(index, Some(error.into())),
            Ok(_) if conn.paused && conn.send.staged() <= limit => {
                conn.paused = false;
                self.backlog.push(index);
            }
            Ok(_) => {}
        }
    }

    /// Flushes every dirty connection.
    fn flush_dirty(&mut self) {
        let mut dirty = mem::take(&mut self.dirty);
        for index in dirty.drain(..) {
            self.flush(index);
        }
        self.dirty = dirty;
    }
}

impl Outbox for Conns {
    fn send(
        &mut self,
        id: ConnId,
        header: Header,
        payload: &[&[u8]],
    ) -> Result<(), TransportError> {
        let config = self.config;
        let conn = self.get(id).ok_or(TransportError::UnknownConnection(id))?;
        if conn.closing {
            return Err(TransportError::UnknownConnection(id));
        }
        match enqueue(&config, &mut conn.send, &mut conn.stream, header, payload) {
            Ok(()) => {
                if conn.send.pending() && !conn.dirty {
                    conn.dirty = true;
                    self.dirty.push(id.index);
                }
                Ok(())
            }
            Err(TransportError::Io(error)) => {
                let copy = io::Error::new(error.kind(), error.to_string());
                self.mark_closing(id.index, Some(TransportError::Io(error)));
                Err(TransportError::Io(copy))
            }
            Err(error) => Err(error),
        }
    }

    fn close(&mut self, id: ConnId) {
        if self.get(id).is_some() {
            self.mark_closing(id.index, None);
        }
    }
}

/// The epoll loop of one communicating thread over many TCP connections.
#[derive(Debug)]
pub struct TcpPoller {
    poll: mio::Poll,
    events: mio::Events,
    conns: Conns,
    /// Scratch list of this round's ready connections: (index, how to read if readable,
    /// writable).
    ready: Vec<(u32, Option<ReadUntil>, bool)>,
    handle: PollerHandle<TcpConnection>,
    adopted: Vec<TcpConnection>,
}

impl TcpPoller {
    /// An empty poller.
    pub fn new(config: TcpConfig) -> Result<Self, TransportError> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
        Ok(TcpPoller {
            poll,
            events: mio::Events::with_capacity(256),
            conns: Conns {
                config,
                ..Conns::default()
            },
            ready: Vec::new(),
            handle: PollerHandle::new(Arc::default(), waker),
            adopted: Vec::new(),
        })
    }

    /// Registers the connections handed over through the handle.
    fn adopt_pending<F: FnMut(&mut dyn Outbox, Event<'_>)>(
        &mut self,
        handler: &mut F,
    ) -> Result<usize, TransportError> {
        self.handle.take_pending(&mut self.adopted);
        let mut count = 0;
        let mut adopted = mem::take(&mut self.adopted);
        for conn in adopted.drain(..) {
            let id = self.register(conn)?;
            handler(&mut self.conns, Event::Opened(id));
            count += 1;
        }
        self.adopted = adopted;
        Ok(count)
    }

    /// Reads from connection `index` and dispatches its frames; returns the frames handed out.
    fn service_read<F: FnMut(&mut dyn Outbox, Event<'_>)>(
        &mut self,
        index: u32,
        until: ReadUntil,
        handler: &mut F,
    ) -> usize {
        let id = self.conns.id(index);
        let max_payload = self.conns.config.max_payload;
        let limit = self.conns.output_limit();
        let Some(conn) = self.conns.slots[index as usize].conn.as_mut() else {
            return 0;
        };
        if conn.closing || conn.paused {
            return 0;
        }
        if conn.send.staged() > limit {
            conn.paused = true;
            return 0;
        }
        // The receive buffer leaves the slot while frames borrowed from it are handed out, so
        // the handler may reply to any connection, this one included.
        let mut recv = mem::take(&mut conn.recv);
        let mut frames = 0;
        let mut reads = 0;
        let mut emptied = false;
        let outcome: Result<(), Option<TransportError>> = loop {
            match recv.next(max_payload) {
                Ok(Some((header, range))) => {
                    if header.opcode == Opcode::GOODBYE {
                        break Err(None);
                    }
                    frames += 1;
                    let frame = Frame {
                        header,
                        payload: &recv.buf[range],
                    };
                    handler(&mut self.conns, Event::Frame { conn: id, frame });
                    if self.conns.slots[index as usize]
                        .conn
                        .as_ref()
                        .is_none_or(|c| c.closing)
                    {
                        break Ok(());
                    }
                    continue;
                }
                Ok(None) => {}
                Err(TransportError::Frame(error)) => {
                    let code = ErrorCode::for_frame_error(&error);
                    // Best effort: the connection is closed right after.
                    let _ = self.conns.send_error(id, 0, code, &error.to_string());
                    break Err(Some(TransportError::Frame(error)));
                }
                Err(error) => break Err(Some(error)),
            }
            if emptied {
                break Ok(());
            }
            if reads == READS_PER_ROUND {
                self.conns.backlog.push(index);
                break Ok(());
            }
            reads += 1;
            let Some(conn) = self.conns.slots[index as usize].conn.as_mut() else {
                break Ok(());
            };
            let spare = recv.spare();
            let room = spare.len();
            match conn.stream.read(spare) {
                Ok(0) => {
                    let mid_frame = recv.mid_frame();
                    break Err(mid_frame.then_some(TransportError::Closed { mid_frame }));
                }
                Ok(n) => {
                    emptied = until == ReadUntil::ShortRead && n < room;
                    recv.filled(n);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(error) => break Err(Some(error.into())),
            }
        };
        if let Some(conn) = self.conns.slots[index as usize].conn.as_mut() {
            conn.recv = recv;
        }
        if let Err(error) = outcome {
            self.conns.mark_closing(index, error);
        }
        frames
    }

    /// Removes the connections marked closing, after a last flush, reporting each once.
    fn reap<F: FnMut(&mut dyn Outbox, Event<'_>)>(&mut self, handler: &mut F) -> usize {
        let mut closed = 0;
        while let Some(index) = self.conns.closing.pop() {
            let id = self.conns.id(index);
            let slot = &mut self.conns.slots[index as usize];
            let Some(mut conn) = slot.conn.take() else {
                continue;
            };
            slot.generation = slot.generation.wrapping_add(1);
            // Best effort: an error reply or a reply to the last request may still fit.
            let _ = conn.send.flush(&mut conn.stream);
            let _ = self.poll.registry().deregister(&mut conn.stream);
            let _ = conn.stream.shutdown(Shutdown::Both);
            self.conns.free.push(index);
            self.conns.live -= 1;
            handler(
                &mut self.conns,
                Event::Closed {
                    conn: id,
                    error: conn.error.take(),
                },
            );
            closed += 1;
        }
        closed
    }
}

impl Outbox for TcpPoller {
    fn send(
        &mut self,
        conn: ConnId,
        header: Header,
        payload: &[&[u8]],
    ) -> Result<(), TransportError> {
        self.conns.send(conn, header, payload)
    }

    fn close(&mut self, conn: ConnId) {
        self.conns.close(conn);
    }
}

impl Poller for TcpPoller {
    type Conn = TcpConnection;

    fn register(&mut self, conn: TcpConnection) -> Result<ConnId, TransportError> {
        let TcpConnection {
            stream, recv, send, ..
        } = conn;
        stream.set_nonblocking(true)?;
        let mut stream = mio::net::TcpStream::from_std(stream);
        let index = match self.conns.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.conns.slots.len()).map_err(|_| {
                    io::Error::new(io::ErrorKind::OutOfMemory, "more than 2^32 connections")
                })?;
                self.conns.slots.push(Slot::default());
                index
            }
        };
        let registered = self.poll.registry().register(
            &mut stream,
            Token(index as usize),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(error) = registered {
            self.conns.free.push(index);
            return Err(error.into());
        }
        let dirty = send.pending();
        self.conns.slots[index as usize].conn = Some(Polled {
            stream,
            recv,
            send,
            dirty,
            closing: false,
            paused: false,
            error: None,
        });
        self.conns.live += 1;
        if dirty {
            self.conns.dirty.push(index);
        }
        // Bytes that arrived before the handover are served without waiting for an event.
        self.conns.backlog.push(index);
        Ok(self.conns.id(index))
    }

    fn handle(&self) -> PollerHandle<TcpConnection> {
        self.handle.clone()
    }

    fn poll<F>(
        &mut self,
        timeout: Option<Duration>,
        mut handler: F,
    ) -> Result<usize, TransportError>
    where
        F: FnMut(&mut dyn Outbox, Event<'_>),
    {
        let mut count = self.adopt_pending(&mut handler)?;
        self.conns.flush_dirty();
        let busy = count > 0 || !self.conns.backlog.is_empty() || !self.conns.closing.is_empty();
        let timeout = if busy { Some(Duration::ZERO) } else { timeout };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
        let mut woken = false;
        self.ready.clear();
        for event in self.events.iter() {
            if event.token() == WAKER {
                woken = true;
                continue;
            }
            let read = if event.is_read_closed() || event.is_error() {
                Some(ReadUntil::WouldBlock)
            } else if event.is_readable() {
                Some(ReadUntil::ShortRead)
            } else {
                None
            };
            self.ready
                .push((event.token().0 as u32, read, event.is_writable()));
        }
        if woken {
            count += self.adopt_pending(&mut handler)?;
        }
        let mut backlog = mem::take(&mut self.conns.backlog);
        let ready = mem::take(&mut self.ready);
        for (index, read, writable) in backlog
            .drain(..)
            .map(|index| (index, Some(ReadUntil::WouldBlock), false))
            .chain(ready.iter().copied())
        {
            if writable {
                self.conns.flush(index);
            }
            if let Some(until) = read {
                count += self.service_read(index, until, &mut handler);
                // The replies of this connection's frames (and any the handler gave to other
                // connections) go now, before the next connection's frames are served: one
                // send per connection either way, but the first connection of a busy round no
                // longer waits for the work of all the others.
                self.conns.flush_dirty();
            }
        }
        self.ready = ready;
        if self.conns.backlog.is_empty() {
            self.conns.backlog = backlog;
        }
        self.conns.flush_dirty();
        count += self.reap(&mut handler);
        Ok(count)
    }

    fn connections(&self) -> usize {
        self.conns.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `chunk` bytes per call and then refuses (would block).
    struct Trickle {
        out: Vec<u8>,
        chunk: usize,
        calls_left: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.calls_left == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.calls_left -= 1;
            let n = buf.len().min(self.chunk);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let joined: Vec<u8> = bufs.iter().flat_map(|buf| buf.iter().copied()).collect();
            self.write(&joined)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn refused_tails_of_vectored_writes_are_staged_in_order() {
        for chunk in [1, 5, 24, 30, 100] {
            for calls in 0..6 {
                let mut send = SendBuf::default();
                send.stage(b"staged", &[]);
                let mut sink = Trickle {
                    out: Vec::new(),
                    chunk,
                    calls_left: calls,
                };
                let done = send
                    .send_vectored(&mut sink, b"HEAD", &[b"abc", b"", b"defgh"])
                    .unwrap();
                sink.calls_left = usize::MAX;
                assert!(send.flush(&mut sink).unwrap());
                assert_eq!(
                    sink.out, b"stagedHEADabcdefgh",
                    "chunk {chunk}, calls {calls}"
                );
                assert_eq!(done, calls * chunk >= 18, "chunk {chunk}, calls {calls}");
            }
        }
    }

    #[test]
    fn peeking_leaves_the_first_frame_for_the_receiver_and_never_waits() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut conn = TcpConnection::new(stream, TcpConfig::default()).unwrap();
        let mut head = [0u8; HEADER_LEN];
        assert_eq!(conn.peek_now(&mut head).unwrap(), None, "nothing sent yet");
        let header = Header::request(Opcode(9), 1, 3);
        client.write_all(&header.encode()).unwrap();
        client.write_all(b"abc").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while conn.peek_now(&mut head).unwrap() != Some(HEADER_LEN) {
            assert!(Instant::now() < deadline, "the header never arrived");
        }
        assert_eq!(head, header.encode());
        assert_eq!(
            conn.peek_now(&mut head).unwrap(),
            Some(HEADER_LEN),
            "peeked twice"
        );
        // Still blocking for the receiver, and the frame is whole.
        let frame = conn.recv(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (frame.header.opcode, frame.payload),
            (Opcode(9), &b"abc"[..])
        );
        drop(client);
        let deadline = Instant::now() + Duration::from_secs(5);
        while conn.peek_now(&mut head).unwrap() != Some(0) {
            assert!(Instant::now() < deadline, "the close never arrived");
        }
    }

    #[test]
    fn receive_buffer_grows_for_a_frame_larger_than_itself_and_compacts() {
        let mut recv = RecvBuf::with_capacity(32);
        let header = Header::request(Opcode(3), 7, 100);
        let mut bytes = header.encode().to_vec();
        bytes.extend((0..100u8).collect::<Vec<_>>());
        let mut fed = 0;
        loop {
            if let Some((got, range)) = recv.next(1000).unwrap() {
                assert_eq!(got, header);
                assert_eq!(recv.buf[range], bytes[HEADER_LEN..]);
                break;
            }
            let spare = recv.spare();
            let n = spare.len().min(bytes.len() - fed).min(10);
            spare[..n].copy_from_slice(&bytes[fed..fed + n]);
            recv.filled(n);
            fed += n;
        }
        assert!(!recv.mid_frame());
    }

    /// A connected pair: the raw client stream and the accepted connection.
    fn pair(config: TcpConfig) -> (TcpStream, TcpConnection) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        (client, TcpConnection::new(stream, config).unwrap())
    }

    fn frame_bytes(opcode: u16, id: u64, payload: &[u8]) -> Vec<u8> {
        let mut bytes = Header::request(Opcode(opcode), id, payload.len() as u32)
            .encode()
            .to_vec();
        bytes.extend_from_slice(payload);
        bytes
    }

    #[test]
    fn a_large_payload_wanted_whole_is_received_into_its_own_buffer_between_other_frames() {
        let (mut peer, mut conn) = pair(TcpConfig::default());
        let big = |seed: u8| {
            (0..200_000u32)
                .map(|i| (i as u8) ^ seed)
                .collect::<Vec<u8>>()
        };
        let frames = [
            frame_bytes(1, 1, b"small"),
            frame_bytes(2, 2, &big(1)),
            frame_bytes(3, 3, &big(2)),
            frame_bytes(4, 4, &big(3)),
        ];
        let sender = std::thread::spawn(move || {
            let all: Vec<u8> = frames.concat();
            // In pieces with pauses, so that large frames arrive in parts.
            for piece in all.chunks(50_000) {
                peer.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            peer
        });
        let own = |h: &Header| h.request_id != 3;
        let mut owned = 0;
        for (id, want) in [
            (1u64, b"small".to_vec()),
            (2, big(1)),
            (3, big(2)),
            (4, big(3)),
        ] {
            let got = conn.recv_for(Duration::from_secs(5), &own).unwrap();
            assert_eq!(got.frame().header.request_id, id);
            if id == 3 {
                assert!(
                    matches!(got, Received::Borrowed(_)),
                    "frame 3 was not wanted owned"
                );
            }
            owned += usize::from(matches!(got, Received::Owned(..)));
            assert!(got.into_payload() == want, "payload of frame {id}");
        }
        assert!(
            owned >= 1,
            "no large frame came in parts: the test did not test"
        );
        assert!(!conn.recv.mid_frame());
        drop(sender.join().unwrap());
    }

    #[test]
    fn a_payload_cut_short_is_a_timeout_or_a_close_mid_frame() {
        let (mut peer, mut conn) = pair(TcpConfig::default());
        let bytes = frame_bytes(2, 1, &[7; 100_000]);
        peer.write_all(&bytes[..30_000]).unwrap();
        let err = conn
            .recv_for(Duration::from_millis(200), &|_| true)
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout(_)), "{err:?}");
        let (mut peer, mut conn) = pair(TcpConfig::default());
        peer.write_all(&bytes[..30_000]).unwrap();
        drop(peer);
        let err = conn
            .recv_for(Duration::from_secs(5), &|_| true)
            .unwrap_err();
        assert!(
            matches!(err, TransportError::Closed { mid_frame: true }),
            "{err:?}"
        );
    }
}
