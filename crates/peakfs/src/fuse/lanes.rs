//! The lanes of a FUSE mount: a client per FUSE thread, so that the requests of a node's
//! processes proceed side by side instead of one at a time behind a single client. The
//! clients form one [`crate::client::group`], so open files, orphans and directory defaults
//! are the mount's, not a lane's.
//!
//! The writable descriptors of an inode live on one lane, the writer lane: the one the first
//! of them took (the lane with the fewest open files). Its client holds all of the inode's
//! uncommitted writes, so a stat, a truncate or another writable descriptor sees them as
//! under a single client. Read-only descriptors opened while it has writable ones join them
//! there; others take the lane with the fewest open files, so the readers of one file
//! proceed side by side (8 threads reading one file on the 16-core host: 17-20 K reads/s
//! on one lane). A reader on another lane still sees the writer lane's writes as one
//! client's descriptors would: before its read, the writer lane commits the inode's
//! writes, and the reader's lane forgets what it read ahead and the size it saw.
//! Requests about no open file take the first lane that is free. A FUSE file handle names
//! its lane and that lane's descriptor.
//!
//! Ties go to the lowest lane, not round the lanes: one process's requests then keep to one
//! client, whose connections the servers serve on the same communicating threads each time,
//! still busy from the last request (one stat loop through a mount of 8 lanes on the 16-core
//! host: 2.9-3.5 K/s when each request took the next lane, 3.6-4.0 K/s with one client).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::client::{Client, ClientError};
use crate::protocol::{Attr, Errno};

/// Low bits of a file handle that name its lane.
const LANE_BITS: u32 = 8;

/// Most lanes of a mount.
pub const MAX_LANES: usize = 1 << LANE_BITS;

/// The file handle of descriptor `fd` of lane `lane`.
fn handle(lane: usize, fd: u64) -> u64 {
    (fd << LANE_BITS) | lane as u64
}

/// The lane and descriptor of file handle `fh`.
fn split(fh: u64) -> (usize, u64) {
    ((fh & (MAX_LANES as u64 - 1)) as usize, fh >> LANE_BITS)
}

/// Where an open inode's handles are.
#[derive(Debug, Default)]
struct OpenIno {
    /// The lane of the inode's writable handles while it has some: its client holds the
    /// inode's uncommitted writes. Read-only handles opened meanwhile join it.
    writer: Option<usize>,
    /// Writable handles.
    writers: u32,
    /// The lanes holding handles of the inode.
    lanes: Vec<Held>,
    /// Writes and size changes through the mount while the inode is open.
    changes: u64,
    /// The `changes` the writer lane has made visible to the other lanes (committed).
    visible: u64,
}

/// An open inode's handles on one lane.
#[derive(Debug)]
struct Held {
    lane: usize,
    handles: u32,
    /// The inode's `changes` this lane's descriptors have caught up with.
    seen: u64,
}

impl OpenIno {
    fn held(&mut self, lane: usize) -> Option<&mut Held> {
        self.lanes.iter_mut().find(|h| h.lane == lane)
    }
}

/// Which lanes hold each open inode, and how many files each lane holds open.
#[derive(Debug)]
struct Placement {
    by_ino: HashMap<u64, OpenIno>,
    /// Open handles per lane.
    per_lane: Vec<u32>,
    /// Open inodes held by more than one lane. While there are none, writes need not count
    /// changes ([`Lanes::on_write`]).
    shared: usize,
}

impl Placement {
    fn new(lanes: usize) -> Self {
        Self {
            by_ino: HashMap::new(),
            per_lane: vec![0; lanes],
            shared: 0,
        }
    }

    /// The lane holding the fewest open handles (the lowest of those).
    fn least_loaded(&self) -> usize {
        (0..self.per_lane.len())
            .min_by_key(|&l| self.per_lane[l])
            .unwrap_or(0)
    }

    /// The lane of `ino`'s writable handles, if it has some.
    fn writer_of(&self, ino: u64) -> Option<usize> {
        self.by_ino.get(&ino).and_then(|o| o.writer)
    }

    /// Counts a new handle of `ino` on `lane`, unless `ino` has writable handles on another
    /// lane: returns the lane that takes it. A writable handle makes its lane the writer.
    fn add(&mut self, ino: u64, lane: usize, writable: bool) -> usize {
        let o = self.by_ino.entry(ino).or_default();
        let lane = o.writer.unwrap_or(lane);
        if writable {
            o.writer = Some(lane);
            o.writers += 1;
        }
        if let Some(h) = o.held(lane) {
            h.handles += 1;
        } else {
            if o.lanes.len() == 1 {
                // Shared from now on. Writes while it was not were not counted: count one,
                // so the writer commits and the lane holding it forgets once, before reads
                // elsewhere.
                o.changes += 1;
                self.shared += 1;
            }
            o.lanes.push(Held {
                lane,
                handles: 1,
                seen: o.changes,
            });
        }
        self.per_lane[lane] += 1;
        lane
    }

    /// Counts a handle to be created on the least loaded lane, before its inode is known, so
    /// that creates running side by side take different lanes; returns the lane.
    fn reserve(&mut self) -> usize {
        let lane = self.least_loaded();
        self.per_lane[lane] += 1;
        lane
    }

    /// The create reserved on `lane` made (or opened) `ino`: counts the handle there, or, if
    /// `ino` has writable handles on another lane, there; returns the lane that holds it.
    fn settle(&mut self, ino: u64, lane: usize, writable: bool) -> usize {
        self.per_lane[lane] -= 1;
        self.add(ino, lane, writable)
    }

    /// The create reserved on `lane` failed.
    fn cancel(&mut self, lane: usize) {
        self.per_lane[lane] -= 1;
    }

    /// Counts a new handle of `ino`: on the lane of its writable handles, or else on the
    /// least loaded lane (so the readers of one file spread over the lanes).
    fn place(&mut self, ino: u64, writable: bool) -> usize {
        let lane = self.least_loaded();
        self.add(ino, lane, writable)
    }

    /// A handle of `ino` on `lane` was closed (or its open failed).
    fn remove(&mut self, ino: u64, lane: usize, writable: bool) {
        let Some(o) = self.by_ino.get_mut(&ino) else {
            return;
        };
        let Some(i) = o.lanes.iter().position(|h| h.lane == lane) else {
            return;
        };
        self.per_lane[lane] -= 1;
        o.lanes[i].handles -= 1;
        if o.lanes[i].handles == 0 {
            o.lanes.swap_remove(i);
            if o.lanes.len() == 1 {
                self.shared -= 1;
            }
        }
        if writable && o.writer == Some(lane) {
            o.writers -= 1;
            if o.writers == 0 {
                // The last close committed the writes.
                o.writer = None;
            }
        }
        if o.lanes.is_empty() {
            self.by_ino.remove(&ino);
        }
    }

    /// `ino` changed: a write through `by` (whose client saw it), or with `by` None a change
    /// of size (every lane's descriptors may hold bytes past the new end).
    fn changed(&mut self, ino: u64, by: Option<usize>) {
        let Some(o) = self.by_ino.get_mut(&ino) else {
            return;
        };
        o.changes += 1;
        let changes = o.changes;
        let held = by.and_then(|lane| o.held(lane));
        if let Some(h) = held.filter(|h| h.seen + 1 == changes) {
            // Caught up before its own write: still caught up.
            h.seen = changes;
        }
    }

    /// Before a read of `ino` on `lane`: the writer lane whose writes it must first make
    /// visible, and the changes they make visible then.
    fn pending_for(&self, ino: u64, lane: usize) -> Option<(usize, u64)> {
        let o = self.by_ino.get(&ino)?;
        let writer = o.writer.filter(|&w| w != lane && o.visible < o.changes)?;
        Some((writer, o.changes))
    }

    /// The writer lane of `ino` made the changes up to `upto` visible.
    fn made_visible(&mut self, ino: u64, upto: u64) {
        if let Some(o) = self.by_ino.get_mut(&ino) {
            o.visible = o.visible.max(upto);
        }
    }

    /// Whether `lane`'s descriptors of `ino` must forget what they read (`ino` changed
    /// through another lane since they last did); they count as caught up from now.
    fn catch_up(&mut self, ino: u64, lane: usize) -> bool {
        let Some(o) = self.by_ino.get_mut(&ino) else {
            return false;
        };
        let changes = o.changes;
        match o.held(lane) {
            Some(h) if h.seen < changes => {
                h.seen = changes;
                true
            }
            _ => false,
        }
    }
}

/// The clients of a mount.
#[derive(Debug)]
pub struct Lanes {
    clients: Vec<Mutex<Client>>,
    placement: Mutex<Placement>,
    /// [`Placement::shared`] as of its last change (stored under its lock), read without it.
    shared: AtomicUsize,
}

/// A lane held by one request.
pub type Lane<'a> = MutexGuard<'a, Client>;

impl Lanes {
    /// Lanes of `clients` (1 to [`MAX_LANES`]), which join the first one's group.
    pub fn new(mut clients: Vec<Client>) -> Result<Self, ClientError> {
        if clients.is_empty() || clients.len() > MAX_LANES {
            return Err(ClientError::Errno(Errno::EINVAL));
        }
        let (first, rest) = clients.split_at_mut(1);
        for c in rest {
            c.join(&first[0])?;
        }
        Ok(Self {
            placement: Mutex::new(Placement::new(clients.len())),
            shared: AtomicUsize::new(0),
            clients: clients.into_iter().map(Mutex::new).collect(),
        })
    }

    fn lock(&self, lane: usize) -> Lane<'_> {
        // A panic in a call leaves at worst a stale open-file entry: keep serving.
        self.clients[lane].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn placement(&self) -> MutexGuard<'_, Placement> {
        // Nothing under this lock calls out; a panic inside (a bookkeeping bug) leaves at
        // worst a count off by one: keep serving.
        self.placement.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the placement, and publishes the count of shared inodes it leaves.
    fn placing<T>(&self, f: impl FnOnce(&mut Placement) -> T) -> T {
        let mut p = self.placement();
        let r = f(&mut p);
        self.shared.store(p.shared, Ordering::SeqCst);
        r
    }

    /// The first free lane, or if all are busy, the first once it is free.
    pub fn any(&self) -> Lane<'_> {
        self.clients
            .iter()
            .find_map(|c| c.try_lock().ok())
            .unwrap_or_else(|| self.lock(0))
    }

    /// The lane for a request about inode `ino`: the one holding its writable handles (whose
    /// client counts their uncommitted writes), or any.
    pub fn for_ino(&self, ino: u64) -> Lane<'_> {
        let writer = self.placement().writer_of(ino);
        match writer {
            Some(lane) => self.lock(lane),
            None => self.any(),
        }
    }

    /// The lane and descriptor of file handle `fh`.
    fn lane_of_handle(&self, fh: u64) -> Result<(usize, u64), ClientError> {
        let (lane, fd) = split(fh);
        if lane >= self.clients.len() {
            return Err(ClientError::BadFd(fh));
        }
        Ok((lane, fd))
    }

    /// Runs `f` on the lane of file handle `fh` with its descriptor there.
    pub fn on_handle<T>(
        &self,
        fh: u64,
        f: impl FnOnce(&mut Client, u64) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let (lane, fd) = self.lane_of_handle(fh)?;
        f(&mut self.lock(lane), fd)
    }

    /// Runs `f` (a read or an fsync) on the lane of file handle `fh` of inode `ino`. Writes
    /// to the inode through another lane come first: that lane commits them (an fsync here
    /// then makes them durable too), and this lane's descriptors forget what they read
    /// before them.
    pub fn on_handle_synced<T>(
        &self,
        fh: u64,
        ino: u64,
        f: impl FnOnce(&mut Client, u64) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let (lane, fd) = self.lane_of_handle(fh)?;
        // A writer lane other than this one holds the inode only while it is shared.
        let pending = if self.shared.load(Ordering::SeqCst) > 0 {
            self.placement().pending_for(ino, lane)
        } else {
            None
        };
        if let Some((writer, upto)) = pending {
            let mut w = self.lock(writer);
            w.commit_writes_of(ino)?;
            self.placement().made_visible(ino, upto);
        }
        let mut c = self.lock(lane);
        // Under the lane's lock: a read on this lane after this one finds the lane caught up
        // only once its descriptors have forgotten.
        if self.placement().catch_up(ino, lane) {
            c.forget_reads_of(ino);
        }
        f(&mut c, fd)
    }

    /// Runs write `f` on the lane of file handle `fh` of inode `ino`.
    pub fn on_write<T>(
        &self,
        fh: u64,
        ino: u64,
        f: impl FnOnce(&mut Client, u64) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let (lane, fd) = self.lane_of_handle(fh)?;
        let mut c = self.lock(lane);
        let written = f(&mut c, fd);
        // Even a failed write may have sent some of its pieces. No inode open on two lanes:
        // no reader elsewhere to tell, and no mount-wide lock for each write (an inode
        // becoming shared counts a change then, `Placement::add`).
        if self.shared.load(Ordering::SeqCst) > 0 {
            self.placement().changed(ino, Some(lane));
        }
        written
    }

    /// The size of `ino` changed: descriptors on every lane forget what they read.
    pub fn resized(&self, ino: u64) {
        self.placement().changed(ino, None);
    }

    /// Opens inode `ino` with `open` (open(2) `flags`) on its lane; returns the file handle.
    /// A writable handle goes to the lane of the inode's other writable handles, a read-only
    /// one too while there are some, or else to the least loaded lane.
    pub fn open(
        &self,
        ino: u64,
        flags: i32,
        open: impl FnOnce(&mut Client) -> Result<u64, ClientError>,
    ) -> Result<u64, ClientError> {
        let writable = is_writable(flags);
        let lane = self.placing(|p| p.place(ino, writable));
        let opened = open(&mut self.lock(lane));
        match opened {
            Ok(fd) => Ok(handle(lane, fd)),
            Err(e) => {
                self.placing(|p| p.remove(ino, lane, writable));
                Err(e)
            }
        }
    }

    /// Creates and opens a file with `create` on the least loaded lane; returns the file
    /// handle and the attributes. Should the inode have writable handles on another lane
    /// (a create of an existing file racing an open of it), the descriptor moves there:
    /// closed here, opened there with `flags` less the creating ones.
    pub fn create(
        &self,
        flags: i32,
        create: impl FnOnce(&mut Client) -> Result<(u64, Attr), ClientError>,
    ) -> Result<(u64, Attr), ClientError> {
        let lane = self.placement().reserve();
        let mut c = self.lock(lane);
        let (fd, attr) = match create(&mut c) {
            Ok(created) => created,
            Err(e) => {
                self.placement().cancel(lane);
                return Err(e);
            }
        };
        let writable = is_writable(flags);
        let held = self.placing(|p| p.settle(attr.ino, lane, writable));
        if held == lane {
            return Ok((handle(lane, fd), attr));
        }
        let closed = c.close(fd);
        drop(c);
        let reopen = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let moved = closed.and_then(|()| self.lock(held).open_ino(attr.ino, reopen));
        match moved {
            Ok(fd) => Ok((handle(held, fd), attr)),
            Err(e) => {
                self.placing(|p| p.remove(attr.ino, held, writable));
                Err(e)
            }
        }
    }

    /// Closes file handle `fh` of inode `ino`, opened `writable` or not.
    pub fn close(&self, fh: u64, ino: u64, writable: bool) -> Result<(), ClientError> {
        let (lane, fd) = self.lane_of_handle(fh)?;
        let closed = self.lock(lane).close(fd);
        self.placing(|p| p.remove(ino, lane, writable));
        closed
    }
}

/// Whether open(2) `flags` open for writing.
pub fn is_writable(flags: i32) -> bool {
    matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_handle_names_its_lane_and_descriptor() {
        for lane in [0, 1, 7, MAX_LANES - 1] {
            for fd in [3, 4, 1 << 40] {
                assert_eq!(split(handle(lane, fd)), (lane, fd));
            }
        }
    }

    #[test]
    fn creates_side_by_side_take_different_lanes() {
        let mut p = Placement::new(3);
        let lanes: Vec<usize> = (0..3).map(|_| p.reserve()).collect();
        assert_eq!(lanes, [0, 1, 2]);
        p.cancel(1);
        assert_eq!(p.reserve(), 1);
    }

    #[test]
    fn first_opens_spread_over_the_lanes() {
        let mut p = Placement::new(4);
        let mut lanes: Vec<usize> = (0..8).map(|ino| p.place(ino, true)).collect();
        lanes.sort_unstable();
        assert_eq!(lanes, [0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn readers_of_one_file_spread_until_a_writer_holds_it() {
        let mut p = Placement::new(3);
        let readers: Vec<usize> = (0..3).map(|_| p.place(7, false)).collect();
        assert_eq!(readers, [0, 1, 2]);
        let writer = p.place(7, true);
        assert_eq!(writer, 0);
        assert_eq!(p.place(7, false), 0, "a reader joins the writer");
        assert_eq!(p.place(7, true), 0, "a writer joins the writer");
        p.remove(7, 0, true);
        p.remove(7, 0, true);
        assert_eq!(p.writer_of(7), None);
        assert_eq!(p.place(7, false), 1, "no writer: the least loaded lane");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Open(u64, bool),
        Create(u64, bool),
        Close(usize),
        Write(usize),
        Resize(u64),
        Read(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..4, any::<bool>()).prop_map(|(i, w)| Op::Open(i, w)),
            (0u64..4, any::<bool>()).prop_map(|(i, w)| Op::Create(i, w)),
            (0usize..8).prop_map(Op::Close),
            (0usize..8).prop_map(Op::Write),
            (0u64..4).prop_map(Op::Resize),
            (0usize..8).prop_map(Op::Read),
        ]
    }

    /// What a lane's descriptors of an inode must do before a read, as the model sees it.
    #[derive(Debug, Default, Clone)]
    struct ModelIno {
        /// Changes the writer lane has not made visible.
        uncommitted: bool,
        /// Lanes whose descriptors may hold bytes from before a change through another lane.
        stale: std::collections::HashSet<usize>,
    }

    proptest! {
        /// The writable handles of an inode are on one lane, and read-only ones opened while
        /// they are open join them; counts per lane are the handles there. A read on a lane
        /// other than the writer's first makes the writer's changes visible, and a lane
        /// forgets what it read exactly when the inode changed through another lane (or was
        /// resized) since it last caught up.
        #[test]
        fn writers_share_a_lane_and_reads_elsewhere_catch_up(
            ops in proptest::collection::vec(op(), 0..200),
            lanes in 1usize..5,
        ) {
            let mut p = Placement::new(lanes);
            // (ino, lane, writable)
            let mut handles: Vec<(u64, usize, bool)> = Vec::new();
            let mut model: std::collections::HashMap<u64, ModelIno> = Default::default();
            for op in ops {
                let writer = |handles: &[(u64, usize, bool)], ino: u64| {
                    handles.iter().find(|h| h.0 == ino && h.2).map(|h| h.1)
                };
                match op {
                    Op::Open(ino, writable) | Op::Create(ino, writable) => {
                        let before = writer(&handles, ino);
                        let lanes_before: std::collections::HashSet<usize> =
                            handles.iter().filter(|h| h.0 == ino).map(|h| h.1).collect();
                        let lane = if matches!(op, Op::Open(..)) {
                            p.place(ino, writable)
                        } else {
                            let want = p.reserve();
                            let lane = p.settle(ino, want, writable);
                            prop_assert_eq!(lane, before.unwrap_or(want));
                            lane
                        };
                        if let Some(w) = before {
                            prop_assert_eq!(lane, w, "a handle joins the writer");
                        }
                        if lanes_before.len() == 1 && !lanes_before.contains(&lane) {
                            // Shared now: writes until now went uncounted.
                            let m = model.entry(ino).or_default();
                            m.uncommitted = true;
                            m.stale.extend(lanes_before);
                        }
                        handles.push((ino, lane, writable));
                    }
                    Op::Close(i) if i < handles.len() => {
                        let (ino, lane, writable) = handles.swap_remove(i);
                        p.remove(ino, lane, writable);
                        if !handles.iter().any(|h| h.0 == ino) {
                            model.remove(&ino);
                        } else if !handles.iter().any(|h| h.0 == ino && h.1 == lane) {
                            model.entry(ino).or_default().stale.remove(&lane);
                        }
                    }
                    Op::Write(i) if i < handles.len() && handles[i].2 => {
                        let (ino, lane, _) = handles[i];
                        // As `Lanes::on_write`: counted only while some inode is shared.
                        if p.shared > 0 {
                            p.changed(ino, Some(lane));
                        }
                        let m = model.entry(ino).or_default();
                        m.uncommitted = true;
                        for h in handles.iter().filter(|h| h.0 == ino && h.1 != lane) {
                            m.stale.insert(h.1);
                        }
                    }
                    Op::Resize(ino) if handles.iter().any(|h| h.0 == ino) => {
                        p.changed(ino, None);
                        let m = model.entry(ino).or_default();
                        m.uncommitted = true;
                        m.stale.extend(handles.iter().filter(|h| h.0 == ino).map(|h| h.1));
                    }
                    Op::Read(i) if i < handles.len() => {
                        let (ino, lane, _) = handles[i];
                        let w = writer(&handles, ino);
                        let m = model.entry(ino).or_default();
                        let pending = p.pending_for(ino, lane);
                        let want = w.filter(|&w| w != lane && m.uncommitted);
                        prop_assert_eq!(pending.map(|(w, _)| w), want);
                        if let Some((_, upto)) = pending {
                            p.made_visible(ino, upto);
                            m.uncommitted = false;
                        }
                        prop_assert_eq!(p.catch_up(ino, lane), m.stale.remove(&lane));
                    }
                    _ => {}
                }
                for &(ino, lane, writable) in &handles {
                    prop_assert_eq!(p.writer_of(ino), writer(&handles, ino));
                    if writable {
                        prop_assert_eq!(p.writer_of(ino), Some(lane));
                    }
                }
                for (lane, &n) in p.per_lane.iter().enumerate() {
                    prop_assert_eq!(n as usize, handles.iter().filter(|h| h.1 == lane).count());
                }
                let open: std::collections::HashSet<u64> = handles.iter().map(|h| h.0).collect();
                prop_assert_eq!(p.by_ino.len(), open.len());
                let shared = open
                    .iter()
                    .filter(|&&ino| {
                        let lanes: std::collections::HashSet<usize> =
                            handles.iter().filter(|h| h.0 == ino).map(|h| h.1).collect();
                        lanes.len() > 1
                    })
                    .count();
                prop_assert_eq!(p.shared, shared);
            }
        }
    }
}
