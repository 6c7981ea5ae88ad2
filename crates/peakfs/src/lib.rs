//! PeakFS: an HPC parallel file system with shared-nothing servers, cART metadata and pipelined RPC.
//!
//! - [`pstore`]: the storage backend of one worker (PStore: PMeta + PData, §III-C).
//! - [`placement`]: the λ routing of metadata and data over servers and workers (§III-C1).
//! - [`protocol`]: the pRPC messages (§III-A, §III-D).
//! - [`master`]: the control plane (§III-A); [`config`]: TOML configs of master and servers.
//! - [`bench`]: `peakfs bench`, mdtest/IOR-style workloads against the RPC echo ceiling (§IV).
//! - [`client`]: the client library (path resolution, dentry cache, write pipeline, §III-C2, §III-D).
//! - [`fuse`]: `peakfs mount`, FUSE over the client library.
//! - [`server`]: a storage server: RingSched over PStore slices (§III-B).
//! - [`local_cluster`]: a master and servers as child processes on loopback.
//! - [`show`]: how the `peakfs` tools print attributes, listings and usage.
//! - [`usage`]: a thread's CPU time, page faults and context switches (getrusage).
//! - [`xattr`]: placement hints as extended attributes (`user.peakfs.dist`, `user.peakfs.io_unit`).

pub mod bench;
pub mod client;
pub mod config;
pub mod fuse;
pub mod local_cluster;
pub mod master;
pub mod placement;
pub mod protocol;
pub mod pstore;
pub mod server;
pub mod show;
pub mod usage;
pub mod xattr;
