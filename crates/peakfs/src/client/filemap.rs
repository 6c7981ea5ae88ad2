//! The File Map of a client (PeakFS §III-A): its open files by descriptor, and by inode, so
//! that what a stat, a truncate or a last close asks of one inode (its uncommitted size, its
//! other descriptors) costs that inode's descriptors, not a walk over every open file: one
//! FUSE mount serves all the processes of a node, which may hold thousands of files open.

use crate::pstore::table::U64Map;

/// Open-file state that the map needs to see: the inode a descriptor names.
pub trait OfIno {
    /// The inode.
    fn ino(&self) -> u64;
}

/// Open files by descriptor, indexed by inode.
#[derive(Debug)]
pub struct FileMap<F> {
    files: U64Map<F>,
    by_ino: U64Map<Fds>,
}

/// The descriptors of one inode: almost always one, kept without an allocation (an mdtest
/// create opens and closes a file per operation).
#[derive(Debug)]
enum Fds {
    One(u64),
    Many(Vec<u64>),
}

impl Fds {
    fn as_slice(&self) -> &[u64] {
        match self {
            Fds::One(fd) => std::slice::from_ref(fd),
            Fds::Many(fds) => fds,
        }
    }

    fn push(&mut self, fd: u64) {
        match self {
            Fds::One(first) => *self = Fds::Many(vec![*first, fd]),
            Fds::Many(fds) => fds.push(fd),
        }
    }

    /// Removes `fd`; whether none is left.
    fn remove(&mut self, fd: u64) -> bool {
        match self {
            Fds::One(only) => *only == fd,
            Fds::Many(fds) => {
                fds.retain(|&d| d != fd);
                fds.is_empty()
            }
        }
    }
}

impl<F> Default for FileMap<F> {
    fn default() -> Self {
        Self {
            files: U64Map::default(),
            by_ino: U64Map::default(),
        }
    }
}

impl<F: OfIno> FileMap<F> {
    /// Adds descriptor `fd` (replacing one of the same number).
    pub fn insert(&mut self, fd: u64, f: F) {
        let ino = f.ino();
        self.remove(fd);
        self.files.insert(fd, f);
        match self.by_ino.get_mut(&ino) {
            Some(fds) => fds.push(fd),
            None => {
                self.by_ino.insert(ino, Fds::One(fd));
            }
        }
    }

    /// Removes descriptor `fd`.
    pub fn remove(&mut self, fd: u64) -> Option<F> {
        let f = self.files.remove(&fd)?;
        let ino = f.ino();
        if self.by_ino.get_mut(&ino).is_some_and(|fds| fds.remove(fd)) {
            self.by_ino.remove(&ino);
        }
        Some(f)
    }

    /// Descriptor `fd`.
    pub fn get_mut(&mut self, fd: u64) -> Option<&mut F> {
        self.files.get_mut(&fd)
    }

    /// Whether no file is open.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The descriptor numbers of `ino`.
    pub fn fds_of_ino(&self, ino: u64) -> &[u64] {
        self.by_ino.get(&ino).map_or(&[][..], Fds::as_slice)
    }

    /// The descriptors of `ino`.
    pub fn of_ino(&self, ino: u64) -> impl Iterator<Item = &F> {
        self.fds_of_ino(ino)
            .iter()
            .filter_map(|fd| self.files.get(fd))
    }

    /// Applies `f` to each descriptor of `ino`.
    pub fn for_each_of_ino(&mut self, ino: u64, mut f: impl FnMut(&mut F)) {
        let Some(fds) = self.by_ino.get(&ino) else {
            return;
        };
        for fd in fds.as_slice() {
            if let Some(file) = self.files.get_mut(fd) {
                f(file);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Open {
        ino: u64,
        touched: u32,
    }

    impl OfIno for Open {
        fn ino(&self) -> u64 {
            self.ino
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Open(u64, u64),
        Close(u64),
        Touch(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..12, 0u64..4).prop_map(|(fd, ino)| Op::Open(fd, ino)),
            (0u64..12).prop_map(Op::Close),
            (0u64..4).prop_map(Op::Touch),
        ]
    }

    proptest! {
        /// The map answers as a plain list of (fd, file) walked in full would.
        #[test]
        fn the_file_map_agrees_with_a_walk_over_every_open_file(
            ops in proptest::collection::vec(op(), 0..120)
        ) {
            let mut map = FileMap::default();
            let mut model: std::collections::BTreeMap<u64, Open> = Default::default();
            for op in ops {
                match op {
                    Op::Open(fd, ino) => {
                        map.insert(fd, Open { ino, touched: 0 });
                        model.insert(fd, Open { ino, touched: 0 });
                    }
                    Op::Close(fd) => prop_assert_eq!(map.remove(fd), model.remove(&fd)),
                    Op::Touch(ino) => {
                        map.for_each_of_ino(ino, |f| f.touched += 1);
                        model.values_mut().filter(|f| f.ino == ino).for_each(|f| f.touched += 1);
                    }
                }
                prop_assert_eq!(map.is_empty(), model.is_empty());
                for ino in 0..4 {
                    let mut got: Vec<_> = map.of_ino(ino).map(|f| f.touched).collect();
                    let mut want: Vec<_> = model.values().filter(|f| f.ino == ino).map(|f| f.touched).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    prop_assert_eq!(got, want);
                }
                for fd in 0..12 {
                    prop_assert_eq!(map.get_mut(fd).cloned(), model.get(&fd).cloned());
                }
            }
        }
    }
}
