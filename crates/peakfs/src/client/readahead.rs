//! The client's read cache with read-ahead (PeakFS §III-D), per open file, kept as a stream
//! of READs in flight: a reader that reaches the data it asked for gets it as soon as the
//! READs holding it are answered, and every read sends the next ones, so that the servers
//! read and send them while the reader consumes these.
//!
//! A read-ahead asked for as one request of the whole window (what this client did before)
//! cost a reader the window's storage read, its transfer and its copy one after another
//! (the server answers a READ when all of it is read): IOR N-N reads on one server and one
//! client on this repository's 2-core box moved 0.9 GB/s against 3.4-4.7 GB/s of the XFER
//! ceiling. Cut into pieces of [`READ_PIECE`] bytes, the server sends one piece while it reads
//! the next, and the client receives it meanwhile.
//!
//! Each READ is a *run*: `len` bytes at file offset `at`, in flight or arrived. Runs are kept
//! in file-offset order and never overlap. A read that the runs cover takes its bytes out of
//! them (a read of exactly one run gets that run's buffer, no copy); runs that end at or
//! before the read's end are dropped. A read they do not cover drops them all (replies still
//! to come are discarded on arrival) and starts again at its offset.

use std::collections::VecDeque;

use super::ClientError;
use super::conn::{Conns, Ticket};

/// Bytes of one READ of a sequential read-ahead (file-based data; block-based data is cut at
/// its blocks, which are smaller).
pub const READ_PIECE: u64 = 256 << 10;

/// How the read-ahead goes on after the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// Where the next range to send starts.
    pub next: u64,
    /// Bytes of each range sent.
    pub len: u64,
    /// Distance from one range to the next: `len` for a sequential reader, the reader's
    /// stride for a strided one.
    pub step: u64,
    /// Bytes kept in flight or arrived from the reader's offset on (its read included).
    pub budget: u64,
}

#[derive(Debug)]
enum RunData {
    Sent(Ticket),
    Ready(Vec<u8>),
}

/// One READ: `len` bytes at file offset `at`.
#[derive(Debug)]
struct Run {
    at: u64,
    len: u64,
    data: RunData,
}

impl Run {
    fn end(&self) -> u64 {
        self.at + self.len
    }
}

/// One open file's read-ahead.
#[derive(Debug, Default)]
pub struct ReadAhead {
    runs: VecDeque<Run>,
    stream: Option<Stream>,
}

impl ReadAhead {
    /// Drops every run; the replies of those in flight are discarded when they arrive.
    pub fn clear(&mut self, conns: &mut Conns) {
        for run in self.runs.drain(..) {
            if let RunData::Sent(t) = run.data {
                conns.abandon(t);
            }
        }
        self.stream = None;
    }

    /// Starts again (after [`Self::clear`]) with `stream`, or with none: what is sent then is
    /// only what one read asked for.
    pub fn restart(&mut self, stream: Option<Stream>) {
        debug_assert!(self.runs.is_empty());
        self.stream = stream;
    }

    /// The stream to go on with, if any.
    pub fn stream(&self) -> Option<Stream> {
        self.stream
    }

    /// Records that the stream's next range went out up to `next`.
    pub fn advance(&mut self, next: u64) {
        if let Some(s) = self.stream.as_mut() {
            s.next = next;
        }
    }

    /// Files READ `ticket` of `len` bytes at `at`; it must start at or after the last run's end.
    pub fn push(&mut self, at: u64, len: u64, ticket: Ticket) {
        debug_assert!(self.runs.back().is_none_or(|r| r.end() <= at));
        self.runs.push_back(Run {
            at,
            len,
            data: RunData::Sent(ticket),
        });
    }

    /// True if the runs hold every byte of `[offset, end)`.
    fn covers(&self, offset: u64, end: u64) -> bool {
        let mut at = offset;
        for run in &self.runs {
            if run.end() <= at {
                continue;
            }
            if run.at > at {
                return false;
            }
            at = run.end();
            if at >= end {
                return true;
            }
        }
        at >= end
    }

    /// True if a read of `[offset, end)` goes on from here: the runs hold it, or hold it up to
    /// where a sequential stream goes on from (which sends the rest).
    pub fn serves(&self, offset: u64, end: u64) -> bool {
        self.covers(offset, end)
            || self
                .stream
                .is_some_and(|s| s.step == s.len && offset <= s.next && self.covers(offset, s.next))
    }

    /// Bytes the runs hold from `from` on.
    pub fn ahead_of(&self, from: u64) -> u64 {
        self.runs
            .iter()
            .filter(|r| r.end() > from)
            .map(|r| r.end() - r.at.max(from))
            .sum()
    }

    /// Takes `[offset, end)`, which the runs must hold ([`Self::serves`], once the stream sent
    /// the rest), waiting for the runs in flight that hold it; runs ending at or before `end`
    /// are dropped. A reply short of its run (a hole's end, the end of the file) reads as
    /// zeros. On a failure every run is dropped.
    pub fn take(
        &mut self,
        conns: &mut Conns,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u8>, ClientError> {
        let r = self.take_covered(conns, offset, end);
        if r.is_err() {
            self.clear(conns);
        }
        r
    }

    fn take_covered(
        &mut self,
        conns: &mut Conns,
        offset: u64,
        end: u64,
    ) -> Result<Vec<u8>, ClientError> {
        while let Some(run) = self.runs.front()
            && run.end() <= offset
        {
            if let Some(Run {
                data: RunData::Sent(t),
                ..
            }) = self.runs.pop_front()
            {
                conns.abandon(t);
            }
        }
        let first = self.runs.front().ok_or(ClientError::Internal(
            "a read the read-ahead does not cover",
        ))?;
        if first.at == offset && first.end() == end {
            let run = self.runs.pop_front();
            return run.map_or(Err(ClientError::Internal("a run vanished")), |run| {
                arrived(conns, run)
            });
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut i = 0;
        while (out.len() as u64) < end - offset {
            let at = offset + out.len() as u64;
            let run = self
                .runs
                .get_mut(i)
                .filter(|r| r.at <= at)
                .ok_or(ClientError::Internal(
                    "a read the read-ahead does not cover",
                ))?;
            if let RunData::Sent(t) = run.data {
                let mut b = conns.wait(t)?;
                b.resize(run.len as usize, 0);
                run.data = RunData::Ready(b);
            }
            let RunData::Ready(b) = &run.data else {
                return Err(ClientError::Internal("a run still in flight"));
            };
            let s = (at - run.at) as usize;
            let take = (run.len - (at - run.at)).min(end - at) as usize;
            out.extend_from_slice(&b[s..s + take]);
            i += 1;
        }
        while self.runs.front().is_some_and(|r| r.end() <= end) {
            self.runs.pop_front();
        }
        Ok(out)
    }
}

/// The bytes of `run`, waiting for them if they are in flight.
fn arrived(conns: &mut Conns, run: Run) -> Result<Vec<u8>, ClientError> {
    let mut b = match run.data {
        RunData::Sent(t) => conns.wait(t)?,
        RunData::Ready(b) => b,
    };
    b.resize(run.len as usize, 0);
    Ok(b)
}
