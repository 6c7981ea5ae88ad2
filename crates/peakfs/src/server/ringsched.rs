//! RingSched (PeakFS §III-B, Fig. 4 and 5): shared-nothing worker threads exchanging requests
//! through lock-free queues.
//!
//! - Every worker thread is pinned to a core (when that core exists) and owns one resource
//!   slice ([`Slice`]: a PStore over its zone); it runs every request on its slice to
//!   completion.
//! - Every worker is also a communicating thread: the acceptor hands client `i` to worker
//!   `i mod T` (link-reduced dispatch), whose fabric poller receives all of that client's
//!   requests. The client says which `i` in its first frame (HELLO, numbered by the master;
//!   see [`crate::protocol`]); a connection that does not gets the next worker in turn. A
//!   request whose λ routes to another worker is forwarded through the SPSC ring of that
//!   ordered pair of workers; the owner sends the reply back through the reverse ring, and
//!   the communicating thread sends it to the client. The one exception is a MKINODE with
//!   `near` ([`Request::runs_on_receiver`]): it runs on the communicating thread's own slice,
//!   so that a directory a client creates lives on the worker that serves that client, and its
//!   entries and files need no hop (see [`crate::placement`]).
//! - Large copies (READ replies of more than `memcpy_threshold` bytes served from the read
//!   cache) go to a memcpy thread pool through one MPMC queue; the copied replies come back
//!   through the MPSC queue of the communicating thread.
//! - No lock on the request path: rings, atomics and each thread's own state only. A sleeping
//!   worker is woken (its poller's waker) only when it announced that it sleeps.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use common::bench::LatencyRecorder;
use common::ring::{
    Consumer, MpmcConsumer, MpmcProducer, MpscConsumer, MpscProducer, Producer, SpscConsumer,
    SpscProducer,
};
use fabric::frame::HEADER_LEN;
use fabric::{
    ConnId, ErrorCode, Event, Header, Listener, Opcode, Outbox, Poller, PollerHandle,
    TcpConnection, TcpListener, TcpPoller, TcpTransport, Transport, TransportError,
};

use super::readcache::{CacheHit, ReadCache};
use super::slice::{Failure, Slice};
use crate::placement::Layout;
use crate::protocol::{Errno, ProtoError, Request, hello_thread, op, xfer_reply_len};
use crate::usage::ThreadUsage;

/// How long an idle worker sleeps in its poller before it re-checks the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// How often workers publish their usage counters.
const USAGE_EVERY: Duration = Duration::from_millis(200);
/// How long an idle worker on a core of its own watches its rings between two polls of its
/// sockets (about what the yield of a worker on a shared core takes).
const RING_WATCH: Duration = Duration::from_nanos(500);
/// How long the acceptor waits for a new connection's first frame (a client sends its HELLO
/// right after connecting) before it hands the connection to the next worker in turn.
const HELLO_WAIT: Duration = Duration::from_millis(50);

/// Errors starting or running RingSched.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// the transport failed
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// a ring could not be built
    #[error("ring: {0}")]
    Ring(String),
    /// a thread could not be spawned
    #[error("spawn: {0}")]
    Spawn(std::io::Error),
    /// a thread panicked
    #[error("thread {0} panicked")]
    Panicked(String),
}

/// Forwarded requests' replies of at most this many bytes are copied out of the owner's reply
/// buffer (into the request's own buffer); larger ones take the buffer with them.
const SMALL_REPLY: usize = 4096;
/// Buffers a worker keeps for the requests it forwards: the buffer of a forwarded request
/// carries its reply back and serves the next forward, so that a hop allocates nothing.
const SPARE_BUFFERS: usize = 64;
/// Larger buffers (a forwarded WRITE's data) are freed rather than kept.
const SPARE_BUFFER_BYTES: usize = 64 << 10;

/// Settings of RingSched.
#[derive(Debug, Clone)]
pub struct SchedConfig {
    /// This server's index.
    pub index: u32,
    /// Cluster layout (λ routing).
    pub layout: Layout,
    /// memcpy threads.
    pub memcpy_threads: u32,
    /// Copies of more bytes go to the memcpy pool.
    pub memcpy_threshold: usize,
    /// Pin workers to cores.
    pub pin: bool,
    /// Worker `w` pins to `cpus[w mod len]`; empty: to core `w`.
    pub cpus: Vec<usize>,
    /// How long a worker keeps polling (yielding the core in between) after its last work
    /// before it sleeps: a forwarded request's reply, or a client's next request, usually
    /// comes within it, and a worker that does not sleep needs no wake-up (no eventfd write by
    /// the producer, no epoll wake-up here) - the hand-off between two workers costs two ring
    /// operations, as in §III-B.
    pub spin: Duration,
    /// Entries per ring.
    pub ring_capacity: usize,
    /// Bytes of read cache per worker.
    pub read_cache_bytes: usize,
}

/// A request forwarded to the worker owning its slice.
#[derive(Debug)]
struct Job {
    origin: usize,
    conn: ConnId,
    id: u64,
    op: Opcode,
    payload: Vec<u8>,
    /// When the communicating thread pushed it (for [`HopTimes`]).
    forwarded: Instant,
}

/// A finished request on its way back to the communicating thread.
#[derive(Debug)]
struct Done {
    conn: ConnId,
    id: u64,
    op: Opcode,
    result: Result<Vec<u8>, Failure>,
    /// When its request was forwarded; `None` for a request run where it arrived.
    forwarded: Option<Instant>,
}

/// Where the time of forwarded requests goes (§III-B's hop), for the line a stopping worker
/// logs: the wait in the owner's ring (`queued`) and the owner's work up to its reply's push
/// (`served`), measured by the owner, and the whole hop from the push to the reply's arrival
/// back at the communicating thread (`hop`), measured there. The means subtract: the reply's
/// wait on its way back is `hop - queued - served`.
#[derive(Debug, Default)]
struct HopTimes {
    queued: LatencyRecorder,
    served: LatencyRecorder,
    hop: LatencyRecorder,
}

impl HopTimes {
    /// `mean/p50/p99` in microseconds, or `-` without samples.
    fn line(recorder: &LatencyRecorder) -> String {
        recorder.summary().map_or_else(
            || "-".to_string(),
            |l| format!("{:.2}/{:.2}/{:.2}", l.mean, l.p50, l.p99),
        )
    }
}

/// Rounds of a worker's log work longer than this count as stalls in its stop line: a
/// request that arrives meanwhile waits for them, and in a bigdir, where every client's
/// next request may hash to this worker, every client soon does.
const STALL: Duration = Duration::from_micros(50);

/// One kind of a worker's log work between rounds (the settle after replies, or the pump of
/// write-backs and checkpoint pieces), for the stop line: only the rounds that had work to
/// do. An idle worker settles and pumps every round too; those rounds summed to 216-319 ms
/// per worker in runs of echoes alone, and a preempted one looked like a stall.
#[derive(Debug, Default)]
struct LogWork {
    max: Duration,
    total: Duration,
    /// Rounds over [`STALL`], and their time.
    stalls: u64,
    stalled: Duration,
}

impl LogWork {
    /// Adds a round of `d` if it had work to do (`worked`).
    fn add(&mut self, d: Duration, worked: bool) {
        if !worked {
            return;
        }
        self.max = self.max.max(d);
        self.total += d;
        if d > STALL {
            self.stalls += 1;
            self.stalled += d;
        }
    }

    /// `max_us/total_ms/stalls/stalled_ms` over [`STALL`].
    fn line(&self) -> String {
        format!(
            "{:.0}/{:.1}/{}/{:.1}",
            self.max.as_secs_f64() * 1e6,
            self.total.as_secs_f64() * 1e3,
            self.stalls,
            self.stalled.as_secs_f64() * 1e3
        )
    }
}

/// What travels between two workers.
#[derive(Debug)]
enum Msg {
    Req(Job),
    Rep(Done),
}

/// A copy for the memcpy pool: `len` bytes of `src` from `offset` into a reply buffer.
#[derive(Debug)]
struct CopyJob {
    src: Arc<[u8]>,
    offset: usize,
    len: usize,
    to: usize,
    done: Done,
}

/// Usage counters a worker publishes (for the master's reports).
#[derive(Debug, Default)]
struct Usage {
    capacity: AtomicU64,
    used: AtomicU64,
    inodes: AtomicU64,
    direct_bytes: AtomicU64,
    copied_bytes: AtomicU64,
}

/// Per-worker state other threads read: sleeping flag and usage.
#[derive(Debug, Default)]
struct Shared {
    sleeping: AtomicBool,
    usage: Usage,
    requests: AtomicU64,
    forwarded: AtomicU64,
    /// Rounds in which this worker slept in its poller (announced `sleeping`, nothing queued).
    sleeps: AtomicU64,
    /// Wake-ups other threads sent this worker because it had announced that it sleeps.
    woken: AtomicU64,
}

/// Server-wide shutdown state.
#[derive(Debug, Default)]
struct Stop {
    stop: AtomicBool,
    quiesced: AtomicUsize,
}

/// A running RingSched.
#[derive(Debug)]
pub struct RingSched {
    addr: std::net::SocketAddr,
    stop: Arc<Stop>,
    shared: Arc<[CachePadded<Shared>]>,
    handles: Vec<PollerHandle<TcpConnection>>,
    acceptor: Option<JoinHandle<Result<(), SchedError>>>,
    workers: Vec<JoinHandle<Result<(), SchedError>>>,
    memcpy: Vec<JoinHandle<()>>,
    memcpy_stop: Arc<AtomicBool>,
}

/// Totals of the workers' usage counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageTotals {
    /// Bytes of data pages.
    pub capacity: u64,
    /// Bytes in use.
    pub used: u64,
    /// Inodes.
    pub inodes: u64,
    /// Requests executed.
    pub requests: u64,
    /// Requests forwarded to another worker.
    pub forwarded: u64,
    /// Data bytes the controller moved straight to or from request and reply buffers
    /// (`ZoneTransfers::direct`; as of the workers' last usage update).
    pub direct_bytes: u64,
    /// Data bytes copied through bounce slots instead (`ZoneTransfers::copied`).
    pub copied_bytes: u64,
}

impl RingSched {
    /// Starts one worker per slice, the memcpy pool and the acceptor on `listener`.
    pub fn start(
        transport: &TcpTransport,
        listener: TcpListener,
        slices: Vec<Slice>,
        cfg: SchedConfig,
    ) -> Result<Self, SchedError> {
        let t = slices.len();
        let addr = listener.local_addr();
        let stop = Arc::new(Stop::default());
        // One cache line each: the sleeping flag and counters are written on every round.
        let shared: Arc<[CachePadded<Shared>]> = (0..t)
            .map(|_| CachePadded::new(Shared::default()))
            .collect();
        let pollers: Vec<TcpPoller> = (0..t)
            .map(|_| transport.poller())
            .collect::<Result<_, _>>()?;
        let handles: Vec<_> = pollers.iter().map(Poller::handle).collect();
        let ring_err = |e: common::ring::RingError| SchedError::Ring(e.to_string());

        // rings[i][j]: producer on i, consumer on j (None on the diagonal).
        let mut producers: Vec<Vec<Option<SpscProducer<Msg>>>> = Vec::new();
        let mut consumers: Vec<Vec<SpscConsumer<Msg>>> = (0..t).map(|_| Vec::new()).collect();
        for i in 0..t {
            let mut row = Vec::new();
            for (j, inbox) in consumers.iter_mut().enumerate() {
                if i == j {
                    row.push(None);
                    continue;
                }
                let (p, c) = common::ring::spsc(cfg.ring_capacity).map_err(ring_err)?;
                row.push(Some(p));
                inbox.push(c);
            }
            producers.push(row);
        }
        let (copy_tx, copy_rx) =
            common::ring::mpmc::<CopyJob>(cfg.ring_capacity).map_err(ring_err)?;
        let mut copied_tx = Vec::new();
        let mut copied_rx = Vec::new();
        for _ in 0..t {
            let (p, c) = common::ring::mpsc::<Done>(cfg.ring_capacity).map_err(ring_err)?;
            copied_tx.push(p);
            copied_rx.push(c);
        }

        let memcpy_stop = Arc::new(AtomicBool::new(false));
        let mut memcpy = Vec::new();
        for m in 0..cfg.memcpy_threads {
            let (rx, back, stop, shared, wake) = (
                copy_rx.clone(),
                copied_tx.clone(),
                memcpy_stop.clone(),
                shared.clone(),
                handles.clone(),
            );
            memcpy.push(
                std::thread::Builder::new()
                    .name(format!("peakfs-memcpy{m}"))
                    .spawn(move || memcpy_loop(rx, back, &stop, &shared, &wake))
                    .map_err(SchedError::Spawn)?,
            );
        }
        drop(copy_rx);
        let memcpy_threads: Vec<std::thread::Thread> =
            memcpy.iter().map(|h| h.thread().clone()).collect();

        let mut workers = Vec::new();
        let mut producers = producers.into_iter();
        let mut consumers = consumers.into_iter();
        let mut copied_rx = copied_rx.into_iter();
        for (w, (slice, poller)) in slices.into_iter().zip(pollers).enumerate() {
            let state = Worker {
                me: w,
                cfg: cfg.clone(),
                slice,
                cache: ReadCache::new(cfg.read_cache_bytes),
                to: producers.next().unwrap_or_default(),
                from: consumers.next().unwrap_or_default(),
                overflow: (0..t).map(|_| VecDeque::new()).collect(),
                pushed: vec![false; t],
                copy_tx: copy_tx.clone(),
                copied: copied_rx
                    .next()
                    .ok_or_else(|| SchedError::Ring("mpsc".into()))?,
                memcpy_threads: memcpy_threads.clone(),
                next_memcpy: 0,
                outstanding: 0,
                ready: VecDeque::new(),
                handles: handles.clone(),
                shared: shared.clone(),
                stop: stop.clone(),
                out: Vec::new(),
                spare: Vec::new(),
                zeros: Vec::new(),
                hops: HopTimes::default(),
                settle_work: LogWork::default(),
                pump_work: LogWork::default(),
                frames: 0,
                busy: Duration::ZERO,
            };
            workers.push(
                std::thread::Builder::new()
                    .name(format!("peakfs-worker{w}"))
                    .spawn(move || state.run(poller))
                    .map_err(SchedError::Spawn)?,
            );
        }
        drop(copy_tx);

        let acceptor = {
            let (stop, handles) = (stop.clone(), handles.clone());
            std::thread::Builder::new()
                .name("peakfs-accept".into())
                .spawn(move || accept_loop(listener, &handles, &stop))
                .map_err(SchedError::Spawn)?
        };
        Ok(Self {
            addr,
            stop,
            shared,
            handles,
            acceptor: Some(acceptor),
            workers,
            memcpy,
            memcpy_stop,
        })
    }

    /// The listening address.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The workers' usage counters, summed.
    pub fn usage(&self) -> UsageTotals {
        self.usage_source().totals()
    }

    /// A handle that reads the usage counters from another thread.
    pub fn usage_source(&self) -> UsageSource {
        UsageSource(self.shared.clone())
    }

    /// Stops accepting, finishes the requests in flight, checkpoints every slice and joins
    /// all threads.
    pub fn shutdown(mut self) -> Result<(), SchedError> {
        self.stop_threads()
    }

    fn stop_threads(&mut self) -> Result<(), SchedError> {
        self.stop.stop.store(true, Ordering::SeqCst);
        let mut result = Ok(());
        if let Some(a) = self.acceptor.take() {
            result = join(a, "acceptor");
        }
        for h in &self.handles {
            let _ = h.wake();
        }
        for (i, w) in self.workers.drain(..).enumerate() {
            let r = join(w, &format!("worker{i}"));
            if result.is_ok() {
                result = r;
            }
        }
        self.memcpy_stop.store(true, Ordering::SeqCst);
        for m in self.memcpy.drain(..) {
            m.thread().unpark();
            if m.join().is_err() && result.is_ok() {
                result = Err(SchedError::Panicked("memcpy".into()));
            }
        }
        result
    }
}

/// Reads the workers' usage counters (for the master's reports).
#[derive(Debug, Clone)]
pub struct UsageSource(Arc<[CachePadded<Shared>]>);

impl UsageSource {
    /// The counters, summed over the workers.
    pub fn totals(&self) -> UsageTotals {
        let mut u = UsageTotals::default();
        for s in self.0.iter() {
            u.capacity += s.usage.capacity.load(Ordering::Relaxed);
            u.used += s.usage.used.load(Ordering::Relaxed);
            u.inodes += s.usage.inodes.load(Ordering::Relaxed);
            u.requests += s.requests.load(Ordering::Relaxed);
            u.forwarded += s.forwarded.load(Ordering::Relaxed);
            u.direct_bytes += s.usage.direct_bytes.load(Ordering::Relaxed);
            u.copied_bytes += s.usage.copied_bytes.load(Ordering::Relaxed);
        }
        u
    }
}

impl Drop for RingSched {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            let _ = self.stop_threads();
        }
    }
}

fn join(h: JoinHandle<Result<(), SchedError>>, name: &str) -> Result<(), SchedError> {
    h.join().map_err(|_| SchedError::Panicked(name.into()))?
}

fn accept_loop(
    listener: TcpListener,
    handles: &[PollerHandle<TcpConnection>],
    stop: &Stop,
) -> Result<(), SchedError> {
    let mut next = 0usize;
    // Accepted connections whose first frame has not arrived yet. They wait here, not in a
    // blocking read, so that a peer which never sends delays nobody else's accept.
    let mut waiting: Vec<(TcpConnection, Instant)> = Vec::new();
    while !stop.stop.load(Ordering::SeqCst) {
        let wait = if waiting.is_empty() {
            Duration::from_millis(20)
        } else {
            Duration::from_micros(200)
        };
        match listener.accept(Some(wait)) {
            Ok(Some(conn)) => waiting.push((conn, Instant::now())),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "accept failed"),
        }
        let mut i = 0;
        while i < waiting.len() {
            let (conn, since) = &waiting[i];
            let Some(asked) = first_frame_thread(conn, *since) else {
                i += 1;
                continue;
            };
            let (conn, _) = waiting.swap_remove(i);
            // Link-reduced dispatch (§III-B): client i to communicating thread i mod T.
            let to = asked.unwrap_or_else(|| {
                next += 1;
                next - 1
            });
            handles[to % handles.len()].adopt(conn)?;
        }
    }
    Ok(())
}

/// Where a new connection goes: `None` while its first frame may still be a HELLO on its way,
/// `Some(Some(i))` for a HELLO asking for thread `i`, `Some(None)` for anything else (another
/// frame, a closed or failed socket, or silence past [`HELLO_WAIT`]), which the poller then
/// serves or reports as usual.
fn first_frame_thread(conn: &TcpConnection, since: Instant) -> Option<Option<usize>> {
    const HELLO_LEN: usize = HEADER_LEN + 8;
    let mut first = [0u8; HELLO_LEN];
    let patient = since.elapsed() < HELLO_WAIT;
    let n = match conn.peek_now(&mut first) {
        Ok(Some(n)) if n > 0 => n,
        Ok(None) if patient => return None,
        Ok(_) | Err(_) => return Some(None),
    };
    let Some(head) = first
        .first_chunk::<HEADER_LEN>()
        .filter(|_| n >= HEADER_LEN)
    else {
        return if patient { None } else { Some(None) };
    };
    match Header::decode(head, u32::MAX) {
        Ok(h) if h.opcode == op::HELLO && h.payload_len == 8 => {
            if n < HELLO_LEN {
                return if patient { None } else { Some(None) };
            }
            let thread = hello_thread(h.opcode, &first[HEADER_LEN..]);
            Some(thread.map(|t| usize::try_from(t).unwrap_or(usize::MAX)))
        }
        Ok(_) | Err(_) => Some(None),
    }
}

fn memcpy_loop(
    mut rx: MpmcConsumer<CopyJob>,
    mut back: Vec<MpscProducer<Done>>,
    stop: &AtomicBool,
    shared: &[CachePadded<Shared>],
    wake: &[PollerHandle<TcpConnection>],
) {
    loop {
        match rx.pop() {
            Some(job) => {
                let mut done = job.done;
                let src = job
                    .src
                    .get(job.offset..job.offset + job.len)
                    .unwrap_or_default();
                done.result = Ok(src.to_vec());
                let mut item = done;
                // The communicating thread drains its MPSC queue every round; wait for room.
                while let Err(common::ring::Full(back_item)) = back[job.to].push(item) {
                    item = back_item;
                    std::thread::yield_now();
                }
                wake_if_sleeping(&shared[job.to], &wake[job.to]);
            }
            None if stop.load(Ordering::SeqCst) => return,
            None => std::thread::park_timeout(Duration::from_millis(5)),
        }
    }
}

/// Wakes a worker only when it announced that it sleeps (Dekker-style: the producer pushes,
/// fences, reads the flag; the sleeper sets the flag, fences, re-checks its queues).
fn wake_if_sleeping(shared: &Shared, handle: &PollerHandle<TcpConnection>) {
    fence(Ordering::SeqCst);
    if shared.sleeping.load(Ordering::SeqCst) {
        shared.woken.fetch_add(1, Ordering::Relaxed);
        let _ = handle.wake();
    }
}

/// One worker: communicating thread and processing thread of one slice.
struct Worker {
    me: usize,
    cfg: SchedConfig,
    slice: Slice,
    cache: ReadCache,
    to: Vec<Option<SpscProducer<Msg>>>,
    from: Vec<SpscConsumer<Msg>>,
    /// Messages that did not fit their ring, per destination, sent first next round.
    overflow: Vec<VecDeque<Msg>>,
    /// Destinations pushed to this round (to wake once).
    pushed: Vec<bool>,
    copy_tx: MpmcProducer<CopyJob>,
    copied: MpscConsumer<Done>,
    memcpy_threads: Vec<std::thread::Thread>,
    next_memcpy: usize,
    /// Requests this thread forwarded whose replies have not come back.
    outstanding: usize,
    /// Local replies copied inline, sent in the next drain.
    ready: VecDeque<Done>,
    handles: Vec<PollerHandle<TcpConnection>>,
    shared: Arc<[CachePadded<Shared>]>,
    stop: Arc<Stop>,
    /// Reused reply buffer.
    out: Vec<u8>,
    /// Buffers for forwarded requests (see [`SPARE_BUFFERS`]).
    spare: Vec<Vec<u8>>,
    /// Zero bytes the XFER replies are cut from (grown to the longest asked for).
    zeros: Vec<u8>,
    hops: HopTimes,
    /// Log work between two rounds, for the stop line: it holds up every request that
    /// arrives meanwhile. The settle of the requests answered ...
    settle_work: LogWork,
    /// ... and the pump of write-backs and checkpoint steps.
    pump_work: LogWork,
    /// Client frames received, echoes and transfers included (`requests` counts the
    /// file system's), for the stop line.
    frames: u64,
    /// Time in rounds that served something (a request, a reply from another thread) without
    /// sleeping first, for the stop line: over `frames`, what a request costs this thread,
    /// which another client's request arriving meanwhile waits for.
    busy: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

fn send_reply(out: &mut dyn Outbox, conn: ConnId, id: u64, op: Opcode, r: Result<&[u8], &Failure>) {
    let sent = match r {
        Ok(bytes) => out.send(conn, Header::reply(op, id, 0), &[bytes]),
        Err((errno, msg)) => out.send_error(conn, id, errno.error_code(), msg),
    };
    match sent {
        Ok(()) | Err(TransportError::UnknownConnection(_)) => {}
        Err(e) => tracing::debug!(error = %e, "reply not sent"),
    }
}

fn proto_failure(e: ProtoError) -> Failure {
    (e.errno(), e.to_string())
}

impl Worker {
    fn run(mut self, mut poller: TcpPoller) -> Result<(), SchedError> {
        if self.cfg.pin {
            let core = match self.cfg.cpus.as_slice() {
                [] => self.me,
                cpus => cpus[self.me % cpus.len()],
            };
            pin(self.me, core);
        }
        // Answer first, log after: a request's WAL append and inode images run once its reply
        // is on its way (PStore::defer_settle), while the client is still waiting for it.
        if let Err(e) = self.slice.store().defer_settle(true) {
            tracing::error!(worker = self.me, error = %e, "settling the store failed");
        }
        let usage_at_start = ThreadUsage::now();
        // Cores named for the workers are theirs alone: a spinning worker need not yield.
        let own_core = self.cfg.pin && !self.cfg.cpus.is_empty();
        let mut last_usage = Instant::now() - USAGE_EVERY;
        let mut marked_idle = false;
        let mut last_work = Instant::now();
        // An Icache write-back is in flight (PStore::pump moves it on).
        let mut writing_behind = false;
        loop {
            let round_start = Instant::now();
            let stopping = self.stop.stop.load(Ordering::SeqCst);
            let spinning = round_start.duration_since(last_work) < self.cfg.spin;
            let wait = if spinning {
                Duration::ZERO
            } else {
                // Announce sleep, then re-check the queues (see `wake_if_sleeping`).
                let me = &self.shared[self.me];
                me.sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                let idle = !writing_behind
                    && self.from.iter().all(Consumer::is_empty)
                    && self.copied.is_empty()
                    && self.ready.is_empty()
                    && self.overflow.iter().all(VecDeque::is_empty);
                if idle {
                    me.sleeps.fetch_add(1, Ordering::Relaxed);
                    IDLE_WAIT
                } else {
                    Duration::ZERO
                }
            };
            let polled = poller.poll(Some(wait), |out, ev| self.on_event(out, ev));
            if !spinning {
                self.shared[self.me].sleeping.store(false, Ordering::SeqCst);
            }
            // The round's replies are sent: now the log work of the last request.
            let settle_start = Instant::now();
            let settling = self.slice.store().is_unsettled();
            if let Err(e) = self.slice.store().settle() {
                tracing::error!(worker = self.me, error = %e, "settling the store failed");
            }
            let pump_start = Instant::now();
            let was_writing_behind = writing_behind;
            writing_behind = self.slice.store().pump().unwrap_or_else(|e| {
                tracing::error!(worker = self.me, error = %e, "a write-back failed (Icache blocks or staged data pages)");
                false
            });
            // A pump had work when something was in flight before or after it (a write-back,
            // the log written ahead, a checkpoint wanted or being written).
            self.pump_work
                .add(pump_start.elapsed(), writing_behind || was_writing_behind);
            self.settle_work.add(pump_start - settle_start, settling);
            let drained = self.drain(&mut poller);
            if polled? + drained > 0 {
                last_work = Instant::now();
                if wait.is_zero() {
                    self.busy += last_work - round_start;
                }
            } else if spinning && own_core {
                // Instead of a yield (about as long), watch the rings: a request forwarded
                // here, or the reply to one forwarded from here, is served at once rather
                // than after the next round of system calls (§III-B's two forwards).
                if self.watch_rings(RING_WATCH) {
                    self.drain(&mut poller);
                    last_work = Instant::now();
                }
            } else if spinning {
                // Spinning must not keep a client or another worker off a shared core.
                std::thread::yield_now();
            }
            self.flush_overflow();
            self.wake_pushed();
            if last_usage.elapsed() >= USAGE_EVERY {
                let s = self.slice.usage();
                let u = &self.shared[self.me].usage;
                u.capacity.store(s.capacity, Ordering::Relaxed);
                u.used.store(s.used, Ordering::Relaxed);
                u.inodes.store(s.inodes, Ordering::Relaxed);
                u.direct_bytes.store(s.transfers.direct, Ordering::Relaxed);
                u.copied_bytes.store(s.transfers.copied, Ordering::Relaxed);
                last_usage = Instant::now();
            }
            if stopping {
                // Once stopping, no new request is forwarded (new frames are refused), so a
                // worker with nothing outstanding stays idle; all idle = nothing in flight.
                let quiet = self.outstanding == 0
                    && self.ready.is_empty()
                    && self.overflow.iter().all(VecDeque::is_empty);
                if quiet && !marked_idle {
                    marked_idle = true;
                    self.stop.quiesced.fetch_add(1, Ordering::SeqCst);
                }
                if marked_idle && self.stop.quiesced.load(Ordering::SeqCst) == self.handles.len() {
                    // Drain what others answered last, flush, checkpoint.
                    let _ = self.drain(&mut poller);
                    let _ = poller.poll(Some(Duration::ZERO), |_, _| {});
                    let served = self.slice.store().stats();
                    // Before the stopping checkpoint: what serving cost.
                    let used = ThreadUsage::now().since(&usage_at_start);
                    if let Err(e) = self.slice.store().checkpoint() {
                        tracing::error!(worker = self.me, error = %e, "checkpoint failed");
                    }
                    let me = &self.shared[self.me];
                    tracing::info!(
                        worker = self.me,
                        requests = me.requests.load(Ordering::Relaxed),
                        forwarded = me.forwarded.load(Ordering::Relaxed),
                        sleeps = me.sleeps.load(Ordering::Relaxed),
                        woken = me.woken.load(Ordering::Relaxed),
                        hop_queued_us = HopTimes::line(&self.hops.queued),
                        hop_served_us = HopTimes::line(&self.hops.served),
                        hop_us = HopTimes::line(&self.hops.hop),
                        checkpoints = served.checkpoints,
                        checkpoint_max_us = served.checkpoint_stops.longest().as_micros(),
                        checkpoint_take_max_us = served.checkpoint_stops.take.as_micros(),
                        checkpoint_piece_max_us = served.checkpoint_stops.piece.as_micros(),
                        checkpoint_last_max_us = served.checkpoint_stops.last.as_micros(),
                        checkpoint_ms = %format_args!("{:.1}", served.checkpoint_stops.total.as_secs_f64() * 1e3),
                        icache_write_backs = served.icache.write_backs,
                        icache_copied_in_flight = served.icache.copied_in_flight,
                        icache_misses = served.icache.misses,
                        // Data the controller took from or put into requests' own buffers,
                        // and data copied through bounce slots.
                        direct_mib = served.transfers.direct >> 20,
                        copied_mib = served.transfers.copied >> 20,
                        settle_max_us_ms_stalls_ms = self.settle_work.line(),
                        pump_max_us_ms_stalls_ms = self.pump_work.line(),
                        frames = self.frames,
                        busy_ms = %format_args!("{:.1}", self.busy.as_secs_f64() * 1e3),
                        minor_faults = used.minor_faults,
                        voluntary_switches = used.voluntary_switches,
                        involuntary_switches = used.involuntary_switches,
                        "worker stopped"
                    );
                    return Ok(());
                }
            }
        }
    }

    fn on_event(&mut self, out: &mut dyn Outbox, ev: Event<'_>) {
        self.serve_event(out, ev);
        // Serve the rings between two client frames as well, not only once per round: a
        // request forwarded here, or the reply to one forwarded from here, then waits for one
        // frame's work of this thread instead of the rest of a round of socket calls (a busy
        // round took 8-10 us on 16 cores, the hand-off itself is two ring operations, §III-B).
        self.drain(out);
        self.wake_pushed();
    }

    fn serve_event(&mut self, out: &mut dyn Outbox, ev: Event<'_>) {
        let Event::Frame { conn, frame } = ev else {
            return;
        };
        let (id, opc, payload) = (frame.header.request_id, frame.header.opcode, frame.payload);
        self.frames += 1;
        if opc == op::ECHO {
            send_reply(out, conn, id, opc, Ok(payload));
            return;
        }
        if opc == op::XFER {
            match xfer_reply_len(payload) {
                Some(n) => {
                    if self.zeros.len() < n {
                        self.zeros.resize(n, 0);
                    }
                    send_reply(out, conn, id, opc, Ok(&self.zeros[..n]));
                }
                None => {
                    let f = (
                        Errno::EINVAL,
                        format!(
                            "XFER payload of {} bytes asks for no valid length",
                            payload.len()
                        ),
                    );
                    send_reply(out, conn, id, opc, Err(&f));
                }
            }
            return;
        }
        if opc == op::HELLO {
            // The acceptor already acted on it (this thread was asked for, or none was free).
            send_reply(out, conn, id, opc, Ok(&[]));
            return;
        }
        if !op::ALL.contains(&opc) && opc != op::ROUTED_ECHO {
            let msg = format!("unknown opcode {:#06x}", opc.0);
            if let Err(e) = out.send_error(conn, id, ErrorCode::UNKNOWN_OPCODE, &msg) {
                tracing::debug!(error = %e, "error reply not sent");
            }
            return;
        }
        if self.stop.stop.load(Ordering::SeqCst) {
            let _ = out.send_error(conn, id, ErrorCode::SHUTTING_DOWN, "server shutting down");
            return;
        }
        let Some(lambda) = payload.first_chunk::<8>().map(|b| u64::from_le_bytes(*b)) else {
            let f = (
                Errno::EINVAL,
                format!("payload of {} bytes has no λ", payload.len()),
            );
            send_reply(out, conn, id, opc, Err(&f));
            return;
        };
        let route = self.cfg.layout.route(lambda);
        if route.server != self.cfg.index {
            let f = (
                Errno::ESTALE,
                format!("λ {lambda} belongs to server {}", route.server),
            );
            send_reply(out, conn, id, opc, Err(&f));
            return;
        }
        let owner = if Request::runs_on_receiver(opc, payload) {
            self.me
        } else {
            route.worker as usize
        };
        if owner == self.me {
            // Run to completion right here: no copy, no hop.
            let (r, copy) = self.execute(opc, payload);
            match copy {
                Some(hit) => {
                    let done = Done {
                        conn,
                        id,
                        op: opc,
                        result: Ok(Vec::new()),
                        forwarded: None,
                    };
                    self.hand_to_memcpy(hit, done, self.me);
                }
                None => send_reply(out, conn, id, opc, r.as_ref().map(|b| *b)),
            }
        } else {
            let job = Job {
                origin: self.me,
                conn,
                id,
                op: opc,
                payload: {
                    let mut buffer = self.spare.pop().unwrap_or_default();
                    buffer.clear();
                    buffer.extend_from_slice(payload);
                    buffer
                },
                forwarded: Instant::now(),
            };
            self.outstanding += 1;
            self.shared[self.me]
                .forwarded
                .fetch_add(1, Ordering::Relaxed);
            self.push(owner, Msg::Req(job));
        }
    }

    /// Runs a request on this worker's slice. A READ served from the read cache with more than
    /// `memcpy_threshold` bytes comes back as a cache hit for the memcpy pool.
    fn execute(
        &mut self,
        opc: Opcode,
        payload: &[u8],
    ) -> (Result<&[u8], Failure>, Option<CacheHit>) {
        self.shared[self.me]
            .requests
            .fetch_add(1, Ordering::Relaxed);
        if opc == op::ROUTED_ECHO {
            // Copied as a reply is built: the hop costs what it costs a request.
            self.out.clear();
            self.out.extend_from_slice(payload);
            return (Ok(self.out.as_slice()), None);
        }
        let req = match Request::decode(opc, payload) {
            Ok((_, req)) => req,
            Err(e) => return (Err(proto_failure(e)), None),
        };
        // A READ's bytes are written over the last reply's (Slice::read_reply), without
        // zeroing the buffer first; every other reply starts from an empty buffer.
        let r = match req {
            // Extents (I/O units, read as they were written) go around the block cache.
            Request::Read {
                ino,
                offset,
                len,
                extent: extent @ Some(_),
            } => self
                .slice
                .read_reply(ino, offset, len, extent, &mut self.out),
            Request::Read {
                ino,
                offset,
                len,
                extent: None,
            } => {
                match self
                    .cache
                    .read(&mut self.slice, ino, offset, len as usize, &mut self.out)
                {
                    Ok(Some(hit)) if hit.len > self.cfg.memcpy_threshold => {
                        return (Ok(&[]), Some(hit));
                    }
                    Ok(Some(hit)) => {
                        let src = hit.src.get(hit.offset..hit.offset + hit.len);
                        self.out.clear();
                        self.out.extend_from_slice(src.unwrap_or_default());
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            other => {
                self.out.clear();
                self.cache.invalidate_for(&other);
                self.slice.execute(other, &mut self.out)
            }
        };
        (r.map(|()| self.out.as_slice()), None)
    }

    /// Sends a cache hit to the memcpy pool; the copied reply goes to communicating thread
    /// `to`'s MPSC queue. A local request counts as outstanding until its copy comes back.
    fn hand_to_memcpy(&mut self, hit: CacheHit, done: Done, to: usize) {
        if to == self.me {
            self.outstanding += 1;
        }
        let job = CopyJob {
            src: hit.src,
            offset: hit.offset,
            len: hit.len,
            to,
            done,
        };
        match self.copy_tx.push(job) {
            Ok(()) if !self.memcpy_threads.is_empty() => {
                let t = &self.memcpy_threads[self.next_memcpy % self.memcpy_threads.len()];
                self.next_memcpy += 1;
                t.unpark();
            }
            Ok(()) => {}
            Err(common::ring::Full(job)) => {
                // Pool saturated: copy here rather than stall.
                let src = job
                    .src
                    .get(job.offset..job.offset + job.len)
                    .unwrap_or_default();
                let done = Done {
                    result: Ok(src.to_vec()),
                    ..job.done
                };
                if to == self.me {
                    self.ready.push_back(done);
                } else {
                    self.push(to, Msg::Rep(done));
                }
            }
        }
    }

    fn push(&mut self, to: usize, msg: Msg) {
        self.pushed[to] = true;
        if !self.overflow[to].is_empty() {
            self.overflow[to].push_back(msg);
            return;
        }
        let Some(Some(p)) = self.to.get_mut(to) else {
            return;
        };
        if let Err(common::ring::Full(msg)) = p.push(msg) {
            self.overflow[to].push_back(msg);
        }
    }

    fn flush_overflow(&mut self) {
        for (to, q) in self.overflow.iter_mut().enumerate() {
            let Some(Some(p)) = self.to.get_mut(to) else {
                continue;
            };
            while let Some(msg) = q.pop_front() {
                if let Err(common::ring::Full(msg)) = p.push(msg) {
                    q.push_front(msg);
                    break;
                }
            }
        }
    }

    fn wake_pushed(&mut self) {
        for (to, pushed) in self.pushed.iter_mut().enumerate() {
            if std::mem::take(pushed) {
                wake_if_sleeping(&self.shared[to], &self.handles[to]);
            }
        }
    }

    /// Sends a reply that came back to this communicating thread (from the owner of a forwarded
    /// request, or from the memcpy pool), times its hop, and keeps its buffer for the next
    /// forward.
    fn deliver(&mut self, out: &mut dyn Outbox, done: Done) {
        if let Some(forwarded) = done.forwarded {
            self.hops.hop.record(forwarded.elapsed());
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        send_reply(out, done.conn, done.id, done.op, done.result.as_deref());
        if let Ok(buffer) = done.result
            && buffer.capacity() <= SPARE_BUFFER_BYTES
            && self.spare.len() < SPARE_BUFFERS
        {
            self.spare.push(buffer);
        }
    }

    /// Spins up to `span` until a ring holds a message; whether one does.
    fn watch_rings(&self, span: Duration) -> bool {
        let until = Instant::now() + span;
        loop {
            if self.from.iter().any(|c| !c.is_empty()) || !self.copied.is_empty() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::hint::spin_loop();
        }
    }

    /// Serves forwarded requests, delivers replies that came back, and copied replies;
    /// returns how many messages it handled.
    fn drain(&mut self, out: &mut dyn Outbox) -> usize {
        let mut handled = 0;
        for j in 0..self.from.len() {
            while let Some(msg) = self.from[j].pop() {
                handled += 1;
                match msg {
                    Msg::Req(job) => {
                        let popped = Instant::now();
                        self.hops.queued.record(popped - job.forwarded);
                        let (r, copy) = self.execute(job.op, &job.payload);
                        let done = Done {
                            conn: job.conn,
                            id: job.id,
                            op: job.op,
                            result: Ok(Vec::new()),
                            forwarded: Some(job.forwarded),
                        };
                        match copy {
                            Some(hit) => self.hand_to_memcpy(hit, done, job.origin),
                            None => {
                                // A small reply goes back in the request's own buffer, and this
                                // worker keeps its reply buffer (handing that over made the
                                // next request grow a new one, 8, 16, 32... bytes: five
                                // allocations for an attribute reply). A large one (a READ's
                                // pages) goes back in the reply buffer itself, uncopied.
                                let result = match r {
                                    Ok(bytes) if bytes.len() <= SMALL_REPLY => {
                                        let mut buffer = job.payload;
                                        buffer.clear();
                                        buffer.extend_from_slice(bytes);
                                        Ok(buffer)
                                    }
                                    Ok(_) => Ok(std::mem::take(&mut self.out)),
                                    Err(e) => Err(e),
                                };
                                self.push(job.origin, Msg::Rep(Done { result, ..done }));
                            }
                        }
                        self.hops.served.record(popped.elapsed());
                    }
                    Msg::Rep(done) => self.deliver(out, done),
                }
            }
        }
        // Copied replies (memcpy pool, or inline) answer requests this thread counted.
        while let Some(done) = self.copied.pop().or_else(|| self.ready.pop_front()) {
            handled += 1;
            self.deliver(out, done);
        }
        handled
    }
}

/// Pins the calling thread (worker `worker`) to `core` (best effort: a core that does not exist
/// or is not ours leaves the thread where it is, with a log line).
fn pin(worker: usize, core: usize) {
    if core >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: `set` is a plain bitmask owned by this frame; CPU_ZERO/CPU_SET write inside it
    // (core < CPU_SETSIZE), and sched_setaffinity(0, ..) only reads it for this thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        tracing::debug!(
            worker,
            core,
            "pinning failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_work_counts_rounds_with_work_and_those_over_the_threshold_as_stalls() {
        let mut w = LogWork::default();
        for us in [10, 50, 51, 400] {
            w.add(Duration::from_micros(us), true);
        }
        // 511 us in all, 451 us of it in the two rounds over 50 us.
        assert_eq!(w.line(), "400/0.5/2/0.5");
        assert_eq!((w.stalls, w.stalled), (2, Duration::from_micros(451)));
        // Rounds without work count for nothing, a long one (preempted) included.
        for us in [3, 5, 600] {
            w.add(Duration::from_micros(us), false);
        }
        assert_eq!(w.line(), "400/0.5/2/0.5");
    }
}
