//! GoFS's batched file API (papers/gofs.md §3.3 "batched node (bnode)" and §3.7
//! batch_open/batch_read/batch_write/batch_close): a bnode opens every file of one directory
//! at once (one path resolution, one readdir, the attributes of all entries) and keeps per file
//! its name hash, name, size and inode number. Batched reads and writes then go straight to the
//! inodes, spread over worker threads, with no per-file path walk or open/close.

use std::sync::Arc;

use crate::error::FsError;
use crate::fs::{FileType, Fs, Ino};
use crate::posix::{Posix, PosixError, Result};

/// One file of a [`Bnode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFile {
    /// Its name in the directory.
    pub name: Vec<u8>,
    /// CRC32C of the name (what the paper's bnode keeps to find a file by name quickly).
    pub name_hash: u32,
    /// Its inode number.
    pub ino: Ino,
    /// Its size in bytes when opened (updated by [`Posix::batch_write`]).
    pub size: u64,
}

/// A batch node: the regular files of one directory, opened together.
#[derive(Debug)]
pub struct Bnode {
    /// The directory's inode number (the bnode shares it, as in the paper's Figure 4).
    pub dir: Ino,
    /// The opened files, in the directory's order (the index is the file's batch id).
    pub files: Vec<BatchFile>,
    fs: Arc<Fs>,
    closed: bool,
}

/// One request of a batched read or write: `len` bytes of file `file` (an index into
/// [`Bnode::files`]) at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRequest {
    /// Index of the file in the bnode.
    pub file: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes to transfer.
    pub len: usize,
}

impl Bnode {
    /// Total bytes of all files.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Index of the file called `name`.
    pub fn find(&self, name: &[u8]) -> Option<usize> {
        let h = common::hash::crc32c(name);
        self.files
            .iter()
            .position(|f| f.name_hash == h && f.name == name)
    }

    /// One request per file for its whole content, laid out back to back (the paper's
    /// boffset[]): what [`Posix::batch_read`] needs to fetch every file.
    pub fn whole_files(&self) -> Vec<BatchRequest> {
        self.files
            .iter()
            .enumerate()
            .map(|(file, f)| BatchRequest {
                file,
                offset: 0,
                len: usize::try_from(f.size).unwrap_or(usize::MAX),
            })
            .collect()
    }

    fn check(&self, reqs: &[BatchRequest], buf_len: usize) -> Result<usize> {
        if self.closed {
            return Err(FsError::InvalidArgument("the bnode is closed".into()).into());
        }
        let mut total = 0usize;
        for r in reqs {
            if r.file >= self.files.len() {
                return Err(FsError::InvalidArgument(format!(
                    "batch request for file {} of a bnode with {} files",
                    r.file,
                    self.files.len()
                ))
                .into());
            }
            total = total.saturating_add(r.len);
        }
        if total > buf_len {
            return Err(FsError::InvalidArgument(format!(
                "batch requests need {total} bytes, the buffer holds {buf_len}"
            ))
            .into());
        }
        Ok(total)
    }

    fn release(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.closed, true) {
            return Ok(());
        }
        let mut first_err = None;
        for f in &self.files {
            if let Err(e) = self.fs.release_inode(f.ino) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), |e| Err(e.into()))
    }
}

impl Drop for Bnode {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!(dir = self.dir, "closing a bnode at drop: {e}");
        }
    }
}

/// Splits `reqs` into at most about `parts` runs of consecutive requests with about the same
/// number of bytes each; returns the index ranges.
fn group_bounds(reqs: &[BatchRequest], parts: usize) -> Vec<std::ops::Range<usize>> {
    let total: usize = reqs.iter().map(|r| r.len).sum();
    let per = total.div_ceil(parts.max(1)).max(1);
    let mut bounds = Vec::new();
    let (mut start, mut bytes) = (0usize, 0usize);
    for (i, r) in reqs.iter().enumerate() {
        if bytes >= per {
            bounds.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += r.len;
    }
    bounds.push(start..reqs.len());
    bounds
}

/// Pairs each request with its piece of `buf` (laid out back to back), grouped for threads.
fn split_mut<'a>(
    reqs: &[BatchRequest],
    mut buf: &'a mut [u8],
    parts: usize,
) -> Vec<Vec<(BatchRequest, &'a mut [u8])>> {
    group_bounds(reqs, parts)
        .into_iter()
        .map(|range| {
            reqs[range]
                .iter()
                .map(|r| {
                    let (piece, rest) = std::mem::take(&mut buf).split_at_mut(r.len);
                    buf = rest;
                    (*r, piece)
                })
                .collect()
        })
        .collect()
}

/// Pairs each request with its piece of `data` (laid out back to back), grouped for threads.
fn split_ref<'a>(
    reqs: &[BatchRequest],
    mut data: &'a [u8],
    parts: usize,
) -> Vec<Vec<(BatchRequest, &'a [u8])>> {
    group_bounds(reqs, parts)
        .into_iter()
        .map(|range| {
            reqs[range]
                .iter()
                .map(|r| {
                    let (piece, rest) = data.split_at(r.len);
                    data = rest;
                    (*r, piece)
                })
                .collect()
        })
        .collect()
}

/// Runs `op` on every group on its own thread (the calling thread takes the first group);
/// returns the per-request results in request order.
fn run_groups<P: Send>(
    groups: Vec<Vec<(BatchRequest, P)>>,
    op: impl Fn(BatchRequest, P) -> std::result::Result<usize, FsError> + Sync,
) -> Result<Vec<usize>> {
    let op = &op;
    let run = move |g: Vec<(BatchRequest, P)>| {
        g.into_iter()
            .map(|(r, p)| op(r, p))
            .collect::<std::result::Result<Vec<usize>, FsError>>()
    };
    let mut groups = groups.into_iter();
    let first = groups.next().unwrap_or_default();
    let results: Vec<std::result::Result<Vec<usize>, FsError>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups.map(|g| s.spawn(move || run(g))).collect();
        let mut out = vec![run(first)];
        for h in handles {
            out.push(h.join().unwrap_or_else(|_| {
                Err(FsError::InvalidArgument("a batch worker panicked".into()))
            }));
        }
        out
    });
    let mut done = Vec::new();
    for r in results {
        done.extend(r.map_err(PosixError::from)?);
    }
    Ok(done)
}

impl Posix {
    /// Opens every regular file of the directory at `dir_path` as one bnode (paper §3.7
    /// batch_open without fnames[]).
    pub fn batch_open(&self, dir_path: &str) -> Result<Bnode> {
        self.batch_open_names(dir_path, None)
    }

    /// Opens the files `names` of the directory at `dir_path` (all regular files when `None`)
    /// as one bnode; the files' indexes follow `names` (or the directory order).
    pub fn batch_open_names(&self, dir_path: &str, names: Option<&[&[u8]]>) -> Result<Bnode> {
        let dir = self.resolve(dir_path, true)?;
        if dir.kind != FileType::Directory {
            return Err(FsError::NotDir.into());
        }
        let fs = Arc::clone(self.fs());
        let entries: Vec<(Vec<u8>, Ino)> = match names {
            None => fs
                .readdir(dir.ino)?
                .into_iter()
                .filter(|e| e.kind == FileType::Regular)
                .map(|e| (e.name, e.ino))
                .collect(),
            Some(names) => {
                let mut v = Vec::with_capacity(names.len());
                for n in names {
                    let st = fs.lookup(dir.ino, n)?;
                    if st.kind != FileType::Regular {
                        return Err(FsError::InvalidArgument(format!(
                            "{} is not a regular file",
                            String::from_utf8_lossy(n)
                        ))
                        .into());
                    }
                    v.push((n.to_vec(), st.ino));
                }
                v
            }
        };
        let mut bnode = Bnode {
            dir: dir.ino,
            files: Vec::with_capacity(entries.len()),
            fs: Arc::clone(&fs),
            closed: false,
        };
        for (name, ino) in entries {
            let size = fs.getattr(ino)?.size;
            fs.open_inode(ino)?;
            bnode.files.push(BatchFile {
                name_hash: common::hash::crc32c(&name),
                name,
                ino,
                size,
            });
        }
        Ok(bnode)
    }

    /// Reads every request into `buf`, request `i` at the sum of the earlier lengths (the
    /// paper's boffset[]); returns the bytes read per request (short at end of file). The
    /// requests are spread over `threads` worker threads.
    pub fn batch_read(
        &self,
        bnode: &Bnode,
        reqs: &[BatchRequest],
        buf: &mut [u8],
        threads: usize,
    ) -> Result<Vec<usize>> {
        let total = bnode.check(reqs, buf.len())?;
        let groups = split_mut(reqs, &mut buf[..total], threads);
        let fs = self.fs();
        if groups.len() == 1 {
            // One thread: the whole batch goes to the engine at once (addresses resolved
            // together, the data reads kept in flight together).
            let mut many: Vec<(Ino, u64, &mut [u8])> = groups
                .into_iter()
                .flatten()
                .map(|(r, piece)| (bnode.files[r.file].ino, r.offset, piece))
                .collect();
            return Ok(fs.read_many(&mut many)?);
        }
        run_groups(groups, |r, piece: &mut [u8]| {
            fs.read(bnode.files[r.file].ino, r.offset, piece)
        })
    }

    /// Writes every request from `data` (laid out like [`batch_read`](Self::batch_read)'s
    /// buffer); returns the bytes written per request and updates the files' sizes.
    pub fn batch_write(
        &self,
        bnode: &mut Bnode,
        reqs: &[BatchRequest],
        data: &[u8],
        threads: usize,
    ) -> Result<Vec<usize>> {
        let total = bnode.check(reqs, data.len())?;
        let groups = split_ref(reqs, &data[..total], threads);
        let fs = self.fs();
        let files = &bnode.files;
        let done = run_groups(groups, |r, piece: &[u8]| {
            fs.write(files[r.file].ino, r.offset, piece)
        })?;
        for (r, n) in reqs.iter().zip(&done) {
            let f = &mut bnode.files[r.file];
            f.size = f.size.max(r.offset + *n as u64);
        }
        Ok(done)
    }

    /// Closes the bnode: every file's open reference is given back.
    pub fn batch_close(&self, mut bnode: Bnode) -> Result<()> {
        bnode.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(file: usize, len: usize) -> BatchRequest {
        BatchRequest {
            file,
            offset: 0,
            len,
        }
    }

    #[test]
    fn split_keeps_request_order_and_buffer_layout() {
        let reqs = [req(0, 3), req(1, 1), req(2, 4), req(3, 2)];
        let mut buf: Vec<u8> = (0..10).collect();
        let groups = split_mut(&reqs, &mut buf, 3);
        let flat: Vec<(usize, Vec<u8>)> = groups
            .into_iter()
            .flatten()
            .map(|(r, s)| (r.file, s.to_vec()))
            .collect();
        assert_eq!(
            flat,
            vec![
                (0, vec![0, 1, 2]),
                (1, vec![3]),
                (2, vec![4, 5, 6, 7]),
                (3, vec![8, 9])
            ]
        );
        let data: Vec<u8> = (0..10).collect();
        let same: Vec<(usize, Vec<u8>)> = split_ref(&reqs, &data, 3)
            .into_iter()
            .flatten()
            .map(|(r, s)| (r.file, s.to_vec()))
            .collect();
        assert_eq!(same, flat);
    }

    #[test]
    fn group_bounds_cover_all_requests_in_about_the_requested_groups() {
        let reqs: Vec<BatchRequest> = (0..100).map(|i| req(i, 16)).collect();
        let bounds = group_bounds(&reqs, 4);
        assert_eq!(bounds, vec![0..25, 25..50, 50..75, 75..100]);
        assert_eq!(group_bounds(&[], 4), vec![0..0]);
    }
}
