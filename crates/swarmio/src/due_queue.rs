//! A worker's completions waiting for their target times (papers/swarmio.md §IV-C: a CQE is
//! posted only once `now >= target`), popped in target order, ties in arrival order.
//!
//! Targets arrive as a few interleaved increasing runs: each scheduling instance of the timing
//! model only moves forward, and a batch's requests rotate over the instances. Under load the
//! instances' backlogs differ by tens of microseconds, so one sorted queue would insert each
//! completion behind hundreds of later ones (a walk and a shift per push). The queue keeps
//! *lanes* instead, each sorted: a push appends to the lane whose last entry is the latest
//! not after it (patience sorting), a pop takes the earliest lane front. With as many lanes as
//! the runs, both cost a scan of a few lane ends.

use std::collections::VecDeque;

/// Lanes at most; a push that fits no lane is inserted in order into one of them.
const MAX_LANES: usize = 32;

/// A completion waiting for its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// when the CQE may be posted (model clock, ns)
    pub target_ns: u64,
    /// arrival order at this worker (ties in `target_ns` pop in this order)
    pub seq: u64,
    /// submission queue of the command
    pub sqid: u16,
    /// command id
    pub cid: u16,
    /// SQ head to report
    pub sq_head: u16,
    /// NVMe status field
    pub status: u16,
}

impl Due {
    fn key(&self) -> (u64, u64) {
        (self.target_ns, self.seq)
    }
}

/// Completions ordered by `(target_ns, seq)` (see the module docs).
#[derive(Debug, Default)]
pub struct DueQueue {
    lanes: Vec<VecDeque<Due>>,
    len: usize,
}

impl DueQueue {
    /// Adds a completion; `seq` must grow from push to push.
    pub fn push(&mut self, d: Due) {
        self.len += 1;
        // The lane whose last entry is the latest not after `d`; empty lanes come last.
        let mut best: Option<(usize, Option<(u64, u64)>)> = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            let back = lane.back().map(Due::key);
            if back.is_some_and(|b| b > d.key()) {
                continue;
            }
            if best.is_none_or(|(_, b)| back > b) {
                best = Some((i, back));
            }
        }
        match best {
            Some((i, _)) => self.lanes[i].push_back(d),
            None if self.lanes.len() < MAX_LANES => self.lanes.push(VecDeque::from([d])),
            None => {
                // Every lane ends after `d`: insert it in order into the first.
                let lane = &mut self.lanes[0];
                let at = lane.len() - lane.iter().rev().take_while(|x| x.key() > d.key()).count();
                lane.insert(at, d);
            }
        }
    }

    /// The lane holding the earliest completion.
    fn earliest(&self) -> Option<usize> {
        self.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.front().map(|d| (d.key(), i)))
            .min()
            .map(|(_, i)| i)
    }

    /// The earliest completion.
    pub fn front(&self) -> Option<&Due> {
        self.earliest().and_then(|i| self.lanes[i].front())
    }

    /// Removes and returns the earliest completion.
    pub fn pop_front(&mut self) -> Option<Due> {
        let d = self.earliest().and_then(|i| self.lanes[i].pop_front())?;
        self.len -= 1;
        Some(d)
    }

    /// Every completion, in no particular order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Due> {
        self.lanes.iter_mut().flatten()
    }

    /// Completions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn due(target_ns: u64, seq: u64) -> Due {
        Due {
            target_ns,
            seq,
            sqid: 1,
            cid: 0,
            sq_head: 0,
            status: 0,
        }
    }

    proptest! {
        /// Pushes and pops in any interleaving give the order of a sorted set of
        /// (target, arrival), including when more runs arrive than there are lanes.
        #[test]
        fn pops_in_target_then_arrival_order(
            ops in proptest::collection::vec((0u64..500, proptest::bool::weighted(0.3)), 0..600),
            runs in 1usize..80,
        ) {
            let mut q = DueQueue::default();
            let mut model = BTreeSet::new();
            let mut cursors = vec![0u64; runs];
            for (seq, &(step, pop)) in ops.iter().enumerate() {
                if pop {
                    let want = model.pop_first();
                    prop_assert_eq!(q.pop_front().map(|d| d.key()), want);
                } else {
                    // Interleaved increasing runs, like the timing model's instances.
                    let r = (step as usize) % runs;
                    cursors[r] += step % 7;
                    let d = due(cursors[r], seq as u64);
                    model.insert(d.key());
                    q.push(d);
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.front().map(Due::key), model.first().copied());
            }
            while let Some(k) = model.pop_first() {
                prop_assert_eq!(q.pop_front().map(|d| d.key()), Some(k));
            }
            prop_assert!(q.is_empty() && q.pop_front().is_none());
        }

        /// Arbitrary targets (no runs at all) still pop in order.
        #[test]
        fn arbitrary_targets_pop_in_order(targets in proptest::collection::vec(0u64..50, 0..300)) {
            let mut q = DueQueue::default();
            for (seq, &t) in targets.iter().enumerate() {
                q.push(due(t, seq as u64));
            }
            let popped: Vec<(u64, u64)> = std::iter::from_fn(|| q.pop_front().map(|d| d.key())).collect();
            let mut want = popped.clone();
            want.sort();
            prop_assert_eq!(popped.len(), targets.len());
            prop_assert_eq!(popped, want);
        }
    }
}
