//! Placement hints as extended attributes (§III-C1: strategies "specified by directory or file
//! attributes"): what `peakfs mount` answers for `getfattr` / `setfattr`.
//!
//! - `user.peakfs.dist`: the hint's words ([`crate::placement::Hint::words`]; `block`, `file` or `io`, then
//!   `bigdir` for a bigdir). Setting it on a directory changes the data distribution of the
//!   files made in it from then on; on a regular file, the file's own, only while it holds no
//!   data. The words `bigdir` and `dir` may be given but must say what the directory already
//!   is: a directory's entries lie where its bigdir flag says, so it is fixed at mkdir (`peakfs
//!   --dist bigdir mkdir`, or a mount or client whose default hint has it).
//! - `user.peakfs.io_unit`: the I/O unit in bytes, in decimal ([`Attr::io_unit`]). On a
//!   directory, the unit of the I/O-based files made in it (and of its new subdirectories'
//!   files), which a writer's own `--io-unit` overrides; removing it leaves their first writes
//!   to fix their units. On an I/O-based file, the unit its first writer fixed: setting it
//!   before the first write fixes it, and once fixed it never changes.
//!
//! Other names do not exist here: reads of them find nothing, and setting one is not
//! supported.

use crate::client::{Client, ClientError, IO_UNITS};
use crate::placement::{DataDist, HintWords};
use crate::protocol::{Attr, Errno};

/// The name of the distribution hint attribute.
pub const DIST: &str = "user.peakfs.dist";
/// The name of the I/O unit attribute.
pub const IO_UNIT: &str = "user.peakfs.io_unit";

/// A refused attribute call: the errno for the caller, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct XattrError {
    /// The errno.
    pub errno: i32,
    /// What was wrong.
    pub message: String,
}

fn refuse(errno: i32, message: impl Into<String>) -> XattrError {
    XattrError {
        errno,
        message: message.into(),
    }
}

/// One of the hint attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintAttr {
    /// [`DIST`].
    Dist,
    /// [`IO_UNIT`].
    IoUnit,
}

impl HintAttr {
    const ALL: [Self; 2] = [Self::Dist, Self::IoUnit];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Dist => DIST,
            Self::IoUnit => IO_UNIT,
        }
    }

    /// The attribute named `name`, if it is one of these.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name().as_bytes() == name)
    }

    /// Its value on the inode with attributes `a` (None: the inode has none).
    pub fn get(self, a: &Attr) -> Option<Vec<u8>> {
        match self {
            Self::Dist => Some(a.hint.words().into_bytes()),
            Self::IoUnit => (a.io_unit != 0).then(|| a.io_unit.to_string().into_bytes()),
        }
    }
}

/// The names of the attributes the inode with attributes `a` has, each ending in NUL (the
/// form listxattr(2) returns).
pub fn list(a: &Attr) -> Vec<u8> {
    let mut out = Vec::new();
    for attr in HintAttr::ALL
        .into_iter()
        .filter(|attr| attr.get(a).is_some())
    {
        out.extend_from_slice(attr.name().as_bytes());
        out.push(0);
    }
    out
}

/// What a set or remove of a hint attribute asks of the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing to change (the value is what the inode has).
    None,
    /// A new data distribution (file or directory) and a directory's unit (0: none):
    /// [`Client::set_hint`].
    Hint {
        /// New data distribution.
        data: Option<DataDist>,
        /// A directory's new unit for its new I/O-based files.
        io_unit: Option<u32>,
    },
    /// Fix a file's I/O unit unless its first writer did: [`Client::fix_io_unit`].
    FixUnit(u32),
}

/// How setxattr(2) may treat an existing value (its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetFlags {
    /// XATTR_CREATE: fail if the attribute exists.
    pub create: bool,
    /// XATTR_REPLACE: fail if it does not.
    pub replace: bool,
}

impl SetFlags {
    /// From setxattr(2)'s flags.
    pub fn from_bits(flags: i32) -> Self {
        Self {
            create: flags & libc::XATTR_CREATE != 0,
            replace: flags & libc::XATTR_REPLACE != 0,
        }
    }
}

/// What setting `attr` to `value` on the inode with attributes `a` changes.
pub fn set(attr: HintAttr, a: &Attr, value: &[u8], flags: SetFlags) -> Result<Change, XattrError> {
    let exists = attr.get(a).is_some();
    if flags.create && exists {
        return Err(refuse(libc::EEXIST, "the attribute exists (XATTR_CREATE)"));
    }
    if flags.replace && !exists {
        return Err(refuse(
            libc::ENODATA,
            "the attribute does not exist (XATTR_REPLACE)",
        ));
    }
    let text = std::str::from_utf8(value)
        .map_err(|_| refuse(libc::EINVAL, "the value is not UTF-8"))?
        .trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let kind = a.mode & libc::S_IFMT;
    if kind != libc::S_IFDIR && kind != libc::S_IFREG {
        return Err(refuse(
            libc::EINVAL,
            "placement hints belong to regular files and directories",
        ));
    }
    match attr {
        HintAttr::Dist => set_dist(a, text),
        HintAttr::IoUnit => set_io_unit(a, text),
    }
}

fn set_dist(a: &Attr, text: &str) -> Result<Change, XattrError> {
    let HintWords { data, bigdir } = HintWords::parse(text).map_err(|word| {
        refuse(
            libc::EINVAL,
            format!("{DIST}: unknown word {word:?} in {text:?} (block, file, io, bigdir, dir)"),
        )
    })?;
    if data.is_none() && bigdir.is_none() {
        return Err(refuse(libc::EINVAL, format!("{DIST}: no words")));
    }
    if bigdir.is_some_and(|b| b != a.hint.bigdir) {
        let (errno, why) = if a.is_dir() {
            (
                libc::EPERM,
                "a directory is a bigdir or not from its mkdir on (make one with `peakfs \
                 --dist bigdir mkdir`)",
            )
        } else {
            (libc::EINVAL, "only a directory is a bigdir")
        };
        return Err(refuse(errno, format!("{DIST} {text:?}: {why}")));
    }
    Ok(match data {
        Some(d) if d != a.hint.data => Change::Hint {
            data: Some(d),
            io_unit: None,
        },
        _ => Change::None,
    })
}

fn set_io_unit(a: &Attr, text: &str) -> Result<Change, XattrError> {
    let range = IO_UNITS;
    let unit = text
        .parse::<u32>()
        .ok()
        .filter(|u| range.contains(u))
        .ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format!(
                    "{IO_UNIT} {text:?}: bytes in {}..={}",
                    range.start(),
                    range.end()
                ),
            )
        })?;
    if a.is_dir() {
        return Ok(if unit == a.io_unit {
            Change::None
        } else {
            Change::Hint {
                data: None,
                io_unit: Some(unit),
            }
        });
    }
    if a.hint.data != DataDist::Io {
        return Err(refuse(
            libc::EINVAL,
            format!(
                "{IO_UNIT}: the file's data is laid out {}, not io (set {DIST} to io first)",
                a.hint.data.word()
            ),
        ));
    }
    match a.io_unit {
        0 => Ok(Change::FixUnit(unit)),
        u if u == unit => Ok(Change::None),
        u => Err(unit_fixed(u)),
    }
}

/// The refusal to change a file's unit that a writer fixed at `unit`.
pub fn unit_fixed(unit: u32) -> XattrError {
    refuse(
        libc::EBUSY,
        format!("{IO_UNIT}: the file's first writer fixed its unit at {unit} bytes"),
    )
}

/// Carries out `change` on `ino` through `client`. A refusal, the servers' or this one's (a
/// unit that another writer fixed first), is [`ClientError::Refused`] with its reason.
pub fn apply(client: &mut Client, ino: u64, change: Change) -> Result<(), ClientError> {
    match change {
        Change::None => Ok(()),
        Change::Hint { data, io_unit } => client.set_hint(ino, data, io_unit).map(|_| ()),
        // Another writer may have fixed another unit since the attributes were read.
        Change::FixUnit(unit) => match client.fix_io_unit(ino, unit)? {
            fixed if fixed == unit => Ok(()),
            fixed => Err(unit_fixed(fixed).into()),
        },
    }
}

impl From<XattrError> for ClientError {
    fn from(e: XattrError) -> Self {
        ClientError::Refused {
            errno: Errno(e.errno),
            message: e.message,
        }
    }
}

/// What removing `attr` from the inode with attributes `a` changes.
pub fn remove(attr: HintAttr, a: &Attr) -> Result<Change, XattrError> {
    if attr.get(a).is_none() {
        return Err(refuse(libc::ENODATA, "the attribute does not exist"));
    }
    match attr {
        HintAttr::Dist => Err(refuse(
            libc::EPERM,
            format!("{DIST}: every file and directory has one (set another instead)"),
        )),
        HintAttr::IoUnit if a.is_dir() => Ok(Change::Hint {
            data: None,
            io_unit: Some(0),
        }),
        HintAttr::IoUnit => Err(unit_fixed(a.io_unit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Hint;

    fn attr(mode: u32, data: DataDist, bigdir: bool, io_unit: u32) -> Attr {
        Attr {
            ino: 7,
            mode,
            hint: Hint { data, bigdir },
            io_unit,
            ..Attr::default()
        }
    }

    const DIR: u32 = libc::S_IFDIR | 0o755;
    const FILE: u32 = libc::S_IFREG | 0o644;

    #[test]
    fn names_values_and_the_list_follow_the_inode() {
        let d = attr(DIR, DataDist::Io, true, 47_008);
        assert_eq!(
            HintAttr::from_name(b"user.peakfs.dist"),
            Some(HintAttr::Dist)
        );
        assert_eq!(HintAttr::from_name(b"security.capability"), None);
        assert_eq!(HintAttr::Dist.get(&d).unwrap(), b"io,bigdir");
        assert_eq!(HintAttr::IoUnit.get(&d).unwrap(), b"47008");
        assert_eq!(list(&d), b"user.peakfs.dist\0user.peakfs.io_unit\0");
        let f = attr(FILE, DataDist::Block, false, 0);
        assert_eq!(HintAttr::IoUnit.get(&f), None);
        assert_eq!(list(&f), b"user.peakfs.dist\0");
    }

    #[test]
    fn a_directory_s_distribution_and_unit_change_but_not_its_bigdir_flag() {
        let d = attr(DIR, DataDist::Block, true, 0);
        let none = SetFlags::default();
        assert_eq!(
            set(HintAttr::Dist, &d, b"io,bigdir\n", none),
            Ok(Change::Hint {
                data: Some(DataDist::Io),
                io_unit: None
            })
        );
        assert_eq!(set(HintAttr::Dist, &d, b"block", none), Ok(Change::None));
        assert_eq!(
            set(HintAttr::Dist, &d, b"file,dir", none)
                .unwrap_err()
                .errno,
            libc::EPERM
        );
        assert_eq!(
            set(HintAttr::Dist, &d, b"huge", none).unwrap_err().errno,
            libc::EINVAL
        );
        assert_eq!(
            set(HintAttr::IoUnit, &d, b"47008\0", none),
            Ok(Change::Hint {
                data: None,
                io_unit: Some(47_008)
            })
        );
        for bad in [&b"4095"[..], b"16777217", b"0", b"-1", b"1e6", b""] {
            let e = set(HintAttr::IoUnit, &d, bad, none).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
        }
        assert_eq!(
            remove(HintAttr::IoUnit, &d).unwrap_err().errno,
            libc::ENODATA
        );
        let d = attr(DIR, DataDist::Block, false, 65_536);
        assert_eq!(
            remove(HintAttr::IoUnit, &d),
            Ok(Change::Hint {
                data: None,
                io_unit: Some(0)
            })
        );
        assert_eq!(remove(HintAttr::Dist, &d).unwrap_err().errno, libc::EPERM);
    }

    #[test]
    fn a_file_s_unit_is_fixed_once_and_only_for_io_files() {
        let none = SetFlags::default();
        let block = attr(FILE, DataDist::Block, false, 0);
        assert_eq!(
            set(HintAttr::IoUnit, &block, b"8192", none)
                .unwrap_err()
                .errno,
            libc::EINVAL
        );
        assert_eq!(
            set(HintAttr::Dist, &block, b"bigdir", none)
                .unwrap_err()
                .errno,
            libc::EINVAL
        );
        let io = attr(FILE, DataDist::Io, false, 0);
        assert_eq!(
            set(HintAttr::IoUnit, &io, b"8192", none),
            Ok(Change::FixUnit(8192))
        );
        let fixed = attr(FILE, DataDist::Io, false, 8192);
        assert_eq!(
            set(HintAttr::IoUnit, &fixed, b"8192", none),
            Ok(Change::None)
        );
        assert_eq!(
            set(HintAttr::IoUnit, &fixed, b"4096", none)
                .unwrap_err()
                .errno,
            libc::EBUSY
        );
        assert_eq!(
            remove(HintAttr::IoUnit, &fixed).unwrap_err().errno,
            libc::EBUSY
        );
        let link = attr(libc::S_IFLNK | 0o777, DataDist::Block, false, 0);
        assert_eq!(
            set(HintAttr::Dist, &link, b"io", none).unwrap_err().errno,
            libc::EINVAL
        );
    }

    #[test]
    fn create_and_replace_flags_see_whether_the_attribute_exists() {
        let io = attr(FILE, DataDist::Io, false, 0);
        let create = SetFlags::from_bits(libc::XATTR_CREATE);
        let replace = SetFlags::from_bits(libc::XATTR_REPLACE);
        assert_eq!(
            set(HintAttr::Dist, &io, b"io", create).unwrap_err().errno,
            libc::EEXIST
        );
        assert_eq!(set(HintAttr::Dist, &io, b"io", replace), Ok(Change::None));
        assert_eq!(
            set(HintAttr::IoUnit, &io, b"4096", create),
            Ok(Change::FixUnit(4096))
        );
        assert_eq!(
            set(HintAttr::IoUnit, &io, b"4096", replace)
                .unwrap_err()
                .errno,
            libc::ENODATA
        );
    }
}
