//! The PeakFS master (PeakFS §III-A, Fig. 3): servers register the addresses clients connect to
//! and periodically report storage usage; clients fetch the cluster view they route by.
//!
//! The master is off the request path: it holds the stable server order (index = `λ mod
//! servers`), so a `Mutex` around its small table is fine. Server indexes survive restarts of
//! both sides: a server formats its data for an index and re-registers with it; a master that
//! restarts learns the table again from the registrations.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use crate::config::{ConfigError, MasterConfig};
use crate::placement::{Hint, Layout, ROOT_INO};
use crate::protocol::PROTOCOL;

/// The generated gRPC types and stubs of `proto/master.proto`.
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
pub mod proto {
    tonic::include_proto!("peakfs.master");
}

use proto::master_server::{Master, MasterServer};
use proto::{
    ClusterView, ClusterViewRequest, RegisterReply, RegisterRequest, ReportReply, ReportRequest,
    ServerInfo, UnregisterReply, UnregisterRequest,
};

/// A registered server.
#[derive(Debug, Clone)]
struct Member {
    data_addr: String,
    workers: u32,
    capacity_bytes: u64,
    used_bytes: u64,
    inodes_used: u64,
    last_seen: Instant,
}

/// The master's gRPC service.
#[derive(Debug, Clone)]
pub struct MasterService {
    cfg: MasterConfig,
    hint: Hint,
    members: Arc<Mutex<Vec<Option<Member>>>>,
    /// Client numbers handed out with ready views.
    clients: Arc<AtomicU64>,
}

impl MasterService {
    /// A master with no registered server.
    pub fn new(cfg: MasterConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let hint = cfg.hint()?;
        let members = Arc::new(Mutex::new(vec![None; cfg.servers as usize]));
        Ok(Self {
            cfg,
            hint,
            members,
            clients: Arc::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Member>>> {
        // A panic while holding the lock leaves a consistent table (every update is one store).
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn alive_window(&self) -> Duration {
        Duration::from_millis(u64::from(self.cfg.report_interval_ms) * 3)
    }
}

#[tonic::async_trait]
impl Master for MasterService {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        let req = request.into_inner();
        if req.protocol != PROTOCOL {
            return Err(Status::failed_precondition(format!(
                "server speaks pRPC version {}, this master {PROTOCOL}: run one PeakFS \
                 version on every host",
                req.protocol
            )));
        }
        if req.data_addr.is_empty() || req.workers == 0 {
            return Err(Status::invalid_argument(format!(
                "register needs a data address and workers > 0 (got {:?}, {})",
                req.data_addr, req.workers
            )));
        }
        // Refused here, not by the server after it took an index: a shape the layout
        // cannot route (too many slices).
        if let Err(e) = Layout::new(self.cfg.servers, req.workers, self.cfg.block_size) {
            return Err(Status::invalid_argument(format!(
                "{} servers of {} workers: {e}",
                self.cfg.servers, req.workers
            )));
        }
        let mut members = self.lock();
        if let Some(other) = members.iter().flatten().find(|m| m.workers != req.workers) {
            return Err(Status::failed_precondition(format!(
                "server has {} workers, the cluster {} (every server needs the same count)",
                req.workers, other.workers
            )));
        }
        let now = Instant::now();
        let alive = |m: &Option<Member>| {
            m.as_ref()
                .is_some_and(|m| now.duration_since(m.last_seen) < self.alive_window())
        };
        let index = if req.index >= 0 {
            let i = usize::try_from(req.index).unwrap_or(usize::MAX);
            match members.get(i) {
                None => {
                    return Err(Status::out_of_range(format!(
                        "index {} but the cluster has {} servers",
                        req.index,
                        members.len()
                    )));
                }
                Some(Some(m)) if m.data_addr != req.data_addr && alive(&members[i]) => {
                    return Err(Status::already_exists(format!(
                        "index {i} is held by live server {}",
                        m.data_addr
                    )));
                }
                Some(_) => i,
            }
        } else if let Some(i) = members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.data_addr == req.data_addr))
        {
            i
        } else if let Some(i) = members.iter().position(Option::is_none) {
            i
        } else {
            return Err(Status::resource_exhausted(format!(
                "all {} server indexes are taken",
                members.len()
            )));
        };
        tracing::info!(index, addr = %req.data_addr, workers = req.workers, "server registered");
        members[index] = Some(Member {
            data_addr: req.data_addr,
            workers: req.workers,
            capacity_bytes: req.capacity_bytes,
            used_bytes: 0,
            inodes_used: 0,
            last_seen: now,
        });
        Ok(Response::new(RegisterReply {
            index: index as u32,
            servers: self.cfg.servers,
            block_size: self.cfg.block_size,
            report_interval_ms: self.cfg.report_interval_ms,
            default_hint: u32::from(self.hint.to_byte()),
        }))
    }

    async fn unregister(
        &self,
        request: Request<UnregisterRequest>,
    ) -> Result<Response<UnregisterReply>, Status> {
        let req = request.into_inner();
        let mut members = self.lock();
        match members.get_mut(req.index as usize) {
            Some(m @ Some(_)) if m.as_ref().is_some_and(|m| m.data_addr == req.data_addr) => {
                tracing::info!(index = req.index, addr = %req.data_addr, "server gave its index back");
                *m = None;
                Ok(Response::new(UnregisterReply {}))
            }
            _ => Err(Status::not_found(format!(
                "index {} is not held by {}",
                req.index, req.data_addr
            ))),
        }
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportReply>, Status> {
        let req = request.into_inner();
        let mut members = self.lock();
        let Some(Some(m)) = members.get_mut(req.index as usize) else {
            return Err(Status::not_found(format!(
                "server index {} is not registered",
                req.index
            )));
        };
        m.capacity_bytes = req.capacity_bytes;
        m.used_bytes = req.used_bytes;
        m.inodes_used = req.inodes_used;
        m.last_seen = Instant::now();
        Ok(Response::new(ReportReply {}))
    }

    async fn get_cluster_view(
        &self,
        _request: Request<ClusterViewRequest>,
    ) -> Result<Response<ClusterView>, Status> {
        let members = self.lock();
        let now = Instant::now();
        let servers: Vec<ServerInfo> = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                m.as_ref().map(|m| ServerInfo {
                    index: i as u32,
                    data_addr: m.data_addr.clone(),
                    workers: m.workers,
                    capacity_bytes: m.capacity_bytes,
                    used_bytes: m.used_bytes,
                    inodes_used: m.inodes_used,
                    alive: now.duration_since(m.last_seen) < self.alive_window(),
                })
            })
            .collect();
        let ready = servers.len() == members.len();
        // Only a ready view is one a client connects with: numbers stay consecutive over the
        // clients, however often each polled before the cluster was ready.
        let client_number = if ready {
            self.clients.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        Ok(Response::new(ClusterView {
            ready,
            client_number,
            workers: servers.first().map_or(0, |s| s.workers),
            servers,
            servers_expected: self.cfg.servers,
            root_ino: ROOT_INO,
            default_hint: u32::from(self.hint.to_byte()),
            block_size: self.cfg.block_size,
            protocol: PROTOCOL,
        }))
    }
}

/// Serves the master on `listener` until `shutdown` completes.
pub async fn serve(
    cfg: MasterConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let service = MasterService::new(cfg)?;
    // A graceful shutdown waits for every client connection to close, and servers and clients
    // keep theirs open: after the signal, connections get a short grace period, then the
    // master stops regardless.
    let (signalled, on_signal) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(MasterServer::new(service))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            async move {
                shutdown.await;
                let _ = signalled.send(());
            },
        );
    tokio::select! {
        served = server => served?,
        () = async {
            if on_signal.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => tracing::info!("connections still open after {SHUTDOWN_GRACE:?}; stopping anyway"),
    }
    Ok(())
}

/// How long a stopping master waits for open connections to close.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A master running on its own runtime thread (tests and embedding).
#[derive(Debug)]
pub struct MasterHandle {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl MasterHandle {
    /// Starts a master listening on `listen` (port 0 picks a free one).
    pub fn start(cfg: MasterConfig, listen: &str) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("peakfs-master".into())
            .spawn(move || {
                rt.block_on(serve(cfg, listener, async {
                    let _ = rx.await;
                }))
            })?;
        Ok(Self {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the master and waits for it.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => anyhow::bail!("master thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for MasterHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Fetches the cluster view from the master at `uri` (`http://host:port`), waiting up to
/// `wait` for it to become ready.
pub fn fetch_view(uri: &str, wait: Duration) -> anyhow::Result<ClusterView> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let deadline = Instant::now() + wait;
        loop {
            match get_view(uri).await {
                Ok(view) if view.protocol != PROTOCOL => return Err(other_version(uri, &view)),
                Ok(view) if view.ready => return Ok(view),
                Ok(_) if Instant::now() >= deadline => {
                    anyhow::bail!("cluster not ready in {wait:?}")
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
}

/// One attempt at the cluster view, given up after `timeout`: what a client asks when a
/// server is not where the view it started with says.
pub fn fetch_view_once(uri: &str, timeout: Duration) -> anyhow::Result<ClusterView> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let view = rt.block_on(async { tokio::time::timeout(timeout, get_view(uri)).await })??;
    if view.protocol != PROTOCOL {
        return Err(other_version(uri, &view));
    }
    Ok(view)
}

async fn get_view(uri: &str) -> anyhow::Result<ClusterView> {
    let mut c = proto::master_client::MasterClient::connect(uri.to_string()).await?;
    Ok(c.get_cluster_view(ClusterViewRequest {})
        .await?
        .into_inner())
}

/// Why a client does not connect to the cluster of `view`, whose servers speak another pRPC
/// version.
fn other_version(uri: &str, view: &ClusterView) -> anyhow::Error {
    anyhow::anyhow!(
        "the cluster at {uri} speaks pRPC version {}, this client {PROTOCOL}: run one PeakFS \
         version on every host",
        view.protocol
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(servers: u32) -> MasterService {
        MasterService::new(MasterConfig {
            servers,
            ..Default::default()
        })
        .unwrap()
    }

    async fn view_of(m: &MasterService) -> ClusterView {
        m.get_cluster_view(Request::new(ClusterViewRequest {}))
            .await
            .unwrap()
            .into_inner()
    }

    #[tokio::test]
    async fn only_servers_and_clients_of_the_master_s_protocol_version_join() {
        let m = master(1);
        for old in [0, PROTOCOL - 1, PROTOCOL + 1] {
            let mut r = reg("a:1", 2, -1);
            r.get_mut().protocol = old;
            let refused = m.register(r).await.unwrap_err();
            assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
            assert!(refused.message().contains("pRPC version"), "{refused:?}");
        }
        m.register(reg("a:1", 2, -1)).await.unwrap();
        let mut view = view_of(&m).await;
        assert_eq!((view.ready, view.protocol), (true, PROTOCOL));
        // A view from a master of another version (0: one from before the field) is refused.
        view.protocol = 0;
        let e = other_version("http://m:1", &view).to_string();
        let says = format!("speaks pRPC version 0, this client {PROTOCOL}");
        assert!(e.contains(&says), "{e}");
    }

    fn reg(addr: &str, workers: u32, index: i64) -> Request<RegisterRequest> {
        Request::new(RegisterRequest {
            data_addr: addr.into(),
            workers,
            capacity_bytes: 1 << 30,
            index,
            protocol: PROTOCOL,
        })
    }

    #[tokio::test]
    async fn only_the_holder_gives_an_index_back_and_a_new_server_takes_it() {
        let m = master(2);
        m.register(reg("a:1", 2, -1)).await.unwrap();
        m.register(reg("b:1", 2, -1)).await.unwrap();
        let back = |index, addr: &str| {
            m.unregister(Request::new(UnregisterRequest {
                index,
                data_addr: addr.into(),
            }))
        };
        assert_eq!(
            back(1, "a:1").await.unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            back(9, "b:1").await.unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert!(view_of(&m).await.ready);
        back(1, "b:1").await.unwrap();
        assert!(!view_of(&m).await.ready, "index 1 is free again");
        assert_eq!(
            back(1, "b:1").await.unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            m.register(reg("c:1", 2, -1)).await.unwrap().get_ref().index,
            1
        );
    }

    #[tokio::test]
    async fn a_shape_with_more_slices_than_the_layout_routes_is_refused_at_registration() {
        let m = master(20_000);
        let refused = m.register(reg("a:1", 2, -1)).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(
            refused.message().contains("20000 servers of 2 workers"),
            "{refused:?}"
        );
        m.register(reg("a:1", 1, -1)).await.unwrap();
    }

    #[tokio::test]
    async fn clients_are_numbered_consecutively_by_the_ready_views_they_get() {
        let m = master(1);
        let view = || view_of(&m);
        // Polls before the cluster is ready use up no number.
        for _ in 0..3 {
            assert!(!view().await.ready);
        }
        m.register(reg("a:1", 2, -1)).await.unwrap();
        let numbers: Vec<u64> = [view().await, view().await, view().await]
            .iter()
            .map(|v| v.client_number)
            .collect();
        assert_eq!(numbers, [0, 1, 2]);
    }

    #[tokio::test]
    async fn registration_keeps_a_stable_order_and_rejects_conflicts() {
        let m = master(2);
        assert!(!view_of(&m).await.ready);
        assert_eq!(
            m.register(reg("a:1", 2, -1)).await.unwrap().get_ref().index,
            0
        );
        assert_eq!(
            m.register(reg("b:1", 2, -1)).await.unwrap().get_ref().index,
            1
        );
        // Re-registration of a known address keeps its index.
        assert_eq!(
            m.register(reg("b:1", 2, -1)).await.unwrap().get_ref().index,
            1
        );
        assert_eq!(
            m.register(reg("c:1", 2, -1)).await.unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(
            m.register(reg("c:1", 2, 0)).await.unwrap_err().code(),
            tonic::Code::AlreadyExists
        );
        assert_eq!(
            m.register(reg("c:1", 2, 5)).await.unwrap_err().code(),
            tonic::Code::OutOfRange
        );
        assert_eq!(
            m.register(reg("c:1", 3, 1)).await.unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
        let view = view_of(&m).await;
        assert!(view.ready);
        assert_eq!(
            view.servers
                .iter()
                .map(|s| s.data_addr.as_str())
                .collect::<Vec<_>>(),
            ["a:1", "b:1"]
        );
        assert_eq!((view.workers, view.root_ino), (2, ROOT_INO));
        m.report(Request::new(ReportRequest {
            index: 1,
            capacity_bytes: 9,
            used_bytes: 5,
            inodes_used: 3,
        }))
        .await
        .unwrap();
        assert_eq!(view_of(&m).await.servers[1].used_bytes, 5);
        let r = m
            .report(Request::new(ReportRequest {
                index: 7,
                ..Default::default()
            }))
            .await;
        assert_eq!(r.unwrap_err().code(), tonic::Code::NotFound);
    }

    #[test]
    fn master_serves_the_view_over_grpc_and_stops() {
        let h = MasterHandle::start(
            MasterConfig {
                servers: 1,
                ..Default::default()
            },
            "127.0.0.1:0",
        )
        .unwrap();
        let uri = format!("http://{}", h.addr());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut c = proto::master_client::MasterClient::connect(uri.clone())
                .await
                .unwrap();
            c.register(reg("x:9", 4, -1)).await.unwrap();
        });
        let view = fetch_view(&uri, Duration::from_secs(5)).unwrap();
        assert_eq!(view.servers[0].data_addr, "x:9");
        h.stop().unwrap();
    }
}
