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

/// Backs off while a polling thread finds no work: spin, then yield, then short sleeps.
/// Returns the new count of idle rounds.
pub fn idle_backoff(idle: u32) -> u32 {
    let idle = idle.saturating_add(1);
    if idle > 20_000 {
        std::thread::sleep(std::time::Duration::from_micros(20));
    } else if idle > 2_000 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
    idle
}
