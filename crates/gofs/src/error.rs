//! Errors of the GoFS engine and their POSIX errno mapping (papers/gofs.md §3: the engine
//! reports file-system errors the FUSE layer turns into errno values).

use gpu_nvme::device::DeviceError;

/// Errors of the GoFS format code and engine.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// no such file or directory
    #[error("no such file or directory")]
    NotFound,
    /// the name exists already
    #[error("file exists")]
    Exists,
    /// a path component is not a directory
    #[error("not a directory")]
    NotDir,
    /// the target is a directory
    #[error("is a directory")]
    IsDir,
    /// the directory is not empty
    #[error("directory not empty")]
    NotEmpty,
    /// no free blocks, segments or node ids are left
    #[error("no space left on device")]
    NoSpace,
    /// a name is longer than 255 bytes
    #[error("file name too long")]
    NameTooLong,
    /// an argument is invalid
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// the operation is not permitted
    #[error("permission denied")]
    PermissionDenied,
    /// the link count would overflow
    #[error("too many links")]
    TooManyLinks,
    /// rename or link across file systems
    #[error("cross-device link")]
    CrossDevice,
    /// the on-disk structure is inconsistent: mount refuses, a file read gives EIO
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    /// the device failed
    #[error("device error: {0}")]
    Io(#[from] DeviceError),
    /// the operation is not implemented
    #[error("operation not supported: {0}")]
    Unsupported(&'static str),
    /// the file system is mounted read-only
    #[error("read-only file system")]
    ReadOnly,
}

impl FsError {
    /// The POSIX errno value of this error.
    pub fn errno(&self) -> i32 {
        match self {
            Self::NotFound => libc::ENOENT,
            Self::Exists => libc::EEXIST,
            Self::NotDir => libc::ENOTDIR,
            Self::IsDir => libc::EISDIR,
            Self::NotEmpty => libc::ENOTEMPTY,
            Self::NoSpace => libc::ENOSPC,
            Self::NameTooLong => libc::ENAMETOOLONG,
            Self::InvalidArgument(_) => libc::EINVAL,
            Self::PermissionDenied => libc::EPERM,
            Self::TooManyLinks => libc::EMLINK,
            Self::CrossDevice => libc::EXDEV,
            Self::Corrupt(_) | Self::Io(_) => libc::EIO,
            Self::Unsupported(_) => libc::EOPNOTSUPP,
            Self::ReadOnly => libc::EROFS,
        }
    }
}

/// Result of the GoFS engine.
pub type Result<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_maps_each_variant_to_its_posix_value() {
        assert_eq!(FsError::NotFound.errno(), libc::ENOENT);
        assert_eq!(FsError::Corrupt("x".into()).errno(), libc::EIO);
        assert_eq!(FsError::Unsupported("x").errno(), libc::EOPNOTSUPP);
        assert_eq!(FsError::NotEmpty.errno(), libc::ENOTEMPTY);
    }
}
