//! The write-ahead log of PStore's hashtables and bitmaps (PeakFS §III-C: "All hashtables use
//! write-ahead logs (WALs) to ensure recovery").
//!
//! Each operation of a worker becomes one transaction frame holding the records of every
//! table, bitmap, dentry and inode change it made:
//!
//! ```text
//! len u32 | crc32c u32 | seq u64 | records ...      (len counts the whole frame)
//! ```
//!
//! The checksum covers the filesystem id (from the superblock, so that frames of an earlier
//! format never validate), then the frame from `seq` on. Replay reads frames in order and
//! stops at the first one whose length, checksum or sequence number is wrong: a torn tail is
//! ignored, and every complete frame is applied whole. Frames are buffered in memory and
//! written at commit (group commit); the page holding the log end is rewritten by the next
//! commit. A checkpoint empties the log.
//!
//! A server also writes frames to the device before their data pages were flushed (without a
//! flush: [`super::PStore::write_through`]), so that a killed process loses nothing it
//! answered. The page cache keeps both, in full, until the machine goes down; after a power
//! cut, though, such a frame may be on the disk while the pages it names are not. So every
//! log write that follows a flush of the data pages first appends a [`Record::DataDurable`]
//! frame, and a replay after a reboot ([`Replay::keep_flushed`]) applies frames only up to the
//! last one: no frame then names pages that may hold another file's old bytes.

use std::ops::Range;

use super::inode::INODE_BYTES;
use super::table::PageRun;

/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 16;
/// Upper bound on one encoded record (a dentry with a 255-byte name).
pub const MAX_RECORD: usize = 1 + 8 + 1 + 255 + 8;
/// Bytes of a [`Record::DataDurable`] frame.
const MARK_FRAME: usize = FRAME_HEADER + 1;

/// One change to a table, bitmap, the dentry index or an inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Inode bitmap: slot taken.
    InodeAlloc {
        /// inode offset (slot)
        slot: u64,
    },
    /// Inode bitmap: slot freed.
    InodeFree {
        /// inode offset (slot)
        slot: u64,
    },
    /// Inode hashtable: ino → slot.
    InoMap {
        /// inode number
        ino: u64,
        /// inode offset
        slot: u64,
    },
    /// Inode hashtable: ino removed.
    InoUnmap {
        /// inode number
        ino: u64,
    },
    /// Page bitmap: run taken.
    PageAlloc {
        /// the pages
        run: PageRun,
    },
    /// Page bitmap: run freed.
    PageFree {
        /// the pages
        run: PageRun,
    },
    /// Block hashtable: (ino, block) → run.
    BlockMap {
        /// inode number
        ino: u64,
        /// file block
        block: u64,
        /// its pages
        run: PageRun,
    },
    /// Block hashtable: (ino, block) removed.
    BlockUnmap {
        /// inode number
        ino: u64,
        /// file block
        block: u64,
    },
    /// Dentry index: (pino, name) → value.
    DentryPut {
        /// parent directory
        pino: u64,
        /// name
        name: Vec<u8>,
        /// ino or inode offset
        value: u64,
    },
    /// Dentry index: (pino, name) removed.
    DentryDel {
        /// parent directory
        pino: u64,
        /// name
        name: Vec<u8>,
    },
    /// The new image of the inode in `slot`.
    Inode {
        /// inode offset
        slot: u64,
        /// encoded inode
        image: Box<[u8; INODE_BYTES]>,
    },
    /// The next inode number this worker hands out.
    NextIno {
        /// next ino
        next: u64,
    },
    /// Inode `ino` lost its last link: it is an orphan until [`Record::InoUnmap`] frees it
    /// (kept while a client holds it open; freed at the latest when the store opens again).
    Orphan {
        /// inode number
        ino: u64,
    },
    /// Every data page that the frames before this one name was flushed before this frame
    /// was written (see the module notes).
    DataDurable,
}

/// Errors of WAL decoding and appending.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    /// the log region cannot hold the frame; checkpoint first
    #[error("WAL full: {need} bytes needed, {free} free")]
    Full {
        /// frame bytes
        need: usize,
        /// free bytes
        free: u64,
    },
    /// a frame's records do not parse
    #[error("WAL record malformed at byte {0} of its frame")]
    Malformed(usize),
}

/// A little-endian cursor over a byte slice (WAL frames, checkpoints, superblocks).
#[derive(Debug)]
pub(super) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Self { b, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], WalError> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or(WalError::Malformed(self.at))?;
        self.at += n;
        Ok(s)
    }

    pub(super) fn u8(&mut self) -> Result<u8, WalError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u32(&mut self) -> Result<u32, WalError> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }

    pub(super) fn u64(&mut self) -> Result<u64, WalError> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }

    pub(super) fn run(&mut self) -> Result<PageRun, WalError> {
        let start = self.u64()?;
        Ok(PageRun::unpack(start, self.u32()?))
    }

    /// Whether every byte has been read.
    pub(super) fn is_done(&self) -> bool {
        self.at >= self.b.len()
    }

    pub(super) fn name(&mut self) -> Result<Vec<u8>, WalError> {
        let n = usize::from(self.u8()?);
        Ok(self.take(n)?.to_vec())
    }
}

impl Record {
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let run = |out: &mut Vec<u8>, r: &PageRun| {
            out.extend_from_slice(&r.start.to_le_bytes());
            out.extend_from_slice(&r.packed_pages().to_le_bytes());
        };
        let name = |out: &mut Vec<u8>, n: &[u8]| {
            out.push(n.len() as u8);
            out.extend_from_slice(n);
        };
        match self {
            Record::InodeAlloc { slot } => {
                out.push(1);
                out.extend_from_slice(&slot.to_le_bytes());
            }
            Record::InodeFree { slot } => {
                out.push(2);
                out.extend_from_slice(&slot.to_le_bytes());
            }
            Record::InoMap { ino, slot } => {
                out.push(3);
                out.extend_from_slice(&ino.to_le_bytes());
                out.extend_from_slice(&slot.to_le_bytes());
            }
            Record::InoUnmap { ino } => {
                out.push(4);
                out.extend_from_slice(&ino.to_le_bytes());
            }
            Record::PageAlloc { run: r } => {
                out.push(5);
                run(out, r);
            }
            Record::PageFree { run: r } => {
                out.push(6);
                run(out, r);
            }
            Record::BlockMap { ino, block, run: r } => {
                out.push(7);
                out.extend_from_slice(&ino.to_le_bytes());
                out.extend_from_slice(&block.to_le_bytes());
                run(out, r);
            }
            Record::BlockUnmap { ino, block } => {
                out.push(8);
                out.extend_from_slice(&ino.to_le_bytes());
                out.extend_from_slice(&block.to_le_bytes());
            }
            Record::DentryPut {
                pino,
                name: n,
                value,
            } => {
                out.push(9);
                out.extend_from_slice(&pino.to_le_bytes());
                name(out, n);
                out.extend_from_slice(&value.to_le_bytes());
            }
            Record::DentryDel { pino, name: n } => {
                out.push(10);
                out.extend_from_slice(&pino.to_le_bytes());
                name(out, n);
            }
            Record::Inode { slot, image } => {
                out.push(11);
                out.extend_from_slice(&slot.to_le_bytes());
                out.extend_from_slice(&image[..]);
            }
            Record::NextIno { next } => {
                out.push(12);
                out.extend_from_slice(&next.to_le_bytes());
            }
            Record::Orphan { ino } => {
                out.push(13);
                out.extend_from_slice(&ino.to_le_bytes());
            }
            Record::DataDurable => out.push(14),
        }
    }

    /// Decodes all records of a frame body.
    pub fn decode_all(body: &[u8]) -> Result<Vec<Record>, WalError> {
        let mut r = Reader::new(body);
        let mut out = Vec::new();
        while r.at < body.len() {
            let at = r.at;
            let rec = match r.u8()? {
                1 => Record::InodeAlloc { slot: r.u64()? },
                2 => Record::InodeFree { slot: r.u64()? },
                3 => Record::InoMap {
                    ino: r.u64()?,
                    slot: r.u64()?,
                },
                4 => Record::InoUnmap { ino: r.u64()? },
                5 => Record::PageAlloc { run: r.run()? },
                6 => Record::PageFree { run: r.run()? },
                7 => Record::BlockMap {
                    ino: r.u64()?,
                    block: r.u64()?,
                    run: r.run()?,
                },
                8 => Record::BlockUnmap {
                    ino: r.u64()?,
                    block: r.u64()?,
                },
                9 => Record::DentryPut {
                    pino: r.u64()?,
                    name: r.name()?,
                    value: r.u64()?,
                },
                10 => Record::DentryDel {
                    pino: r.u64()?,
                    name: r.name()?,
                },
                11 => {
                    let slot = r.u64()?;
                    let mut image = Box::new([0u8; INODE_BYTES]);
                    image.copy_from_slice(r.take(INODE_BYTES)?);
                    Record::Inode { slot, image }
                }
                12 => Record::NextIno { next: r.u64()? },
                13 => Record::Orphan { ino: r.u64()? },
                14 => Record::DataDurable,
                _ => return Err(WalError::Malformed(at)),
            };
            out.push(rec);
        }
        Ok(out)
    }
}

fn frame_crc(fs_id: u64, from_seq: &[u8]) -> u32 {
    common::hash::crc32c_append(common::hash::crc32c(&fs_id.to_le_bytes()), from_seq)
}

/// The in-memory end of the log: frames not yet written, and where the next one goes.
#[derive(Debug)]
pub struct Wal {
    fs_id: u64,
    page: usize,
    capacity: u64,
    /// Bytes of the log from `buf_start` (page-aligned) to the end.
    buf: Vec<u8>,
    buf_start: u64,
    /// Bytes of `buf` already on the device.
    written: usize,
    next_seq: u64,
    /// Log bytes up to the end of the last [`Record::DataDurable`] frame (or of the frames a
    /// replay left): frames after it want one before the next log write after a data flush.
    marked: u64,
}

/// The result of reading a log region.
#[derive(Debug)]
pub struct Replay {
    /// The complete frames, in order, each the records of one transaction.
    pub frames: Vec<Vec<Record>>,
    /// Log bytes the complete frames take.
    pub end: u64,
    /// Sequence number after the last complete frame.
    pub next_seq: u64,
    /// Frames, and their log bytes, up to the end of the last [`Record::DataDurable`] frame.
    flushed: (usize, u64),
}

impl Replay {
    /// Keeps only the frames up to the last [`Record::DataDurable`] frame: a replay after a
    /// reboot, when frames written after it may name data pages the disk never got. The
    /// sequence numbers of the frames dropped stay used, so that the frames written from
    /// here on never chain onto those still on the device.
    pub fn keep_flushed(&mut self) {
        let (frames, end) = self.flushed;
        self.frames.truncate(frames);
        self.end = end;
    }
}

impl Wal {
    /// An empty log over `capacity` bytes of pages of `page` bytes, first frame `next_seq`.
    pub fn new(fs_id: u64, page: usize, capacity: u64, next_seq: u64) -> Self {
        Self {
            fs_id,
            page,
            capacity,
            buf: Vec::new(),
            buf_start: 0,
            written: 0,
            next_seq,
            marked: 0,
        }
    }

    /// The log as [`Self::replay`] of `region` from byte `start` left it: its complete frames
    /// stay where they are, and the next frame goes after them. A log started over at its
    /// first page instead would overwrite frames that only the log holds until the next
    /// checkpoint is down.
    pub fn after_replay(
        fs_id: u64,
        page: usize,
        region: &[u8],
        start: usize,
        replay: &Replay,
    ) -> Self {
        let end = usize::try_from(replay.end)
            .ok()
            .and_then(|e| e.checked_add(start))
            .unwrap_or(usize::MAX)
            .min(region.len());
        let mut wal = Self::new(fs_id, page, region.len() as u64, replay.next_seq);
        wal.continue_after(&region[..end]);
        wal
    }

    /// Goes on after `log`, the log's bytes from its start, which are on the device (nothing of
    /// this log may be unwritten): the next frame goes after them, and the last partial page
    /// is written again, whole, with it.
    pub fn continue_after(&mut self, log: &[u8]) {
        debug_assert!(!self.has_unwritten(), "unwritten frames would be dropped");
        let from = log.len() / self.page * self.page;
        self.buf = log[from..].to_vec();
        self.buf_start = from as u64;
        self.written = self.buf.len();
        self.marked = log.len() as u64;
    }

    /// Sequence number of the next frame.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Log bytes in use.
    pub fn len(&self) -> u64 {
        self.buf_start + self.buf.len() as u64
    }

    /// Log bytes on the device: its length up to the first frame not yet written.
    pub fn written_len(&self) -> u64 {
        self.buf_start + self.written as u64
    }

    /// Whether the log holds no frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of frames not yet written.
    pub fn unwritten_bytes(&self) -> usize {
        self.buf.len() - self.written
    }

    /// Whether frames not yet written exist.
    pub fn has_unwritten(&self) -> bool {
        self.unwritten_bytes() > 0
    }

    /// Whether a frame of `body` bytes fits, with room left for the
    /// [`Record::DataDurable`] frame that may follow it.
    pub fn fits(&self, body: usize) -> bool {
        self.len() + (FRAME_HEADER + body + MARK_FRAME) as u64 <= self.capacity
    }

    /// Appends a [`Record::DataDurable`] frame, if frames came after the last one: the caller
    /// flushed the data pages that every frame so far names, and writes this frame after
    /// that flush. [`Self::fits`] kept room for it.
    pub fn mark_data_durable(&mut self) -> Result<(), WalError> {
        if self.len() > self.marked {
            self.append(&[Record::DataDurable])?;
            self.marked = self.len();
        }
        Ok(())
    }

    /// Appends one transaction frame.
    pub fn append(&mut self, records: &[Record]) -> Result<u64, WalError> {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0u8; 8]);
        self.buf.extend_from_slice(&self.next_seq.to_le_bytes());
        for r in records {
            r.encode(&mut self.buf);
        }
        let len = self.buf.len() - start;
        if self.len() > self.capacity {
            self.buf.truncate(start);
            return Err(WalError::Full {
                need: len,
                free: self.capacity - self.len(),
            });
        }
        let crc = frame_crc(self.fs_id, &self.buf[start + 8..]);
        self.buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Writes the unwritten frames with `write(first_page, bytes)` (whole pages, zero padded)
    /// and keeps the last partial page for the next commit.
    pub fn write_out<E>(
        &mut self,
        write: impl FnOnce(u64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some((first_page, upto, range)) = self.unwritten_range() else {
            return Ok(());
        };
        // Padded in place (the buffer keeps its capacity): a server writes the log through
        // before each reply to a write, and a copy of the pages cost an allocation each time.
        let padded = range.start + range.len().div_ceil(self.page) * self.page;
        self.buf.resize(padded, 0);
        let written = write(first_page, &self.buf[range.start..padded]);
        self.buf.truncate(upto);
        written?;
        self.mark_written(upto);
        Ok(())
    }

    /// The unwritten frames from the start of the page the first of them is in, unpadded (the
    /// last page may end early), as `(first page, log bytes covered, range of
    /// [`Self::buffer`])`, or `None` when all are written. Once the pages are on the device,
    /// [`Self::mark_written`] with the bytes covered records it; frames appended meanwhile
    /// stay unwritten. Appends leave that range as it is; [`Self::mark_written`] and
    /// [`Self::reset`] move it.
    pub fn unwritten_range(&self) -> Option<(u64, usize, Range<usize>)> {
        if !self.has_unwritten() {
            return None;
        }
        let from = self.written / self.page * self.page;
        let first_page = (self.buf_start + from as u64) / self.page as u64;
        Some((first_page, self.buf.len(), from..self.buf.len()))
    }

    /// The log's bytes in memory, from its first page not yet wholly written.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// Records that the first `upto` bytes of the buffer (as [`Self::unwritten_range`]
    /// returned them) are on the device: the whole pages among them leave the buffer.
    pub fn mark_written(&mut self, upto: usize) {
        let keep = upto / self.page * self.page;
        self.buf.drain(..keep);
        self.buf_start += keep as u64;
        self.written = upto - keep;
    }

    /// Empties the log after a checkpoint; sequence numbers continue.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.buf_start = 0;
        self.written = 0;
        self.marked = 0;
    }

    /// Reads the frames of a log region that start at `first_seq`; stops at the first frame
    /// that is torn, corrupt or out of sequence.
    pub fn replay(fs_id: u64, region: &[u8], first_seq: u64) -> Replay {
        let mut at = 0usize;
        let mut seq = first_seq;
        let mut frames = Vec::new();
        let mut flushed = (0, 0);
        while let Some(h) = region.get(at..at + FRAME_HEADER) {
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            let mut s = [0u8; 8];
            s.copy_from_slice(&h[8..16]);
            if len < FRAME_HEADER || u64::from_le_bytes(s) != seq {
                break;
            }
            let Some(frame) = region.get(at..at + len) else {
                break;
            };
            if frame_crc(fs_id, &frame[8..]) != crc {
                break;
            }
            let Ok(records) = Record::decode_all(&frame[FRAME_HEADER..]) else {
                break;
            };
            let mark = records.contains(&Record::DataDurable);
            frames.push(records);
            at += len;
            seq += 1;
            if mark {
                flushed = (frames.len(), at as u64);
            }
        }
        Replay {
            frames,
            end: at as u64,
            next_seq: seq,
            flushed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::InodeAlloc { slot: 3 },
            Record::InoMap { ino: 9, slot: 3 },
            Record::PageAlloc {
                run: PageRun::new(4, 2),
            },
            Record::BlockMap {
                ino: 9,
                block: 1,
                run: PageRun::new(4, 2),
            },
            Record::DentryPut {
                pino: 1,
                name: b"file.1".to_vec(),
                value: 9,
            },
            Record::Inode {
                slot: 3,
                image: Box::new([7; INODE_BYTES]),
            },
            Record::NextIno { next: 10 },
            Record::Orphan { ino: 9 },
            Record::DentryDel {
                pino: 1,
                name: vec![b'x'; 255],
            },
            Record::BlockUnmap { ino: 9, block: 1 },
            Record::PageFree {
                run: PageRun::new(4, 2),
            },
            Record::InoUnmap { ino: 9 },
            Record::InodeFree { slot: 3 },
            Record::DataDurable,
        ]
    }

    fn written(wal: &mut Wal, region: &mut [u8]) {
        wal.write_out(|page, bytes| {
            let at = page as usize * 512;
            region[at..at + bytes.len()].copy_from_slice(bytes);
            Ok::<(), ()>(())
        })
        .unwrap();
    }

    #[test]
    fn frames_replay_in_order_across_commits() {
        let mut wal = Wal::new(42, 512, 8192, 5);
        let mut region = vec![0u8; 8192];
        for i in 0..10 {
            wal.append(&sample()).unwrap();
            if i % 3 == 0 {
                written(&mut wal, &mut region);
            }
        }
        written(&mut wal, &mut region);
        let r = Wal::replay(42, &region, 5);
        assert_eq!(r.frames.len(), 10);
        assert!(r.frames.iter().all(|f| *f == sample()));
        assert_eq!((r.end, r.next_seq), (wal.len(), 15));
        assert!(
            Wal::replay(43, &region, 5).frames.is_empty(),
            "another fs id"
        );
        assert!(
            Wal::replay(42, &region, 6).frames.is_empty(),
            "another epoch"
        );
    }

    #[test]
    fn a_log_reopened_after_replay_appends_after_its_frames() {
        let mut wal = Wal::new(42, 512, 8192, 5);
        let mut region = vec![0u8; 8192];
        for _ in 0..3 {
            wal.append(&sample()).unwrap();
        }
        written(&mut wal, &mut region);
        let r = Wal::replay(42, &region, 5);
        let mut again = Wal::after_replay(42, 512, &region, 0, &r);
        assert_eq!((again.len(), again.next_seq()), (r.end, 8));
        assert!(!again.has_unwritten());
        again.append(&sample()).unwrap();
        written(&mut again, &mut region);
        let r = Wal::replay(42, &region, 5);
        assert_eq!(
            (r.frames.len(), r.next_seq),
            (4, 9),
            "the first three and the new one"
        );
        assert_eq!(r.end, again.len());
    }

    #[test]
    fn frames_appended_while_a_snapshot_is_written_stay_unwritten() {
        let mut wal = Wal::new(42, 512, 8192, 5);
        let mut region = vec![0u8; 8192];
        for _ in 0..3 {
            wal.append(&sample()).unwrap();
        }
        let (page, upto, range) = wal.unwritten_range().unwrap();
        assert_eq!((page, range.start), (0, 0));
        let pages = wal.buffer()[range].to_vec();
        // Two more frames while the snapshot is on its way.
        wal.append(&sample()).unwrap();
        wal.append(&sample()).unwrap();
        region[..pages.len()].copy_from_slice(&pages);
        wal.mark_written(upto);
        assert!(wal.has_unwritten());
        assert_eq!(
            Wal::replay(42, &region, 5).frames.len(),
            3,
            "the snapshot's frames"
        );
        written(&mut wal, &mut region);
        assert!(!wal.has_unwritten() && wal.unwritten_range().is_none());
        let r = Wal::replay(42, &region, 5);
        assert_eq!((r.frames.len(), r.end), (5, wal.len()));
    }

    #[test]
    fn a_torn_or_corrupt_frame_ends_the_replay_and_earlier_frames_survive() {
        let mut wal = Wal::new(1, 512, 8192, 0);
        let mut region = vec![0u8; 8192];
        for _ in 0..3 {
            wal.append(&sample()).unwrap();
        }
        written(&mut wal, &mut region);
        let frame = (wal.len() / 3) as usize;
        for cut in [frame * 2 + 1, frame * 3 - 1] {
            let mut torn = region.clone();
            // What never reached the disk holds older bytes, not necessarily zeros.
            torn[cut..].fill(0xEE);
            assert_eq!(Wal::replay(1, &torn, 0).frames.len(), 2, "cut at {cut}");
        }
        let mut bad = region.clone();
        bad[frame + 40] ^= 1;
        assert_eq!(Wal::replay(1, &bad, 0).frames.len(), 1);
    }

    #[test]
    fn a_full_log_refuses_the_frame_and_stays_intact() {
        let mut wal = Wal::new(1, 512, 700, 0);
        wal.append(&sample()).unwrap();
        let len = wal.len();
        assert!(matches!(wal.append(&sample()), Err(WalError::Full { .. })));
        assert_eq!(wal.len(), len);
        assert_eq!(wal.next_seq(), 1);
    }

    #[test]
    fn a_replay_after_a_reboot_stops_at_the_last_data_durable_mark_and_skips_the_rest_s_numbers() {
        let rec = [Record::NextIno { next: 7 }];
        let mut wal = Wal::new(42, 512, 8192, 5);
        let mut region = vec![0u8; 8192];
        // Nothing logged since the last mark: no second mark.
        wal.mark_data_durable().unwrap();
        assert!(wal.is_empty());
        wal.append(&rec).unwrap();
        wal.append(&rec).unwrap();
        wal.mark_data_durable().unwrap();
        let marked = wal.len();
        wal.mark_data_durable().unwrap();
        assert_eq!(
            wal.len(),
            marked,
            "one mark per flush that has frames to cover"
        );
        // Written before their data pages were flushed.
        wal.append(&rec).unwrap();
        wal.append(&rec).unwrap();
        written(&mut wal, &mut region);

        let all = Wal::replay(42, &region, 5);
        assert_eq!((all.frames.len(), all.next_seq), (5, 10));
        let mut flushed = Wal::replay(42, &region, 5);
        flushed.keep_flushed();
        assert_eq!(flushed.frames.len(), 3, "two frames and their mark");
        assert_eq!(flushed.frames[2], vec![Record::DataDurable]);
        assert_eq!((flushed.end, flushed.next_seq), (marked, 10));

        // The log goes on after the mark with numbers the dropped frames never had.
        let mut again = Wal::after_replay(42, 512, &region, 0, &flushed);
        assert_eq!((again.len(), again.next_seq()), (marked, 10));
        again.append(&rec).unwrap();
        written(&mut again, &mut region);
        let mut r = Wal::replay(42, &region, 5);
        assert_eq!(
            r.frames.len(),
            3,
            "the new frame does not chain onto the mark"
        );
        r.keep_flushed();
        assert_eq!(r.frames.len(), 3);

        // A log with no mark at all keeps nothing after a reboot.
        let mut bare = Wal::new(42, 512, 8192, 0);
        bare.append(&rec).unwrap();
        let mut region = vec![0u8; 8192];
        written(&mut bare, &mut region);
        let mut r = Wal::replay(42, &region, 0);
        r.keep_flushed();
        assert_eq!((r.frames.len(), r.end, r.next_seq), (0, 0, 1));
    }

    #[test]
    fn a_frame_that_fits_leaves_room_for_its_mark() {
        let rec = [Record::NextIno { next: 7 }];
        let body = 9;
        let capacity = (2 * FRAME_HEADER + body + 1) as u64;
        let mut wal = Wal::new(1, 512, capacity, 0);
        assert!(wal.fits(body));
        wal.append(&rec).unwrap();
        assert!(!wal.fits(0));
        wal.mark_data_durable().unwrap();
        assert_eq!(wal.len(), capacity);
    }
}
