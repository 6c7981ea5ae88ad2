//! Linear-probing tables of a power-of-two size, at most half full, that double without a
//! stop: cART's jump table and stem index ([`super::cart`]).
//!
//! Rehashing a whole table when it doubles stalls the request whose insert made it grow, and
//! the stall grows with the table (12 ms at 10 M names for cART's tables together, on the
//! 2-core box). A [`Growing`] table instead keeps the old table beside the new one after it
//! doubles: lookups look in the new one, then in the old; inserts and replacements go to the
//! new one; and every insert moves the next [`MOVE_STEP`] slots of the old table over. The
//! old table only loses entries, and each slot it loses becomes [`Slot::MOVED`], past which
//! probes go on, so its probe runs stay whole until it is dropped.
//!
//! The move is done long before the table can double again: it starts at a quarter full of
//! the new size and doubles next at half full, at least a quarter of the new size's inserts
//! later, while its old half is moved in a sixteenth of that.

/// Old slots moved into the new table per insert while a table moves.
pub(super) const MOVE_STEP: usize = 16;

/// A table entry word.
pub(super) trait Slot: Copy + Eq {
    /// No entry: a probe stops here.
    const EMPTY: Self;
    /// A slot of the old table whose entry moved or was removed: a probe goes on past it.
    /// Never an entry.
    const MOVED: Self;
}

/// The jump table's entries: a stem id + 1 in the top bits, so every entry is at least 2^42.
impl Slot for u64 {
    const EMPTY: u64 = 0;
    const MOVED: u64 = 1;
}

/// The stem index's entries: a stem id + 1, below 2^22.
impl Slot for u32 {
    const EMPTY: u32 = 0;
    const MOVED: u32 = u32::MAX;
}

/// Slot `h` of a non-empty table of `2^(64 - shift)` slots (top bits of the hash).
#[inline(always)]
pub(super) fn home(h: u64, shift: u32) -> usize {
    (h >> (shift & 63)) as usize
}

/// Puts `entry` into the first empty slot from `home` on, in a linear-probing table of a
/// power-of-two size that has an empty slot.
fn probe_place<T: Copy + PartialEq>(slots: &mut [T], entry: T, home: usize, empty: T) {
    let mask = slots.len() - 1;
    let mut i = home;
    while slots[i] != empty {
        i = (i + 1) & mask;
    }
    slots[i] = entry;
}

/// Empties slot `i` of a linear-probing table of a power-of-two size by backward shifting:
/// each later entry of the probe run whose home does not lie between the hole and itself
/// moves into the hole. `home_of` gives an entry's home slot, `None` for `empty`.
fn probe_delete<T: Copy>(
    slots: &mut [T],
    mut i: usize,
    empty: T,
    home_of: impl Fn(T) -> Option<usize>,
) {
    let mask = slots.len() - 1;
    let mut j = i;
    loop {
        slots[i] = empty;
        loop {
            j = (j + 1) & mask;
            let Some(h) = home_of(slots[j]) else {
                return;
            };
            let stays = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !stays {
                break;
            }
        }
        slots[i] = slots[j];
        i = j;
    }
}

/// Where [`Growing::locate`] found an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// In slot `i` of the new table.
    New(usize),
    /// In slot `i` of the old table.
    Old(usize),
}

/// A linear-probing table that doubles without a stop (see the module's doc). Entries are
/// found by a hash and a predicate; moving them needs each entry's hash (`hash_of`).
#[derive(Debug)]
pub(super) struct Growing<T> {
    slots: Vec<T>,
    shift: u32,
    /// Entries in `slots`.
    used: usize,
    /// The table being moved into `slots` (empty when none is).
    old: Vec<T>,
    old_shift: u32,
    /// Entries still in `old`.
    old_used: usize,
    /// The old table's slots before this one have been moved.
    moved: usize,
}

impl<T: Slot> Growing<T> {
    pub(super) fn new() -> Self {
        Self {
            slots: Vec::new(),
            shift: 64,
            used: 0,
            old: Vec::new(),
            old_shift: 64,
            old_used: 0,
            moved: 0,
        }
    }

    /// Entries held, in both tables.
    pub(super) fn len(&self) -> usize {
        self.used + self.old_used
    }

    /// The new table's slots and shift, for a lookup's fast path of its own; an entry not
    /// found there may still be in the old table ([`Self::find`] looks in both).
    #[inline(always)]
    pub(super) fn table(&self) -> (&[T], u32) {
        (&self.slots, self.shift)
    }

    /// Whether the table is moving (the old table still holds entries).
    #[cfg(test)]
    pub(super) fn moving(&self) -> bool {
        !self.old.is_empty()
    }

    /// The first entry from slot `home(h)` on for which `is` holds, before an empty slot.
    #[inline(always)]
    fn probe(slots: &[T], shift: u32, h: u64, is: &impl Fn(T) -> bool) -> Option<usize> {
        if slots.is_empty() {
            return None;
        }
        let mask = slots.len() - 1;
        let mut i = home(h, shift);
        loop {
            let e = slots[i];
            if e == T::EMPTY {
                return None;
            }
            if e != T::MOVED && is(e) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The entry with hash `h` for which `is` holds.
    #[inline(always)]
    pub(super) fn find(&self, h: u64, is: impl Fn(T) -> bool) -> Option<T> {
        if let Some(i) = Self::probe(&self.slots, self.shift, h, &is) {
            return Some(self.slots[i]);
        }
        if self.old_used == 0 {
            return None;
        }
        Self::probe(&self.old, self.old_shift, h, &is).map(|i| self.old[i])
    }

    /// Where the entry with hash `h` for which `is` holds is.
    fn locate(&self, h: u64, is: impl Fn(T) -> bool) -> Option<Found> {
        if let Some(i) = Self::probe(&self.slots, self.shift, h, &is) {
            return Some(Found::New(i));
        }
        if self.old_used == 0 {
            return None;
        }
        Self::probe(&self.old, self.old_shift, h, &is).map(Found::Old)
    }

    /// Puts `entry` (hash `h`, for which `is` holds) into the table, in place of the entry for
    /// which `is` holds if there is one; returns the entry it replaced.
    pub(super) fn put(
        &mut self,
        h: u64,
        entry: T,
        is: impl Fn(T) -> bool,
        hash_of: impl Fn(T) -> u64,
    ) -> Option<T> {
        let replaced = match self.locate(h, &is) {
            None => {
                self.insert(h, entry, hash_of);
                return None;
            }
            Some(Found::New(i)) => std::mem::replace(&mut self.slots[i], entry),
            Some(Found::Old(i)) => {
                // Moves over with its new value.
                let old = std::mem::replace(&mut self.old[i], T::MOVED);
                self.old_used -= 1;
                self.place(h, entry);
                old
            }
        };
        self.step(MOVE_STEP, &hash_of);
        Some(replaced)
    }

    /// Puts `entry` (hash `h`), known to be in neither table, into the table without looking
    /// for it. Grows the table first if the entry would fill it more than half, and moves the
    /// next old slots over after.
    pub(super) fn insert(&mut self, h: u64, entry: T, hash_of: impl Fn(T) -> u64) {
        if 2 * (self.len() + 1) > self.slots.len() {
            self.grow(&hash_of);
        }
        self.place(h, entry);
        self.step(MOVE_STEP, &hash_of);
    }

    /// Removes the entry with hash `h` for which `is` holds; returns it.
    pub(super) fn remove(
        &mut self,
        h: u64,
        is: impl Fn(T) -> bool,
        hash_of: impl Fn(T) -> u64,
    ) -> Option<T> {
        match self.locate(h, is)? {
            Found::New(i) => {
                let e = self.slots[i];
                self.used -= 1;
                let shift = self.shift;
                probe_delete(&mut self.slots, i, T::EMPTY, |e| {
                    (e != T::EMPTY).then(|| home(hash_of(e), shift))
                });
                Some(e)
            }
            Found::Old(i) => {
                self.old_used -= 1;
                let e = std::mem::replace(&mut self.old[i], T::MOVED);
                if self.old_used == 0 {
                    self.drop_old();
                }
                Some(e)
            }
        }
    }

    /// Every entry, of both tables, in no particular order.
    #[cfg(test)]
    pub(super) fn entries(&self) -> impl Iterator<Item = T> + '_ {
        self.slots
            .iter()
            .chain(&self.old)
            .copied()
            .filter(|&e| e != T::EMPTY && e != T::MOVED)
    }

    /// Heap bytes held, both tables.
    pub(super) fn bytes(&self) -> usize {
        (self.slots.capacity() + self.old.capacity()) * size_of::<T>()
    }

    /// Heap bytes of the new table alone: what the table holds once moved.
    pub(super) fn settled_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<T>()
    }

    /// Puts an entry known to be in neither table into the new one.
    fn place(&mut self, h: u64, entry: T) {
        probe_place(&mut self.slots, entry, home(h, self.shift), T::EMPTY);
        self.used += 1;
    }

    /// Doubles the new table; the entries stay where they are, the old table they are in
    /// becomes the one being moved. A move still under way is finished first (it never is:
    /// see the module's doc).
    fn grow(&mut self, hash_of: &impl Fn(T) -> u64) {
        self.step(usize::MAX, hash_of);
        let n = (2 * self.slots.len()).max(64);
        self.old = std::mem::replace(&mut self.slots, vec![T::EMPTY; n]);
        self.old_shift = self.shift;
        self.shift = 64 - n.trailing_zeros();
        self.old_used = std::mem::take(&mut self.used);
        self.moved = 0;
        if self.old_used == 0 {
            self.drop_old();
        }
    }

    /// Moves the next `count` slots of the old table into the new one.
    fn step(&mut self, count: usize, hash_of: &impl Fn(T) -> u64) {
        if self.old.is_empty() {
            return;
        }
        let end = self.moved.saturating_add(count).min(self.old.len());
        for i in self.moved..end {
            let e = self.old[i];
            if e != T::EMPTY && e != T::MOVED {
                self.old[i] = T::MOVED;
                self.old_used -= 1;
                self.place(hash_of(e), e);
            }
        }
        self.moved = end;
        if self.old_used == 0 {
            self.drop_old();
        }
    }

    fn drop_old(&mut self) {
        self.old = Vec::new();
        self.old_used = 0;
        self.moved = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    // Test entries: a key of at least 1 in the high half, a value in the low (never 0 or 1).
    fn key_hash(key: u64) -> u64 {
        // Few distinct hashes: long probe runs that wrap around the table's end.
        common::hash::mix64(key % 7)
    }

    fn entry(key: u64, value: u32) -> u64 {
        key << 32 | u64::from(value)
    }

    fn hash_of(e: u64) -> u64 {
        key_hash(e >> 32)
    }

    fn put(t: &mut Growing<u64>, key: u64, value: u32) -> Option<u32> {
        t.put(
            key_hash(key),
            entry(key, value),
            |e| e >> 32 == key,
            hash_of,
        )
        .map(|e| e as u32)
    }

    fn get(t: &Growing<u64>, key: u64) -> Option<u32> {
        t.find(key_hash(key), |e| e >> 32 == key).map(|e| e as u32)
    }

    fn remove(t: &mut Growing<u64>, key: u64) -> Option<u32> {
        t.remove(key_hash(key), |e| e >> 32 == key, hash_of)
            .map(|e| e as u32)
    }

    #[test]
    fn a_doubled_table_answers_from_both_halves_while_it_moves_and_drops_the_old_one_after() {
        let mut t = Growing::new();
        for k in 1..=32 {
            assert_eq!(put(&mut t, k, k as u32), None);
        }
        assert!(!t.moving(), "64 slots hold 32 entries");
        // The 33rd doubles the table; one step moves only 16 of the old 64 slots.
        assert_eq!(put(&mut t, 33, 33), None);
        assert!(t.moving());
        assert_eq!(t.len(), 33);
        for k in 1..=33 {
            assert_eq!(get(&t, k), Some(k as u32), "key {k} while moving");
        }
        // A replacement and a removal of entries still in the old table.
        let in_old: Vec<u64> = t.old.iter().filter(|&&e| e > 1).map(|&e| e >> 32).collect();
        assert!(
            in_old.len() >= 2,
            "entries left in the old table: {in_old:?}"
        );
        assert_eq!(put(&mut t, in_old[0], 1000), Some(in_old[0] as u32));
        assert_eq!(remove(&mut t, in_old[1]), Some(in_old[1] as u32));
        assert_eq!(get(&t, in_old[0]), Some(1000));
        assert_eq!(get(&t, in_old[1]), None);
        for k in 100..110 {
            put(&mut t, k, 7);
        }
        assert!(!t.moving(), "the old table is moved within 4 more inserts");
        assert_eq!(t.old.capacity(), 0);
        assert_eq!(t.len(), 33 - 1 + 10);
        assert_eq!(t.bytes(), 128 * 8);
    }

    proptest! {
        /// Puts, replacements and removes agree with a HashMap at every point, through many
        /// doublings and moves; the table never holds more than half of its slots.
        #[test]
        fn a_growing_table_agrees_with_a_map(
            ops in proptest::collection::vec((0u64..600, 0u32..1000, 0u8..4), 1..3000)
        ) {
            let mut t = Growing::new();
            let mut model = HashMap::new();
            for (key, value, op) in ops {
                let key = key + 1;
                if op == 0 {
                    prop_assert_eq!(remove(&mut t, key), model.remove(&key));
                } else {
                    prop_assert_eq!(put(&mut t, key, value), model.insert(key, value));
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(2 * t.len() <= t.table().0.len().max(1));
                prop_assert_eq!(get(&t, key), model.get(&key).copied());
            }
            for key in 1..=600 {
                prop_assert_eq!(get(&t, key), model.get(&key).copied());
            }
            let mut all: Vec<u64> = t.entries().map(|e| e >> 32).collect();
            all.sort_unstable();
            let mut want: Vec<u64> = model.keys().copied().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
        }
    }
}
