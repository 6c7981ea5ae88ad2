//! A tiny pRPC test client (raw protocol requests over fabric's RpcClient) and cluster helpers
//! shared by the server integration tests.

#![allow(dead_code, reason = "each test crate uses a subset")]

use std::time::Duration;

use fabric::{
    Connection, Opcode, RpcClient, TcpConnection, TcpTransport, Transport, TransportError,
};
use peakfs::master::proto::ClusterView;
use peakfs::placement::{DataDist, Hint, Layout, home_lambda, name_lambda};
use peakfs::protocol::{Attr, Errno, LinkFlags, Removed, Reply, Request, SetAttr, UnlinkFlags};

/// Regular file mode.
pub const REG: u32 = libc::S_IFREG | 0o644;
/// Directory mode.
pub const DIR: u32 = libc::S_IFDIR | 0o755;

/// A client connected to every server of a cluster view.
pub struct Client {
    pub layout: Layout,
    pub conns: Vec<RpcClient<TcpConnection>>,
}

/// An owned reply payload or the errno of an error reply.
pub type Res = Result<Vec<u8>, Errno>;

impl Client {
    /// Connects to every server of `view`.
    pub fn connect(view: &ClusterView) -> Self {
        let layout = Layout::new(view.servers_expected, view.workers, view.block_size).unwrap();
        let t = TcpTransport::default();
        let conns = view
            .servers
            .iter()
            .map(|s| {
                let c = t.connect(&s.data_addr, Duration::from_secs(5)).unwrap();
                RpcClient::new(c, 64, Duration::from_secs(20))
            })
            .collect();
        Self { layout, conns }
    }

    /// Sends `req` with characteristic value `lambda` and waits for its reply.
    pub fn call(&mut self, lambda: u64, req: Request<'_>) -> Res {
        self.try_call(lambda, req)
            .unwrap_or_else(|e| panic!("transport error: {e}"))
    }

    /// Like [`Client::call`], but a transport failure (server gone) is an error too.
    pub fn try_call(&mut self, lambda: u64, req: Request<'_>) -> Result<Res, TransportError> {
        let server = self.layout.route(lambda).server as usize;
        let mut head = Vec::new();
        req.encode_head(lambda, &mut head);
        let data: &[u8] = match req {
            Request::Write { data, .. } => data,
            _ => &[],
        };
        let frame = self.conns[server].call(req.opcode(), &[&head, data]);
        match frame {
            Ok(f) => Ok(Ok(f.payload.to_vec())),
            Err(TransportError::Remote { code, .. }) => Ok(Err(Errno::from_error_code(code))),
            Err(e) => Err(e),
        }
    }

    fn attr(&mut self, opc: Opcode, lambda: u64, req: Request<'_>) -> Result<Attr, Errno> {
        let p = self.call(lambda, req)?;
        match Reply::decode(opc, &p).unwrap() {
            Reply::Attr(a) => Ok(a),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// GETATTR at the inode's home.
    pub fn getattr(&mut self, ino: u64) -> Result<Attr, Errno> {
        self.attr(
            peakfs::protocol::op::GETATTR,
            home_lambda(ino),
            Request::GetAttr { ino },
        )
    }

    /// Creates a file (or, in a bigdir, a directory) in `parent`.
    pub fn create(
        &mut self,
        parent: &Attr,
        name: &str,
        mode: u32,
        hint: Hint,
    ) -> Result<Attr, Errno> {
        let l = self
            .layout
            .dentry_lambda(parent.ino, parent.hint.bigdir, name.as_bytes());
        let req = Request::Create {
            pino: parent.ino,
            mode,
            uid: 0,
            gid: 0,
            rdev: 0,
            hint,
            io_unit: 0,
            excl: true,
            name: name.as_bytes(),
        };
        self.attr(peakfs::protocol::op::CREATE, l, req)
    }

    /// mkdir following the protocol: CREATE in a bigdir; MKINODE + LINK in a regular dir.
    pub fn mkdir(&mut self, parent: &Attr, name: &str, hint: Hint) -> Result<Attr, Errno> {
        if parent.hint.bigdir {
            return self.create(parent, name, DIR, hint);
        }
        let mk = Request::MkInode {
            mode: DIR,
            uid: 0,
            gid: 0,
            hint,
            io_unit: 0,
            near: false,
        };
        let a = self.attr(
            peakfs::protocol::op::MKINODE,
            name_lambda(parent.ino, name.as_bytes()),
            mk,
        )?;
        let link = Request::Link {
            pino: parent.ino,
            ino: a.ino,
            mode: DIR,
            flags: LinkFlags::default(),
            name: name.as_bytes(),
        };
        if let Err(e) = self.call(home_lambda(parent.ino), link) {
            let undo = Request::RmInode {
                ino: a.ino,
                orphan: false,
            };
            self.call(home_lambda(a.ino), undo).unwrap();
            return Err(e);
        }
        Ok(a)
    }

    /// LOOKUP then GETATTR if the inode is elsewhere.
    pub fn lookup(&mut self, parent: &Attr, name: &str) -> Result<Attr, Errno> {
        let l = self
            .layout
            .dentry_lambda(parent.ino, parent.hint.bigdir, name.as_bytes());
        let p = self.call(
            l,
            Request::Lookup {
                pino: parent.ino,
                name: name.as_bytes(),
            },
        )?;
        match Reply::decode(peakfs::protocol::op::LOOKUP, &p).unwrap() {
            Reply::Lookup { attr: Some(a), .. } => Ok(a),
            Reply::Lookup {
                ino, attr: None, ..
            } => self.getattr(ino),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// All entry names of a directory (every slot for a bigdir), sorted.
    pub fn readdir(&mut self, dir: &Attr) -> Vec<String> {
        let lambdas: Vec<u64> = if dir.hint.bigdir {
            (0..u64::from(self.layout.slots())).collect()
        } else {
            vec![home_lambda(dir.ino)]
        };
        let mut names = Vec::new();
        for l in lambdas {
            let mut after = Vec::new();
            loop {
                let req = Request::ReadDir {
                    pino: dir.ino,
                    max: 100,
                    after: &after,
                };
                let p = self.call(l, req).unwrap();
                let Reply::Entries { more, entries } =
                    Reply::decode(peakfs::protocol::op::READDIR, &p).unwrap()
                else {
                    panic!("not entries")
                };
                for e in &entries {
                    names.push(String::from_utf8(e.name.to_vec()).unwrap());
                }
                match entries.last() {
                    Some(last) if more => after = last.name.to_vec(),
                    _ => break,
                }
            }
        }
        names.sort();
        names
    }

    /// UNLINK (or rmdir's dentry step with `dir`).
    pub fn unlink(&mut self, parent: &Attr, name: &str, dir: bool) -> Result<Removed, Errno> {
        let l = self
            .layout
            .dentry_lambda(parent.ino, parent.hint.bigdir, name.as_bytes());
        let flags = UnlinkFlags {
            dir,
            ..UnlinkFlags::default()
        };
        let p = self.call(
            l,
            Request::Unlink {
                pino: parent.ino,
                flags,
                name: name.as_bytes(),
            },
        )?;
        match Reply::decode(peakfs::protocol::op::UNLINK, &p).unwrap() {
            Reply::Removed(Some(r)) => Ok(r),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// Writes `data` at `offset`, split by the layout, pipelined over the servers; then
    /// commits: SETATTR extend_to at home and FSYNC on every touched slice.
    pub fn write(&mut self, file: &Attr, offset: u64, data: &[u8], fsync: bool) {
        let pieces = self
            .layout
            .split(file.ino, file.hint.data, offset, data.len() as u64);
        let mut touched = std::collections::BTreeSet::new();
        for p in &pieces {
            let at = (p.offset - offset) as usize;
            let req = Request::Write {
                ino: file.ino,
                offset: p.offset,
                extent: (file.hint.data == DataDist::Io).then_some(p.offset),
                dist: file.hint.data,
                drop_set_id: false,
                data: &data[at..at + p.len as usize],
            };
            self.call(p.lambda, req).unwrap();
            touched.insert(p.lambda);
        }
        let end = offset + data.len() as u64;
        let set = SetAttr {
            extend_to: Some(end),
            layout: Some(file.hint.data),
            ..SetAttr::default()
        };
        self.call(
            home_lambda(file.ino),
            Request::SetAttr { ino: file.ino, set },
        )
        .unwrap();
        if fsync {
            touched.insert(home_lambda(file.ino));
            for l in touched {
                self.call(l, Request::Fsync { ino: file.ino }).unwrap();
            }
        }
    }

    /// Reads `len` bytes at `offset` (clipped at the size from GETATTR).
    pub fn read(&mut self, file: &Attr, offset: u64, len: u64) -> Vec<u8> {
        let size = self.getattr(file.ino).unwrap().size;
        let len = len.min(size.saturating_sub(offset));
        let mut out = Vec::new();
        for p in self.layout.split(file.ino, file.hint.data, offset, len) {
            let req = Request::Read {
                ino: file.ino,
                offset: p.offset,
                len: p.len as u32,
                extent: (file.hint.data == DataDist::Io).then_some(p.offset),
            };
            let mut got = self.call(p.lambda, req).unwrap();
            got.resize(p.len as usize, 0);
            out.extend_from_slice(&got);
        }
        out
    }

    /// Says goodbye on every connection.
    pub fn close(mut self) {
        for c in &mut self.conns {
            let _ = c.connection().close();
        }
    }
}

/// The default hint of a view.
pub fn default_hint(view: &ClusterView) -> Hint {
    Hint::from_byte(view.default_hint as u8).unwrap()
}

/// Deterministic test bytes for (file, offset).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (common::hash::mix64(seed ^ (i as u64 / 8)) >> ((i % 8) * 8)) as u8)
        .collect()
}

/// A block-distributed file hint.
pub fn block_file() -> Hint {
    Hint {
        data: DataDist::Block,
        bigdir: false,
    }
}

/// Asserts equal byte strings, naming the first difference instead of printing them.
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {} (got {} bytes)",
            want.len(),
            got.len()
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: length");
}
