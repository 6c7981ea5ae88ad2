//! The client's pRPC connections (PeakFS §III-B, §III-D): one fabric connection per server,
//! requests routed by λ, many requests in flight per connection (the write pipeline and
//! batched metadata requests), replies matched by request id.
//!
//! Every reply wait is bounded by the RPC timeout: a dead or unreachable server turns into
//! [`ClientError::Unreachable`] after it, never a hang. A connection that failed is dropped
//! with all its in-flight requests (pending writes fail their file) and reconnected on the
//! next request to that server. A connection found closed by its server before a request
//! goes out on it idle (the server restarted at the same address) is replaced first, so that
//! request is not lost with it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fabric::{
    Connection, Opcode, RpcClient, TcpConfig, TcpConnection, TcpTransport, Transport,
    TransportError,
};

use crate::placement::Layout;
use crate::protocol::{Errno, Request, hello_payload, op};
use crate::pstore::table::U64Map;

use super::ClientError;

/// What a request in flight is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// A caller collects the reply with [`Conns::wait`].
    Sync,
    /// A pipelined write of open file `fh`: its reply only decrements `unfinished_cnt`.
    Write(u64),
    /// Nobody looks at the reply (HELLO).
    Discard,
    /// A request of a [`Conns::burst`]: nobody looks at the reply, but a failure fails the
    /// burst.
    Burst,
}

/// A request in flight: the server it went to and its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    server: u32,
    id: u64,
}

/// The write pipeline state of one open file (§III-D).
#[derive(Debug, Default)]
struct WriteState {
    /// Writes sent whose replies have not arrived (`unfinished_cnt`).
    unfinished: usize,
    /// The first failure of a write, reported by the next fsync/close.
    error: Option<ClientError>,
    /// The writes in flight in the order they were sent, as (server, request id): a full
    /// pipeline waits for the oldest, whichever server has it.
    order: VecDeque<(u32, u64)>,
}

#[derive(Debug)]
struct Server {
    addr: String,
    rpc: Option<RpcClient<TcpConnection>>,
    pending: U64Map<Tag>,
    done: U64Map<Result<Vec<u8>, ClientError>>,
    /// When the connection was last checked for a close by the server.
    checked: Instant,
}

/// How often an idle connection is checked for a close by its server before it is used.
const IDLE_CHECK: Duration = Duration::from_millis(100);

/// Connections to every server of a cluster.
#[derive(Debug)]
pub struct Conns {
    layout: Layout,
    transport: TcpTransport,
    servers: Vec<Server>,
    window: usize,
    timeout: Duration,
    writes: U64Map<WriteState>,
    /// Requests sent since connecting (RPCs per operation in the benchmark).
    sent: u64,
    /// Reused buffer for a request's encoded head.
    head: Vec<u8>,
    /// The communicating thread this client asks every server for (HELLO).
    thread: u64,
    /// The first failure of a burst's requests, until the burst returns it.
    burst_error: Option<ClientError>,
    /// The master's URI, asked for a server's address when a connection to it fails (the
    /// server may have come back at another one).
    master: Option<String>,
}

impl Conns {
    /// Connects to every server (`addrs[i]` is server `i`), asking each for communicating
    /// thread `thread` (HELLO); a reply wait polls the socket for `reply_poll` before it
    /// sleeps ([`TcpConfig::reply_poll`]).
    pub fn connect(
        layout: Layout,
        addrs: Vec<String>,
        window: usize,
        timeout: Duration,
        reply_poll: Duration,
        thread: u64,
    ) -> Result<Self, ClientError> {
        let mut conns = Self {
            layout,
            transport: TcpTransport::new(TcpConfig {
                reply_poll,
                ..TcpConfig::default()
            }),
            servers: addrs
                .into_iter()
                .map(|addr| Server {
                    addr,
                    rpc: None,
                    pending: U64Map::default(),
                    done: U64Map::default(),
                    checked: Instant::now(),
                })
                .collect(),
            window: window.max(1),
            timeout,
            writes: U64Map::default(),
            sent: 0,
            head: Vec::with_capacity(64),
            thread,
            burst_error: None,
            master: None,
        };
        for s in 0..conns.servers.len() {
            conns.rpc(s as u32)?;
        }
        Ok(conns)
    }

    /// Asks the master at `uri` for a server's address whenever a connection to that server
    /// cannot be made: a server restarted at another address registers it there.
    pub fn ask_master_on_failure(&mut self, uri: String) {
        self.master = Some(uri);
    }

    /// The address the master holds for `server` now, if a master is known and it differs
    /// from the one this client used.
    fn moved(&self, server: u32) -> Option<String> {
        let view = crate::master::fetch_view_once(self.master.as_deref()?, self.timeout)
            .inspect_err(|e| tracing::debug!(error = %e, "cluster view not refreshed"))
            .ok()?;
        let addr = view
            .servers
            .into_iter()
            .find(|s| s.index == server)?
            .data_addr;
        (addr != self.servers[server as usize].addr).then_some(addr)
    }

    /// The cluster layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Requests sent since connecting.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Servers connected to.
    pub fn servers(&self) -> u32 {
        self.servers.len() as u32
    }

    fn unreachable(&self, server: u32, source: TransportError) -> ClientError {
        ClientError::Unreachable {
            server,
            addr: self.servers[server as usize].addr.clone(),
            timed_out: matches!(source, TransportError::Timeout(_))
                || matches!(&source, TransportError::Connect { source, .. }
                    if source.kind() == std::io::ErrorKind::TimedOut),
            reason: source.to_string(),
        }
    }

    /// The live connection to `server`, (re)connecting if needed.
    fn rpc(&mut self, server: u32) -> Result<&mut RpcClient<TcpConnection>, ClientError> {
        let s = server as usize;
        if self.servers[s].pending.is_empty() && self.servers[s].rpc.is_some() {
            self.replace_if_closed(server);
        }
        if self.servers[s].rpc.is_none() {
            let conn = match self.transport.connect(&self.servers[s].addr, self.timeout) {
                Ok(conn) => conn,
                Err(e) => {
                    let Some(addr) = self.moved(server) else {
                        return Err(self.unreachable(server, e));
                    };
                    tracing::info!(server, from = %self.servers[s].addr, to = %addr, "server moved");
                    self.servers[s].addr = addr;
                    self.transport
                        .connect(&self.servers[s].addr, self.timeout)
                        .map_err(|e| self.unreachable(server, e))?
                }
            };
            let mut rpc = RpcClient::new(conn, self.window, self.timeout);
            // First, and sent now: the server's acceptor waits for it to pick our thread. Its
            // (empty) reply is collected with the next ones.
            let hello = hello_payload(self.thread);
            let id = rpc
                .submit(op::HELLO, &[&hello])
                .and_then(|id| rpc.connection().flush().map(|()| id))
                .map_err(|e| self.unreachable(server, e))?;
            self.servers[s].pending.insert(id, Tag::Discard);
            self.servers[s].rpc = Some(rpc);
        }
        match self.servers[s].rpc.as_mut() {
            Some(rpc) => Ok(rpc),
            None => Err(ClientError::Internal("connection vanished")),
        }
    }

    /// Drops `server`'s idle connection if the server closed it: it restarted, and a request
    /// sent there would be lost (EIO) although the server is back. Checked at most every
    /// [`IDLE_CHECK`] (one system call), so a busy client does not pay for it.
    fn replace_if_closed(&mut self, server: u32) {
        let s = &mut self.servers[server as usize];
        let now = Instant::now();
        if now.duration_since(s.checked) < IDLE_CHECK {
            return;
        }
        s.checked = now;
        if s.rpc
            .as_mut()
            .is_some_and(|rpc| rpc.connection().peer_closed())
        {
            self.fail_server(server, TransportError::Closed { mid_frame: false });
        }
    }

    /// Drops server `server`'s connection after `err`: every request in flight there fails.
    fn fail_server(&mut self, server: u32, err: TransportError) -> ClientError {
        let error = self.unreachable(server, err);
        let s = &mut self.servers[server as usize];
        if let Some(mut rpc) = s.rpc.take() {
            let _ = rpc.connection().close();
        }
        let pending: Vec<(u64, Tag)> = s.pending.drain().collect();
        for (id, tag) in pending {
            self.complete(server, id, tag, Err(error.clone()));
        }
        error
    }

    fn complete(&mut self, server: u32, id: u64, tag: Tag, r: Result<Vec<u8>, ClientError>) {
        match tag {
            Tag::Sync => {
                self.servers[server as usize].done.insert(id, r);
            }
            Tag::Write(fh) => {
                let w = self.writes.entry(fh).or_default();
                w.unfinished = w.unfinished.saturating_sub(1);
                if let Err(e) = r {
                    w.error.get_or_insert(e);
                }
            }
            Tag::Discard => {}
            Tag::Burst => {
                if let Err(e) = r {
                    self.burst_error.get_or_insert(e);
                }
            }
        }
    }

    /// Waits for one reply from `server` and files it under its tag.
    fn reap(&mut self, server: u32) -> Result<(), ClientError> {
        self.reap_for_caller(server, None).map(drop)
    }

    /// As [`Self::reap`], but the reply to synchronous request `want`, if this is it, is
    /// returned rather than filed: the usual call finds its reply without a trip through
    /// `done`.
    fn reap_for_caller(
        &mut self,
        server: u32,
        want: Option<u64>,
    ) -> Result<Option<Result<Vec<u8>, ClientError>>, ClientError> {
        self.rpc(server)?;
        let s = &mut self.servers[server as usize];
        let Some(rpc) = s.rpc.as_mut() else {
            return Err(ClientError::Internal("connection vanished"));
        };
        // Only a waiting caller reads the bytes: a large reply for one is received straight
        // into a buffer of its own, the others' are not copied at all.
        let pending = &s.pending;
        let reply = match rpc.next_reply_for(&|h| pending.get(&h.request_id) == Some(&Tag::Sync)) {
            Ok(received) => {
                let id = received.frame().header.request_id;
                match s.pending.remove(&id) {
                    // A reply to nothing we sent: the stream is out of sync, start over.
                    None => Err(TransportError::Busy {
                        in_flight: id as usize,
                    }),
                    Some(tag) => {
                        let result = match received.frame().error() {
                            Some(Ok((code, message))) => Err(ClientError::Refused {
                                errno: Errno::from_error_code(code),
                                message: message.to_owned(),
                            }),
                            Some(Err(e)) => Err(ClientError::Protocol(e.to_string())),
                            None if tag == Tag::Sync => Ok(received.into_payload()),
                            None => Ok(Vec::new()),
                        };
                        Ok((id, tag, result))
                    }
                }
            }
            Err(e) => Err(e),
        };
        match reply {
            Ok((id, Tag::Sync, result)) if want == Some(id) => Ok(Some(result)),
            Ok((id, tag, result)) => {
                self.complete(server, id, tag, result);
                Ok(None)
            }
            Err(e) => Err(self.fail_server(server, e)),
        }
    }

    fn submit_tagged(
        &mut self,
        lambda: u64,
        req: &Request<'_>,
        tag: Tag,
    ) -> Result<Ticket, ClientError> {
        let server = self.layout.route(lambda).server;
        while self
            .servers
            .get(server as usize)
            .ok_or(ClientError::Internal("route beyond the server list"))?
            .pending
            .len()
            >= self.window
        {
            self.reap(server)?;
        }
        let mut head = std::mem::take(&mut self.head);
        head.clear();
        req.encode_head(lambda, &mut head);
        let data: &[u8] = match req {
            // Zero copy: the caller's bytes go out as their own slice (writev).
            Request::Write { data, .. } => data,
            _ => &[],
        };
        let sent = self
            .rpc(server)
            .map(|rpc| rpc.submit(req.opcode(), &[&head, data]));
        self.head = head;
        let id = match sent? {
            Ok(id) => id,
            Err(e) => return Err(self.fail_server(server, e)),
        };
        self.servers[server as usize].pending.insert(id, tag);
        self.sent += 1;
        Ok(Ticket { server, id })
    }

    /// Sends `req` (characteristic value `lambda`) without waiting; collect with
    /// [`Conns::wait`].
    pub fn submit(&mut self, lambda: u64, req: &Request<'_>) -> Result<Ticket, ClientError> {
        self.submit_tagged(lambda, req, Tag::Sync)
    }

    /// Waits for the reply of `t`; an error reply is [`ClientError::Refused`].
    pub fn wait(&mut self, t: Ticket) -> Result<Vec<u8>, ClientError> {
        loop {
            let s = &mut self.servers[t.server as usize];
            if !s.done.is_empty()
                && let Some(r) = s.done.remove(&t.id)
            {
                return r;
            }
            if !s.pending.contains_key(&t.id) {
                return Err(ClientError::Internal("waited for an unknown request"));
            }
            if let Some(r) = self.reap_for_caller(t.server, Some(t.id))? {
                return r;
            }
        }
    }

    /// Sends `req` and waits for its reply.
    pub fn call(&mut self, lambda: u64, req: &Request<'_>) -> Result<Vec<u8>, ClientError> {
        let t = self.submit(lambda, req)?;
        self.flush(t.server)?;
        self.wait(t)
    }

    /// Gives up on `t`: its reply, arrived or to come, is dropped (a read sent ahead that the
    /// reader no longer wants).
    pub fn abandon(&mut self, t: Ticket) {
        let s = &mut self.servers[t.server as usize];
        if s.done.remove(&t.id).is_none()
            && let Some(tag) = s.pending.get_mut(&t.id)
        {
            *tag = Tag::Discard;
        }
    }

    /// Sends what [`Self::submit`] queued, to every server. A connection that fails here
    /// fails its requests, which their waits return.
    pub fn flush_all(&mut self) {
        for s in 0..self.servers() {
            let _ = self.flush(s);
        }
    }

    /// Sends every request, then waits for every reply (one round trip for independent
    /// requests; requests to the same slice are processed in order).
    pub fn call_many(&mut self, reqs: &[(u64, Request<'_>)]) -> Vec<Result<Vec<u8>, ClientError>> {
        if reqs.is_empty() {
            return Vec::new();
        }
        let tickets: Vec<_> = reqs.iter().map(|(l, r)| self.submit(*l, r)).collect();
        self.flush_all();
        tickets
            .into_iter()
            .map(|t| t.and_then(|t| self.wait(t)))
            .collect()
    }

    fn flush(&mut self, server: u32) -> Result<(), ClientError> {
        if self.servers[server as usize].rpc.is_none() {
            return Ok(());
        }
        let r = self.rpc(server)?.flush();
        r.map_err(|e| self.fail_server(server, e))
    }

    /// Sends a pipelined write of open file `fh` (`unfinished_cnt += 1`) and returns once it
    /// is sent; at most `max_unfinished` writes of the file stay unacknowledged.
    pub fn submit_write(
        &mut self,
        fh: u64,
        lambda: u64,
        req: &Request<'_>,
        max_unfinished: usize,
    ) -> Result<(), ClientError> {
        while self
            .writes
            .get(&fh)
            .is_some_and(|w| w.unfinished >= max_unfinished.max(1))
        {
            self.reap_for(fh)?;
        }
        let t = self.submit_tagged(lambda, req, Tag::Write(fh))?;
        let w = self.writes.entry(fh).or_default();
        w.unfinished += 1;
        w.order.push_back((t.server, t.id));
        self.flush(t.server)
    }

    /// Reaps replies until the oldest write of `fh` in flight is answered. Waiting for the
    /// oldest, not for any server that has one: the writes of an N-1 file go to every server,
    /// and a client that always waited on the first server with a write in flight left the
    /// replies of the others unread, its pipeline paced by that one server's round trips.
    fn reap_for(&mut self, fh: u64) -> Result<(), ClientError> {
        loop {
            let Some(&(server, id)) = self.writes.get(&fh).and_then(|w| w.order.front()) else {
                // Nothing in flight: the counter is stale (connection reset); clear it.
                if let Some(w) = self.writes.get_mut(&fh) {
                    w.unfinished = 0;
                }
                return Ok(());
            };
            if self.servers[server as usize].pending.get(&id) != Some(&Tag::Write(fh)) {
                // Answered already (or failed with its connection).
                if let Some(w) = self.writes.get_mut(&fh) {
                    w.order.pop_front();
                }
                continue;
            }
            // A failed connection fails the write, which the caller sees below.
            let _ = self.reap(server);
            return Ok(());
        }
    }

    /// Writes of `fh` not yet acknowledged.
    pub fn unfinished(&self, fh: u64) -> usize {
        self.writes.get(&fh).map_or(0, |w| w.unfinished)
    }

    /// Waits until `fh`'s `unfinished_cnt` is zero; returns (and clears) the first write error.
    pub fn drain_writes(&mut self, fh: u64) -> Result<(), ClientError> {
        while self.unfinished(fh) > 0 {
            self.reap_for(fh)?;
        }
        match self.writes.get_mut(&fh).and_then(|w| w.error.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Forgets the pipeline state of a closed file.
    pub fn forget(&mut self, fh: u64) {
        self.writes.remove(&fh);
    }

    /// Sends `count` requests `opcode` with the payload `parts` (an ECHO or an XFER) to
    /// `server`, keeping `window` in flight, and waits for all replies, which nobody reads
    /// (the benchmark's ceilings).
    pub fn burst(
        &mut self,
        server: u32,
        opcode: Opcode,
        parts: &[&[u8]],
        count: u64,
        window: usize,
    ) -> Result<(), ClientError> {
        if server >= self.servers() {
            return Err(ClientError::Internal(
                "a burst to a server that does not exist",
            ));
        }
        let window = window.clamp(1, self.window);
        for _ in 0..count {
            while self.servers[server as usize].pending.len() >= window {
                self.reap(server)?;
            }
            let rpc = self.rpc(server)?;
            match rpc.submit(opcode, parts) {
                Ok(id) => {
                    self.servers[server as usize].pending.insert(id, Tag::Burst);
                    self.sent += 1;
                }
                Err(e) => return Err(self.fail_server(server, e)),
            }
        }
        while !self.servers[server as usize].pending.is_empty() {
            self.reap(server)?;
        }
        self.burst_error.take().map_or(Ok(()), Err)
    }

    /// Closes every connection (GOODBYE).
    pub fn close(&mut self) {
        for s in &mut self.servers {
            if let Some(mut rpc) = s.rpc.take() {
                let _ = rpc.connection().close();
            }
        }
    }
}

impl Drop for Conns {
    fn drop(&mut self) {
        self.close();
    }
}
