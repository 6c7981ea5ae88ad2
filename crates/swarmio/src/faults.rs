//! Fault injection: media errors on chosen LBAs (reads that fail, and writes that fail with a
//! write fault, leaving the media as it was), latency spikes, and controller reset (the reset
//! itself is [`crate::SwarmIo::reset`]).
//!
//! Workers consult the media-error table on every read and write, so it is a list behind a
//! reader-writer lock that is only written when faults are injected, plus an `armed` flag that
//! keeps the lock off the hot path while no media error is set.

use std::ops::Range;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The faults currently injected into one emulated SSD.
#[derive(Debug, Default)]
pub struct Faults {
    /// Ranges of failing LBAs, and whether they fail writes (rather than reads).
    media: RwLock<Vec<(Range<u64>, bool)>>,
    armed: AtomicBool,
    spike_every: AtomicU64,
    spike_ns: AtomicU64,
    spike_counter: AtomicU64,
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads touching any LBA in `lbas` complete with Unrecovered Read Error from now on.
    pub fn add_media_error(&self, lbas: Range<u64>) {
        self.add(lbas, false);
    }

    /// Writes touching any LBA in `lbas` complete with Write Fault from now on, and write
    /// nothing (a crash test stops a writer at that write).
    pub fn add_write_fault(&self, lbas: Range<u64>) {
        self.add(lbas, true);
    }

    fn add(&self, lbas: Range<u64>, writes: bool) {
        if lbas.is_empty() {
            return;
        }
        let mut media = self.media.write().unwrap_or_else(|e| e.into_inner());
        media.push((lbas, writes));
        self.armed.store(true, Ordering::Release);
    }

    /// Removes every media error and write fault.
    pub fn clear_media_errors(&self) {
        let mut media = self.media.write().unwrap_or_else(|e| e.into_inner());
        media.clear();
        self.armed.store(false, Ordering::Release);
    }

    /// Whether a read of `blocks` blocks at `lba` touches an injected media error.
    pub fn media_error(&self, lba: u64, blocks: u64) -> bool {
        self.hits(lba, blocks, false)
    }

    /// Whether a write of `blocks` blocks at `lba` touches an injected write fault.
    pub fn write_fault(&self, lba: u64, blocks: u64) -> bool {
        self.hits(lba, blocks, true)
    }

    fn hits(&self, lba: u64, blocks: u64, writes: bool) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let end = lba.saturating_add(blocks);
        let media = self.media.read().unwrap_or_else(|e| e.into_inner());
        media
            .iter()
            .any(|(r, w)| *w == writes && r.start < end && lba < r.end)
    }

    /// Every `every`-th command (counted across the controller) completes `extra` later than
    /// the timing model says; `every == 0` turns spikes off.
    pub fn set_latency_spike(&self, every: u64, extra: Duration) {
        self.spike_ns.store(
            u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.spike_every.store(every, Ordering::Release);
    }

    /// Adds the spike to the targets of the commands of a dispatcher's batch that it hits,
    /// in place. One atomic step per batch, and none while spikes are off.
    pub fn apply_spikes(&self, targets: &mut [u64]) {
        let every = self.spike_every.load(Ordering::Acquire);
        if every == 0 || targets.is_empty() {
            return;
        }
        let extra = self.spike_ns.load(Ordering::Relaxed);
        let first = self
            .spike_counter
            .fetch_add(targets.len() as u64, Ordering::Relaxed);
        for (i, t) in targets.iter_mut().enumerate() {
            if (first + i as u64 + 1).is_multiple_of(every) {
                *t = t.saturating_add(extra);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_errors_hit_exactly_the_injected_ranges() {
        let f = Faults::new();
        assert!(!f.media_error(0, u64::MAX), "nothing injected");
        f.add_media_error(100..110);
        f.add_media_error(5..6);
        assert!(f.media_error(105, 1));
        assert!(f.media_error(95, 6), "a read overlapping the start");
        assert!(!f.media_error(95, 5), "a read ending right before it");
        assert!(!f.media_error(110, 8), "a read starting right after it");
        assert!(f.media_error(5, 1));
        assert!(!f.media_error(u64::MAX - 1, 5), "no overflow near the end");
        assert!(!f.write_fault(105, 1), "a read error fails no write");
        f.add_write_fault(200..201);
        assert!(f.write_fault(199, 2) && !f.write_fault(201, 4));
        assert!(!f.media_error(200, 1), "a write fault fails no read");
        f.clear_media_errors();
        assert!(!f.media_error(105, 1));
        assert!(!f.write_fault(200, 1));
    }

    #[test]
    fn every_nth_command_gets_the_spike() {
        let f = Faults::new();
        let mut t = vec![0u64; 10];
        f.apply_spikes(&mut t);
        assert!(t.iter().all(|&x| x == 0), "spikes are off by default");
        f.set_latency_spike(4, Duration::from_micros(3));
        f.apply_spikes(&mut t[..6]);
        f.apply_spikes(&mut t[6..]);
        let spiked: Vec<usize> = (0..10).filter(|&i| t[i] == 3000).collect();
        assert_eq!(
            spiked,
            vec![3, 7],
            "commands 4 and 8, counted across batches"
        );
    }
}
