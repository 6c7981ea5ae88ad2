//! GoFS's ring-buffer range lock (GoFS paper §3.3, "Scalable accesses to inode").
//!
//! The inode mutex is replaced by a lock on byte ranges: disjoint ranges proceed in parallel,
//! overlapping ones are granted one at a time in arrival order. Requests live in a ring buffer
//! of [`RangeSlot`]s; a request appends its range and checks it only against OLDER requests, so
//! a newer request is never granted before an older overlapping one (no starvation of large
//! ranges by streams of small ones). The CUDA twin in `cuda/range_lock.cuh` shares the
//! `#[repr(C)]` layout and runs the same protocol, with the conflict check spread over a warp.
//!
//! Protocol, for a request that draws ticket `t` from the header's `tail`:
//! 1. Slot `t % capacity` serves tickets `t`, `t + capacity`, ... in turn. Wait until its state
//!    says "vacant for `t`" (the release of ticket `t - capacity` writes that).
//! 2. Publish offset and length, then the state `(t, WAITING)`.
//! 3. For every older ticket `u` in `max(head, t - capacity + 1)..t`, read slot `u % capacity`:
//!    a state naming a ticket newer than `u` means `u` is released; a state naming `u` live
//!    carries `u`'s range, and if it overlaps ours we poll until `u` is released; anything else
//!    means `u` has not published yet, and we wait for it to.
//! 4. Store `(t, HELD)`. Release stores "vacant for `t + capacity`" and advances `head` over
//!    the contiguous run of released tickets.
//!
//! Every state carries its ticket, so a waiter cannot mistake a slot reused by a newer ticket for
//! the one it waits on. Older tickets than `t - capacity + 1` need no check: such a ticket `u`
//! shares its slot with some `u + k * capacity` inside the window, which cannot publish before
//! `u` has released. Waits only ever point at older tickets, so they cannot form a cycle; the
//! one way to deadlock is for a thread to wait while itself holding a guard that an older
//! request waits on (as with any FIFO lock), or to hold `capacity` guards and ask for another.
//! Tickets have 62 bits (the state's low two bits hold the phase): at a billion requests a
//! second they last 146 years.

use std::fmt;
use std::ops::Range;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::loom_compat::Backoff;

/// Largest ring a lock may have (32 MiB of slots); a conflict check scans up to this many.
pub const MAX_CAPACITY: usize = 1 << 20;
/// Low bits of a slot state that hold its phase; the bits above hold the ticket.
pub const PHASE_BITS: u32 = 2;
/// Mask of the phase bits of a slot state.
pub const PHASE_MASK: u64 = (1 << PHASE_BITS) - 1;
/// Phase of a slot waiting for the ticket in its state to claim it.
pub const PHASE_VACANT: u64 = 0;
/// Phase of a published request that is still checking older requests for conflicts.
pub const PHASE_WAITING: u64 = 1;
/// Phase of a granted request.
pub const PHASE_HELD: u64 = 2;

/// Packs a ticket and a phase into a slot state.
pub const fn slot_state(ticket: u64, phase: u64) -> u64 {
    (ticket << PHASE_BITS) | phase
}

/// The ticket named by a slot state.
pub const fn state_ticket(state: u64) -> u64 {
    state >> PHASE_BITS
}

/// The phase of a slot state: [`PHASE_VACANT`], [`PHASE_WAITING`] or [`PHASE_HELD`].
pub const fn state_phase(state: u64) -> u64 {
    state & PHASE_MASK
}

/// Errors of the range lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RangeLockError {
    /// Range lock capacity is not a power of two between 1 and `MAX_CAPACITY`.
    #[error("range lock capacity {0} is not a power of two between 1 and {MAX_CAPACITY}")]
    BadCapacity(usize),
    /// Range of zero length.
    #[error("range at offset {offset} has zero length")]
    ZeroLength {
        /// Offset of the rejected range.
        offset: u64,
    },
    /// Range end overflows `u64`.
    #[error("range at offset {offset} with length {len} ends past u64::MAX")]
    RangeOverflow {
        /// Offset of the rejected range.
        offset: u64,
        /// Length of the rejected range.
        len: u64,
    },
}

/// One request of the ring, shared with CUDA (`struct RangeSlot` in `cuda/range_lock.cuh`).
///
/// `state` packs the owning ticket and phase (see [`slot_state`]); `offset` and `len` are the
/// requested byte range, valid while `state` names its ticket live.
#[repr(C, align(32))]
#[derive(Debug)]
pub struct RangeSlot {
    state: AtomicU64,
    offset: AtomicU64,
    len: AtomicU64,
}

impl RangeSlot {
    /// Initial slot image: vacant for its first ticket, which is the slot's index.
    fn vacant_for(ticket: u64) -> Self {
        Self {
            state: AtomicU64::new(slot_state(ticket, PHASE_VACANT)),
            offset: AtomicU64::new(0),
            len: AtomicU64::new(0),
        }
    }

    /// Snapshot of the state word.
    pub fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    /// Snapshot of the published offset.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }

    /// Snapshot of the published length.
    pub fn length(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }
}

/// Counters of a lock, shared with CUDA (`struct RangeLockHeader` in `cuda/range_lock.cuh`).
///
/// `tail` is the next ticket; every ticket below `head` is released. `head` sits on its own
/// cache line so that releasers advancing it do not slow down acquirers drawing tickets.
#[repr(C, align(64))]
pub struct RangeLockHeader {
    capacity: u64,
    tail: AtomicU64,
    _pad_to_head_line: [u64; 6],
    head: AtomicU64,
}

impl RangeLockHeader {
    fn new(capacity: u64) -> Self {
        Self {
            capacity,
            tail: AtomicU64::new(0),
            _pad_to_head_line: [0; 6],
            head: AtomicU64::new(0),
        }
    }

    /// Number of slots in the ring (a power of two).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Snapshot of the next ticket to be drawn.
    pub fn tail(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    /// Snapshot of the oldest ticket that may still be live.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }
}

impl fmt::Debug for RangeLockHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeLockHeader")
            .field("capacity", &self.capacity)
            .field("tail", &self.tail())
            .field("head", &self.head())
            .finish()
    }
}

#[cfg(not(loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<RangeSlot>() == 32);
    assert!(align_of::<RangeSlot>() == 32);
    assert!(offset_of!(RangeSlot, state) == 0);
    assert!(offset_of!(RangeSlot, offset) == 8);
    assert!(offset_of!(RangeSlot, len) == 16);
    assert!(size_of::<RangeLockHeader>() == 128);
    assert!(align_of::<RangeLockHeader>() == 64);
    assert!(offset_of!(RangeLockHeader, capacity) == 0);
    assert!(offset_of!(RangeLockHeader, tail) == 8);
    assert!(offset_of!(RangeLockHeader, head) == 64);
};

/// What a requester learns about an older ticket from its slot.
enum OlderRequest {
    Released,
    Unpublished,
    Live { offset: u64, len: u64 },
}

/// A byte-range lock with FIFO order among overlapping requests (GoFS §3.3).
pub struct RangeLock {
    header: RangeLockHeader,
    slots: Box<[RangeSlot]>,
}

impl fmt::Debug for RangeLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeLock")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl RangeLock {
    /// Creates a lock whose ring holds `capacity` requests (a power of two up to
    /// [`MAX_CAPACITY`]). Requests beyond that many in flight wait for a slot.
    pub fn new(capacity: usize) -> Result<Self, RangeLockError> {
        if !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
            return Err(RangeLockError::BadCapacity(capacity));
        }
        let slots = (0..capacity as u64).map(RangeSlot::vacant_for).collect();
        Ok(Self {
            header: RangeLockHeader::new(capacity as u64),
            slots,
        })
    }

    /// Number of slots in the ring.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The shared header, laid out as `RangeLockHeader` in `cuda/range_lock.cuh`.
    pub fn header(&self) -> &RangeLockHeader {
        &self.header
    }

    /// The ring, laid out as an array of `RangeSlot` in `cuda/range_lock.cuh`; slot `i` serves
    /// tickets `i`, `i + capacity`, ...
    pub fn slots(&self) -> &[RangeSlot] {
        &self.slots
    }

    /// Locks `offset..offset + len`, waiting (spinning, then yielding) for a ring slot and for
    /// every older overlapping request to be released.
    pub fn acquire(&self, offset: u64, len: u64) -> Result<RangeGuard<'_>, RangeLockError> {
        validate(offset, len)?;
        let ticket = self.header.tail.fetch_add(1, Ordering::Relaxed);
        let slot = self.slot(ticket);
        let backoff = Backoff::new();
        while slot.state.load(Ordering::Acquire) != slot_state(ticket, PHASE_VACANT) {
            backoff.snooze();
        }
        self.publish(slot, ticket, offset, len);
        for older in self.older_tickets(ticket) {
            let backoff = Backoff::new();
            while self.older_blocks(older, offset, len) {
                backoff.snooze();
            }
        }
        slot.state
            .store(slot_state(ticket, PHASE_HELD), Ordering::Release);
        Ok(RangeGuard {
            lock: self,
            ticket,
            offset,
            len,
        })
    }

    /// Locks `offset..offset + len` if that needs no waiting, and returns `None` otherwise:
    /// when the ring has no vacant slot for the next ticket, or when an older request overlaps
    /// the range or has not published its range yet. A refused request releases its slot at
    /// once, so it never holds up younger requests.
    pub fn try_acquire(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<Option<RangeGuard<'_>>, RangeLockError> {
        validate(offset, len)?;
        // Draw a ticket only if its slot is vacant: a drawn ticket must be served, and waiting
        // for the slot is what `try` must not do.
        let mut ticket = self.header.tail.load(Ordering::Relaxed);
        loop {
            let state = self.slot(ticket).state.load(Ordering::Acquire);
            if state == slot_state(ticket, PHASE_VACANT) {
                match self.header.tail.compare_exchange(
                    ticket,
                    ticket + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(current) => ticket = current,
                }
            } else if state_ticket(state) < ticket {
                return Ok(None);
            } else {
                ticket = self.header.tail.load(Ordering::Relaxed);
            }
        }
        let slot = self.slot(ticket);
        self.publish(slot, ticket, offset, len);
        if self
            .older_tickets(ticket)
            .any(|older| self.older_blocks(older, offset, len))
        {
            self.release(ticket);
            return Ok(None);
        }
        slot.state
            .store(slot_state(ticket, PHASE_HELD), Ordering::Release);
        Ok(Some(RangeGuard {
            lock: self,
            ticket,
            offset,
            len,
        }))
    }

    fn slot(&self, ticket: u64) -> &RangeSlot {
        &self.slots[(ticket & (self.header.capacity - 1)) as usize]
    }

    fn publish(&self, slot: &RangeSlot, ticket: u64, offset: u64, len: u64) {
        // A reader that loads this new range while inspecting the slot's previous ticket must
        // then see a newer state; pairs with the acquire fence in `inspect`.
        fence(Ordering::Release);
        slot.offset.store(offset, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.state
            .store(slot_state(ticket, PHASE_WAITING), Ordering::Release);
    }

    /// The older tickets that `ticket` must check (see the module doc).
    fn older_tickets(&self, ticket: u64) -> Range<u64> {
        let oldest_in_ring = ticket.saturating_sub(self.header.capacity - 1);
        self.header.head.load(Ordering::Acquire).max(oldest_in_ring)..ticket
    }

    /// Whether the older ticket `older` keeps a request for `offset..offset + len` waiting.
    fn older_blocks(&self, older: u64, offset: u64, len: u64) -> bool {
        match self.inspect(older) {
            OlderRequest::Released => false,
            OlderRequest::Unpublished => true,
            OlderRequest::Live {
                offset: other_offset,
                len: other_len,
            } => offset < other_offset + other_len && other_offset < offset + len,
        }
    }

    fn inspect(&self, ticket: u64) -> OlderRequest {
        let slot = self.slot(ticket);
        let state = slot.state.load(Ordering::Acquire);
        if state_ticket(state) > ticket {
            return OlderRequest::Released;
        }
        if state_ticket(state) < ticket || state_phase(state) == PHASE_VACANT {
            return OlderRequest::Unpublished;
        }
        let offset = slot.offset.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        // The slot may have been released and republished by a newer ticket while we read the
        // range; the range is `ticket`'s only if the state still names `ticket`. The fence keeps
        // the range reads before the second load, which must itself acquire: when it sees the
        // release, the caller's critical section must follow the released one.
        fence(Ordering::Acquire);
        if state_ticket(slot.state.load(Ordering::Acquire)) != ticket {
            return OlderRequest::Released;
        }
        OlderRequest::Live { offset, len }
    }

    fn release(&self, ticket: u64) {
        let vacant = slot_state(ticket + self.header.capacity, PHASE_VACANT);
        self.slot(ticket).state.store(vacant, Ordering::Release);
        // Of two releasers of neighbouring tickets, the SeqCst fences let at least one see both
        // releases, so `head` never stalls behind a released ticket.
        fence(Ordering::SeqCst);
        self.advance_head();
    }

    fn advance_head(&self) {
        let mut head = self.header.head.load(Ordering::Acquire);
        // A slot naming a ticket newer than `head` means ticket `head` is released. The slot of
        // `tail` never does, so `head` stops at `tail` at the latest.
        while state_ticket(self.slot(head).state.load(Ordering::Acquire)) > head {
            match self.header.head.compare_exchange(
                head,
                head + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => head += 1,
                Err(current) => head = current,
            }
        }
    }
}

fn validate(offset: u64, len: u64) -> Result<(), RangeLockError> {
    if len == 0 {
        return Err(RangeLockError::ZeroLength { offset });
    }
    match offset.checked_add(len) {
        Some(_) => Ok(()),
        None => Err(RangeLockError::RangeOverflow { offset, len }),
    }
}

/// A granted range; dropping it releases the range.
#[derive(Debug)]
#[must_use = "the range is released as soon as the guard is dropped"]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    ticket: u64,
    offset: u64,
    len: u64,
}

impl RangeGuard<'_> {
    /// The granted byte range (never empty).
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.len
    }

    /// The request's position in the lock's arrival order: overlapping requests are granted
    /// in increasing ticket order.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        self.lock.release(self.ticket);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    const PATIENCE: Duration = Duration::from_secs(10);

    fn wait_until(condition: impl Fn() -> bool) {
        let backoff = Backoff::new();
        while !condition() {
            backoff.snooze();
        }
    }

    #[test]
    fn capacity_must_be_a_bounded_power_of_two() {
        for bad in [0, 3, 6, MAX_CAPACITY + 1, MAX_CAPACITY * 2] {
            assert_eq!(
                RangeLock::new(bad).unwrap_err(),
                RangeLockError::BadCapacity(bad)
            );
        }
        for good in [1, 2, 64, MAX_CAPACITY] {
            assert_eq!(RangeLock::new(good).unwrap().capacity(), good);
        }
    }

    #[test]
    fn zero_length_and_overflowing_ranges_are_rejected() {
        let lock = RangeLock::new(4).unwrap();
        assert_eq!(
            lock.acquire(7, 0).unwrap_err(),
            RangeLockError::ZeroLength { offset: 7 }
        );
        assert_eq!(
            lock.try_acquire(u64::MAX, 1).unwrap_err(),
            RangeLockError::RangeOverflow {
                offset: u64::MAX,
                len: 1
            }
        );
        assert_eq!(lock.header().tail(), 0, "a rejected range draws no ticket");
        let whole = lock.acquire(0, u64::MAX).unwrap();
        assert_eq!(whole.range(), 0..u64::MAX);
    }

    #[test]
    fn slot_states_follow_the_protocol() {
        let lock = RangeLock::new(2).unwrap();
        assert_eq!(lock.slots()[1].state(), slot_state(1, PHASE_VACANT));
        let guard = lock.acquire(10, 5).unwrap();
        let slot = &lock.slots()[0];
        assert_eq!(slot.state(), slot_state(0, PHASE_HELD));
        assert_eq!((slot.offset(), slot.length()), (10, 5));
        drop(guard);
        assert_eq!(state_ticket(slot.state()), 2);
        assert_eq!(state_phase(slot.state()), PHASE_VACANT);
        assert_eq!((lock.header().head(), lock.header().tail()), (1, 1));
    }

    #[test]
    fn slots_are_reused_across_many_laps() {
        let lock = RangeLock::new(4).unwrap();
        for round in 0..1000u64 {
            let first = lock.acquire(round, 3).unwrap();
            let second = lock
                .try_acquire(round + 3, 3)
                .unwrap()
                .expect("disjoint range");
            assert_eq!(second.ticket(), first.ticket() + 1);
        }
        assert_eq!(lock.header().tail(), 2000);
        assert_eq!(lock.header().head(), 2000);
    }

    #[test]
    fn full_ring_refuses_try_until_the_oldest_slot_is_released() {
        let lock = RangeLock::new(2).unwrap();
        let oldest = lock.acquire(0, 1).unwrap();
        drop(lock.acquire(1, 1).unwrap());
        // Only one range is held, but ticket 2 needs ticket 0's slot.
        assert!(lock.try_acquire(2, 1).unwrap().is_none());
        assert_eq!(
            lock.header().tail(),
            2,
            "a refused try on a full ring draws no ticket"
        );
        drop(oldest);
        assert!(lock.try_acquire(2, 1).unwrap().is_some());
    }

    #[test]
    fn refused_try_leaves_no_slot_blocking_younger_requests() {
        let lock = RangeLock::new(8).unwrap();
        let held = lock.acquire(0, 10).unwrap();
        assert!(lock.try_acquire(5, 20).unwrap().is_none());
        // Overlaps the refused request only; it would wait forever if that slot stayed live.
        let younger = lock
            .try_acquire(20, 5)
            .unwrap()
            .expect("refused request left a live slot");
        assert_eq!(younger.ticket(), held.ticket() + 2);
    }

    #[test]
    fn disjoint_range_is_granted_while_another_is_held() {
        let lock = &RangeLock::new(4).unwrap();
        let _held = lock.acquire(0, 10).unwrap();
        let (granted, on_grant) = mpsc::channel();
        thread::scope(|scope| {
            scope.spawn(move || {
                let _disjoint = lock.acquire(10, 10).unwrap();
                granted.send(()).unwrap();
            });
            on_grant
                .recv_timeout(PATIENCE)
                .expect("disjoint acquire waited on a held range");
        });
    }

    #[test]
    fn overlapping_acquire_waits_for_release() {
        let lock = &RangeLock::new(4).unwrap();
        let held = lock.acquire(0, 10).unwrap();
        let (granted, on_grant) = mpsc::channel();
        thread::scope(|scope| {
            scope.spawn(move || {
                let _overlapping = lock.acquire(9, 1).unwrap();
                granted.send(()).unwrap();
            });
            wait_until(|| lock.slots()[1].state() == slot_state(1, PHASE_WAITING));
            assert!(
                on_grant.try_recv().is_err(),
                "granted while an overlapping range is held"
            );
            drop(held);
            on_grant
                .recv_timeout(PATIENCE)
                .expect("not granted after the release");
        });
    }

    #[test]
    fn younger_request_cannot_overtake_an_older_waiting_overlap() {
        let lock = &RangeLock::new(8).unwrap();
        let small = lock.acquire(0, 10).unwrap();
        let (granted, on_grant) = mpsc::channel();
        thread::scope(|scope| {
            scope.spawn(move || {
                let _large = lock.acquire(0, 100).unwrap();
                granted.send(()).unwrap();
            });
            wait_until(|| lock.slots()[1].state() == slot_state(1, PHASE_WAITING));
            // Disjoint from the held range, but it overlaps the older waiting request.
            assert!(lock.try_acquire(50, 10).unwrap().is_none());
            assert!(
                lock.try_acquire(100, 10).unwrap().is_some(),
                "disjoint from both"
            );
            drop(small);
            on_grant
                .recv_timeout(PATIENCE)
                .expect("older waiter not granted");
        });
    }

    #[derive(Debug, Clone)]
    enum Op {
        TryAcquire { offset: u64, len: u64 },
        AcquireIfFree { offset: u64, len: u64 },
        Release { index: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..64u64, 1..16u64).prop_map(|(offset, len)| Op::TryAcquire { offset, len }),
            (0..64u64, 1..16u64).prop_map(|(offset, len)| Op::AcquireIfFree { offset, len }),
            any::<usize>().prop_map(|index| Op::Release { index }),
        ]
    }

    /// The single-threaded model: held requests as (ticket, offset, len), and the next ticket.
    #[derive(Default)]
    struct Model {
        held: Vec<(u64, u64, u64)>,
        tail: u64,
    }

    impl Model {
        fn overlaps_held(&self, offset: u64, len: u64) -> bool {
            self.held
                .iter()
                .any(|&(_, o, l)| offset < o + l && o < offset + len)
        }

        fn ring_full(&self, capacity: u64) -> bool {
            self.tail >= capacity && self.held.iter().any(|&(t, _, _)| t == self.tail - capacity)
        }
    }

    proptest! {
        #[test]
        fn single_thread_grants_match_interval_overlap_model(
            capacity_log2 in 0..4u32,
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let capacity = 1u64 << capacity_log2;
            let lock = RangeLock::new(capacity as usize).unwrap();
            let mut model = Model::default();
            let mut guards: Vec<RangeGuard<'_>> = Vec::new();
            for op in ops {
                match op {
                    Op::TryAcquire { offset, len } => {
                        let granted = lock.try_acquire(offset, len).unwrap();
                        if model.ring_full(capacity) {
                            prop_assert!(granted.is_none());
                        } else {
                            let ticket = model.tail;
                            model.tail += 1;
                            let refused = model.overlaps_held(offset, len);
                            prop_assert_eq!(granted.is_none(), refused);
                            if let Some(guard) = granted {
                                prop_assert_eq!(guard.ticket(), ticket);
                                model.held.push((ticket, offset, len));
                                guards.push(guard);
                            }
                        }
                    }
                    Op::AcquireIfFree { offset, len } => {
                        // A blocking acquire that would wait would hang a single thread.
                        if !model.ring_full(capacity) && !model.overlaps_held(offset, len) {
                            let guard = lock.acquire(offset, len).unwrap();
                            prop_assert_eq!(guard.ticket(), model.tail);
                            model.held.push((model.tail, offset, len));
                            model.tail += 1;
                            guards.push(guard);
                        }
                    }
                    Op::Release { index } => {
                        if !guards.is_empty() {
                            let index = index % guards.len();
                            drop(guards.swap_remove(index));
                            model.held.swap_remove(index);
                        }
                    }
                }
                let oldest_held = model.held.iter().map(|&(t, _, _)| t).min();
                prop_assert_eq!(lock.header().tail(), model.tail);
                prop_assert_eq!(lock.header().head(), oldest_held.unwrap_or(model.tail));
            }
        }
    }

    #[test]
    fn threads_never_share_a_unit_and_overlaps_are_granted_in_ticket_order() {
        const THREADS: usize = 8;
        const ITERATIONS: usize = 2000;
        const UNITS: u64 = 48;
        const FREE: usize = 0;
        let lock = RangeLock::new(8).unwrap();
        let owners: Vec<AtomicUsize> = (0..UNITS).map(|_| AtomicUsize::new(FREE)).collect();
        // One plus the ticket of the last request granted each unit.
        let last_grant: Vec<AtomicU64> = (0..UNITS).map(|_| AtomicU64::new(0)).collect();
        let exclusion_violations = AtomicUsize::new(0);
        let order_violations = AtomicUsize::new(0);
        let grants = AtomicUsize::new(0);
        thread::scope(|scope| {
            for id in 1..=THREADS {
                let (lock, owners, last_grant) = (&lock, &owners, &last_grant);
                let (exclusion_violations, order_violations) =
                    (&exclusion_violations, &order_violations);
                let grants = &grants;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(id as u64);
                    for _ in 0..ITERATIONS {
                        let offset = rng.random_range(0..UNITS);
                        let len = rng.random_range(1..=(UNITS - offset).min(12));
                        let guard = if rng.random_bool(0.25) {
                            match lock.try_acquire(offset, len).unwrap() {
                                Some(guard) => guard,
                                None => continue,
                            }
                        } else {
                            lock.acquire(offset, len).unwrap()
                        };
                        grants.fetch_add(1, Ordering::Relaxed);
                        let units = offset as usize..(offset + len) as usize;
                        for unit in units.clone() {
                            if owners[unit].swap(id, Ordering::Relaxed) != FREE {
                                exclusion_violations.fetch_add(1, Ordering::Relaxed);
                            }
                            let previous =
                                last_grant[unit].swap(guard.ticket() + 1, Ordering::Relaxed);
                            if previous > guard.ticket() {
                                order_violations.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        thread::yield_now();
                        for unit in units {
                            if owners[unit].swap(FREE, Ordering::Relaxed) != id {
                                exclusion_violations.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(exclusion_violations.load(Ordering::Relaxed), 0);
        assert_eq!(order_violations.load(Ordering::Relaxed), 0);
        assert!(grants.load(Ordering::Relaxed) >= THREADS * ITERATIONS * 3 / 4);
        assert_eq!(
            lock.header().head(),
            lock.header().tail(),
            "every ticket was released"
        );
    }

    #[test]
    fn cuda_header_mirrors_layout_and_constants() {
        let header = include_str!("../cuda/range_lock.cuh");
        let expected = [
            format!("#define RANGE_LOCK_MAX_CAPACITY {MAX_CAPACITY}ULL"),
            format!("#define RANGE_LOCK_PHASE_BITS {PHASE_BITS}ULL"),
            format!("#define RANGE_LOCK_PHASE_MASK {PHASE_MASK}ULL"),
            format!("#define RANGE_LOCK_PHASE_VACANT {PHASE_VACANT}ULL"),
            format!("#define RANGE_LOCK_PHASE_WAITING {PHASE_WAITING}ULL"),
            format!("#define RANGE_LOCK_PHASE_HELD {PHASE_HELD}ULL"),
            format!("sizeof(RangeSlot) == {}", size_of::<RangeSlot>()),
            format!("alignof(RangeSlot) == {}", align_of::<RangeSlot>()),
            format!(
                "RANGE_LOCK_OFFSETOF(RangeSlot, len) == {}",
                core::mem::offset_of!(RangeSlot, len)
            ),
            format!(
                "sizeof(RangeLockHeader) == {}",
                size_of::<RangeLockHeader>()
            ),
            format!(
                "alignof(RangeLockHeader) == {}",
                align_of::<RangeLockHeader>()
            ),
            format!(
                "RANGE_LOCK_OFFSETOF(RangeLockHeader, head) == {}",
                core::mem::offset_of!(RangeLockHeader, head)
            ),
        ];
        for line in expected {
            assert!(header.contains(&line), "cuda/range_lock.cuh lacks `{line}`");
        }
    }
}
