//! Consistent placement of keys on buckets and nodes (GNStor §4.1 "Access control":
//! `hash([VID,VBA], factor)` chooses the target SSDs, and each deEngine recomputes it to check
//! that it is a valid target; PeakFS §III maps keys to servers and threads the same way).
//!
//! - [`jump_hash`] (Lamping & Veach 2014, "A Fast, Minimal Memory, Consistent Hash
//!   Algorithm") maps a key to one of `n` numbered buckets with no state at all; growing to
//!   `n + 1` buckets moves only the expected `1 / (n + 1)` of keys, all to the new bucket.
//!   Buckets can only be added or removed at the end.
//! - Rendezvous (highest random weight) hashing, [`rendezvous_pick`] and
//!   [`rendezvous_top_k`] (Thaler & Ravishankar 1998), works on any set of node ids: each
//!   (key, node) pair gets a pseudo-random score and the key goes to the highest-scoring
//!   nodes. Removing a node moves only the keys it held; adding one moves only keys to it.
//!   Its top-k list is the replica set for a replication factor `k`.

use serde::{Deserialize, Serialize};

use super::mix64;

/// Errors from the placement functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// the number of buckets must be at least 1
    #[error("the number of buckets must be at least 1")]
    ZeroBuckets,
    /// the number of replicas must be at least 1
    #[error("the number of replicas must be at least 1")]
    ZeroReplicas,
    /// {requested} replicas requested but only {available} distinct nodes are available
    #[error("{requested} replicas requested but only {available} distinct nodes are available")]
    NotEnoughNodes {
        /// The requested replica count.
        requested: usize,
        /// The number of distinct node ids given.
        available: usize,
    },
}

/// Identifies a placement target: an SSD of a GNStor array, a PeakFS server or thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u64);

/// Multiplier of the linear congruential generator in Lamping & Veach's Fig. 1.
const JUMP_LCG_MULTIPLIER: u64 = 2_862_933_555_777_941_757;

/// The bucket in `0..buckets` that `key` belongs to (Lamping & Veach's `JumpConsistentHash`,
/// the paper's loop verbatim, so results match other implementations of it).
///
/// Composite keys such as (VID, VBA) should be hashed to one `u64` first (e.g. with
/// [`mix64`]), as the paper prescribes for non-integer keys.
pub fn jump_hash(key: u64, buckets: u32) -> Result<u32, HashError> {
    if buckets == 0 {
        return Err(HashError::ZeroBuckets);
    }
    let mut key = key;
    let mut bucket = 0u64;
    let mut next = 0u64;
    while next < u64::from(buckets) {
        bucket = next;
        key = key.wrapping_mul(JUMP_LCG_MULTIPLIER).wrapping_add(1);
        // The next bucket this key jumps to is (b + 1) / r for r uniform in (0, 1], taken from
        // the top 31 bits of the LCG state. A float result beyond u64 saturates, ending the loop.
        next = ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as u64;
    }
    // `bucket < buckets <= u32::MAX`, so the conversion is lossless.
    Ok(bucket as u32)
}

/// Salt that keeps node-id hashes apart from key hashes of the same integer.
const NODE_SALT: u64 = 0x6E6F_6465_2D69_6421; // "node-id!"

/// The rendezvous weight of `node` for a key whose hash is `key_hash`.
fn score(key_hash: u64, node: NodeId) -> u64 {
    mix64(key_hash ^ mix64(node.0 ^ NODE_SALT))
}

/// The node of `nodes` that `key` belongs to, or `None` if `nodes` is empty.
///
/// Equals the first entry of [`rendezvous_top_k`]. Order and duplicates in `nodes` do not
/// matter; ties in score (vanishingly rare) go to the larger node id.
pub fn rendezvous_pick(key: u64, nodes: &[NodeId]) -> Option<NodeId> {
    let key_hash = mix64(key);
    nodes
        .iter()
        .copied()
        .max_by_key(|&node| (score(key_hash, node), node))
}

/// The `k` distinct nodes of `nodes` with the highest scores for `key`, best first: the
/// replica set of `key` for replication factor `k`.
///
/// Order and duplicates in `nodes` do not matter. Errors if `k` is zero or exceeds the
/// number of distinct nodes.
pub fn rendezvous_top_k(key: u64, nodes: &[NodeId], k: usize) -> Result<Vec<NodeId>, HashError> {
    if k == 0 {
        return Err(HashError::ZeroReplicas);
    }
    let key_hash = mix64(key);
    let mut scored: Vec<(u64, NodeId)> = nodes
        .iter()
        .map(|&node| (score(key_hash, node), node))
        .collect();
    // Descending by (score, id); duplicates of a node have equal scores and end up adjacent.
    scored.sort_unstable_by(|a, b| b.cmp(a));
    scored.dedup();
    if k > scored.len() {
        return Err(HashError::NotEnoughNodes {
            requested: k,
            available: scored.len(),
        });
    }
    Ok(scored[..k].iter().map(|&(_, node)| node).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn sample_keys(count: usize) -> Vec<u64> {
        let mut rng = StdRng::seed_from_u64(0x5EED);
        (0..count).map(|_| rng.random()).collect()
    }

    fn nodes(ids: std::ops::Range<u64>) -> Vec<NodeId> {
        ids.map(NodeId).collect()
    }

    #[test]
    fn jump_hash_matches_published_vectors() {
        // Vectors from dgryski/go-jump's tests, an implementation of the paper's loop.
        let vectors = [
            (1, 1, 0),
            (42, 57, 43),
            (0xDEAD_10CC, 1, 0),
            (0xDEAD_10CC, 666, 361),
            (256, 1024, 520),
        ];
        for (key, buckets, expected) in vectors {
            assert_eq!(
                jump_hash(key, buckets),
                Ok(expected),
                "key {key} buckets {buckets}"
            );
        }
        assert_eq!(jump_hash(0, 1), Ok(0));
    }

    #[test]
    fn jump_hash_rejects_zero_buckets() {
        assert_eq!(jump_hash(7, 0), Err(HashError::ZeroBuckets));
    }

    #[test]
    fn jump_hash_spreads_keys_evenly_over_buckets() {
        let buckets = 10u32;
        let mut counts = [0u32; 10];
        for key in sample_keys(10_000) {
            counts[jump_hash(key, buckets).unwrap() as usize] += 1;
        }
        // Expected 1,000 per bucket, standard deviation ~30.
        assert!(
            counts.iter().all(|&c| (850..=1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn jump_hash_growth_moves_about_one_over_n_plus_one_of_keys_all_to_the_new_bucket() {
        let keys = sample_keys(10_000);
        for n in [1u32, 2, 5, 10, 31, 100] {
            let mut moved = 0usize;
            for &key in &keys {
                let before = jump_hash(key, n).unwrap();
                let after = jump_hash(key, n + 1).unwrap();
                if before != after {
                    assert_eq!(after, n, "key {key} moved to an old bucket");
                    moved += 1;
                }
            }
            let expected = keys.len() as f64 / f64::from(n + 1);
            let tolerance = 5.0 * expected.sqrt() + 10.0;
            assert!(
                (moved as f64 - expected).abs() < tolerance,
                "n={n}: moved {moved}"
            );
        }
    }

    #[test]
    fn jump_hash_handles_the_largest_bucket_count() {
        for key in sample_keys(100) {
            assert!(jump_hash(key, u32::MAX).is_ok());
        }
    }

    #[test]
    fn rendezvous_pick_is_none_only_for_no_nodes() {
        assert_eq!(rendezvous_pick(1, &[]), None);
        assert_eq!(rendezvous_pick(1, &[NodeId(9)]), Some(NodeId(9)));
    }

    #[test]
    fn rendezvous_removing_a_node_moves_only_its_keys() {
        let all = nodes(0..10);
        let without_3: Vec<_> = all.iter().copied().filter(|&n| n != NodeId(3)).collect();
        let mut moved = 0;
        for key in sample_keys(10_000) {
            let before = rendezvous_pick(key, &all).unwrap();
            let after = rendezvous_pick(key, &without_3).unwrap();
            if before == NodeId(3) {
                moved += 1;
            } else {
                assert_eq!(before, after, "key {key} moved off a surviving node");
            }
        }
        // Node 3 held about a tenth of the keys.
        assert!((850..=1150).contains(&moved), "moved {moved}");
    }

    #[test]
    fn rendezvous_adding_a_node_moves_keys_only_to_it() {
        let before_nodes = nodes(0..7);
        let after_nodes = nodes(0..8);
        for key in sample_keys(5_000) {
            let before = rendezvous_pick(key, &before_nodes).unwrap();
            let after = rendezvous_pick(key, &after_nodes).unwrap();
            assert!(
                after == before || after == NodeId(7),
                "key {key}: {before:?} -> {after:?}"
            );
        }
    }

    #[test]
    fn rendezvous_spreads_keys_evenly_over_nodes() {
        let all = nodes(100..110);
        let mut counts = [0u32; 10];
        for key in sample_keys(10_000) {
            counts[(rendezvous_pick(key, &all).unwrap().0 - 100) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (850..=1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn rendezvous_top_k_removing_a_node_replaces_only_that_replica() {
        let all = nodes(0..8);
        let without_5: Vec<_> = all.iter().copied().filter(|&n| n != NodeId(5)).collect();
        for key in sample_keys(2_000) {
            let before = rendezvous_top_k(key, &all, 3).unwrap();
            let after = rendezvous_top_k(key, &without_5, 3).unwrap();
            let kept: Vec<_> = before.iter().copied().filter(|&n| n != NodeId(5)).collect();
            assert_eq!(after[..kept.len()], kept[..], "key {key}");
        }
    }

    #[test]
    fn rendezvous_top_k_rejects_zero_and_too_many_replicas() {
        let two = [NodeId(1), NodeId(2), NodeId(2)];
        assert_eq!(rendezvous_top_k(1, &two, 0), Err(HashError::ZeroReplicas));
        assert_eq!(
            rendezvous_top_k(1, &two, 3),
            Err(HashError::NotEnoughNodes {
                requested: 3,
                available: 2
            })
        );
    }

    proptest! {
        #[test]
        fn rendezvous_top_k_is_distinct_ordered_and_led_by_pick(
            key in any::<u64>(),
            ids in proptest::collection::vec(0u64..20, 1..20),
            k in 1usize..6,
        ) {
            let mut list: Vec<NodeId> = ids.into_iter().map(NodeId).collect();
            let distinct = { let mut d = list.clone(); d.sort(); d.dedup(); d.len() };
            match rendezvous_top_k(key, &list, k) {
                Ok(top) => {
                    prop_assert_eq!(top.len(), k);
                    prop_assert_eq!(Some(top[0]), rendezvous_pick(key, &list));
                    let mut sorted = top.clone();
                    sorted.sort();
                    sorted.dedup();
                    prop_assert_eq!(sorted.len(), k);
                    // The input order must not matter.
                    list.reverse();
                    prop_assert_eq!(rendezvous_top_k(key, &list, k).unwrap(), top);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    HashError::NotEnoughNodes { requested: k, available: distinct }
                ),
            }
        }

        #[test]
        fn jump_hash_is_always_in_range(key in any::<u64>(), buckets in 1u32..) {
            prop_assert!(jump_hash(key, buckets).unwrap() < buckets);
        }
    }
}
