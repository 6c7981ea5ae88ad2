//! Fixed-capacity cuckoo hash table for GNStor's FTL mapping (GNStor §4.1, "Metadata
//! persistence and recovery": the deEngine maps (VID, VBA) straight to a PPA and "uses the
//! cuckoo hash (Pagh and Rodler, 2004) to find a mapping table slot").
//!
//! Design (bucketized cuckoo hashing, as in MemC3 and libcuckoo):
//! - `u64` keys and values; the caller packs (VID, VBA) into the key (16 + 48 bits) and the
//!   PPA into the value. Key [`EMPTY_KEY`] (`u64::MAX`) marks a free slot and is reserved.
//! - Buckets of [`SLOTS_PER_BUCKET`] = 4 slots, one 64-byte cache line each; a power-of-two
//!   number of buckets.
//! - Two candidate buckets per key: `h1 = mix64(key)`, `h2 = mix64(h1)`, bucket `h & mask`.
//!   A lookup reads at most two cache lines.
//! - Insertion into two full buckets does a random walk: move the new item into a slot,
//!   evict the slot's occupant to its other bucket, and so on, for at most `max_kicks`
//!   evictions (default [`DEFAULT_MAX_KICKS`]). Victim slots are chosen by
//!   `mix64(carried_key ^ kick) % 4`, so the walk is deterministic.
//! - If the walk runs out of kicks, every eviction is undone in reverse, so the table is
//!   exactly as before the call, and the rejected item comes back in [`CuckooError::Full`]:
//!   nothing is ever lost silently. With 4-slot buckets tables fill past 95 % first.
//!
//! The storage is a `#[repr(C)]` array of [`CuckooBucket`]s with layout asserts, so a CUDA
//! twin can read the same bytes; [`CuckooTable::buckets`] exposes them for upload.

use super::mix64;

/// Slots in one bucket: 4 × 16 bytes fill one 64-byte cache line.
pub const SLOTS_PER_BUCKET: usize = 4;

/// The key that marks a free slot; it cannot be stored.
pub const EMPTY_KEY: u64 = u64::MAX;

/// Default bound on evictions per insertion (the classic cuckoo walk limit).
pub const DEFAULT_MAX_KICKS: u32 = 500;

/// Errors from building or filling a [`CuckooTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CuckooError {
    /// capacity {capacity} must be a power of two of at least 4 slots
    #[error("capacity {capacity} must be a power of two of at least {SLOTS_PER_BUCKET} slots")]
    InvalidCapacity {
        /// The requested capacity in slots.
        capacity: usize,
    },
    /// could not allocate {capacity} slots
    #[error("could not allocate {capacity} slots")]
    OutOfMemory {
        /// The requested capacity in slots.
        capacity: usize,
    },
    /// key {0:#x} is reserved to mark free slots
    #[error("key {0:#x} is reserved to mark free slots")]
    ReservedKey(u64),
    /// table full: no free slot for key {key:#x} within {kicks} evictions; table unchanged
    #[error("table full: no free slot for key {key:#x} within {kicks} evictions; table unchanged")]
    Full {
        /// The key that could not be inserted.
        key: u64,
        /// Its value, handed back to the caller.
        value: u64,
        /// The eviction bound that was exhausted.
        kicks: u32,
    },
}

/// One (key, value) slot; free when `key == EMPTY_KEY`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuckooSlot {
    /// The packed key, or [`EMPTY_KEY`].
    pub key: u64,
    /// The mapped value (0 in free slots).
    pub value: u64,
}

/// A cache-line-aligned bucket of [`SLOTS_PER_BUCKET`] slots.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CuckooBucket {
    /// The slots, in no particular order.
    pub slots: [CuckooSlot; SLOTS_PER_BUCKET],
}

const _: () = assert!(size_of::<CuckooSlot>() == 16);
const _: () = assert!(core::mem::offset_of!(CuckooSlot, key) == 0);
const _: () = assert!(core::mem::offset_of!(CuckooSlot, value) == 8);
const _: () = assert!(size_of::<CuckooBucket>() == 64);
const _: () = assert!(align_of::<CuckooBucket>() == 64);
const _: () = assert!(core::mem::offset_of!(CuckooBucket, slots) == 0);

const FREE_SLOT: CuckooSlot = CuckooSlot {
    key: EMPTY_KEY,
    value: 0,
};
const FREE_BUCKET: CuckooBucket = CuckooBucket {
    slots: [FREE_SLOT; SLOTS_PER_BUCKET],
};

/// A fixed-capacity map from `u64` keys to `u64` values with two-choice bucketized cuckoo
/// hashing (see the module documentation for the exact layout and hash functions).
#[derive(Debug, Clone)]
pub struct CuckooTable {
    buckets: Box<[CuckooBucket]>,
    bucket_mask: u64,
    len: usize,
    max_kicks: u32,
}

impl CuckooTable {
    /// An empty table of `capacity` slots with the default eviction bound.
    pub fn new(capacity: usize) -> Result<Self, CuckooError> {
        Self::with_max_kicks(capacity, DEFAULT_MAX_KICKS)
    }

    /// An empty table of `capacity` slots (a power of two, at least [`SLOTS_PER_BUCKET`])
    /// that tries at most `max_kicks` evictions per insertion (0: only free candidate slots).
    pub fn with_max_kicks(capacity: usize, max_kicks: u32) -> Result<Self, CuckooError> {
        if !capacity.is_power_of_two() || capacity < SLOTS_PER_BUCKET {
            return Err(CuckooError::InvalidCapacity { capacity });
        }
        let bucket_count = capacity / SLOTS_PER_BUCKET;
        let mut buckets = Vec::new();
        buckets
            .try_reserve_exact(bucket_count)
            .map_err(|_| CuckooError::OutOfMemory { capacity })?;
        buckets.resize(bucket_count, FREE_BUCKET);
        Ok(Self {
            buckets: buckets.into_boxed_slice(),
            bucket_mask: bucket_count as u64 - 1,
            len: 0,
            max_kicks,
        })
    }

    /// Total slots.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Stored entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bound on evictions per insertion.
    pub fn max_kicks(&self) -> u32 {
        self.max_kicks
    }

    /// The raw bucket array, e.g. to copy into GPU memory (layout in the module docs).
    pub fn buckets(&self) -> &[CuckooBucket] {
        &self.buckets
    }

    /// The value stored under `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.find(key).map(|(b, s)| self.buckets[b].slots[s].value)
    }

    /// Stores `value` under `key`, returning the value it replaced, if any.
    ///
    /// On [`CuckooError::Full`] the table is unchanged and the pair is returned in the error.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<Option<u64>, CuckooError> {
        if key == EMPTY_KEY {
            return Err(CuckooError::ReservedKey(key));
        }
        if let Some(old) = self.update(key, value) {
            return Ok(Some(old));
        }
        let item = CuckooSlot { key, value };
        let (first, second) = self.candidates(key);
        if self.place_in_free_slot(first, item) || self.place_in_free_slot(second, item) {
            return Ok(None);
        }
        self.insert_by_eviction(item, first, second)
    }

    /// Replaces the value of an existing `key`, returning the old value; inserts nothing.
    pub fn update(&mut self, key: u64, value: u64) -> Option<u64> {
        let (b, s) = self.find(key)?;
        Some(std::mem::replace(
            &mut self.buckets[b].slots[s].value,
            value,
        ))
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<u64> {
        let (b, s) = self.find(key)?;
        let slot = std::mem::replace(&mut self.buckets[b].slots[s], FREE_SLOT);
        self.len -= 1;
        Some(slot.value)
    }

    /// The two candidate buckets of `key` (equal for some keys; that is harmless).
    fn candidates(&self, key: u64) -> (usize, usize) {
        let h1 = mix64(key);
        let h2 = mix64(h1);
        // Masked by `bucket_mask < buckets.len()`, so both fit in usize.
        (
            (h1 & self.bucket_mask) as usize,
            (h2 & self.bucket_mask) as usize,
        )
    }

    /// Bucket and slot index of `key`, if stored.
    fn find(&self, key: u64) -> Option<(usize, usize)> {
        if key == EMPTY_KEY {
            return None;
        }
        let (first, second) = self.candidates(key);
        [first, second].into_iter().find_map(|b| {
            self.buckets[b]
                .slots
                .iter()
                .position(|slot| slot.key == key)
                .map(|s| (b, s))
        })
    }

    /// Puts `item` into a free slot of `bucket` if there is one.
    fn place_in_free_slot(&mut self, bucket: usize, item: CuckooSlot) -> bool {
        match self.buckets[bucket]
            .slots
            .iter_mut()
            .find(|slot| slot.key == EMPTY_KEY)
        {
            Some(slot) => {
                *slot = item;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// The random walk for an `item` whose candidate buckets are both full; undoes every
    /// eviction if no free slot turns up within `max_kicks`.
    fn insert_by_eviction(
        &mut self,
        item: CuckooSlot,
        first: usize,
        second: usize,
    ) -> Result<Option<u64>, CuckooError> {
        let mut carried = item;
        // Start from either candidate so walks from different keys spread over both.
        let mut bucket = if mix64(item.key ^ u64::MAX) & 1 == 0 {
            first
        } else {
            second
        };
        let mut path: Vec<(usize, usize)> = Vec::new();
        for kick in 0..self.max_kicks {
            let victim = (mix64(carried.key ^ u64::from(kick)) % SLOTS_PER_BUCKET as u64) as usize;
            std::mem::swap(&mut carried, &mut self.buckets[bucket].slots[victim]);
            path.push((bucket, victim));
            let (a, b) = self.candidates(carried.key);
            bucket = if a == bucket { b } else { a };
            if self.place_in_free_slot(bucket, carried) {
                return Ok(None);
            }
        }
        // Swaps are their own inverses: replaying them backwards restores every slot and
        // leaves the original item in `carried`.
        for &(b, s) in path.iter().rev() {
            std::mem::swap(&mut carried, &mut self.buckets[b].slots[s]);
        }
        debug_assert_eq!(carried, item);
        Err(CuckooError::Full {
            key: item.key,
            value: item.value,
            kicks: self.max_kicks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn capacity_must_be_a_power_of_two_of_at_least_one_bucket() {
        for capacity in [0, 1, 2, 3, 12, 100, usize::MAX] {
            assert_eq!(
                CuckooTable::new(capacity).unwrap_err(),
                CuckooError::InvalidCapacity { capacity }
            );
        }
        assert_eq!(CuckooTable::new(4).unwrap().capacity(), 4);
        assert_eq!(CuckooTable::new(1024).unwrap().capacity(), 1024);
    }

    #[test]
    fn unallocatable_capacity_is_an_error_not_an_abort() {
        let capacity = 1usize << 62;
        assert_eq!(
            CuckooTable::new(capacity).unwrap_err(),
            CuckooError::OutOfMemory { capacity }
        );
    }

    #[test]
    fn reserved_key_is_rejected_and_never_found() {
        let mut table = CuckooTable::new(16).unwrap();
        assert_eq!(
            table.insert(EMPTY_KEY, 1),
            Err(CuckooError::ReservedKey(EMPTY_KEY))
        );
        assert_eq!(table.get(EMPTY_KEY), None);
        assert_eq!(table.update(EMPTY_KEY, 1), None);
        assert_eq!(table.remove(EMPTY_KEY), None);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn insert_get_update_remove_roundtrip() {
        let mut table = CuckooTable::new(16).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.insert(10, 100), Ok(None));
        assert_eq!(table.insert(10, 101), Ok(Some(100)));
        assert_eq!(table.update(10, 102), Some(101));
        assert_eq!(table.update(11, 1), None);
        assert_eq!(table.get(11), None);
        assert_eq!(table.get(10), Some(102));
        assert_eq!(table.len(), 1);
        assert_eq!(table.remove(10), Some(102));
        assert_eq!(table.remove(10), None);
        assert!(table.is_empty());
    }

    /// Inserts random keys until the first `Full`; returns the table, the model and the error.
    fn fill_until_full(
        capacity: usize,
        mut next_key: impl FnMut() -> u64,
    ) -> (CuckooTable, HashMap<u64, u64>, CuckooError) {
        let mut table = CuckooTable::new(capacity).unwrap();
        let mut model = HashMap::new();
        loop {
            let key = next_key();
            let value = key.rotate_left(17);
            match table.insert(key, value) {
                Ok(previous) => assert_eq!(previous, model.insert(key, value)),
                Err(e) => return (table, model, e),
            }
        }
    }

    fn assert_holds_exactly(table: &CuckooTable, model: &HashMap<u64, u64>) {
        assert_eq!(table.len(), model.len());
        for (&key, &value) in model {
            assert_eq!(table.get(key), Some(value), "key {key:#x} lost");
        }
        let stored = table
            .buckets()
            .iter()
            .flat_map(|b| b.slots)
            .filter(|s| s.key != EMPTY_KEY);
        assert_eq!(stored.count(), model.len());
    }

    #[test]
    fn random_keys_fill_past_ninety_percent_before_full() {
        for seed in 0..4 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (table, model, _) = fill_until_full(4096, || rng.random_range(0..EMPTY_KEY));
            let load = model.len() as f64 / table.capacity() as f64;
            assert!(load > 0.90, "seed {seed}: full at load {load}");
            assert_holds_exactly(&table, &model);
        }
    }

    #[test]
    fn sequential_vid_vba_keys_fill_past_ninety_percent_before_full() {
        let mut vba = 0u64;
        let (table, model, _) = fill_until_full(4096, || {
            vba += 1;
            (7 << 48) | vba
        });
        let load = model.len() as f64 / table.capacity() as f64;
        assert!(load > 0.90, "full at load {load}");
        assert_holds_exactly(&table, &model);
    }

    #[test]
    fn full_returns_the_pair_and_leaves_the_table_unchanged() {
        let mut rng = StdRng::seed_from_u64(99);
        let (mut table, model, error) = fill_until_full(256, || rng.random_range(0..EMPTY_KEY));
        let CuckooError::Full { key, value, kicks } = error else {
            panic!("{error:?}")
        };
        assert_eq!((value, kicks), (key.rotate_left(17), DEFAULT_MAX_KICKS));
        let before = table.clone();
        // Further failing inserts must not disturb a single slot either.
        for _ in 0..50 {
            let key = rng.random_range(0..EMPTY_KEY);
            if let Err(CuckooError::Full { .. }) = table.insert(key, 1) {
                assert_eq!(table.buckets(), before.buckets());
            } else {
                table = before.clone();
            }
        }
        assert_eq!(table.get(key), None);
        assert_holds_exactly(&table, &model);
    }

    #[test]
    fn zero_kicks_only_uses_free_candidate_slots() {
        let mut table = CuckooTable::with_max_kicks(64, 0).unwrap();
        let mut stored = 0;
        for key in 0..64 {
            match table.insert(key, key) {
                Ok(_) => stored += 1,
                Err(e) => assert_eq!(
                    e,
                    CuckooError::Full {
                        key,
                        value: key,
                        kicks: 0
                    }
                ),
            }
        }
        assert_eq!(table.len(), stored);
        assert!(
            stored < 64,
            "two-choice placement without eviction cannot fill every slot"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Update(u64, u64),
        Remove(u64),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct keys on a small table, so updates, removes and Full all happen.
        let key = 0u64..48;
        prop_oneof![
            4 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            1 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Update(k, v)),
            2 => key.clone().prop_map(Op::Remove),
            1 => key.prop_map(Op::Get),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_hashmap_that_may_refuse_inserts(
            max_kicks in 0u32..40,
            ops in proptest::collection::vec(op(), 0..300),
        ) {
            let mut table = CuckooTable::with_max_kicks(32, max_kicks).unwrap();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => match table.insert(k, v) {
                        Ok(previous) => prop_assert_eq!(previous, model.insert(k, v)),
                        Err(e) => {
                            let full = CuckooError::Full { key: k, value: v, kicks: max_kicks };
                            prop_assert_eq!(e, full);
                            prop_assert!(!model.contains_key(&k));
                        }
                    },
                    Op::Update(k, v) => {
                        let expected = model.get_mut(&k).map(|slot| std::mem::replace(slot, v));
                        prop_assert_eq!(table.update(k, v), expected);
                    }
                    Op::Remove(k) => prop_assert_eq!(table.remove(k), model.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(table.get(k), model.get(&k).copied()),
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(table.get(*k), Some(*v));
            }
        }
    }
}
