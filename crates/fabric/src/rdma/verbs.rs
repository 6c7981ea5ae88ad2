//! RDMA verbs transport (feature `rdma`, PeakFS §III-D) on the `sideway` crate: one reliable-
//! connected QP per connection, set up through a TCP side channel carrying [`QpInfo`]; frames go
//! by SEND into the peer's posted receive slots (registered receive ring), small frames copied
//! into a registered send ring, frames whose payload lies in a [`RegisteredBuffer`] gathered
//! straight from it (zero copy; the call returns once the SEND completed, as PeakFS's write
//! pipeline does); large data moves one-sided with [`RdmaConnection::write_remote`] /
//! [`RdmaConnection::read_remote`] into or out of the peer's registered buffers.
//!
//! Not exercised here: this machine has no RDMA device; [`RdmaDevice::open`] then fails with
//! [`TransportError::NoDevice`].

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{GenericCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};

use super::{HANDSHAKE_LEN, MrKeys, MrTable, QpInfo, RemoteBuf, SendRing, WrId, decode_message};
use crate::frame::{HEADER_LEN, Header, Opcode};
use crate::transport::{
    ConnId, Connection, Event, Frame, Listener, Outbox, Poller, PollerHandle, Transport,
    TransportError,
};

/// Most scatter/gather entries of one SEND (header + payload slices).
const MAX_SEND_SGE: usize = 8;

/// Knobs of the RDMA transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Device name (`mlx5_0`); `None`: the first device.
    pub device: Option<String>,
    /// Port number on the device.
    pub port: u8,
    /// GID table index (RoCE).
    pub gid_index: u8,
    /// Receive slots posted per connection.
    pub recv_slots: u32,
    /// Send-ring slots per connection (SENDs in flight).
    pub send_slots: u32,
    /// Bytes per slot: the largest frame one SEND carries.
    pub slot_size: u32,
    /// Bound on waits for send-ring space, completions and the handshake.
    pub op_timeout: Duration,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            device: None,
            port: 1,
            gid_index: 0,
            recv_slots: 128,
            send_slots: 128,
            slot_size: 8192,
            op_timeout: Duration::from_secs(10),
        }
    }
}

/// Maps a verbs error to [`TransportError::Verbs`].
fn verbs<E: std::fmt::Display>(call: &'static str) -> impl FnOnce(E) -> TransportError {
    move |error| TransportError::Verbs {
        call,
        detail: error.to_string(),
    }
}

/// An opened device and its protection domain.
pub struct RdmaDevice {
    name: String,
    context: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
}

impl std::fmt::Debug for RdmaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaDevice")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RdmaDevice {
    /// Opens the configured device; [`TransportError::NoDevice`] if there is none.
    pub fn open(config: &RdmaConfig) -> Result<Arc<RdmaDevice>, TransportError> {
        let list = DeviceList::new().map_err(|_| TransportError::NoDevice)?;
        let device = match &config.device {
            Some(name) => list.iter().find(|device| device.name() == *name),
            None => list.iter().next(),
        }
        .ok_or(TransportError::NoDevice)?;
        let name = device.name();
        let context = device.open().map_err(verbs("ibv_open_device"))?;
        let pd = context.alloc_pd().map_err(verbs("ibv_alloc_pd"))?;
        Ok(Arc::new(RdmaDevice { name, context, pd }))
    }

    /// Allocates and registers `len` bytes (local write, remote read and write): the memory
    /// PeakFS's allocator hands applications so their buffers need no copy.
    pub fn alloc_buffer(&self, len: usize) -> Result<RegisteredBuffer, TransportError> {
        let bytes = vec![0u8; len.max(1)].into_boxed_slice();
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
        // SAFETY: `bytes` is a live heap allocation of `bytes.len()` bytes that the returned
        // buffer owns; its field order drops the registration before the memory.
        let mr = unsafe { self.pd.reg_mr(bytes.as_ptr() as usize, bytes.len(), access) }
            .map_err(verbs("ibv_reg_mr"))?;
        Ok(RegisteredBuffer { mr, bytes })
    }
}

/// Memory registered with a device's protection domain.
pub struct RegisteredBuffer {
    // Declared first: dropped (deregistered) before the memory it covers.
    mr: Arc<MemoryRegion>,
    bytes: Box<[u8]>,
}

impl std::fmt::Debug for RegisteredBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RegisteredBuffer({} bytes, lkey {:#x})",
            self.bytes.len(),
            self.mr.lkey()
        )
    }
}

impl RegisteredBuffer {
    /// Its keys.
    pub fn keys(&self) -> MrKeys {
        MrKeys {
            lkey: self.mr.lkey(),
            rkey: self.mr.rkey(),
        }
    }

    /// Start address (what the peer's one-sided operations name).
    pub fn addr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }

    /// The descriptor of `range` to send to the peer, or `None` if it is out of bounds.
    pub fn remote(&self, range: Range<usize>) -> Option<RemoteBuf> {
        let len = u32::try_from(self.bytes.get(range.clone())?.len()).ok()?;
        Some(RemoteBuf {
            addr: self.addr() + range.start as u64,
            len,
            rkey: self.mr.rkey(),
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// The verbs half of a connection: QP, CQ, send ring and completion bookkeeping. Split from the
/// receive ring so a poller can lend a received payload while replying on any connection.
struct Link {
    qp: ExtendedQueuePair,
    cq: GenericCompletionQueue,
    send_ring_buf: RegisteredBuffer,
    send_ring: SendRing,
    /// Receive ring address and key (for reposting without borrowing the ring).
    recv_base: u64,
    recv_lkey: u32,
    slot_size: u32,
    /// The peer's slot size: the largest frame it accepts.
    peer_slot_size: u32,
    /// Receive completions not yet handed out: (slot, bytes).
    arrived: VecDeque<(u32, u32)>,
    /// Slot whose frame was handed out last; reposted before the next receive.
    lent: Option<u32>,
    /// Registered user memory that payloads may be gathered from.
    mrs: MrTable,
    /// Numbering of one-sided operations; `one_sided_done` counts their completions.
    one_sided_next: u32,
    one_sided_done: u32,
    timeout: Duration,
}

impl Link {
    /// Posts a receive for `slot`.
    fn post_recv(&mut self, slot: u32) -> Result<(), TransportError> {
        let addr = self.recv_base + u64::from(slot) * u64::from(self.slot_size);
        let mut guard = self.qp.start_post_recv();
        let wr = guard.construct_wr(WrId::Recv(slot).encode());
        // SAFETY: the receive ring is registered with `recv_lkey`, lives as long as the
        // connection (and outlives the QP's use of it: the QP is torn down first), and slot
        // `slot` spans `slot_size` bytes inside it.
        unsafe { wr.setup_sge(self.recv_lkey, addr, self.slot_size) };
        guard.post().map_err(verbs("ibv_post_recv"))
    }

    /// Drains the CQ; returns whether anything completed.
    fn poll_cq(&mut self) -> Result<bool, TransportError> {
        let Ok(poller) = self.cq.start_poll() else {
            return Ok(false);
        };
        let mut any = false;
        for wc in poller {
            any = true;
            if wc.status() != WorkCompletionStatus::Success as u32 {
                return Err(TransportError::Verbs {
                    call: "ibv_poll_cq",
                    detail: format!(
                        "work request {:#x} failed with status {}",
                        wc.wr_id(),
                        wc.status()
                    ),
                });
            }
            let id = WrId::decode(wc.wr_id()).map_err(verbs("ibv_poll_cq"))?;
            match id {
                WrId::Send(slot) => self
                    .send_ring
                    .complete(slot)
                    .map_err(verbs("ibv_poll_cq"))?,
                WrId::Recv(slot) => self.arrived.push_back((slot, wc.byte_len())),
                WrId::OneSided(_) => self.one_sided_done = self.one_sided_done.wrapping_add(1),
            }
        }
        Ok(any)
    }

    /// Polls until `done` holds or the timeout passes.
    fn wait(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Link) -> bool,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + self.timeout;
        while !done(self) {
            if !self.poll_cq()? {
                if Instant::now() >= deadline {
                    return Err(TransportError::Verbs {
                        call: "ibv_poll_cq",
                        detail: format!("no completion for {what} within {:?}", self.timeout),
                    });
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Sends one frame by SEND; see the module doc for copy versus gather.
    fn send(&mut self, mut header: Header, payload: &[&[u8]]) -> Result<(), TransportError> {
        let len: usize = payload.iter().map(|part| part.len()).sum();
        let max = self.peer_slot_size - HEADER_LEN as u32;
        header.payload_len = u32::try_from(len)
            .ok()
            .filter(|&n| n <= max)
            .ok_or(TransportError::PayloadTooLarge { len, max })?;
        if self.send_ring.acquire().is_none() {
            self.wait("a send-ring slot", |link| {
                link.send_ring.in_flight() < link.send_ring.slots()
            })?;
        }
        let slot = self.send_ring.acquire().ok_or(TransportError::Verbs {
            call: "ibv_post_send",
            detail: "send ring full".into(),
        })?;
        let at = slot as usize * self.slot_size as usize;
        let keys = self.send_ring_buf.keys();
        let ring = &mut self.send_ring_buf.as_mut_slice()[at..at + self.slot_size as usize];
        ring[..HEADER_LEN].copy_from_slice(&header.encode());
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SEND_SGE];
        sges[0] = ibv_sge {
            addr: ring.as_ptr() as u64,
            length: HEADER_LEN as u32,
            lkey: keys.lkey,
        };
        let gathered = payload.len() < MAX_SEND_SGE
            && payload.iter().enumerate().all(|(i, part)| {
                let found = self.mrs.find(part.as_ptr() as usize, part.len());
                if let Some((_, keys)) = found {
                    sges[i + 1] = ibv_sge {
                        addr: part.as_ptr() as u64,
                        length: part.len() as u32,
                        lkey: keys.lkey,
                    };
                }
                found.is_some() || part.is_empty()
            });
        let used = if gathered {
            1 + payload.len()
        } else {
            let mut end = HEADER_LEN;
            for part in payload {
                ring[end..end + part.len()].copy_from_slice(part);
                end += part.len();
            }
            sges[0].length = end as u32;
            1
        };
        let mut guard = self.qp.start_post_send();
        let wr = guard
            .construct_wr(WrId::Send(slot).encode(), WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: every entry names registered memory (the send ring, or a region of `mrs`)
        // that stays valid until the SEND completes: the ring is owned by this link, and for
        // gathered user memory this call waits for the completion below before returning.
        unsafe { wr.setup_sge_list(&sges[..used]) };
        guard.post().map_err(verbs("ibv_post_send"))?;
        if gathered && len > 0 {
            self.wait("a zero-copy SEND", |link| link.send_ring.in_flight() == 0)?;
        }
        Ok(())
    }

    /// Posts a one-sided READ or WRITE and waits for it.
    fn one_sided(
        &mut self,
        write: bool,
        local: Range<u64>,
        lkey: u32,
        remote: RemoteBuf,
    ) -> Result<(), TransportError> {
        let length = u32::try_from(local.end - local.start).unwrap_or(u32::MAX);
        if length != remote.len {
            return Err(TransportError::PayloadTooLarge {
                len: length as usize,
                max: remote.len,
            });
        }
        let id = self.one_sided_next;
        self.one_sided_next = id.wrapping_add(1);
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(WrId::OneSided(id).encode(), WorkRequestFlags::Signaled);
        let wr = if write {
            wr.setup_write(remote.rkey, remote.addr)
        } else {
            wr.setup_read(remote.rkey, remote.addr)
        };
        // SAFETY: `local` lies in a registered buffer the caller borrows for the duration of
        // this call, which waits for the completion.
        unsafe { wr.setup_sge(lkey, local.start, length) };
        guard.post().map_err(verbs("ibv_post_send"))?;
        let target = id.wrapping_add(1);
        self.wait("a one-sided operation", |link| {
            link.one_sided_done == target
        })
    }

    /// The next received frame: its header and where its payload lies in the receive ring.
    fn next_frame(
        &mut self,
        max_payload: u32,
        ring: &[u8],
    ) -> Result<Option<(Header, Range<usize>)>, TransportError> {
        if let Some(slot) = self.lent.take() {
            self.post_recv(slot)?;
        }
        if self.arrived.is_empty() {
            self.poll_cq()?;
        }
        let Some((slot, len)) = self.arrived.pop_front() else {
            return Ok(None);
        };
        self.lent = Some(slot);
        let start = slot as usize * self.slot_size as usize;
        let bytes = ring
            .get(start..start + len as usize)
            .ok_or(TransportError::Verbs {
                call: "ibv_poll_cq",
                detail: format!("receive of {len} bytes overflows slot {slot}"),
            })?;
        let (header, payload) = decode_message(bytes, max_payload)?;
        Ok(Some((header, start + payload.start..start + payload.end)))
    }
}

/// A connected RC queue pair with its side channel.
pub struct RdmaConnection {
    link: Link,
    recv_ring: RegisteredBuffer,
    side: TcpStream,
    peer: SocketAddr,
    device: Arc<RdmaDevice>,
}

impl std::fmt::Debug for RdmaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaConnection")
            .field("peer", &self.peer)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl RdmaConnection {
    /// Builds the QP and rings, exchanges [`QpInfo`] over `side`, and brings the QP to RTS.
    fn establish(
        side: TcpStream,
        device: Arc<RdmaDevice>,
        config: &RdmaConfig,
    ) -> Result<Self, TransportError> {
        side.set_nodelay(true)?;
        side.set_read_timeout(Some(config.op_timeout))?;
        side.set_write_timeout(Some(config.op_timeout))?;
        let peer = side.peer_addr()?;
        let slot = config.slot_size as usize;
        let send_ring_buf = device.alloc_buffer(slot * config.send_slots as usize)?;
        let recv_ring = device.alloc_buffer(slot * config.recv_slots as usize)?;
        let cq = device
            .context
            .create_cq_builder()
            .setup_cqe(config.send_slots + config.recv_slots + 2)
            .build_ex()
            .map_err(verbs("ibv_create_cq_ex"))?;
        let cq = GenericCompletionQueue::from(cq);
        let mut qp = device
            .pd
            .create_qp_builder()
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .setup_max_send_wr(config.send_slots + 1)
            .setup_max_recv_wr(config.recv_slots)
            .setup_max_send_sge(MAX_SEND_SGE as u32)
            .build_ex()
            .map_err(verbs("ibv_create_qp_ex"))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(config.port)
            .setup_access_flags(
                AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
            );
        qp.modify(&attr).map_err(verbs("ibv_modify_qp(INIT)"))?;
        let gid = device
            .context
            .query_gid(config.port, config.gid_index.into())
            .map_err(verbs("ibv_query_gid"))?;
        let lid = device
            .context
            .query_port(config.port)
            .map_err(verbs("ibv_query_port"))?
            .lid();
        let psn = rand_psn();
        let mut link = Link {
            qp,
            cq,
            recv_base: recv_ring.addr(),
            recv_lkey: recv_ring.keys().lkey,
            send_ring_buf,
            send_ring: SendRing::new(config.send_slots),
            slot_size: config.slot_size,
            peer_slot_size: config.slot_size,
            arrived: VecDeque::new(),
            lent: None,
            mrs: MrTable::default(),
            one_sided_next: 0,
            one_sided_done: 0,
            timeout: config.op_timeout,
        };
        for slot in 0..config.recv_slots {
            link.post_recv(slot)?;
        }
        let local = QpInfo {
            qp_num: link.qp.qp_number(),
            psn,
            lid,
            gid: Ipv6Addr::from(gid).octets(),
            recv_slots: config.recv_slots,
            slot_size: config.slot_size,
        };
        let mut side = side;
        side.write_all(&local.encode())?;
        let mut message = [0u8; HANDSHAKE_LEN];
        side.read_exact(&mut message)?;
        let remote = QpInfo::decode(&message).map_err(verbs("handshake"))?;
        link.peer_slot_size = remote.slot_size;

        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::Mtu1024)
            .setup_dest_qp_num(remote.qp_num)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(1)
            .setup_min_rnr_timer(12);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(config.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(config.gid_index)
            .setup_grh_dest_gid(&Gid::from(Ipv6Addr::from(remote.gid)))
            .setup_grh_hop_limit(1);
        attr.setup_address_vector(&ah);
        link.qp.modify(&attr).map_err(verbs("ibv_modify_qp(RTR)"))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            // 7: retry forever on receiver-not-ready, so a SEND waits for a reposted slot.
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        link.qp.modify(&attr).map_err(verbs("ibv_modify_qp(RTS)"))?;
        // Neither side sends before both QPs are ready to receive.
        side.write_all(&[1])?;
        side.read_exact(&mut [0u8])?;
        Ok(RdmaConnection {
            link,
            recv_ring,
            side,
            peer,
            device,
        })
    }

    /// Lets frames whose payload lies in `buffer` be sent without a copy.
    pub fn register_for_send(&mut self, buffer: &RegisteredBuffer) -> Result<(), TransportError> {
        self.link
            .mrs
            .insert(
                buffer.addr() as usize,
                buffer.as_slice().len(),
                buffer.keys(),
            )
            .map(|_| ())
            .map_err(verbs("register_for_send"))
    }

    /// RDMA WRITEs `local[range]` into the peer's `remote` buffer (same length) and waits.
    pub fn write_remote(
        &mut self,
        local: &RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteBuf,
    ) -> Result<(), TransportError> {
        let span = local_span(local, range)?;
        self.link.one_sided(true, span, local.keys().lkey, remote)
    }

    /// RDMA READs the peer's `remote` buffer into `local[range]` (same length) and waits.
    pub fn read_remote(
        &mut self,
        local: &mut RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteBuf,
    ) -> Result<(), TransportError> {
        let span = local_span(local, range)?;
        self.link.one_sided(false, span, local.keys().lkey, remote)
    }

    /// The device this connection runs on (to allocate buffers).
    pub fn device(&self) -> &Arc<RdmaDevice> {
        &self.device
    }
}

/// The address range of `range` in `buffer`, checked.
fn local_span(
    buffer: &RegisteredBuffer,
    range: Range<usize>,
) -> Result<Range<u64>, TransportError> {
    let len = buffer.as_slice().len();
    if range.start > range.end || range.end > len {
        return Err(TransportError::PayloadTooLarge {
            len: range.end,
            max: len as u32,
        });
    }
    Ok(buffer.addr() + range.start as u64..buffer.addr() + range.end as u64)
}

/// A random 24-bit initial packet sequence number.
fn rand_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    common::hash::crc32c(&nanos.to_le_bytes()) & 0x00ff_ffff
}

impl Connection for RdmaConnection {
    fn send(&mut self, header: Header, payload: &[&[u8]]) -> Result<(), TransportError> {
        self.link.send(header, payload)
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        // SENDs are posted at once; nothing is staged.
        Ok(())
    }

    fn recv(&mut self, timeout: Duration) -> Result<Frame<'_>, TransportError> {
        let deadline = Instant::now() + timeout;
        let max_payload = self.link.peer_slot_size;
        loop {
            if let Some((header, range)) = self
                .link
                .next_frame(max_payload, self.recv_ring.as_slice())?
            {
                if header.opcode == Opcode::GOODBYE {
                    return Err(TransportError::Closed { mid_frame: false });
                }
                return Ok(Frame {
                    header,
                    payload: &self.recv_ring.as_slice()[range],
                });
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout(timeout));
            }
            std::thread::yield_now();
        }
    }

    fn close(&mut self) -> Result<(), TransportError> {
        let said = self.send(Header::request(Opcode::GOODBYE, 0, 0), &[]);
        let _ = self.side.shutdown(std::net::Shutdown::Both);
        said
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

/// The RDMA [`Transport`]: addresses are those of the TCP side channel.
#[derive(Debug, Clone, Default)]
pub struct RdmaTransport {
    config: RdmaConfig,
}

impl RdmaTransport {
    /// A transport with `config`.
    pub fn new(config: RdmaConfig) -> Self {
        RdmaTransport { config }
    }
}

/// Accepts side-channel connections and sets up a QP for each.
#[derive(Debug)]
pub struct RdmaListener {
    side: crate::tcp::TcpListener,
    device: Arc<RdmaDevice>,
    config: RdmaConfig,
}

impl Listener for RdmaListener {
    type Conn = RdmaConnection;

    fn accept(&self, timeout: Option<Duration>) -> Result<Option<RdmaConnection>, TransportError> {
        let Some(side) = self.side.accept(timeout)? else {
            return Ok(None);
        };
        let stream = side.into_stream();
        RdmaConnection::establish(stream, Arc::clone(&self.device), &self.config).map(Some)
    }

    fn local_addr(&self) -> SocketAddr {
        self.side.local_addr()
    }
}

impl Transport for RdmaTransport {
    type Conn = RdmaConnection;
    type Listener = RdmaListener;
    type Poller = RdmaPoller;

    fn connect(&self, addr: &str, timeout: Duration) -> Result<RdmaConnection, TransportError> {
        let device = RdmaDevice::open(&self.config)?;
        let targets = addr
            .to_socket_addrs()
            .map_err(|source| TransportError::Resolve {
                addr: addr.to_owned(),
                source,
            })?;
        let mut last =
            std::io::Error::new(std::io::ErrorKind::NotFound, "address resolved to nothing");
        for target in targets {
            match TcpStream::connect_timeout(&target, timeout) {
                Ok(side) => return RdmaConnection::establish(side, device, &self.config),
                Err(error) => last = error,
            }
        }
        Err(TransportError::Connect {
            addr: addr.to_owned(),
            source: last,
        })
    }

    fn listen(&self, addr: &str) -> Result<RdmaListener, TransportError> {
        let device = RdmaDevice::open(&self.config)?;
        let side = crate::tcp::TcpTransport::default().listen(addr)?;
        Ok(RdmaListener {
            side,
            device,
            config: self.config.clone(),
        })
    }

    fn poller(&self) -> Result<RdmaPoller, TransportError> {
        RdmaPoller::new()
    }
}

/// A communicating thread's loop over many RDMA connections: it busy-polls their CQs (RDMA
/// servers poll rather than sleep), yielding when idle.
pub struct RdmaPoller {
    links: Vec<(u32, Option<Link>)>,
    rings: Vec<Option<(RegisteredBuffer, TcpStream, Arc<RdmaDevice>)>>,
    closing: Vec<(u32, Option<TransportError>)>,
    handle: PollerHandle<RdmaConnection>,
    adopted: Vec<RdmaConnection>,
    waker_poll: mio::Poll,
    events: mio::Events,
}

impl std::fmt::Debug for RdmaPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaPoller")
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

/// Token of the poller's waker.
const WAKER: mio::Token = mio::Token(0);

impl RdmaPoller {
    /// An empty poller.
    pub fn new() -> Result<Self, TransportError> {
        let waker_poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(waker_poll.registry(), WAKER)?);
        Ok(RdmaPoller {
            links: Vec::new(),
            rings: Vec::new(),
            closing: Vec::new(),
            handle: PollerHandle::new(Arc::default(), waker),
            adopted: Vec::new(),
            waker_poll,
            events: mio::Events::with_capacity(4),
        })
    }

    fn link(&mut self, id: ConnId) -> Result<&mut Link, TransportError> {
        match self.links.get_mut(id.index as usize) {
            Some((generation, Some(link))) if *generation == id.generation => Ok(link),
            _ => Err(TransportError::UnknownConnection(id)),
        }
    }
}

/// The poller's links seen as an [`Outbox`] while a payload from its rings is lent out.
struct Links<'a> {
    links: &'a mut Vec<(u32, Option<Link>)>,
    closing: &'a mut Vec<(u32, Option<TransportError>)>,
}

impl Outbox for Links<'_> {
    fn send(
        &mut self,
        conn: ConnId,
        header: Header,
        payload: &[&[u8]],
    ) -> Result<(), TransportError> {
        match self.links.get_mut(conn.index as usize) {
            Some((generation, Some(link))) if *generation == conn.generation => {
                link.send(header, payload)
            }
            _ => Err(TransportError::UnknownConnection(conn)),
        }
    }

    fn close(&mut self, conn: ConnId) {
        if matches!(self.links.get(conn.index as usize), Some((generation, Some(_))) if *generation == conn.generation)
        {
            self.closing.push((conn.index, None));
        }
    }
}

impl Outbox for RdmaPoller {
    fn send(
        &mut self,
        conn: ConnId,
        header: Header,
        payload: &[&[u8]],
    ) -> Result<(), TransportError> {
        self.link(conn)?.send(header, payload)
    }

    fn close(&mut self, conn: ConnId) {
        Links {
            links: &mut self.links,
            closing: &mut self.closing,
        }
        .close(conn);
    }
}

impl Poller for RdmaPoller {
    type Conn = RdmaConnection;

    fn register(&mut self, conn: RdmaConnection) -> Result<ConnId, TransportError> {
        let RdmaConnection {
            link,
            recv_ring,
            side,
            device,
            ..
        } = conn;
        let index = match self.links.iter().position(|(_, link)| link.is_none()) {
            Some(index) => index,
            None => {
                self.links.push((0, None));
                self.rings.push(None);
                self.links.len() - 1
            }
        };
        self.links[index].1 = Some(link);
        self.rings[index] = Some((recv_ring, side, device));
        Ok(ConnId {
            index: index as u32,
            generation: self.links[index].0,
        })
    }

    fn handle(&self) -> PollerHandle<RdmaConnection> {
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
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let mut count = 0;
        loop {
            self.handle.take_pending(&mut self.adopted);
            let mut adopted = std::mem::take(&mut self.adopted);
            for conn in adopted.drain(..) {
                let id = self.register(conn)?;
                handler(self, Event::Opened(id));
                count += 1;
            }
            self.adopted = adopted;
            for index in 0..self.links.len() {
                let generation = self.links[index].0;
                let Some((ring, ..)) = &self.rings[index] else {
                    continue;
                };
                let Some(link) = self.links[index].1.as_mut() else {
                    continue;
                };
                let max_payload = link.peer_slot_size;
                match link.next_frame(max_payload, ring.as_slice()) {
                    Ok(None) => {}
                    Ok(Some((header, _))) if header.opcode == Opcode::GOODBYE => {
                        self.closing.push((index as u32, None));
                    }
                    Ok(Some((header, range))) => {
                        let conn = ConnId {
                            index: index as u32,
                            generation,
                        };
                        let frame = Frame {
                            header,
                            payload: &ring.as_slice()[range],
                        };
                        let mut out = Links {
                            links: &mut self.links,
                            closing: &mut self.closing,
                        };
                        handler(&mut out, Event::Frame { conn, frame });
                        count += 1;
                    }
                    Err(error) => self.closing.push((index as u32, Some(error))),
                }
            }
            while let Some((index, error)) = self.closing.pop() {
                let slot = &mut self.links[index as usize];
                if slot.1.take().is_none() {
                    continue;
                }
                let conn = ConnId {
                    index,
                    generation: slot.0,
                };
                slot.0 = slot.0.wrapping_add(1);
                if let Some((_, side, _)) = self.rings[index as usize].take() {
                    let _ = side.shutdown(std::net::Shutdown::Both);
                }
                handler(self, Event::Closed { conn, error });
                count += 1;
            }
            if count > 0 || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Ok(count);
            }
            // A wake (replies waiting in rings) ends the round too.
            self.waker_poll
                .poll(&mut self.events, Some(Duration::ZERO))?;
            if !self.events.is_empty() {
                return Ok(count);
            }
            std::thread::yield_now();
        }
    }

    fn connections(&self) -> usize {
        self.links.iter().filter(|(_, link)| link.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_a_device_on_a_machine_without_one_says_so() {
        // This machine has no RDMA device (see the README); with one, this test is moot.
        if let Err(error) = RdmaDevice::open(&RdmaConfig::default()) {
            assert!(matches!(error, TransportError::NoDevice), "{error}");
            assert_eq!(error.to_string(), "no RDMA device found");
        }
    }

    #[test]
    fn connect_and_listen_fail_cleanly_without_a_device() {
        let transport = RdmaTransport::default();
        if RdmaDevice::open(&RdmaConfig::default()).is_err() {
            assert!(matches!(
                transport.listen("127.0.0.1:0"),
                Err(TransportError::NoDevice)
            ));
            assert!(matches!(
                transport.connect("127.0.0.1:1", Duration::from_millis(100)),
                Err(TransportError::NoDevice)
            ));
        }
    }
}
