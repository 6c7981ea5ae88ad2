//! The PeakFS server (PeakFS §III-A, §III-B): storage ([`storage`]: one PStore zone per
//! worker), RingSched ([`ringsched`]: pinned workers, link-reduced dispatch, lock-free rings,
//! memcpy pool), the request handlers of a slice ([`slice`]), the read cache ([`readcache`]),
//! and the control plane: registration with the master and periodic usage reports.

pub mod readcache;
pub mod ringsched;
pub mod slice;
pub mod storage;

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::{Listener, TcpTransport, Transport};

use crate::config::{ConfigError, ServerConfig};
use crate::master::proto::master_client::MasterClient;
use crate::master::proto::{RegisterReply, RegisterRequest, ReportRequest, UnregisterRequest};
use crate::placement::{Hint, Layout, PlacementError};
use crate::protocol::PROTOCOL;
use ringsched::{RingSched, SchedConfig, SchedError, UsageTotals};
use slice::{Slice, hint_to_store};
use storage::{Storage, StorageError};

/// How long a starting server keeps trying to reach the master.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(15);
/// Read cache per worker.
const READ_CACHE_BYTES: usize = 32 << 20;

/// Errors starting or stopping a server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// bad configuration
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// storage failed
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// RingSched failed
    #[error(transparent)]
    Sched(#[from] SchedError),
    /// the master refused or could not be reached
    #[error("master: {0}")]
    Master(String),
    /// the master's cluster shape is invalid
    #[error(transparent)]
    Layout(#[from] PlacementError),
    /// transport or runtime setup failed
    #[error("{0}")]
    Io(String),
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    index: u32,
    layout: Layout,
    sched: RingSched,
    report_stop: Option<mpsc::Sender<()>>,
    report: Option<JoinHandle<()>>,
}

impl Server {
    /// Opens the storage and checks it fits the workers, registers with the master, opens
    /// (recovers) or formats the zones, starts RingSched and the usage reports. A new server
    /// (empty data) that fails after it registered gives its index back.
    pub fn start(cfg: &ServerConfig) -> Result<Self, ServerError> {
        cfg.validate()?;
        let mut storage = Storage::open(cfg)?;
        storage.check_workers(cfg.workers)?;
        let transport = TcpTransport::default();
        let listener = transport
            .listen(&cfg.listen)
            .map_err(|e| ServerError::Io(e.to_string()))?;
        let addr = listener.local_addr();
        let advertise = cfg.advertise.clone().unwrap_or_else(|| addr.to_string());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ServerError::Io(e.to_string()))?;
        let uri = cfg.master_uri();
        let req = RegisterRequest {
            data_addr: advertise.clone(),
            workers: cfg.workers,
            capacity_bytes: storage.capacity(),
            index: storage.existing().map_or(-1, |sb| i64::from(sb.index)),
            protocol: PROTOCOL,
        };
        let reply = rt.block_on(register(&uri, req.clone(), REGISTER_TIMEOUT))?;
        let index = reply.index;
        let new = req.index < 0;
        // Everything after the registration: a new server whose start fails here gives its
        // index back, so that the master can give it to the next one.
        let registered = move || -> Result<Self, ServerError> {
            let layout = Layout::new(reply.servers, cfg.workers, reply.block_size)?;
            let hint = u8::try_from(reply.default_hint)
                .map_err(|_| PlacementError::BadHint(0xFF))
                .and_then(Hint::from_byte)?;
            let t0 = Instant::now();
            let zones = storage.zones(reply.index, &layout, hint_to_store(hint))?;
            tracing::info!(
                index = reply.index,
                addr = %req.data_addr,
                workers = cfg.workers,
                recovered = req.index >= 0,
                ms = t0.elapsed().as_millis() as u64,
                "zones ready"
            );
            let sched = RingSched::start(
                &transport,
                listener,
                zones.into_iter().map(Slice::new).collect(),
                SchedConfig {
                    index: reply.index,
                    layout,
                    memcpy_threads: cfg.memcpy_threads,
                    memcpy_threshold: cfg.memcpy_threshold,
                    pin: cfg.pin,
                    cpus: cfg.cpus.clone(),
                    spin: cfg.spin(),
                    ring_capacity: cfg.ring_capacity,
                    read_cache_bytes: READ_CACHE_BYTES,
                },
            )?;
            let (report_stop, stop_rx) = mpsc::channel();
            let usage = sched.usage_source();
            let interval = Duration::from_millis(u64::from(reply.report_interval_ms.max(10)));
            let mut req = RegisterRequest {
                index: i64::from(reply.index),
                ..req
            };
            let index = reply.index;
            let report = std::thread::Builder::new()
                .name("peakfs-report".into())
                .spawn(move || {
                    while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(interval)
                    {
                        let u = usage.totals();
                        req.capacity_bytes = u.capacity;
                        if let Err(e) = rt.block_on(report_once(&uri, index, u, &req)) {
                            tracing::warn!(error = %e, "usage report failed");
                        }
                    }
                })
                .map_err(|e| ServerError::Io(e.to_string()))?;
            Ok(Self {
                index,
                layout,
                sched,
                report_stop: Some(report_stop),
                report: Some(report),
            })
        };
        registered().inspect_err(|e| {
            if new {
                give_index_back(&cfg.master_uri(), index, &advertise, e);
            }
        })
    }

    /// This server's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The cluster layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The pRPC address.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.sched.local_addr()
    }

    /// Usage and request counters.
    pub fn usage(&self) -> UsageTotals {
        self.sched.usage()
    }

    /// Stops accepting, finishes in-flight requests, checkpoints every slice and stops.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.report_stop.take();
        if let Some(r) = self.report.take() {
            let _ = r.join();
        }
        Ok(self.sched.shutdown()?)
    }
}

/// Gives index `index` back to the master after a start that failed with `why` (logged;
/// a master that cannot be reached keeps it until this address registers again).
fn give_index_back(uri: &str, index: u32, data_addr: &str, why: &ServerError) {
    let req = UnregisterRequest {
        index,
        data_addr: data_addr.to_string(),
    };
    let given = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let mut c = MasterClient::connect(uri.to_string())
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::time::timeout(Duration::from_secs(5), c.unregister(req))
                    .await
                    .map_err(|_| "timed out".to_string())?
                    .map_err(|s| s.message().to_string())
            })
        });
    match given {
        Ok(_) => tracing::info!(index, error = %why, "start failed: index given back"),
        Err(e) => {
            tracing::warn!(index, error = %why, "start failed; giving the index back failed: {e}")
        }
    }
}

async fn register(
    uri: &str,
    req: RegisterRequest,
    timeout: Duration,
) -> Result<RegisterReply, ServerError> {
    let deadline = Instant::now() + timeout;
    let mut waiting = false;
    loop {
        match MasterClient::connect(uri.to_string()).await {
            Ok(mut c) => match c.register(req.clone()).await {
                Ok(reply) => return Ok(reply.into_inner()),
                // Its index is held by the address this server had before a restart at
                // another one: the master frees it once that one missed its reports.
                Err(s) if s.code() == tonic::Code::AlreadyExists && Instant::now() < deadline => {
                    if !waiting {
                        tracing::info!(
                            reason = s.message(),
                            "waiting for the master to free the index"
                        );
                        waiting = true;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(s) => {
                    return Err(ServerError::Master(format!(
                        "register refused: {}",
                        s.message()
                    )));
                }
            },
            Err(e) if Instant::now() >= deadline => {
                return Err(ServerError::Master(format!("cannot reach {uri}: {e}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Reports usage; re-registers when the master forgot this server (it restarted).
async fn report_once(
    uri: &str,
    index: u32,
    u: UsageTotals,
    again: &RegisterRequest,
) -> Result<(), ServerError> {
    let mut c = MasterClient::connect(uri.to_string())
        .await
        .map_err(|e| ServerError::Master(e.to_string()))?;
    let r = c
        .report(ReportRequest {
            index,
            capacity_bytes: u.capacity,
            used_bytes: u.used,
            inodes_used: u.inodes,
        })
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => {
            c.register(again.clone())
                .await
                .map_err(|s| ServerError::Master(s.message().into()))?;
            Ok(())
        }
        Err(s) => Err(ServerError::Master(s.message().into())),
    }
}
