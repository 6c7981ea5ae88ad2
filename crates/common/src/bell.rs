//! A bell idle threads sleep on until another thread, having published work for them, rings
//! it: a software NVMe controller's workers sleep on the bell of their doorbell registers, and
//! host queues ring it after each doorbell write (gpu-nvme's `FileController`), the way a virtio
//! device is kicked, instead of polling in fixed sleeps.
//!
//! The protocol is Dekker's: a ringer publishes its work, fences and reads the count of
//! sleepers; a sleeper counts itself, fences and looks for work once more. One of the two sees
//! the other's write, so work published while a thread falls asleep either keeps it awake or
//! wakes it. The sleep is a futex wait on the ring count, which returns at once if a ring came
//! after the sleeper read the count. Ringing costs a fence and a load while nobody sleeps.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

use crate::loom_compat::Futex;

/// Where idle threads sleep until a ring (see the module doc).
#[derive(Debug)]
pub struct Bell {
    /// The futex word: moves on at every ring that found a sleeper.
    rings: AtomicU32,
    /// Threads between announcing their sleep and waking up.
    sleepers: AtomicU32,
    /// Sleeps that reached the futex (diagnostics and tests).
    sleeps: AtomicU64,
    futex: Futex,
}

impl Default for Bell {
    fn default() -> Self {
        Self {
            rings: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            sleeps: AtomicU64::new(0),
            futex: Futex::new(),
        }
    }
}

impl Bell {
    /// Called after publishing work a sleeping thread must see: wakes every sleeper.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        self.ring_after_fence();
    }

    /// [`Self::ring`] for a caller that already fenced (`SeqCst`) after publishing its work.
    pub fn ring_after_fence(&self) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.rings.fetch_add(1, Ordering::SeqCst);
            self.futex.wake_all(&self.rings);
        }
    }

    /// Sleeps until a ring or `at_most` passed, unless `idle` (which looks for work once more)
    /// finds work once the sleep is announced. Returns whether it slept. A sleep may also end
    /// early (a signal, a ring meant for another sleeper): callers look for work and sleep
    /// again.
    pub fn sleep(&self, idle: impl FnOnce() -> bool, at_most: Duration) -> bool {
        let seen = self.rings.load(Ordering::SeqCst);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let slept = idle();
        if slept {
            self.sleeps.fetch_add(1, Ordering::Relaxed);
            self.futex.wait(&self.rings, seen, at_most);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        slept
    }

    /// Sleeps that reached the futex so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_sleeper_that_finds_work_does_not_sleep() {
        let bell = Bell::default();
        let t = Instant::now();
        assert!(!bell.sleep(|| false, Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(bell.sleeps(), 0);
    }

    #[test]
    fn an_unrung_sleep_ends_at_its_limit() {
        let bell = Bell::default();
        let t = Instant::now();
        assert!(bell.sleep(|| true, Duration::from_millis(30)));
        assert!(
            t.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(bell.sleeps(), 1);
    }

    /// A ringer that writes its "doorbell" just as the sleeper checks it: every write must be
    /// seen, either by the sleeper's check or by a ring that wakes it. A lost wake-up shows as
    /// a sleep that runs to its 2 s limit.
    #[test]
    fn no_doorbell_write_is_slept_through() {
        let bell = Arc::new(Bell::default());
        let doorbell = Arc::new(AtomicU32::new(0));
        let taken = Arc::new(AtomicU32::new(0));
        let rounds = 3_000;
        let ringer = {
            let (bell, doorbell, taken) = (bell.clone(), doorbell.clone(), taken.clone());
            std::thread::spawn(move || {
                for i in 1..=rounds {
                    // Write only once the sleeper took the last write: it is then on its way
                    // back to sleep, and this write races its check.
                    while taken.load(Ordering::SeqCst) != i - 1 {
                        std::hint::spin_loop();
                    }
                    // Now and then the sleeper gets time to reach the futex first.
                    if i % 10 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    doorbell.store(i, Ordering::SeqCst);
                    bell.ring();
                }
            })
        };
        let mut seen = 0;
        let mut longest = Duration::ZERO;
        while seen < rounds {
            let t = Instant::now();
            bell.sleep(
                || doorbell.load(Ordering::SeqCst) == seen,
                Duration::from_secs(2),
            );
            longest = longest.max(t.elapsed());
            // Take the write (in a controller: fetch the commands).
            seen = doorbell.load(Ordering::SeqCst);
            taken.store(seen, Ordering::SeqCst);
        }
        ringer.join().unwrap();
        assert!(
            longest < Duration::from_secs(1),
            "a sleep outlived its ring: {longest:?}"
        );
        assert!(
            bell.sleeps() > 0,
            "the sleeper never slept: the test raced nothing"
        );
    }
}
