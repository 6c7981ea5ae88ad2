//! SwarmIO: an NVMe SSD emulator that keeps up with GPU-initiated I/O (papers/swarmio.md) and
//! holds a faithful timing model. It is a gpu-nvme [`Controller`](gpu_nvme::controller::Controller):
//! hosts and GPU threads reach it through real NVMe queue pairs.
//!
//! - [`emulator`]: service units (dispatchers and workers), the emulated namespace, baseline mode.
//! - [`timing_model`]: the global timing model with aggregated or per-request updates (§IV-D).
//! - [`presets`]: timing presets of real SSDs from their datasheets.
//! - [`store`]: RAM (sparse) or file blocks behind a volatile write cache.
//! - [`bench`]: the emulator as the controller of gpu-nvme's block benchmark.
//! - [`faults`]: media errors, latency spikes; controller reset is [`emulator::SwarmIo::reset`].

pub mod bench;
pub mod emulator;
pub mod faults;
pub mod presets;
pub mod store;
pub mod timing_model;

pub use emulator::{Backing, SwarmConfig, SwarmIo};
