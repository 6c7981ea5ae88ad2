//! Read-ahead for sequential readers (papers/gofs.md §3.3, per-file state kept by the host
//! engine; the same idea as the kernel's read-ahead): when a read continues where the previous
//! one on the inode ended, the engine reads a whole window of the file (128 KiB, doubling up
//! to 512 KiB while the reader stays sequential) with multi-block commands, and the following
//! small reads are copied from it without a device command.
//!
//! A window holds file data, never block addresses, so the cleaner moving blocks does not
//! stale it. It is stamped with the inode's data generation read under the engine lock when
//! its addresses were resolved; a write or truncate of the inode bumps the generation after
//! its engine work while it still holds its range lock, and a reader checks the stamp while
//! holding its own, so an overlapping change is either wholly before the check (the stamp
//! differs: the window is not used) or wholly after the read. A new inode bumps its
//! generation too, so a window of a freed inode number never serves its next file.

use crate::format::BLOCK_SIZE;

/// Blocks of the first window (128 KiB).
pub const FIRST_WINDOW: usize = 32;
/// Blocks of the largest window (512 KiB).
pub const MAX_WINDOW: usize = 128;
/// Bytes all windows together may hold; past it sequential reads go to the device directly.
pub const BUDGET: usize = 64 << 20;

/// What a window's data reflects: the inode's data generation.
pub type Stamp = u64;

/// Bytes held by the windows of all inodes (against [`BUDGET`]).
pub type Budget = super::budget::Budget<BUDGET>;

/// The read-ahead state of one inode.
#[derive(Debug, Default)]
pub struct ReadAhead {
    /// what `data` reflects; `None` = no window
    stamp: Option<Stamp>,
    /// file offset of `data[0]` (block-aligned)
    start: u64,
    /// valid bytes of `data`
    len: usize,
    /// whether the window ends at the end of the file
    eof: bool,
    /// the window (its capacity is charged to the [`Budget`])
    data: Vec<u8>,
    /// where a read continuing the previous one starts
    next: u64,
    /// blocks of the next window
    window: usize,
}

/// A window to fill, handed out by [`ReadAhead::miss`] and returned with [`ReadAhead::fill`].
#[derive(Debug)]
pub struct Fill {
    /// file offset of the window (block-aligned)
    pub start: u64,
    /// the buffer to read into, `window` bytes long
    pub data: Vec<u8>,
}

impl ReadAhead {
    /// Copies `buf.len()` bytes at `off` from the window when it is current (`stamp`) and
    /// covers them (or reaches the end of the file); returns the bytes copied.
    pub fn serve(&mut self, stamp: Stamp, off: u64, buf: &mut [u8]) -> Option<usize> {
        if self.stamp != Some(stamp) || off < self.start {
            return None;
        }
        let end = self.start + self.len as u64;
        let want = off.saturating_add(buf.len() as u64);
        if want > end && !self.eof {
            return None;
        }
        let n = (want.min(end)).saturating_sub(off) as usize;
        if n > 0 {
            let from = (off - self.start) as usize;
            buf[..n].copy_from_slice(&self.data[from..from + n]);
        }
        self.next = off + n as u64;
        Some(n)
    }

    /// Records a read of `len` bytes at `off` that [`serve`](Self::serve) could not answer.
    /// When it continues the previous read (and is smaller than a window), returns the window
    /// to read, its buffer charged to `budget`; the caller reads it and hands it to
    /// [`fill`](Self::fill).
    pub fn miss(&mut self, off: u64, len: usize, budget: &Budget) -> Option<Fill> {
        let sequential = off == self.next && off != 0;
        self.next = off.saturating_add(len as u64);
        if !sequential {
            self.window = FIRST_WINDOW;
            return None;
        }
        let blocks = self.window.clamp(FIRST_WINDOW, MAX_WINDOW);
        let bytes = blocks * BLOCK_SIZE;
        if len >= bytes {
            return None;
        }
        let cap = self.data.capacity();
        if cap < bytes {
            if !budget.take(bytes - cap) {
                return None;
            }
            self.data.reserve_exact(bytes - self.data.len());
            // Charge what the allocator really gave.
            let extra = self.data.capacity() - cap - (bytes - cap);
            if extra > 0 && !budget.take(extra) {
                budget.give(bytes - cap);
                self.drop_window(budget);
                return None;
            }
        }
        self.window = (blocks * 2).min(MAX_WINDOW);
        self.stamp = None;
        let mut data = std::mem::take(&mut self.data);
        data.resize(bytes, 0);
        Some(Fill {
            start: off - off % BLOCK_SIZE as u64,
            data,
        })
    }

    /// Installs a window read at `stamp`: `got` bytes of `fill.data` are file data, and
    /// `got < fill.data.len()` means the file ended there. `None`: the read failed or found
    /// no block data, so the buffer is only kept for reuse. A buffer another reader of the
    /// inode installed meanwhile is freed (its bytes given back to `budget`).
    pub fn fill(&mut self, fill: Fill, read: Option<(Stamp, usize)>, budget: &Budget) {
        let Fill { start, data } = fill;
        budget.give(self.data.capacity());
        self.data = data;
        match read {
            Some((stamp, got)) => {
                self.stamp = Some(stamp);
                self.start = start;
                self.len = got.min(self.data.len());
                self.eof = got < self.data.len();
            }
            None => self.stamp = None,
        }
    }

    /// Frees the window and gives its bytes back to `budget`.
    pub fn drop_window(&mut self, budget: &Budget) {
        budget.give(self.data.capacity());
        self.data = Vec::new();
        self.stamp = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = BLOCK_SIZE as u64;

    fn filled(ra: &mut ReadAhead, budget: &Budget, off: u64, stamp: Stamp, file: u64) {
        let mut f = ra.miss(off, BLOCK_SIZE, budget).expect("a window");
        let got = (file.saturating_sub(f.start) as usize).min(f.data.len());
        for (i, b) in f.data[..got].iter_mut().enumerate() {
            *b = ((f.start + i as u64) / B) as u8;
        }
        ra.fill(f, Some((stamp, got)), budget);
    }

    #[test]
    fn a_sequential_reader_gets_a_window_and_a_random_one_does_not() {
        let budget = Budget::default();
        let mut ra = ReadAhead::default();
        assert!(ra.miss(0, BLOCK_SIZE, &budget).is_none(), "first read at 0");
        assert!(ra.miss(9 * B, BLOCK_SIZE, &budget).is_none(), "a jump");
        filled(&mut ra, &budget, 10 * B, 1, 1 << 30);
        let mut buf = [0u8; BLOCK_SIZE];
        assert_eq!(ra.serve(1, 11 * B, &mut buf), Some(BLOCK_SIZE));
        assert!(buf.iter().all(|&b| b == 11));
        assert_eq!(ra.serve(2, 12 * B, &mut buf), None, "stale stamp");
        assert_eq!(ra.serve(1, 9 * B, &mut buf), None, "before the window");
        let end = 10 * B + (FIRST_WINDOW as u64) * B;
        assert_eq!(ra.serve(1, end - 100, &mut buf), None, "past the window");
        assert_eq!(budget.held(), ra.data.capacity());
        ra.drop_window(&budget);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn windows_grow_to_the_maximum_and_stop_at_the_end_of_file() {
        let budget = Budget::default();
        let mut ra = ReadAhead {
            next: B,
            ..ReadAhead::default()
        };
        let mut sizes = Vec::new();
        for _ in 0..4 {
            let next = ra.next;
            let f = ra.miss(next, BLOCK_SIZE, &budget).expect("a window");
            sizes.push(f.data.len() / BLOCK_SIZE);
            ra.next = f.start + f.data.len() as u64;
            ra.fill(f, None, &budget);
        }
        assert_eq!(sizes, [32, 64, 128, 128]);
        let file = ra.next + 3 * B + 100;
        let next = ra.next;
        filled(&mut ra, &budget, next, 7, file);
        let mut buf = [0u8; BLOCK_SIZE];
        let off = file - 100;
        assert_eq!(ra.serve(7, off, &mut buf), Some(100), "short at EOF");
        assert_eq!(ra.serve(7, file + B, &mut buf), Some(0), "past EOF");
    }

    #[test]
    fn two_readers_filling_one_inode_at_once_leave_only_one_buffer_charged() {
        let budget = Budget::default();
        let mut ra = ReadAhead {
            next: B,
            ..ReadAhead::default()
        };
        let a = ra.miss(B, BLOCK_SIZE, &budget).expect("a window");
        let b = ra
            .miss(2 * B, BLOCK_SIZE, &budget)
            .expect("a second window");
        ra.fill(a, Some((1, FIRST_WINDOW * BLOCK_SIZE)), &budget);
        ra.fill(b, Some((1, 2 * FIRST_WINDOW * BLOCK_SIZE)), &budget);
        assert_eq!(budget.held(), ra.data.capacity());
        ra.drop_window(&budget);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn the_budget_caps_the_bytes_of_all_windows() {
        let budget = Budget::default();
        assert!(budget.take(BUDGET));
        let mut ra = ReadAhead {
            next: B,
            ..ReadAhead::default()
        };
        assert!(ra.miss(B, BLOCK_SIZE, &budget).is_none(), "over budget");
        budget.give(BUDGET);
        assert!(ra.miss(2 * B, BLOCK_SIZE, &budget).is_some());
    }
}
