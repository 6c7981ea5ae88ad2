//! Bounded lock-free task-exchange queues for PeakFS's RingSched (PeakFS §III-C, "Lock-free
//! task exchange queue", Fig. 4).
//!
//! RingSched moves every request between threads through three kinds of queue, each picked
//! for the producer/consumer pattern it serves:
//! - [`spsc`]: one queue per ordered pair of worker threads (request forwarding to the thread
//!   that owns a resource slice). Backed by [`rtrb`].
//! - [`mpmc`]: the single queue through which workers hand memcpy jobs to any memcpy thread.
//!   Backed by [`crossbeam_queue::ArrayQueue`].
//! - [`mpsc`]: one queue per worker for memcpy threads to send responses back. There is no
//!   well-kept bounded MPSC crate, so this is an `ArrayQueue` (an MPMC queue) used with one
//!   consumer; the single consumer is enforced by the type system: [`MpscConsumer`] is not
//!   `Clone`, while [`MpscProducer`] is.
//!
//! All three share one interface: the [`Producer`] and [`Consumer`] traits, with non-blocking
//! `push`/`pop` and blocking variants that spin with [`Backoff`] and give up when every handle
//! on the other side has been dropped (or, for `pop`, at an optional deadline).
//!
//! Model checking: the lock-free protocols live in `rtrb` and `crossbeam-queue`, both of which
//! are model-checked with loom upstream; this module only adds handle counting around them
//! (plain atomic counters), so it carries no loom test of its own.
//!
//! False sharing: both crates already keep head and tail on separate cache lines. The only
//! state added here, the live-handle counters of the `ArrayQueue`-backed queues, is
//! [`CachePadded`] so that clone/drop traffic never touches the queue's hot lines.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::{Backoff, CachePadded};

/// Errors from constructing a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// queue capacity must be at least 1
    #[error("queue capacity must be at least 1")]
    ZeroCapacity,
    /// queue capacity {capacity} does not fit in memory for this element type
    #[error("queue capacity {capacity} does not fit in memory for this element type")]
    TooLarge {
        /// The requested capacity in elements.
        capacity: usize,
    },
}

/// A non-blocking push found the queue full; the rejected value is handed back.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("queue is full")]
pub struct Full<T>(pub T);

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

/// A blocking push gave up because every consumer is gone; the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every consumer of the queue has been dropped")]
pub struct Disconnected<T>(pub T);

impl<T> fmt::Debug for Disconnected<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Disconnected(..)")
    }
}

/// Why a blocking pop returned without a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PopWaitError {
    /// the deadline passed while the queue was empty
    #[error("the deadline passed while the queue was empty")]
    TimedOut,
    /// the queue is empty and every producer has been dropped
    #[error("the queue is empty and every producer has been dropped")]
    Disconnected,
}

/// The sending side of a bounded queue.
pub trait Producer<T> {
    /// Appends `value`, or hands it back in [`Full`] if the queue has no free slot.
    fn push(&mut self, value: T) -> Result<(), Full<T>>;

    /// The most elements the queue holds at once.
    fn capacity(&self) -> usize;

    /// True once every consumer handle has been dropped: nothing pushed will be read.
    fn is_abandoned(&self) -> bool;

    /// Pushes `value`, spinning with exponential backoff (then yielding) while the queue is
    /// full. Hands the value back if every consumer is gone.
    fn push_blocking(&mut self, value: T) -> Result<(), Disconnected<T>> {
        let backoff = Backoff::new();
        let mut value = value;
        loop {
            match self.push(value) {
                Ok(()) => return Ok(()),
                Err(Full(rejected)) => value = rejected,
            }
            if self.is_abandoned() {
                return Err(Disconnected(value));
            }
            backoff.snooze();
        }
    }
}

/// The receiving side of a bounded queue.
pub trait Consumer<T> {
    /// Removes the oldest element, or returns `None` if the queue is empty.
    fn pop(&mut self) -> Option<T>;

    /// Elements currently in the queue (a snapshot: producers may add more concurrently).
    fn len(&self) -> usize;

    /// True if the queue held no element at the moment of the call.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most elements the queue holds at once.
    fn capacity(&self) -> usize;

    /// True once every producer handle has been dropped: no element will be added.
    fn is_abandoned(&self) -> bool;

    /// Pops an element, spinning with exponential backoff (then yielding) while the queue is
    /// empty, until `deadline` (if any) passes or every producer is gone and the queue is
    /// drained.
    fn pop_blocking(&mut self, deadline: Option<Instant>) -> Result<T, PopWaitError> {
        let backoff = Backoff::new();
        loop {
            if let Some(value) = self.pop() {
                return Ok(value);
            }
            if self.is_abandoned() {
                // A producer may have pushed between the pop above and its own drop; the
                // drop's release ordering makes that element visible to this second pop.
                return self.pop().ok_or(PopWaitError::Disconnected);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(PopWaitError::TimedOut);
            }
            backoff.snooze();
        }
    }
}

/// Rejects capacities that are zero or whose backing array would exceed `isize::MAX` bytes
/// (the backing crates panic on both).
fn check_capacity<T>(capacity: usize) -> Result<(), RingError> {
    if capacity == 0 {
        return Err(RingError::ZeroCapacity);
    }
    // Both crates store at most one element plus one `usize` stamp per slot; the stamp also
    // keeps the bound meaningful for zero-sized `T`.
    let slot_bytes = size_of::<T>() + size_of::<usize>();
    match capacity.checked_mul(slot_bytes) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(RingError::TooLarge { capacity }),
    }
}

// ---------------------------------------------------------------------------------------------
// SPSC: rtrb
// ---------------------------------------------------------------------------------------------

/// Creates a single-producer single-consumer queue holding up to `capacity` elements.
pub fn spsc<T>(capacity: usize) -> Result<(SpscProducer<T>, SpscConsumer<T>), RingError> {
    check_capacity::<T>(capacity)?;
    let (producer, consumer) = rtrb::RingBuffer::new(capacity);
    Ok((SpscProducer(producer), SpscConsumer(consumer)))
}

/// The only producer of an [`spsc`] queue (neither `Clone` nor shareable across threads).
pub struct SpscProducer<T>(rtrb::Producer<T>);

/// The only consumer of an [`spsc`] queue (neither `Clone` nor shareable across threads).
pub struct SpscConsumer<T>(rtrb::Consumer<T>);

impl<T> Producer<T> for SpscProducer<T> {
    fn push(&mut self, value: T) -> Result<(), Full<T>> {
        self.0
            .push(value)
            .map_err(|rtrb::PushError::Full(v)| Full(v))
    }

    fn capacity(&self) -> usize {
        self.0.buffer().capacity()
    }

    fn is_abandoned(&self) -> bool {
        self.0.is_abandoned()
    }
}

impl<T> Consumer<T> for SpscConsumer<T> {
    fn pop(&mut self) -> Option<T> {
        self.0.pop().ok()
    }

    fn len(&self) -> usize {
        self.0.slots()
    }

    fn capacity(&self) -> usize {
        self.0.buffer().capacity()
    }

    fn is_abandoned(&self) -> bool {
        self.0.is_abandoned()
    }
}

impl<T> SpscProducer<T> {
    /// Moves up to `max` items out of `items` into the queue while it has room and publishes
    /// them with ONE index update; returns how many moved (0 when full). Pushing item by item
    /// updates the shared tail index once per item, and the consumer polling that index pulls
    /// its cache line across cores every time; a batch pays that transfer once.
    pub fn push_batch(&mut self, items: &mut impl Iterator<Item = T>, max: usize) -> usize {
        let room = self.0.slots().min(max);
        if room == 0 {
            return 0;
        }
        match self.0.write_chunk_uninit(room) {
            Ok(chunk) => chunk.fill_from_iter(items),
            Err(_) => 0,
        }
    }
}

impl<T> SpscConsumer<T> {
    /// Pops up to `max` items in queue order into `sink` and frees their slots with ONE index
    /// update; returns how many were popped (0 when empty). See [`SpscProducer::push_batch`].
    pub fn pop_batch(&mut self, max: usize, mut sink: impl FnMut(T)) -> usize {
        let ready = self.0.slots().min(max);
        if ready == 0 {
            return 0;
        }
        let Ok(chunk) = self.0.read_chunk(ready) else {
            return 0;
        };
        let mut popped = 0;
        for item in chunk {
            sink(item);
            popped += 1;
        }
        popped
    }
}

impl<T> fmt::Debug for SpscProducer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpscProducer")
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<T> fmt::Debug for SpscConsumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpscConsumer")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// MPSC and MPMC: crossbeam ArrayQueue plus live-handle counts
// ---------------------------------------------------------------------------------------------

/// The queue and the number of live handles on each side.
struct Shared<T> {
    queue: ArrayQueue<T>,
    producers: CachePadded<AtomicUsize>,
    consumers: CachePadded<AtomicUsize>,
}

/// Which side of the queue a [`Handle`] is counted on.
#[derive(Debug, Clone, Copy)]
enum Side {
    Producer,
    Consumer,
}

/// One counted reference to a [`Shared`] queue; cloning and dropping keep the count of its
/// side exact, which is what `is_abandoned` reads.
struct Handle<T> {
    shared: Arc<Shared<T>>,
    side: Side,
}

impl<T> Handle<T> {
    fn pair(capacity: usize) -> Result<(Self, Self), RingError> {
        check_capacity::<T>(capacity)?;
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity),
            producers: CachePadded::new(AtomicUsize::new(1)),
            consumers: CachePadded::new(AtomicUsize::new(1)),
        });
        let producer = Handle {
            shared: Arc::clone(&shared),
            side: Side::Producer,
        };
        Ok((
            producer,
            Handle {
                shared,
                side: Side::Consumer,
            },
        ))
    }

    fn count(&self, side: Side) -> &AtomicUsize {
        match side {
            Side::Producer => &self.shared.producers,
            Side::Consumer => &self.shared.consumers,
        }
    }

    /// True once no handle of the opposite side is alive.
    fn peer_gone(&self) -> bool {
        let peer = match self.side {
            Side::Producer => Side::Consumer,
            Side::Consumer => Side::Producer,
        };
        // Acquire pairs with the Release decrement in `drop`, so everything the last peer
        // pushed is visible once its departure is.
        self.count(peer).load(Ordering::Acquire) == 0
    }

    fn push(&self, value: T) -> Result<(), Full<T>> {
        self.shared.queue.push(value).map_err(Full)
    }

    fn pop(&self) -> Option<T> {
        self.shared.queue.pop()
    }

    fn len(&self) -> usize {
        self.shared.queue.len()
    }

    fn capacity(&self) -> usize {
        self.shared.queue.capacity()
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        // Relaxed suffices: the clone happens-after the handle it copies, which is alive.
        self.count(self.side).fetch_add(1, Ordering::Relaxed);
        Handle {
            shared: Arc::clone(&self.shared),
            side: self.side,
        }
    }
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        self.count(self.side).fetch_sub(1, Ordering::Release);
    }
}

impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("side", &self.side)
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .field("peer_gone", &self.peer_gone())
            .finish()
    }
}

/// Creates a multi-producer single-consumer queue holding up to `capacity` elements.
///
/// It is an MPMC `ArrayQueue` with one consumer: [`MpscProducer`] is `Clone`,
/// [`MpscConsumer`] is not.
pub fn mpsc<T>(capacity: usize) -> Result<(MpscProducer<T>, MpscConsumer<T>), RingError> {
    let (producer, consumer) = Handle::pair(capacity)?;
    Ok((MpscProducer(producer), MpscConsumer(consumer)))
}

/// Creates a multi-producer multi-consumer queue holding up to `capacity` elements.
pub fn mpmc<T>(capacity: usize) -> Result<(MpmcProducer<T>, MpmcConsumer<T>), RingError> {
    let (producer, consumer) = Handle::pair(capacity)?;
    Ok((MpmcProducer(producer), MpmcConsumer(consumer)))
}

/// A producer of an [`mpsc`] queue; clone it for each producing thread.
///
/// ```
/// use common::ring::{Consumer, Producer, mpsc};
/// let (mut first, mut consumer) = mpsc::<u32>(4).unwrap();
/// let mut second = first.clone();
/// first.push(1).unwrap();
/// second.push(2).unwrap();
/// assert_eq!((consumer.pop(), consumer.pop()), (Some(1), Some(2)));
/// ```
#[derive(Debug)]
pub struct MpscProducer<T>(Handle<T>);

/// The only consumer of an [`mpsc`] queue (deliberately not `Clone`):
///
/// ```compile_fail
/// use common::ring::mpsc;
/// let (_producer, consumer) = mpsc::<u32>(4).unwrap();
/// let _second = consumer.clone(); // error: a second consumer would break the MPSC contract
/// ```
#[derive(Debug)]
pub struct MpscConsumer<T>(Handle<T>);

/// A producer of an [`mpmc`] queue; clone it for each producing thread.
#[derive(Debug)]
pub struct MpmcProducer<T>(Handle<T>);

/// A consumer of an [`mpmc`] queue; clone it for each consuming thread.
#[derive(Debug)]
pub struct MpmcConsumer<T>(Handle<T>);

impl<T> Clone for MpscProducer<T> {
    fn clone(&self) -> Self {
        MpscProducer(self.0.clone())
    }
}

impl<T> Clone for MpmcProducer<T> {
    fn clone(&self) -> Self {
        MpmcProducer(self.0.clone())
    }
}

impl<T> Clone for MpmcConsumer<T> {
    fn clone(&self) -> Self {
        MpmcConsumer(self.0.clone())
    }
}

/// Implements [`Producer`] for a newtype over [`Handle`].
macro_rules! impl_producer {
    ($ty:ident) => {
        impl<T> Producer<T> for $ty<T> {
            fn push(&mut self, value: T) -> Result<(), Full<T>> {
                self.0.push(value)
            }

            fn capacity(&self) -> usize {
                self.0.capacity()
            }

            fn is_abandoned(&self) -> bool {
                self.0.peer_gone()
            }
        }
    };
}

/// Implements [`Consumer`] for a newtype over [`Handle`].
macro_rules! impl_consumer {
    ($ty:ident) => {
        impl<T> Consumer<T> for $ty<T> {
            fn pop(&mut self) -> Option<T> {
                self.0.pop()
            }

            fn len(&self) -> usize {
                self.0.len()
            }

            fn capacity(&self) -> usize {
                self.0.capacity()
            }

            fn is_abandoned(&self) -> bool {
                self.0.peer_gone()
            }
        }
    };
}

impl_producer!(MpscProducer);
impl_producer!(MpmcProducer);
impl_consumer!(MpscConsumer);
impl_consumer!(MpmcConsumer);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashSet, VecDeque};
    use std::thread;
    use std::time::Duration;

    proptest! {
        /// Batched pushes and pops, in any sizes and interleaving, deliver every item once and
        /// in order, never exceed the capacity, and report exactly what they moved.
        #[test]
        fn spsc_batches_keep_fifo_order_and_count_exactly(
            capacity in 1usize..40,
            steps in proptest::collection::vec((any::<bool>(), 0usize..50), 1..60),
        ) {
            let (mut tx, mut rx) = spsc::<u32>(capacity).unwrap();
            let mut next = 0u32;
            let mut want = VecDeque::new();
            for (push, n) in steps {
                if push {
                    let mut items = next..next + n as u32;
                    let room = capacity - want.len();
                    let moved = tx.push_batch(&mut items, n);
                    prop_assert_eq!(moved, n.min(room));
                    want.extend(next..next + moved as u32);
                    next += moved as u32;
                } else {
                    let mut got = Vec::new();
                    let popped = rx.pop_batch(n, |v| got.push(v));
                    prop_assert_eq!(popped, got.len());
                    prop_assert_eq!(popped, n.min(want.len()));
                    let expected: Vec<u32> = want.drain(..popped).collect();
                    prop_assert_eq!(got, expected);
                }
                prop_assert_eq!(rx.len(), want.len());
            }
        }
    }

    /// The three queue kinds, as a pair of trait objects, for tests that hold for all of them.
    type Pair = (Box<dyn Producer<u32> + Send>, Box<dyn Consumer<u32> + Send>);

    fn all_kinds(capacity: usize) -> Vec<(&'static str, Pair)> {
        let (sp, sc) = spsc(capacity).unwrap();
        let (mp, mc) = mpsc(capacity).unwrap();
        let (xp, xc) = mpmc(capacity).unwrap();
        vec![
            ("spsc", (Box::new(sp), Box::new(sc))),
            ("mpsc", (Box::new(mp), Box::new(mc))),
            ("mpmc", (Box::new(xp), Box::new(xc))),
        ]
    }

    #[test]
    fn zero_capacity_is_rejected_by_every_kind() {
        assert_eq!(spsc::<u8>(0).unwrap_err(), RingError::ZeroCapacity);
        assert_eq!(mpsc::<u8>(0).unwrap_err(), RingError::ZeroCapacity);
        assert_eq!(mpmc::<u8>(0).unwrap_err(), RingError::ZeroCapacity);
    }

    #[test]
    fn capacity_beyond_address_space_is_rejected_without_panicking() {
        let huge = usize::MAX / 4;
        assert_eq!(
            spsc::<u64>(huge).unwrap_err(),
            RingError::TooLarge { capacity: huge }
        );
        assert_eq!(
            mpsc::<u64>(huge).unwrap_err(),
            RingError::TooLarge { capacity: huge }
        );
        assert_eq!(
            mpmc::<u64>(huge).unwrap_err(),
            RingError::TooLarge { capacity: huge }
        );
    }

    #[test]
    fn push_beyond_capacity_hands_value_back_and_fifo_order_holds() {
        for (kind, (mut p, mut c)) in all_kinds(3) {
            assert_eq!(p.capacity(), 3, "{kind}");
            assert_eq!(c.capacity(), 3, "{kind}");
            for v in 0..3 {
                p.push(v).unwrap();
            }
            assert_eq!(p.push(99), Err(Full(99)), "{kind}");
            assert_eq!(c.len(), 3, "{kind}");
            assert_eq!(
                (c.pop(), c.pop(), c.pop(), c.pop()),
                (Some(0), Some(1), Some(2), None)
            );
            assert!(c.is_empty(), "{kind}");
        }
    }

    #[test]
    fn pop_blocking_times_out_on_empty_queue_with_live_producer() {
        for (kind, (_p, mut c)) in all_kinds(4) {
            let deadline = Instant::now() + Duration::from_millis(20);
            assert_eq!(
                c.pop_blocking(Some(deadline)),
                Err(PopWaitError::TimedOut),
                "{kind}"
            );
            assert!(Instant::now() >= deadline, "{kind}");
        }
    }

    #[test]
    fn pop_blocking_drains_then_reports_disconnection_after_producers_drop() {
        for (kind, (mut p, mut c)) in all_kinds(4) {
            p.push(7).unwrap();
            assert!(!c.is_abandoned(), "{kind}");
            drop(p);
            assert!(c.is_abandoned(), "{kind}");
            assert_eq!(c.pop_blocking(None), Ok(7), "{kind}");
            assert_eq!(
                c.pop_blocking(None),
                Err(PopWaitError::Disconnected),
                "{kind}"
            );
        }
    }

    #[test]
    fn push_blocking_returns_value_when_consumers_are_gone() {
        for (kind, (mut p, c)) in all_kinds(1) {
            p.push(1).unwrap();
            drop(c);
            assert!(p.is_abandoned(), "{kind}");
            assert_eq!(p.push_blocking(2), Err(Disconnected(2)), "{kind}");
        }
    }

    #[test]
    fn cloned_mpmc_handles_keep_their_side_alive_until_the_last_drops() {
        let (p, c) = mpmc::<u8>(2).unwrap();
        let p2 = p.clone();
        let c2 = c.clone();
        drop(p);
        assert!(!c.is_abandoned());
        drop(c);
        assert!(!p2.is_abandoned());
        drop(p2);
        assert!(c2.is_abandoned());
    }

    #[test]
    fn push_blocking_waits_for_consumer_to_free_a_slot() {
        let (mut p, mut c) = spsc::<u32>(1).unwrap();
        p.push(0).unwrap();
        let consumer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            (c.pop_blocking(None), c.pop_blocking(None))
        });
        p.push_blocking(1).unwrap();
        assert_eq!(consumer.join().unwrap(), (Ok(0), Ok(1)));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Pop,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![any::<u32>().prop_map(Op::Push), Just(Op::Pop)],
            0..200,
        )
    }

    proptest! {
        #[test]
        fn single_thread_interleaving_matches_bounded_vecdeque(
            capacity in 1usize..8,
            ops in ops(),
        ) {
            for (kind, (mut p, mut c)) in all_kinds(capacity) {
                let mut model = VecDeque::new();
                for op in &ops {
                    match *op {
                        Op::Push(v) => {
                            let expected = if model.len() < capacity {
                                model.push_back(v);
                                Ok(())
                            } else {
                                Err(Full(v))
                            };
                            prop_assert_eq!(p.push(v), expected, "{}", kind);
                        }
                        Op::Pop => prop_assert_eq!(c.pop(), model.pop_front(), "{}", kind),
                    }
                    prop_assert_eq!(c.len(), model.len(), "{}", kind);
                }
            }
        }
    }

    const STRESS_ITEMS: u32 = 20_000;

    #[test]
    fn spsc_stress_preserves_order_across_threads() {
        let (mut p, mut c) = spsc::<u32>(64).unwrap();
        let producer = thread::spawn(move || {
            for v in 0..STRESS_ITEMS {
                p.push_blocking(v).unwrap();
            }
        });
        for expected in 0..STRESS_ITEMS {
            assert_eq!(c.pop_blocking(None), Ok(expected));
        }
        producer.join().unwrap();
        assert_eq!(c.pop_blocking(None), Err(PopWaitError::Disconnected));
    }

    /// Encodes (producer, sequence) so the consumer can check per-producer order.
    fn tag(producer: u32, seq: u32) -> u32 {
        producer << 24 | seq
    }

    #[test]
    fn mpsc_stress_preserves_each_producers_order() {
        const PRODUCERS: u32 = 4;
        let (p, mut c) = mpsc::<u32>(64).unwrap();
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|id| {
                let mut p = p.clone();
                thread::spawn(move || {
                    for seq in 0..STRESS_ITEMS / PRODUCERS {
                        p.push_blocking(tag(id, seq)).unwrap();
                    }
                })
            })
            .collect();
        drop(p);
        let mut next_seq = [0u32; PRODUCERS as usize];
        while let Ok(v) = c.pop_blocking(None) {
            let (id, seq) = ((v >> 24) as usize, v & 0xFF_FFFF);
            assert_eq!(seq, next_seq[id], "producer {id} out of order");
            next_seq[id] += 1;
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(next_seq, [STRESS_ITEMS / PRODUCERS; PRODUCERS as usize]);
    }

    #[test]
    fn mpmc_stress_delivers_every_item_exactly_once() {
        const PRODUCERS: u32 = 4;
        const CONSUMERS: usize = 4;
        let (p, c) = mpmc::<u32>(64).unwrap();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|id| {
                let mut p = p.clone();
                thread::spawn(move || {
                    for seq in 0..STRESS_ITEMS / PRODUCERS {
                        p.push_blocking(tag(id, seq)).unwrap();
                    }
                })
            })
            .collect();
        drop(p);
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let mut c = c.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Ok(v) = c.pop_blocking(None) {
                        got.push(v);
                    }
                    got
                })
            })
            .collect();
        drop(c);
        for h in producers {
            h.join().unwrap();
        }
        let mut seen = HashSet::new();
        for h in consumers {
            for v in h.join().unwrap() {
                assert!(seen.insert(v), "item {v:#x} delivered twice");
            }
        }
        let expected: HashSet<u32> = (0..PRODUCERS)
            .flat_map(|id| (0..STRESS_ITEMS / PRODUCERS).map(move |seq| tag(id, seq)))
            .collect();
        assert_eq!(seen, expected);
    }
}
