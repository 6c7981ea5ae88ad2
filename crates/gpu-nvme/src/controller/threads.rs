//! Thread plumbing every software controller shares: the set of its threads with their stop
//! flag, the mailboxes through which `attach_queue`/`detach_queue` reach a running thread, and
//! the backoff of a polling thread that finds no work.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_utils::Backoff;

use super::ControllerError;

/// A controller's threads: started together, stopped together.
#[derive(Debug, Default)]
pub struct ThreadSet {
    running: AtomicBool,
    stop: AtomicBool,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl ThreadSet {
    /// Marks the set running (CC.EN = 1); an error if it already is.
    pub fn begin(&self) -> Result<(), ControllerError> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(ControllerError::State("already running"));
        }
        self.stop.store(false, Ordering::Release);
        Ok(())
    }

    /// Starts a named thread of the set.
    pub fn spawn(
        &self,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<(), ControllerError> {
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(body)
            .map_err(ControllerError::Io)?;
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
        Ok(())
    }

    /// The flag every thread of the set polls.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// Whether the threads are asked to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether the set is running.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Asks every thread to stop (without waiting).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Stops every thread and waits for them (CC.EN = 0).
    pub fn stop_and_join(&self) {
        self.request_stop();
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
        self.running.store(false, Ordering::Release);
    }
}

/// A mailbox through which `attach_queue`/`detach_queue` reach a running thread.
#[derive(Debug)]
pub struct Mailbox<T> {
    add: Mutex<Vec<T>>,
    remove: Mutex<Vec<u16>>,
    dirty: AtomicBool,
    requested: AtomicU64,
    applied: AtomicU64,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Self {
            add: Mutex::new(Vec::new()),
            remove: Mutex::new(Vec::new()),
            dirty: AtomicBool::new(false),
            requested: AtomicU64::new(0),
            applied: AtomicU64::new(0),
        }
    }
}

impl<T> Mailbox<T> {
    /// Queues a change and returns the number to wait for.
    pub fn post(&self, add: Option<T>, remove: Option<u16>) -> u64 {
        if let Some(a) = add {
            self.add.lock().unwrap_or_else(|e| e.into_inner()).push(a);
        }
        if let Some(r) = remove {
            self.remove
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(r);
        }
        let n = self.requested.fetch_add(1, Ordering::AcqRel) + 1;
        self.dirty.store(true, Ordering::Release);
        n
    }

    /// Whether changes wait to be applied.
    pub fn has_mail(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Applies queued changes to `items` (the owning thread calls this).
    pub fn apply(&self, items: &mut Vec<T>, id: impl Fn(&T) -> u16) {
        // A plain load first: polling threads call this every round, and a swap is a locked
        // instruction that would stall each round until the thread's pending stores drain.
        if !self.dirty.load(Ordering::Acquire) || !self.dirty.swap(false, Ordering::AcqRel) {
            return;
        }
        let target = self.requested.load(Ordering::Acquire);
        items.append(&mut self.add.lock().unwrap_or_else(|e| e.into_inner()));
        let remove = std::mem::take(&mut *self.remove.lock().unwrap_or_else(|e| e.into_inner()));
        items.retain(|x| !remove.contains(&id(x)));
        self.applied.store(target, Ordering::Release);
    }

    pub fn wait(&self, n: u64, stop: &AtomicBool) {
        let backoff = Backoff::new();
        while self.applied.load(Ordering::Acquire) < n && !stop.load(Ordering::Acquire) {
            backoff.snooze();
        }
    }
}

/// How a polling thread backs off while it finds no work: it spins, then yields its core,
/// then sleeps 20 us at a time, counting idle rounds from its last work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleBackoff {
    /// Idle rounds spent spinning.
    pub spins: u32,
    /// Idle rounds after the spins spent yielding (each a `sched_yield`, roughly 0.5 us);
    /// every round after them sleeps.
    pub yields: u32,
}

impl Default for IdleBackoff {
    /// 2,000 spins, then 18,000 yields (some milliseconds): a device that stays busy in
    /// bursts answers at once.
    fn default() -> Self {
        Self {
            spins: 2_000,
            yields: 18_000,
        }
    }
}

impl IdleBackoff {
    /// Whether `idle` rounds have used up the spins and yields (the next step sleeps).
    pub fn is_spent(&self, idle: u32) -> bool {
        idle >= self.spins.saturating_add(self.yields)
    }

    /// Backs off for idle round `idle + 1`; returns the new count of idle rounds.
    pub fn step(&self, idle: u32) -> u32 {
        if self.is_spent(idle) {
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else if idle >= self.spins {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        idle.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn idle_rounds_spin_then_yield_then_sleep() {
        let b = IdleBackoff {
            spins: 3,
            yields: 2,
        };
        let mut idle = 0;
        for _ in 0..5 {
            assert!(!b.is_spent(idle), "round {idle}");
            let t = Instant::now();
            idle = b.step(idle);
            // Spins and yields never sleep (generous bound for a loaded CI machine).
            assert!(t.elapsed() < Duration::from_millis(20), "round {idle}");
        }
        assert_eq!(idle, 5);
        assert!(
            b.is_spent(idle),
            "after 3 spins and 2 yields the next round sleeps"
        );
        let t = Instant::now();
        assert_eq!(b.step(idle), 6);
        assert!(
            t.elapsed() >= Duration::from_micros(20),
            "the 6th round sleeps"
        );
        // The count saturates instead of wrapping back to spinning.
        assert_eq!(b.step(u32::MAX), u32::MAX);
        assert_eq!(
            IdleBackoff::default().spins + IdleBackoff::default().yields,
            20_000
        );
    }
}
