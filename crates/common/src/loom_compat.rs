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

/// A futex on a `u32` word outside loom: the thread sleeps in the kernel, which checks the
/// word under its own lock, so a wake after the word changed is never lost.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Futex;

#[cfg(not(loom))]
impl Futex {
    pub(crate) fn new() -> Self {
        Self
    }

    /// Sleeps while `word` holds `expected`, at most `at_most` (or until any wake or signal).
    pub(crate) fn wait(
        &self,
        word: &std::sync::atomic::AtomicU32,
        expected: u32,
        at_most: std::time::Duration,
    ) {
        let timeout = libc::timespec {
            tv_sec: at_most.as_secs().try_into().unwrap_or(libc::time_t::MAX),
            tv_nsec: at_most.subsec_nanos().into(),
        };
        // SAFETY: `word` is a live, aligned u32 for the whole call; FUTEX_WAIT only reads it
        // and returns at once (EAGAIN) if it no longer holds `expected`. Every return (woken,
        // timed out, interrupted) is fine: callers look for work again.
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

    /// Wakes every thread asleep on `word`.
    pub(crate) fn wake_all(&self, word: &std::sync::atomic::AtomicU32) {
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
}

/// Under loom, the futex's guarantee from a mutex and a condition variable: the word is
/// checked under the lock a waker takes, so a wake between the check and the wait is not lost.
/// Timeouts are not modelled: a lost wake-up leaves the sleeper blocked, which loom reports.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Futex {
    lock: loom::sync::Mutex<()>,
    woken: loom::sync::Condvar,
}

#[cfg(loom)]
impl Futex {
    pub(crate) fn new() -> Self {
        Self {
            lock: loom::sync::Mutex::new(()),
            woken: loom::sync::Condvar::new(),
        }
    }

    pub(crate) fn wait(
        &self,
        word: &loom::sync::atomic::AtomicU32,
        expected: u32,
        _at_most: std::time::Duration,
    ) {
        let guard = self.lock.lock().unwrap();
        if word.load(loom::sync::atomic::Ordering::SeqCst) == expected {
            drop(self.woken.wait(guard).unwrap());
        }
    }

    pub(crate) fn wake_all(&self, _word: &loom::sync::atomic::AtomicU32) {
        let _guard = self.lock.lock().unwrap();
        self.woken.notify_all();
    }
}
