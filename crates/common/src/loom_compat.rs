//! What the concurrent primitives use from the outside world, swapped for loom's model under
//! `--cfg loom` so that their model checks drive every wait through loom's scheduler.

/// Spin-then-yield backoff (crossbeam's) outside loom.
#[cfg(not(loom))]
pub(crate) use crossbeam_utils::Backoff;

/// Under loom every wait must hand control to the model's scheduler instead of spinning.
#[cfg(loom)]
pub(crate) struct Backoff;

#[cfg(loom)]
impl Backoff {
    pub(crate) fn new() -> Self {
        Self
    }

    pub(crate) fn snooze(&self) {
        loom::thread::yield_now();
    }
}
