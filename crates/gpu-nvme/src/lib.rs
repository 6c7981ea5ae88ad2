//! gpu-nvme: the storage path every system of the family uses.
//!
//! - [`spec`]: NVMe commands, completions, statuses, PRPs and identify data, as on the wire.
//! - [`queue`]: queue pairs shared by CPU threads, GPU threads (`cuda/nvme.cuh`) and a
//!   controller, with BaM's ticket protocol.
//! - [`cuda`]: the GPU runtime (driver API through `cudarc`, NVRTC, page-locked mapped memory).
//! - [`controller`]: the `Controller` trait, the shared admin queue and data path, and
//!   `FileController` (a file or block device as the namespace).
//! - [`device`]: the host driver and block API (`read_blocks`/`write_blocks`); the GPU's
//!   `nvme_read`/`nvme_write` live in `cuda/nvme.cuh`.

pub mod bench;
pub mod conformance;
pub mod controller;
pub mod cuda;
pub mod device;
pub mod kernels;
pub mod memory;
pub mod queue;
pub mod spec;
