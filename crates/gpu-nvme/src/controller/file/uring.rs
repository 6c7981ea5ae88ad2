//! The io_uring path of the file controller: every read or write of a fetched batch whose
//! buffers are host memory goes down in one submission, straight into the submitter's buffers.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use io_uring::{IoUring, opcode, types};

use crate::controller::StatsCounters;
use crate::controller::data::{Segment, out_of_space};
use crate::memory::RegionKind;
use crate::spec::Status;

/// Whether a transfer can go through io_uring: host memory only, block aligned under O_DIRECT.
pub(super) fn reachable(segs: &[Segment], direct: bool) -> bool {
    segs.iter().all(|s| {
        s.kind == RegionKind::Host && (!direct || (s.addr % 4096 == 0 && s.len % 512 == 0))
    })
}

#[derive(Debug, Clone, Copy)]
struct Op {
    result_index: usize,
    write: bool,
    off: u64,
    len: u64,
    iov_start: usize,
    iov_count: usize,
}

/// One worker's ring and the batch being built.
pub(super) struct Batch {
    ring: IoUring,
    ops: Vec<Op>,
    iovecs: Vec<libc::iovec>,
}

impl Batch {
    /// A ring large enough for `max_batch` commands (capped by the kernel's limit).
    pub(super) fn new(max_batch: usize) -> io::Result<Self> {
        let entries = u32::try_from(max_batch.next_power_of_two().min(4096)).unwrap_or(4096);
        Ok(Self {
            ring: IoUring::new(entries)?,
            ops: Vec::new(),
            iovecs: Vec::new(),
        })
    }

    /// Queues a transfer whose result goes to `results[result_index]`.
    pub(super) fn push(
        &mut self,
        result_index: usize,
        write: bool,
        off: u64,
        len: u64,
        segs: &[Segment],
    ) {
        let iov_start = self.iovecs.len();
        self.iovecs.extend(segs.iter().map(|s| libc::iovec {
            iov_base: s.addr as *mut libc::c_void,
            iov_len: s.len,
        }));
        self.ops.push(Op {
            result_index,
            write,
            off,
            len,
            iov_start,
            iov_count: segs.len(),
        });
    }

    /// Submits every queued transfer, waits for all, and records their statuses.
    pub(super) fn complete(
        &mut self,
        file: &File,
        results: &mut [(u16, Status)],
        stats: &StatsCounters,
    ) {
        let fd = types::Fd(file.as_raw_fd());
        let capacity = self.ring.params().sq_entries() as usize;
        let ops = std::mem::take(&mut self.ops);
        for chunk in ops.chunks(capacity) {
            for (i, op) in chunk.iter().enumerate() {
                // SAFETY: the iovecs live in `self.iovecs`, which is not touched until every
                // entry of this chunk has completed below.
                let iov = unsafe { self.iovecs.as_ptr().add(op.iov_start) };
                let n = op.iov_count as u32;
                let entry = if op.write {
                    opcode::Writev::new(fd, iov, n).offset(op.off).build()
                } else {
                    opcode::Readv::new(fd, iov, n).offset(op.off).build()
                };
                // SAFETY: the buffers named by the iovecs are registered DMA memory that stays
                // valid until the command completes, and we wait for completion below.
                if unsafe { self.ring.submission().push(&entry.user_data(i as u64)) }.is_err() {
                    results[op.result_index].1 = Status::internal_error();
                }
            }
            let mut remaining = chunk.len();
            while remaining > 0 {
                if let Err(e) = self.ring.submit_and_wait(1) {
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    for op in chunk {
                        results[op.result_index].1 = Status::internal_error();
                    }
                    break;
                }
                for cqe in self.ring.completion() {
                    remaining -= 1;
                    let Some(op) = chunk.get(cqe.user_data() as usize) else {
                        continue;
                    };
                    let mut ok = u64::try_from(cqe.result()).is_ok_and(|n| n == op.len);
                    let mut failed = (cqe.result() < 0).then(|| -cqe.result());
                    if let (false, true, Ok(done)) = (ok, op.write, u64::try_from(cqe.result())) {
                        // A short write: the rest is written now, or its error says why not.
                        let iov = &self.iovecs[op.iov_start..op.iov_start + op.iov_count];
                        match finish_write(file, iov, op.off, done) {
                            Ok(()) => ok = true,
                            Err(e) => failed = e.raw_os_error(),
                        }
                    }
                    results[op.result_index].1 = match (ok, op.write) {
                        (true, write) => {
                            let (count, bytes) = if write {
                                (&stats.writes, &stats.bytes_written)
                            } else {
                                (&stats.reads, &stats.bytes_read)
                            };
                            count.fetch_add(1, Ordering::Relaxed);
                            bytes.fetch_add(op.len, Ordering::Relaxed);
                            Status::SUCCESS
                        }
                        (false, true) if out_of_space(failed) => Status::capacity_exceeded(),
                        (false, true) => Status::write_fault(),
                        (false, false) => Status::unrecovered_read_error(),
                    };
                }
            }
        }
        self.iovecs.clear();
    }
}

/// Writes what a short write left of `iovecs` (their first `done` bytes are at `off`) with
/// pwritev, until all is written or a call fails: that error is the cause the short write
/// did not say (out of space, most often).
fn finish_write(file: &File, iovecs: &[libc::iovec], off: u64, mut done: u64) -> io::Result<()> {
    let total: u64 = iovecs.iter().map(|v| v.iov_len as u64).sum();
    while done < total {
        let mut rest = Vec::with_capacity(iovecs.len());
        let mut skip = done;
        for v in iovecs {
            let len = v.iov_len as u64;
            if skip >= len {
                skip -= len;
                continue;
            }
            rest.push(libc::iovec {
                iov_base: v.iov_base.cast::<u8>().wrapping_add(skip as usize).cast(),
                iov_len: (len - skip) as usize,
            });
            skip = 0;
        }
        let at = i64::try_from(off + done).map_err(|_| io::Error::other("offset past i64"))?;
        let count = i32::try_from(rest.len()).map_err(|_| io::Error::other("too many iovecs"))?;
        // SAFETY: the iovecs name the command's registered DMA memory, which stays valid until
        // the command completes, after this call.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), rest.as_ptr(), count, at) };
        match n {
            n if n > 0 => done += n as u64,
            0 => return Err(io::ErrorKind::WriteZero.into()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}
