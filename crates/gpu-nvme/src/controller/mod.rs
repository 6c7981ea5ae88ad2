//! The `Controller` trait and what every software NVMe controller shares: the register file
//! (doorbells), the DMA map, the admin queue, statistics and data movement.
//!
//! A controller is whoever consumes queue pairs. It is reached exactly as hardware is: the host
//! configures the admin queue (AQA/ASQ/ACQ), then creates I/O queues with admin commands whose
//! PRPs name the rings; from then on only doorbells and ring memory pass between the two sides.

pub mod admin;
pub mod data;
pub mod file;
pub mod io;
pub mod threads;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use common::bell::Bell;

use crate::cuda::Gpu;
use crate::memory::{DmaMap, HostRegion, MemoryError};
use crate::queue::ControllerQueue;
use crate::spec::{AsciiText, IdentifyController, NamespaceGeometry, Nqn};

pub use admin::AdminConfig;
pub use file::{FileBackend, FileController, FileControllerConfig};

/// Identify Controller data of one of our software controllers (one namespace).
pub fn software_identify(model: &str, serial: &str) -> IdentifyController {
    let text = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .collect::<String>()
    };
    IdentifyController::new(
        AsciiText::new(&text(serial)).unwrap_or_default(),
        AsciiText::new(&text(model)).unwrap_or_default(),
        AsciiText::new(env!("CARGO_PKG_VERSION")).unwrap_or_default(),
        Nqn::new("nqn.2026-11.org.gpu-storage:nvme").unwrap_or_default(),
        1,
    )
}

/// Errors of controller set-up and management.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// the namespace file could not be opened or is unusable
    #[error("namespace {path}: {reason}")]
    Namespace {
        /// the file or device
        path: String,
        /// what is wrong
        reason: String,
    },
    /// a configuration value is out of range
    #[error("invalid controller configuration: {0}")]
    Config(String),
    /// queue id already in use, unknown, or beyond the controller's limit
    #[error("invalid queue id {0}")]
    QueueId(u16),
    /// the controller is not running (or already running)
    #[error("controller state: {0}")]
    State(&'static str),
    /// memory for registers could not be allocated
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// an I/O error of the backing file
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The longest a controller thread sleeps on a bell before it looks again (every doorbell
/// write, queue change and stop rings the bell, so this only bounds what a missed ring costs).
pub(crate) const BELL_SLEEP_LIMIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The doorbell registers: `u32` words, SQ `y` tail at index `2y`, CQ `y` head at `2y + 1`
/// (NVMe's layout with a doorbell stride of 4 bytes). Page-locked and mapped into the GPU when
/// GPU threads ring them.
#[derive(Debug)]
pub struct Registers {
    region: HostRegion,
    max_queues: u16,
    /// Rung by host I/O queues after their doorbell writes, for controller workers asleep:
    /// queue `y` rings bell `y mod len`.
    io_bells: Vec<Arc<Bell>>,
    /// Rung by the host admin queue after its doorbell writes, for the admin thread asleep.
    admin_bell: Arc<Bell>,
}

impl Registers {
    /// Doorbells for the admin queue and `max_io_queues` I/O queues.
    pub fn new(max_io_queues: u16, gpu: Option<&Gpu>) -> Result<Self, ControllerError> {
        if max_io_queues == 0 {
            return Err(ControllerError::Config(
                "at least one I/O queue is needed".into(),
            ));
        }
        let words = 2 * (usize::from(max_io_queues) + 1);
        Ok(Self {
            region: HostRegion::new(words * 4, gpu)?,
            max_queues: max_io_queues,
            io_bells: vec![Arc::default()],
            admin_bell: Arc::default(),
        })
    }

    /// Gives the I/O queues `n` bells (at least one), queue `y` ringing bell `y mod n`: a
    /// controller that serves SQ `y` on worker `y mod n` lets each worker sleep on its own
    /// bell, so that a worker asleep costs the submissions to other workers' queues nothing.
    /// Call before any queue exists.
    pub fn with_io_bells(mut self, n: usize) -> Self {
        self.io_bells = (0..n.max(1)).map(|_| Arc::default()).collect();
        self
    }

    /// Number of I/O queues the controller supports.
    pub fn max_io_queues(&self) -> u16 {
        self.max_queues
    }

    fn word(&self, index: usize) -> *const AtomicU32 {
        // SAFETY: callers pass index < 2 * (max_queues + 1), inside the region.
        unsafe { self.region.host_ptr().add(index * 4).cast::<AtomicU32>() }
    }

    fn check(&self, qid: u16) -> Result<(), ControllerError> {
        if qid > self.max_queues {
            return Err(ControllerError::QueueId(qid));
        }
        Ok(())
    }

    /// Host address of SQ `qid`'s tail doorbell.
    pub fn sq_tail(&self, qid: u16) -> Result<*const AtomicU32, ControllerError> {
        self.check(qid)?;
        Ok(self.word(2 * usize::from(qid)))
    }

    /// Host address of CQ `qid`'s head doorbell.
    pub fn cq_head(&self, qid: u16) -> Result<*const AtomicU32, ControllerError> {
        self.check(qid)?;
        Ok(self.word(2 * usize::from(qid) + 1))
    }

    /// GPU addresses of (SQ tail, CQ head) doorbells of `qid`, when mapped into a GPU.
    pub fn gpu_doorbells(&self, qid: u16) -> Option<(u64, u64)> {
        self.check(qid).ok()?;
        let base = self.region.gpu_ptr()?;
        Some((base + 8 * u64::from(qid), base + 8 * u64::from(qid) + 4))
    }

    /// The bell host queue `qid` rings after writing its SQ doorbell: a controller thread whose
    /// doorbells only host threads write may sleep on it while idle. The admin queue has a
    /// bell of its own, so that an admin thread asleep costs the I/O queues' submissions
    /// nothing.
    pub fn bell(&self, qid: u16) -> &Arc<Bell> {
        if qid == 0 {
            &self.admin_bell
        } else {
            self.io_bell(usize::from(qid))
        }
    }

    /// I/O bell `index mod n` of the `n` ([`Self::with_io_bells`]): the one worker `index`
    /// of a controller that serves SQ `y` on worker `y mod n` sleeps on.
    pub fn io_bell(&self, index: usize) -> &Arc<Bell> {
        &self.io_bells[index % self.io_bells.len()]
    }

    /// Wakes every controller thread asleep on a bell (a stopping controller rings it).
    pub fn ring_all(&self) {
        for bell in &self.io_bells {
            bell.ring();
        }
        self.admin_bell.ring();
    }

    /// Zeroes both doorbells of `qid` (queue creation and deletion).
    pub fn reset(&self, qid: u16) -> Result<(), ControllerError> {
        // SAFETY: both words are inside the live region.
        unsafe {
            (*self.sq_tail(qid)?).store(0, Ordering::Release);
        }
        // SAFETY: as above.
        unsafe {
            (*self.cq_head(qid)?).store(0, Ordering::Release);
        }
        Ok(())
    }
}

/// Counters every controller keeps.
#[derive(Debug, Default)]
pub struct StatsCounters {
    /// Commands completed (any status).
    pub commands: AtomicU64,
    /// Read commands completed successfully.
    pub reads: AtomicU64,
    /// Write commands completed successfully.
    pub writes: AtomicU64,
    /// Bytes read.
    pub bytes_read: AtomicU64,
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// Commands completed with an error status.
    pub errors: AtomicU64,
    /// Batches fetched (one doorbell read that found work).
    pub batches: AtomicU64,
    /// Nanoseconds workers spent executing batches (the rest of their time is polling).
    pub busy_ns: AtomicU64,
    /// Of `busy_ns`, the nanoseconds spent waiting for copies into GPU memory to land.
    pub copy_wait_ns: AtomicU64,
    /// Of `busy_ns`, the nanoseconds spent posting completions.
    pub post_ns: AtomicU64,
    /// Nanoseconds dispatchers (controllers that separate fetching from execution) spent on
    /// fetched batches.
    pub dispatch_ns: AtomicU64,
    /// Completions that found their CQ full and had to wait for the host.
    pub cq_full: AtomicU64,
}

impl StatsCounters {
    /// Adds a thread's locally tallied counts. Each thread owns its counters (one
    /// `StatsCounters` per thread, on lines of its own) and is their only writer, so the add
    /// is a plain load and store: a locked add, even once per batch, waits for the thread's
    /// pending stores (the data it just copied) to drain. Readers may see a batch's counts
    /// in part, never torn values.
    pub fn add(&self, delta: &ControllerStats) {
        let pairs = [
            (&self.commands, delta.commands),
            (&self.reads, delta.reads),
            (&self.writes, delta.writes),
            (&self.bytes_read, delta.bytes_read),
            (&self.bytes_written, delta.bytes_written),
            (&self.errors, delta.errors),
            (&self.batches, delta.batches),
            (&self.busy_ns, delta.busy_ns),
            (&self.copy_wait_ns, delta.copy_wait_ns),
            (&self.post_ns, delta.post_ns),
            (&self.dispatch_ns, delta.dispatch_ns),
            (&self.cq_full, delta.cq_full),
        ];
        for (counter, value) in pairs {
            if value != 0 {
                counter.store(counter.load(Ordering::Relaxed) + value, Ordering::Relaxed);
            }
        }
    }

    /// A snapshot.
    pub fn snapshot(&self) -> ControllerStats {
        ControllerStats {
            commands: self.commands.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            copy_wait_ns: self.copy_wait_ns.load(Ordering::Relaxed),
            post_ns: self.post_ns.load(Ordering::Relaxed),
            dispatch_ns: self.dispatch_ns.load(Ordering::Relaxed),
            cq_full: self.cq_full.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::AddAssign for ControllerStats {
    fn add_assign(&mut self, o: Self) {
        self.commands += o.commands;
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.errors += o.errors;
        self.batches += o.batches;
        self.busy_ns += o.busy_ns;
        self.copy_wait_ns += o.copy_wait_ns;
        self.post_ns += o.post_ns;
        self.dispatch_ns += o.dispatch_ns;
        self.cq_full += o.cq_full;
    }
}

/// A snapshot of [`StatsCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControllerStats {
    /// Commands completed (any status).
    pub commands: u64,
    /// Read commands completed successfully.
    pub reads: u64,
    /// Write commands completed successfully.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Commands completed with an error status.
    pub errors: u64,
    /// Batches fetched (one doorbell read that found work).
    pub batches: u64,
    /// Nanoseconds workers spent executing batches.
    pub busy_ns: u64,
    /// Of `busy_ns`, the nanoseconds spent waiting for copies into GPU memory to land.
    pub copy_wait_ns: u64,
    /// Of `busy_ns`, the nanoseconds spent posting completions.
    pub post_ns: u64,
    /// Nanoseconds dispatchers spent on fetched batches.
    pub dispatch_ns: u64,
    /// Completions that found their CQ full and had to wait for the host.
    pub cq_full: u64,
}

/// An NVMe controller implemented in software.
///
/// Queue pairs are attached through the admin queue (Create I/O CQ/SQ), which calls
/// [`Controller::attach_queue`]; drivers never call it directly. Every implementation must pass
/// the conformance suite in `tests/conformance.rs`.
pub trait Controller: Send + Sync + std::fmt::Debug {
    /// The doorbell registers.
    fn registers(&self) -> &Registers;
    /// The bus address space the controller may reach.
    fn dma(&self) -> &DmaMap;
    /// Geometry of namespace `nsid` (1-based), if it exists.
    fn namespace(&self, nsid: u32) -> Option<NamespaceGeometry>;
    /// Identify Controller data.
    fn identify(&self) -> IdentifyController;
    /// Enables the controller with the given admin queue (CC.EN = 1) and starts its threads.
    fn start(self: std::sync::Arc<Self>, admin: AdminConfig) -> Result<(), ControllerError>;
    /// Stops all threads (CC.EN = 0); queues are forgotten.
    fn stop(&self);
    /// Takes over an I/O queue pair created by the admin queue.
    fn attach_queue(&self, queue: ControllerQueue) -> Result<(), ControllerError>;
    /// Releases I/O queue pair `sqid`; returns once no worker touches it any more.
    fn detach_queue(&self, sqid: u16) -> Result<(), ControllerError>;
    /// Counters.
    fn stats(&self) -> ControllerStats;
    /// Whether I/O queue `sqid` is served inline: by the host thread waiting for its
    /// completions ([`Controller::serve_inline`]), not by a controller thread. Such a queue
    /// rings no bell, and every wait on it must call `serve_inline` until its completion comes.
    fn serves_inline(&self, sqid: u16) -> bool {
        let _ = sqid;
        false
    }
    /// Runs the commands waiting in inline queue `sqid` on the calling thread and posts their
    /// completions; returns how many it ran (0 also when another thread is serving it).
    fn serve_inline(&self, sqid: u16) -> usize {
        let _ = sqid;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_tally_adds_every_field_once() {
        let counters = StatsCounters::default();
        let tally = ControllerStats {
            commands: 1,
            reads: 2,
            writes: 3,
            bytes_read: 4,
            bytes_written: 5,
            errors: 6,
            batches: 7,
            busy_ns: 8,
            copy_wait_ns: 9,
            post_ns: 12,
            dispatch_ns: 10,
            cq_full: 11,
        };
        counters.add(&tally);
        counters.add(&tally);
        let mut twice = tally;
        twice += tally;
        assert_eq!(counters.snapshot(), twice);
    }
}
