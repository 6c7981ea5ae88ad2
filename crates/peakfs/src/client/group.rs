//! What the clients of one group share. A FUSE mount runs several clients, one per FUSE
//! thread, so that the requests of a node's processes proceed side by side instead of one
//! at a time; towards the servers and the node's processes they must still act as one
//! client:
//!
//! - an inode open through any of them stays usable when another unlinks it or renames over
//!   it (the unlink asks its server to keep an orphan), and the group's last close frees it;
//! - what a directory gives its new entries ([`DirDefaults`]), as one of them learned or
//!   changed it, holds for all: a hint set through one applies to files made through
//!   another, and a removed directory's defaults are gone for every one of them (its ino may
//!   come back as a directory of another kind).
//!
//! A client alone is a group of one. The state is behind one mutex, held only for a map
//! operation, never across a request.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::DirDefaults;
use crate::pstore::table::{U64Map, U64Set};

/// Directories whose defaults a group remembers before it starts again.
const MAX_DIRS: usize = 1 << 20;

/// Inodes whose unsynced slices a group remembers; past that, they are synced at once.
const MAX_UNSYNCED: usize = 1 << 16;

/// The state the clients of a group share.
#[derive(Debug, Default)]
pub struct Group {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Open descriptors by inode, over all clients of the group.
    open: U64Map<u32>,
    /// Inodes unlinked while open in the group (orphans at their home): the last close frees
    /// them.
    orphans: U64Set,
    /// What directories give their new entries, by ino.
    dirs: U64Map<DirDefaults>,
    /// The slices (a λ of each, by route) that the group's committed writes to an inode
    /// reached since their last FSYNC through the group, by ino.
    unsynced: U64Map<Slices>,
}

/// Slices by route (server, worker), with a λ that reaches each.
pub(super) type Slices = BTreeMap<(u32, u32), u64>;

impl Group {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single map operation: a panic elsewhere leaves the maps whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A descriptor of `ino` was opened.
    pub(super) fn opened(&self, ino: u64) {
        *self.state().open.entry(ino).or_insert(0) += 1;
    }

    /// A descriptor of `ino` was closed; whether it was the group's last one of an orphan,
    /// which the caller must now free.
    pub(super) fn closed(&self, ino: u64) -> bool {
        let mut s = self.state();
        match s.open.get_mut(&ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                s.open.remove(&ino);
                s.orphans.remove(&ino)
            }
            None => false,
        }
    }

    /// Whether any client of the group holds a file open: an unlink or a replacing rename
    /// must then let an inode that loses its last link become an orphan.
    pub(super) fn any_open(&self) -> bool {
        !self.state().open.is_empty()
    }

    /// Keeps orphan `ino` until its last close if the group holds it open; false if it does
    /// not (the caller frees it now).
    pub(super) fn keep_orphan(&self, ino: u64) -> bool {
        let mut s = self.state();
        let open = s.open.contains_key(&ino);
        if open {
            s.orphans.insert(ino);
        }
        open
    }

    /// The defaults of directory `ino`, if known.
    pub(super) fn dir_defaults(&self, ino: u64) -> Option<DirDefaults> {
        self.state().dirs.get(&ino).copied()
    }

    /// Remembers the defaults of directory `ino`.
    pub(super) fn learn_dir(&self, ino: u64, d: DirDefaults) {
        let mut s = self.state();
        if s.dirs.len() >= MAX_DIRS && !s.dirs.contains_key(&ino) {
            s.dirs.clear();
        }
        s.dirs.insert(ino, d);
    }

    /// Writes to `ino` reached `slices` and were committed, not made durable. Returns the
    /// `(ino, λ)` slices the caller must FSYNC now: all the group remembered, when it
    /// remembers [`MAX_UNSYNCED`] inodes already.
    pub(super) fn wrote(&self, ino: u64, slices: Slices) -> Vec<(u64, u64)> {
        if slices.is_empty() {
            return Vec::new();
        }
        let mut s = self.state();
        let mut overflow = Vec::new();
        if s.unsynced.len() >= MAX_UNSYNCED && !s.unsynced.contains_key(&ino) {
            for (i, sl) in s.unsynced.drain() {
                overflow.extend(sl.into_values().map(|l| (i, l)));
            }
        }
        s.unsynced.entry(ino).or_default().extend(slices);
        overflow
    }

    /// Takes the slices that writes to `ino` reached since their last FSYNC (the caller's
    /// fsync now makes them durable).
    pub(super) fn take_unsynced(&self, ino: u64) -> Slices {
        self.state().unsynced.remove(&ino).unwrap_or_default()
    }

    /// Forgets directory `ino` (removed).
    pub(super) fn forget_dir(&self, ino: u64) {
        self.state().dirs.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Open(u64),
        Close(u64),
        Unlink(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..4).prop_map(Op::Open),
            (0u64..4).prop_map(Op::Close),
            (0u64..4).prop_map(Op::Unlink),
        ]
    }

    #[test]
    fn unsynced_slices_are_kept_until_an_fsync_takes_them_or_too_many_inodes_have_some() {
        let g = Group::default();
        let slices = |ls: &[u64]| ls.iter().map(|&l| ((l as u32, 0), l)).collect::<Slices>();
        assert!(g.wrote(1, slices(&[5, 6])).is_empty());
        assert!(g.wrote(1, slices(&[6, 7])).is_empty());
        assert!(g.wrote(2, Slices::new()).is_empty());
        assert_eq!(g.take_unsynced(1), slices(&[5, 6, 7]));
        assert!(g.take_unsynced(1).is_empty(), "taken");
        for ino in 0..MAX_UNSYNCED as u64 {
            assert!(g.wrote(ino, slices(&[ino % 3])).is_empty());
        }
        assert!(
            g.wrote(7, slices(&[9])).is_empty(),
            "an inode known already"
        );
        let mut overflow = g.wrote(u64::MAX, slices(&[4]));
        overflow.sort_unstable();
        let mut want: Vec<(u64, u64)> = (0..MAX_UNSYNCED as u64).map(|i| (i, i % 3)).collect();
        want.push((7, 9));
        want.sort_unstable();
        assert_eq!(overflow, want, "all the group remembered, to be synced now");
        assert_eq!(g.take_unsynced(u64::MAX), slices(&[4]));
        assert!(g.take_unsynced(7).is_empty());
    }

    proptest! {
        /// An inode unlinked while open is freed exactly once: at the close that leaves it
        /// open nowhere in the group; one unlinked while closed is freed by the unlink.
        #[test]
        fn an_orphan_is_freed_once_at_the_groups_last_close(
            ops in proptest::collection::vec(op(), 0..100)
        ) {
            let g = Group::default();
            let mut open = [0u32; 4];
            let mut orphan = [false; 4];
            for op in ops {
                match op {
                    Op::Open(i) => {
                        g.opened(i);
                        open[i as usize] += 1;
                    }
                    Op::Close(i) if open[i as usize] > 0 => {
                        open[i as usize] -= 1;
                        let last_of_orphan = open[i as usize] == 0 && orphan[i as usize];
                        if last_of_orphan {
                            orphan[i as usize] = false;
                        }
                        prop_assert_eq!(g.closed(i), last_of_orphan);
                    }
                    Op::Close(_) => {}
                    Op::Unlink(i) => {
                        let kept = g.keep_orphan(i);
                        prop_assert_eq!(kept, open[i as usize] > 0);
                        orphan[i as usize] |= kept;
                    }
                }
                prop_assert_eq!(g.any_open(), open.iter().any(|&n| n > 0));
            }
        }
    }
}
