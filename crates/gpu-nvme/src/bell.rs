//! Doorbell wake-ups for software controllers whose doorbells only host threads ring.
//!
//! A hardware controller sees a doorbell write at no cost to anyone; a software one must poll
//! the doorbell words, and a polling thread that finds nothing can only spin, yield or sleep.
//! Sleeping a fixed slice (20 us) costs an idle controller about a sixth of a core in timer
//! wake-ups (an idle `peakfs-server` used 18 % of a core, nearly all of it in `nanosleep`), takes
//! those wake-ups from the cores of busy threads, and answers the next command up to a slice
//! plus the timer's slack late. A [`DoorbellBell`] lets the idle thread sleep in a futex until a
//! host thread that wrote a doorbell rings the bell (the way a virtio device is kicked).
//!
//! The protocol is Dekker's, as for RingSched's sleeping workers: a ringer writes its doorbell,
//! fences and reads the count of sleepers; a sleeper counts itself, fences and re-reads the
//! doorbells. One of the two sees the other's write, so a doorbell written while the thread
//! falls asleep either keeps it awake or wakes it. GPU threads cannot make the system call, so
//! a controller whose doorbells a GPU may ring must keep polling.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

/// Where idle controller threads sleep until a host thread rings after a doorbell write.
#[derive(Debug, Default)]
pub struct DoorbellBell {
    /// The futex word: moves on at every ring that found a sleeper.
    rings: AtomicU32,
    /// Threads between announcing their sleep and waking up.
    sleepers: AtomicU32,
    /// Sleeps that reached the futex (diagnostics and tests).
    sleeps: AtomicU64,
}

impl DoorbellBell {
    /// Called by a host thread after it wrote a doorbell (or posted anything else a sleeping
    /// controller thread must see): wakes every sleeper. Costs a fence and a load while nobody
    /// sleeps.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        self.ring_after_fence();
    }

    /// [`Self::ring`] for a caller that already fenced (`SeqCst`) after its doorbell write.
    pub fn ring_after_fence(&self) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.rings.fetch_add(1, Ordering::SeqCst);
            futex_wake_all(&self.rings);
        }
    }

    /// Sleeps until a ring or `at_most` passed, unless `idle` (which re-reads the doorbells and
    /// anything else the thread serves) finds work once the sleep is announced. Returns
    /// whether it slept.
    pub fn sleep(&self, idle: impl FnOnce() -> bool, at_most: Duration) -> bool {
        let seen = self.rings.load(Ordering::SeqCst);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let slept = idle();
        if slept {
            self.sleeps.fetch_add(1, Ordering::Relaxed);
            futex_wait(&self.rings, seen, at_most);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        slept
    }

    /// Sleeps that reached the futex so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, at_most: Duration) {
    let timeout = libc::timespec {
        tv_sec: at_most.as_secs().try_into().unwrap_or(libc::time_t::MAX),
        tv_nsec: at_most.subsec_nanos().into(),
    };
    // SAFETY: `word` is a live, aligned u32 for the whole call; FUTEX_WAIT only reads it, and
    // returns at once (EAGAIN) if it no longer holds `expected`. Any return (woken, timed out,
    // interrupted) is fine: the caller polls again.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &raw const timeout,
        );
    }
}

fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_sleeper_that_finds_work_does_not_sleep() {
        let bell = DoorbellBell::default();
        let t = Instant::now();
        assert!(!bell.sleep(|| false, Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(bell.sleeps(), 0);
    }

    #[test]
    fn an_unrung_sleep_ends_at_its_limit() {
        let bell = DoorbellBell::default();
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
        let bell = Arc::new(DoorbellBell::default());
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
