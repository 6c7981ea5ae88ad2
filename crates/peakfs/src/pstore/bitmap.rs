//! PMeta's inode bitmap and PData's page bitmap (PeakFS §III-C: "a bitmap for assigning the
//! inode to a certain location in the metadata zone", "a bitmap to assign several consecutive
//! data pages for a file block").
//!
//! One worker owns its bitmaps (shared nothing), so this is a plain word array with a next-fit
//! cursor, not `common::bitmap::sharded` (atomic, multi-shard, and it may split a request
//! into several extents, while a file block needs one run) nor `common::bitmap::size_class`
//! (byte offsets rounded to a few size levels, without a way to mark a given run used, which
//! WAL replay needs).

/// Errors of bitmap updates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitmapError {
    /// the run is outside the bitmap
    #[error("run {start}+{len} is outside the bitmap of {bits} bits")]
    OutOfRange {
        /// first bit
        start: u64,
        /// bits in the run
        len: u64,
        /// bits in the bitmap
        bits: u64,
    },
    /// a bit of the run already has the requested state (double allocation or double free)
    #[error("bit {bit} is already {}", if *.used { "used" } else { "free" })]
    Conflict {
        /// the offending bit
        bit: u64,
        /// its state
        used: bool,
    },
}

/// A bitmap of `bits` units; a set bit is a used unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    bits: u64,
    used: u64,
    cursor: u64,
}

impl Bitmap {
    /// All units free.
    pub fn new(bits: u64) -> Self {
        Self {
            words: vec![0; bits.div_ceil(64) as usize],
            bits,
            used: 0,
            cursor: 0,
        }
    }

    /// Rebuilds a bitmap from its words (a checkpoint); bits past `bits` must be clear.
    pub fn from_words(bits: u64, words: Vec<u64>) -> Option<Self> {
        if words.len() as u64 != bits.div_ceil(64) {
            return None;
        }
        if !bits.is_multiple_of(64) && words.last().is_some_and(|w| w >> (bits % 64) != 0) {
            return None;
        }
        let used = words.iter().map(|w| u64::from(w.count_ones())).sum();
        Some(Self {
            words,
            bits,
            used,
            cursor: 0,
        })
    }

    /// The words, for checkpoints.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Number of units.
    pub fn bits(&self) -> u64 {
        self.bits
    }

    /// Units in use.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Whether unit `i` is used (`false` outside the bitmap).
    pub fn is_used(&self, i: u64) -> bool {
        i < self.bits && self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    fn check(&self, start: u64, len: u64) -> Result<(), BitmapError> {
        if len == 0 || start.checked_add(len).is_none_or(|e| e > self.bits) {
            return Err(BitmapError::OutOfRange {
                start,
                len,
                bits: self.bits,
            });
        }
        Ok(())
    }

    /// Marks `len` units from `start` used; all of them must be free.
    pub fn set_run(&mut self, start: u64, len: u64) -> Result<(), BitmapError> {
        self.update(start, len, true)
    }

    /// Marks `len` units from `start` used (`used`) or free: live (`strict`), all of them must
    /// be in the other state; in WAL replay ([`Self::force_run`]) they may be in either.
    pub fn mark_run(
        &mut self,
        start: u64,
        len: u64,
        used: bool,
        strict: bool,
    ) -> Result<(), BitmapError> {
        if strict {
            self.update(start, len, used)
        } else {
            self.force_run(start, len, used)
        }
    }

    /// Marks `len` units from `start` used (`used`) or free, whatever their state: WAL replay
    /// over a checkpoint written between requests, which may already hold the change.
    pub fn force_run(&mut self, start: u64, len: u64, used: bool) -> Result<(), BitmapError> {
        self.check(start, len)?;
        for i in start..start + len {
            if self.is_used(i) != used {
                self.words[(i / 64) as usize] ^= 1 << (i % 64);
                if used {
                    self.used += 1;
                } else {
                    self.used -= 1;
                }
            }
        }
        Ok(())
    }

    /// Marks `len` units from `start` free; all of them must be used.
    pub fn clear_run(&mut self, start: u64, len: u64) -> Result<(), BitmapError> {
        self.update(start, len, false)
    }

    fn update(&mut self, start: u64, len: u64, used: bool) -> Result<(), BitmapError> {
        self.check(start, len)?;
        if let Some(bit) = (start..start + len).find(|&i| self.is_used(i) == used) {
            return Err(BitmapError::Conflict { bit, used });
        }
        for i in start..start + len {
            self.words[(i / 64) as usize] ^= 1 << (i % 64);
        }
        if used {
            self.used += len;
        } else {
            self.used -= len;
        }
        Ok(())
    }

    /// Finds and marks `len` consecutive free units (next fit from the last allocation).
    pub fn alloc_run(&mut self, len: u64) -> Option<u64> {
        if len == 0 || len > self.bits - self.used {
            return None;
        }
        let start = self
            .find_free_run(self.cursor, self.bits, len)
            .or_else(|| self.find_free_run(0, self.cursor.min(self.bits), len))?;
        self.set_run(start, len).ok()?;
        self.cursor = start + len;
        Some(start)
    }

    /// First run of `len` free units inside `[from, to + len - 1)`, skipping full words.
    fn find_free_run(&self, from: u64, to: u64, len: u64) -> Option<u64> {
        let mut i = from;
        let mut run_start = from;
        let mut run = 0;
        while i < self.bits && (run > 0 || i < to) {
            let w = self.words[(i / 64) as usize];
            if i.is_multiple_of(64) && run == 0 && w == u64::MAX {
                i += 64;
                run_start = i;
                continue;
            }
            if w >> (i % 64) & 1 == 0 {
                if run == 0 {
                    run_start = i;
                }
                run += 1;
                if run == len {
                    return Some(run_start);
                }
            } else {
                run = 0;
            }
            i += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn double_allocation_and_double_free_are_refused() {
        let mut b = Bitmap::new(100);
        b.set_run(10, 5).unwrap();
        assert_eq!(
            b.set_run(14, 2),
            Err(BitmapError::Conflict {
                bit: 14,
                used: true
            })
        );
        b.clear_run(10, 5).unwrap();
        assert!(b.clear_run(10, 1).is_err());
        assert!(b.set_run(99, 2).is_err());
        assert_eq!(b.used(), 0);
    }

    proptest! {
        /// A forced run leaves its bits as asked whatever they were, and the count of used
        /// units right (what replay over a checkpoint written in steps relies on).
        #[test]
        fn a_forced_run_sets_its_bits_whatever_they_were(
            ops in prop::collection::vec((0u64..120, 1u64..20, any::<bool>()), 1..100)
        ) {
            let mut b = Bitmap::new(130);
            let mut model = [false; 130];
            for (start, len, used) in ops {
                let fits = start + len <= 130;
                prop_assert_eq!(b.force_run(start, len, used).is_ok(), fits);
                if fits {
                    model[start as usize..(start + len) as usize].fill(used);
                }
                for (i, &m) in model.iter().enumerate() {
                    prop_assert_eq!(b.is_used(i as u64), m);
                }
                prop_assert_eq!(b.used(), model.iter().filter(|&&m| m).count() as u64);
            }
        }

        #[test]
        fn runs_are_consecutive_disjoint_and_refound_after_free(
            ops in prop::collection::vec((1u64..9, any::<bool>()), 1..200)
        ) {
            let mut b = Bitmap::new(300);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, free) in ops {
                if free && !live.is_empty() {
                    let (s, l) = live.remove(len as usize % live.len());
                    b.clear_run(s, l).unwrap();
                } else if let Some(s) = b.alloc_run(len) {
                    for &(o, ol) in &live {
                        prop_assert!(s + len <= o || o + ol <= s, "overlap");
                    }
                    live.push((s, len));
                } else {
                    // Refusal only when no free run of that length exists.
                    let free_run = (0..=300 - len).any(|s| (s..s + len).all(|i| !b.is_used(i)));
                    prop_assert!(!free_run);
                }
                prop_assert_eq!(b.used(), live.iter().map(|r| r.1).sum::<u64>());
            }
            let copy = Bitmap::from_words(300, b.words().to_vec()).unwrap();
            prop_assert_eq!(copy.used(), b.used());
        }
    }
}
