//! Network transports and the framed RPC wire format shared by PeakFS (pRPC, §III-B/§III-D) and
//! GNStor: [`frame`] is the wire format, [`transport`] the abstraction, [`tcp`] the default
//! transport, `rdma` (feature `rdma`) the verbs one, and [`rpc`] the pipelining client and the
//! reference server loop.

pub mod frame;
pub mod rdma;
pub mod rpc;
pub mod tcp;
pub mod transport;

pub use frame::{ErrorCode, Flags, Header, Opcode};
pub use rpc::{RpcClient, Server, serve};
pub use tcp::{TcpConfig, TcpConnection, TcpListener, TcpPoller, TcpTransport};
pub use transport::{
    ConnId, Connection, Event, Frame, Listener, Outbox, Poller, PollerHandle, Received, Transport,
    TransportError,
};
