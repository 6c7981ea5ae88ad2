//! Run-time compilation of the embedded CUDA C sources with NVRTC and the on-disk cache of
//! compiled images (ARCHITECTURE.md "Two engines, one design": device code "embedded with
//! `include_str!`, compiled at run time by NVRTC ..., cached on disk by source hash and GPU
//! arch").
//!
//! Headers travel inside the binary as (include name, contents) pairs handed to
//! `nvrtcCreateProgram`, so a binary carried to the GPU machine needs no source tree; include
//! directories (`--include-path`) serve the development tree and CI.
//!
//! Targets: `sm_XY` yields a CUBIN (no JIT at load, and no dependence on the driver accepting
//! this NVRTC's PTX version); `compute_XY` yields PTX that the driver JIT-compiles.

use std::ffi::{CStr, CString, c_char, c_int};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};
use sha2::{Digest, Sha256};

use super::CudaError;
use super::context::skip_or_fail;

/// Environment variable that turns missing NVRTC into a test failure when set to `1`.
pub const NVRTC_TESTS_ENV: &str = "NVRTC_TESTS";

/// Environment variable naming the compiled-module cache directory.
pub const PTX_CACHE_ENV: &str = "GPU_STORAGE_PTX_CACHE";

/// The language standard every source is compiled with (the CI's cuda-check uses the same).
const STD_OPTION: &str = "-std=c++17";

/// Bumped when the cache's key or file layout changes.
const CACHE_FORMAT: &str = "gpu-storage-nvrtc-cache-v1";

/// A CUDA C source embedded in the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSource {
    /// File name shown in compiler messages, e.g. "queue.cu".
    pub name: &'static str,
    /// The source text, usually `include_str!("../cuda/queue.cu")`.
    pub source: &'static str,
}

/// An in-memory header: `#include "<name>"` (spelled exactly so) resolves to the contents.
pub type Header<'a> = (&'a str, &'a str);

/// Compile options on top of the fixed ones (`--gpu-architecture`, `-std=c++17`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Directories searched for `#include`s (`--include-path`); their files are part of the
    /// cache key.
    pub include_dirs: Vec<PathBuf>,
    /// Further NVRTC options, passed verbatim (e.g. "-lineinfo", "-DQUEUE_DEPTH=1024").
    pub extra: Vec<String>,
}

/// A compiled module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleImage {
    /// PTX text, from a `compute_XY` target.
    Ptx(String),
    /// A CUBIN, from an `sm_XY` target.
    Cubin(Vec<u8>),
}

impl ModuleImage {
    fn bytes(&self) -> &[u8] {
        match self {
            ModuleImage::Ptx(text) => text.as_bytes(),
            ModuleImage::Cubin(bytes) => bytes,
        }
    }
}

/// Whether [`PtxCache::get_or_compile`] found the image on disk or compiled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Read from the cache; NVRTC was not run.
    Hit,
    /// Compiled by NVRTC (and stored, unless the cache directory refused the write).
    Miss,
}

/// The kind of image an architecture option produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageKind {
    Ptx,
    Cubin,
}

impl ImageKind {
    fn extension(self) -> &'static str {
        match self {
            ImageKind::Ptx => "ptx",
            ImageKind::Cubin => "cubin",
        }
    }
}

/// Parses `compute_XY` / `sm_XY` (optionally with the `a` or `f` suffix of
/// architecture-specific targets, e.g. `sm_90a`); anything else is rejected so that the string
/// cannot smuggle further options into NVRTC.
fn parse_arch(arch: &str) -> Result<ImageKind, CudaError> {
    let (kind, rest) = if let Some(rest) = arch.strip_prefix("compute_") {
        (ImageKind::Ptx, rest)
    } else if let Some(rest) = arch.strip_prefix("sm_") {
        (ImageKind::Cubin, rest)
    } else {
        return Err(bad_arch(arch));
    };
    let digits = rest.strip_suffix(['a', 'f']).unwrap_or(rest);
    let valid = (2..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit());
    if valid { Ok(kind) } else { Err(bad_arch(arch)) }
}

fn bad_arch(arch: &str) -> CudaError {
    CudaError::InvalidArgument(format!(
        "GPU architecture {arch:?} is not of the form compute_XY or sm_XY"
    ))
}

/// Chooses the NVRTC target for a device of compute capability `major.minor`: `sm_XY` when
/// NVRTC supports it, otherwise PTX for the newest supported architecture below it (which the
/// driver JIT-compiles for the newer device).
pub fn target_for_device(major: u32, minor: u32, supported: &[u32]) -> Result<String, CudaError> {
    let wanted = major * 10 + minor;
    if supported.contains(&wanted) {
        return Ok(format!("sm_{wanted}"));
    }
    match supported
        .iter()
        .copied()
        .filter(|&arch| arch < wanted)
        .max()
    {
        Some(older) => Ok(format!("compute_{older}")),
        None => Err(CudaError::InvalidArgument(format!(
            "GPU compute capability {major}.{minor} is older than every architecture this \
             NVRTC supports ({supported:?})"
        ))),
    }
}

/// Whether `libnvrtc.so` can be loaded; probed once per process.
pub fn nvrtc_available() -> Result<(), CudaError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    let present = *PRESENT.get_or_init(|| {
        // SAFETY: loading libnvrtc runs only its own initialisers; the probe tries the names
        // cudarc's lazy loader tries, so `true` means the loader will not panic.
        unsafe { sys::is_culib_present() }
    });
    if present {
        Ok(())
    } else {
        Err(CudaError::NoNvrtc(
            "searched libnvrtc.so and libnvrtc.so.13 on LD_LIBRARY_PATH and the system library \
             path; `pip install nvidia-cuda-nvrtc==13.0.*` provides one"
                .into(),
        ))
    }
}

/// For NVRTC tests: `true` when NVRTC can be used; otherwise prints
/// `skipped <test_name>: <reason>` and returns `false`.
///
/// # Panics
/// When [`NVRTC_TESTS_ENV`] is `1` and NVRTC is missing.
pub fn nvrtc_or_skip(test_name: &str) -> bool {
    let required = std::env::var(NVRTC_TESTS_ENV).is_ok_and(|value| value == "1");
    skip_or_fail(test_name, nvrtc_available(), required, NVRTC_TESTS_ENV).is_some()
}

/// NVRTC's version as (major, minor).
pub fn nvrtc_version() -> Result<(u32, u32), CudaError> {
    nvrtc_available()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: both out-pointers are valid for writes; the library is present.
    let code = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    nvrtc_call("nvrtcVersion", code)?;
    Ok((
        u32::try_from(major).unwrap_or(0),
        u32::try_from(minor).unwrap_or(0),
    ))
}

/// The real architectures NVRTC can build CUBINs for, e.g. `[75, 80, ..., 90, 100, 120]`.
pub fn nvrtc_supported_archs() -> Result<Vec<u32>, CudaError> {
    nvrtc_available()?;
    let mut count: c_int = 0;
    // SAFETY: the out-pointer is valid for writes; the library is present.
    let code = unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) };
    nvrtc_call("nvrtcGetNumSupportedArchs", code)?;
    let mut archs: Vec<c_int> = vec![0; usize::try_from(count).unwrap_or(0)];
    // SAFETY: `archs` holds the `count` elements NVRTC writes.
    let code = unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    nvrtc_call("nvrtcGetSupportedArchs", code)?;
    Ok(archs
        .into_iter()
        .filter_map(|arch| u32::try_from(arch).ok())
        .collect())
}

/// Maps a non-compilation NVRTC failure to an error (no program log exists yet).
fn nvrtc_call(call: &str, code: nvrtcResult) -> Result<(), CudaError> {
    code.result().map_err(|_| CudaError::Nvrtc {
        name: call.into(),
        code,
        log: String::new(),
    })
}

/// Compiles `source` to PTX for `arch` (e.g. "compute_90"); needs only `libnvrtc`, no GPU.
/// A compile error returns [`CudaError::Nvrtc`] with the compiler's log.
pub fn compile_to_ptx(
    source: &KernelSource,
    headers: &[Header<'_>],
    arch: &str,
    opts: &CompileOptions,
) -> Result<String, CudaError> {
    parse_arch(arch)?;
    let options = nvrtc_options(arch, opts)?;
    let program = Program::compile(source, headers, &options)?;
    program.ptx()
}

/// Compiles `source` for `arch`: a CUBIN for `sm_XY`, PTX for `compute_XY`. No caching.
pub fn compile(
    source: &KernelSource,
    headers: &[Header<'_>],
    arch: &str,
    opts: &CompileOptions,
) -> Result<ModuleImage, CudaError> {
    let kind = parse_arch(arch)?;
    let options = nvrtc_options(arch, opts)?;
    compile_with(source, headers, &options, kind)
}

fn compile_with(
    source: &KernelSource,
    headers: &[Header<'_>],
    options: &[String],
    kind: ImageKind,
) -> Result<ModuleImage, CudaError> {
    let program = Program::compile(source, headers, options)?;
    match kind {
        ImageKind::Ptx => program.ptx().map(ModuleImage::Ptx),
        ImageKind::Cubin => program.cubin().map(ModuleImage::Cubin),
    }
}

/// The full NVRTC option list for `arch` and `opts`.
fn nvrtc_options(arch: &str, opts: &CompileOptions) -> Result<Vec<String>, CudaError> {
    let mut options = vec![format!("--gpu-architecture={arch}"), STD_OPTION.to_owned()];
    for dir in &opts.include_dirs {
        if !dir.is_dir() {
            return Err(CudaError::InvalidArgument(format!(
                "include directory {} does not exist",
                dir.display()
            )));
        }
        let dir = dir.to_str().ok_or_else(|| {
            CudaError::InvalidArgument(format!("include directory {} is not UTF-8", dir.display()))
        })?;
        options.push(format!("--include-path={dir}"));
    }
    options.extend(opts.extra.iter().cloned());
    Ok(options)
}

/// Converts a caller's string for NVRTC, rejecting interior NUL bytes.
fn c_string(what: &str, value: &str) -> Result<CString, CudaError> {
    CString::new(value)
        .map_err(|_| CudaError::InvalidArgument(format!("{what} contains a NUL byte: {value:?}")))
}

/// A compiled NVRTC program, destroyed on drop.
struct Program {
    handle: nvrtcProgram,
}

impl Program {
    /// Creates and compiles a program; a compile failure carries the program log.
    fn compile(
        source: &KernelSource,
        headers: &[Header<'_>],
        options: &[String],
    ) -> Result<Program, CudaError> {
        nvrtc_available()?;
        let text = c_string("CUDA source", source.source)?;
        let name = c_string("source name", source.name)?;
        let header_names = headers
            .iter()
            .map(|(include, _)| c_string("header name", include))
            .collect::<Result<Vec<_>, _>>()?;
        let header_texts = headers
            .iter()
            .map(|(_, contents)| c_string("header contents", contents))
            .collect::<Result<Vec<_>, _>>()?;
        let option_strings = options
            .iter()
            .map(|option| c_string("NVRTC option", option))
            .collect::<Result<Vec<_>, _>>()?;
        let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
        let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
        let option_ptrs: Vec<*const c_char> = option_strings.iter().map(|s| s.as_ptr()).collect();
        let header_count = c_int::try_from(headers.len())
            .map_err(|_| CudaError::InvalidArgument("too many headers".into()))?;
        let option_count = c_int::try_from(options.len())
            .map_err(|_| CudaError::InvalidArgument("too many options".into()))?;

        let mut handle: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer refers to a NUL-terminated string that outlives the call (NVRTC
        // copies them), and the two header arrays hold `header_count` entries each.
        let code = unsafe {
            sys::nvrtcCreateProgram(
                &mut handle,
                text.as_ptr(),
                name.as_ptr(),
                header_count,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        };
        nvrtc_call("nvrtcCreateProgram", code)?;
        let program = Program { handle };

        // SAFETY: `handle` is a live program; `option_ptrs` holds `option_count` C strings.
        let code =
            unsafe { sys::nvrtcCompileProgram(program.handle, option_count, option_ptrs.as_ptr()) };
        let log = program.log();
        if code != nvrtcResult::NVRTC_SUCCESS {
            let mut log = log;
            if code == nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
                log.push_str(
                    "\nlibnvrtc-builtins.so could not be loaded: put the directory holding \
                     libnvrtc.so on LD_LIBRARY_PATH",
                );
            }
            return Err(CudaError::Nvrtc {
                name: source.name.into(),
                code,
                log,
            });
        }
        if !log.trim().is_empty() {
            tracing::debug!(source = source.name, %log, "NVRTC warnings");
        }
        Ok(program)
    }

    /// The program log (compiler messages); empty if NVRTC cannot produce it.
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: `handle` is a live program and the out-pointer is valid.
        let code = unsafe { sys::nvrtcGetProgramLogSize(self.handle, &mut size) };
        if code != nvrtcResult::NVRTC_SUCCESS || size == 0 {
            return String::new();
        }
        let mut buffer: Vec<c_char> = vec![0; size];
        // SAFETY: `buffer` holds the `size` bytes NVRTC reported for the log.
        let code = unsafe { sys::nvrtcGetProgramLog(self.handle, buffer.as_mut_ptr()) };
        if code != nvrtcResult::NVRTC_SUCCESS {
            return String::new();
        }
        c_chars_to_string(&buffer)
    }

    fn ptx(&self) -> Result<String, CudaError> {
        let mut size = 0usize;
        // SAFETY: `handle` is a live, compiled program and the out-pointer is valid.
        let code = unsafe { sys::nvrtcGetPTXSize(self.handle, &mut size) };
        nvrtc_call("nvrtcGetPTXSize", code)?;
        let mut buffer: Vec<c_char> = vec![0; size];
        // SAFETY: `buffer` holds the `size` bytes NVRTC reported for the PTX.
        let code = unsafe { sys::nvrtcGetPTX(self.handle, buffer.as_mut_ptr()) };
        nvrtc_call("nvrtcGetPTX", code)?;
        Ok(c_chars_to_string(&buffer))
    }

    fn cubin(&self) -> Result<Vec<u8>, CudaError> {
        let mut size = 0usize;
        // SAFETY: `handle` is a live, compiled program and the out-pointer is valid.
        let code = unsafe { sys::nvrtcGetCUBINSize(self.handle, &mut size) };
        nvrtc_call("nvrtcGetCUBINSize", code)?;
        if size == 0 {
            return Err(CudaError::InvalidArgument(
                "NVRTC produced no CUBIN: the target must be sm_XY".into(),
            ));
        }
        let mut buffer = vec![0u8; size];
        // SAFETY: `buffer` holds the `size` bytes NVRTC reported for the CUBIN.
        let code = unsafe { sys::nvrtcGetCUBIN(self.handle, buffer.as_mut_ptr().cast()) };
        nvrtc_call("nvrtcGetCUBIN", code)?;
        Ok(buffer)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `handle` came from nvrtcCreateProgram and is destroyed exactly once, here.
        let code = unsafe { sys::nvrtcDestroyProgram(&mut self.handle) };
        if code != nvrtcResult::NVRTC_SUCCESS {
            tracing::warn!(?code, "nvrtcDestroyProgram failed");
        }
    }
}

/// NVRTC's NUL-terminated text as a `String` (lossy: logs may quote non-UTF-8 source bytes).
fn c_chars_to_string(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer.iter().map(|&c| c.to_ne_bytes()[0]).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(text) => text.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The on-disk cache of compiled modules, keyed by the SHA-256 of everything that affects the
/// output: source, headers, files of the include directories, options (which include the
/// architecture) and the NVRTC version.
#[derive(Clone, Debug)]
pub struct PtxCache {
    dir: PathBuf,
}

impl PtxCache {
    /// The cache at `$GPU_STORAGE_PTX_CACHE`, else `$XDG_CACHE_HOME/gpu-storage/ptx`, else
    /// `~/.cache/gpu-storage/ptx`; created if missing.
    pub fn from_env() -> Result<PtxCache, CudaError> {
        let dir = default_cache_dir(
            std::env::var_os(PTX_CACHE_ENV),
            std::env::var_os("XDG_CACHE_HOME"),
            std::env::var_os("HOME"),
        )
        .ok_or_else(|| {
            CudaError::InvalidArgument(format!(
                "no cache directory: set {PTX_CACHE_ENV}, XDG_CACHE_HOME or HOME"
            ))
        })?;
        PtxCache::at(dir)
    }

    /// The cache in `dir`, created if missing.
    pub fn at(dir: impl Into<PathBuf>) -> Result<PtxCache, CudaError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| CudaError::Cache {
            path: dir.clone(),
            source,
        })?;
        Ok(PtxCache { dir })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Returns the cached image for these inputs, or compiles and stores it. A cache file that
    /// cannot be read or written only costs a compilation (and a warning), never an error.
    pub fn get_or_compile(
        &self,
        source: &KernelSource,
        headers: &[Header<'_>],
        arch: &str,
        opts: &CompileOptions,
    ) -> Result<(ModuleImage, CacheOutcome), CudaError> {
        let kind = parse_arch(arch)?;
        let options = nvrtc_options(arch, opts)?;
        let path = self.path_for(source, headers, &options, opts, kind)?;
        if let Some(image) = read_cached(&path, kind) {
            tracing::debug!(source = source.name, path = %path.display(), "PTX cache hit");
            return Ok((image, CacheOutcome::Hit));
        }
        let image = compile_with(source, headers, &options, kind)?;
        if let Err(error) = write_atomically(&path, image.bytes()) {
            tracing::warn!(path = %path.display(), %error, "could not store compiled module");
        }
        Ok((image, CacheOutcome::Miss))
    }

    /// The file that holds (or will hold) the image for these inputs.
    fn path_for(
        &self,
        source: &KernelSource,
        headers: &[Header<'_>],
        options: &[String],
        opts: &CompileOptions,
        kind: ImageKind,
    ) -> Result<PathBuf, CudaError> {
        let (major, minor) = nvrtc_version()?;
        let mut key = KeyHasher::default();
        key.field(CACHE_FORMAT.as_bytes());
        key.field(format!("nvrtc {major}.{minor}").as_bytes());
        key.list(options.iter().map(String::as_bytes));
        key.field(source.name.as_bytes());
        key.field(source.source.as_bytes());
        key.list(
            headers
                .iter()
                .flat_map(|(name, text)| [name.as_bytes(), text.as_bytes()]),
        );
        for dir in &opts.include_dirs {
            let mut files = Vec::new();
            collect_files(dir, dir, &mut files).map_err(|error| {
                CudaError::InvalidArgument(format!(
                    "cannot read include directory {}: {error}",
                    dir.display()
                ))
            })?;
            files.sort();
            key.list(
                files
                    .iter()
                    .flat_map(|(name, text)| [name.as_slice(), text.as_slice()]),
            );
        }
        Ok(self
            .dir
            .join(format!("{}.{}", key.finish(), kind.extension())))
    }
}

/// The cache directory from (override, XDG_CACHE_HOME, HOME); relative XDG paths are ignored
/// as the XDG specification requires.
fn default_cache_dir(
    override_dir: Option<std::ffi::OsString>,
    xdg_cache_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    let non_empty = |value: Option<std::ffi::OsString>| value.filter(|v| !v.is_empty());
    if let Some(dir) = non_empty(override_dir) {
        return Some(PathBuf::from(dir));
    }
    let suffix = Path::new("gpu-storage").join("ptx");
    if let Some(xdg) = non_empty(xdg_cache_home)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Some(xdg.join(suffix));
    }
    non_empty(home).map(|home| PathBuf::from(home).join(".cache").join(suffix))
}

/// SHA-256 over length-prefixed fields, so that no two different inputs share a byte stream.
#[derive(Default)]
struct KeyHasher {
    hasher: Sha256,
}

impl KeyHasher {
    fn field(&mut self, bytes: &[u8]) {
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    fn list<'a>(&mut self, items: impl Iterator<Item = &'a [u8]>) {
        let items: Vec<&[u8]> = items.collect();
        self.field(&(items.len() as u64).to_le_bytes());
        for item in items {
            self.field(item);
        }
    }

    fn finish(self) -> String {
        self.hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

/// Every regular file under `dir` as (path relative to `root`, contents); symbolic links to
/// directories are not followed, so link cycles cannot loop.
fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let file_type = fs::symlink_metadata(&path)?.file_type();
        if file_type.is_dir() {
            collect_files(root, &path, out)?;
        } else if path.is_file() {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            out.push((
                relative.to_string_lossy().into_owned().into_bytes(),
                fs::read(&path)?,
            ));
        }
    }
    Ok(())
}

/// The cached image at `path`, if a usable one is there.
fn read_cached(path: &Path, kind: ImageKind) -> Option<ModuleImage> {
    let bytes = match fs::read(path) {
        Ok(bytes) if !bytes.is_empty() => bytes,
        Ok(_) => return None,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "unreadable PTX cache entry");
            return None;
        }
    };
    match kind {
        ImageKind::Ptx => String::from_utf8(bytes).ok().map(ModuleImage::Ptx),
        ImageKind::Cubin => Some(ModuleImage::Cubin(bytes)),
    }
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so readers in
/// other processes see either no file or a complete one.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(
        ".{file_name}.{}.{sequence}.tmp",
        std::process::id()
    ));
    let written = fs::write(&temporary, bytes).and_then(|()| fs::rename(&temporary, path));
    if written.is_err() {
        // Best effort: a leftover temporary file is harmless, the rename error is what matters.
        let _ = fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD_ONE: KernelSource = KernelSource {
        name: "add_one.cu",
        source: r#"extern "C" __global__ void add_one(unsigned char *bytes, unsigned long long n) {
            unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
            if (i < n) bytes[i] += 1;
        }"#,
    };

    #[test]
    fn parse_arch_accepts_virtual_and_real_targets() {
        assert_eq!(parse_arch("compute_90").unwrap(), ImageKind::Ptx);
        assert_eq!(parse_arch("sm_90").unwrap(), ImageKind::Cubin);
        assert_eq!(parse_arch("sm_90a").unwrap(), ImageKind::Cubin);
        assert_eq!(parse_arch("compute_100f").unwrap(), ImageKind::Ptx);
    }

    #[test]
    fn parse_arch_rejects_malformed_or_smuggled_options() {
        for arch in [
            "",
            "sm_",
            "sm_9",
            "sm_9000",
            "90",
            "compute_90 -G",
            "sm_x0",
            "sm_90ab",
        ] {
            assert!(
                matches!(parse_arch(arch), Err(CudaError::InvalidArgument(_))),
                "{arch}"
            );
        }
    }

    #[test]
    fn target_for_device_prefers_the_exact_real_architecture() {
        assert_eq!(
            target_for_device(9, 0, &[75, 80, 90, 100]).unwrap(),
            "sm_90"
        );
    }

    #[test]
    fn target_for_device_falls_back_to_ptx_of_the_newest_older_architecture() {
        assert_eq!(
            target_for_device(13, 0, &[75, 80, 90, 120]).unwrap(),
            "compute_120"
        );
        assert_eq!(
            target_for_device(8, 9, &[75, 80, 90]).unwrap(),
            "compute_80"
        );
    }

    #[test]
    fn target_for_device_rejects_devices_older_than_nvrtc_supports() {
        assert!(matches!(
            target_for_device(7, 0, &[75, 80]),
            Err(CudaError::InvalidArgument(_))
        ));
    }

    #[test]
    fn options_carry_arch_standard_include_dirs_and_extras_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let opts = CompileOptions {
            include_dirs: vec![dir.path().to_path_buf()],
            extra: vec!["-lineinfo".into()],
        };
        let options = nvrtc_options("compute_90", &opts).unwrap();
        assert_eq!(
            options,
            [
                "--gpu-architecture=compute_90".to_owned(),
                "-std=c++17".to_owned(),
                format!("--include-path={}", dir.path().display()),
                "-lineinfo".to_owned(),
            ]
        );
    }

    #[test]
    fn missing_include_dir_is_an_invalid_argument() {
        let opts = CompileOptions {
            include_dirs: vec![PathBuf::from("/nonexistent/gpu-storage/include")],
            ..CompileOptions::default()
        };
        assert!(matches!(
            nvrtc_options("sm_90", &opts),
            Err(CudaError::InvalidArgument(_))
        ));
    }

    #[test]
    fn cache_dir_prefers_override_then_absolute_xdg_then_home() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(
            default_cache_dir(os("/o"), os("/x"), os("/h")),
            Some(PathBuf::from("/o"))
        );
        assert_eq!(
            default_cache_dir(None, os("/x"), os("/h")),
            Some(PathBuf::from("/x/gpu-storage/ptx"))
        );
        assert_eq!(
            default_cache_dir(os(""), os("relative"), os("/h")),
            Some(PathBuf::from("/h/.cache/gpu-storage/ptx"))
        );
        assert_eq!(default_cache_dir(None, None, None), None);
    }

    #[test]
    fn key_fields_are_length_prefixed() {
        let digest = |fields: &[&[u8]]| {
            let mut key = KeyHasher::default();
            fields.iter().for_each(|field| key.field(field));
            key.finish()
        };
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[b"ab", b"c"]).len(), 64);
    }

    #[test]
    fn atomic_write_leaves_only_the_final_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.ptx");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn compile_to_ptx_produces_ptx_for_the_kernel() {
        if !nvrtc_or_skip("compile_to_ptx_produces_ptx_for_the_kernel") {
            return;
        }
        let ptx = compile_to_ptx(&ADD_ONE, &[], "compute_90", &CompileOptions::default()).unwrap();
        assert!(ptx.contains(".target sm_90"), "{ptx}");
        assert!(ptx.contains(".entry add_one"), "{ptx}");
    }

    #[test]
    fn compile_for_a_real_architecture_produces_a_cubin() {
        if !nvrtc_or_skip("compile_for_a_real_architecture_produces_a_cubin") {
            return;
        }
        let image = compile(&ADD_ONE, &[], "sm_90", &CompileOptions::default()).unwrap();
        let ModuleImage::Cubin(bytes) = image else {
            panic!("expected a CUBIN")
        };
        assert_eq!(&bytes[..4], b"\x7fELF");
    }

    #[test]
    fn in_memory_headers_resolve_includes() {
        if !nvrtc_or_skip("in_memory_headers_resolve_includes") {
            return;
        }
        let source = KernelSource {
            name: "uses_header.cu",
            source: "#include \"lib/step.cuh\"\n\
                     extern \"C\" __global__ void k(unsigned int *x) { x[0] = step(x[0]); }",
        };
        let header = "#pragma once\n__device__ unsigned int step(unsigned int v) { return v + 3; }";
        let ptx = compile_to_ptx(
            &source,
            &[("lib/step.cuh", header)],
            "compute_90",
            &CompileOptions::default(),
        )
        .unwrap();
        assert!(ptx.contains(".entry k"), "{ptx}");
        let missing = compile_to_ptx(&source, &[], "compute_90", &CompileOptions::default());
        assert!(
            matches!(missing, Err(CudaError::Nvrtc { .. })),
            "{missing:?}"
        );
    }

    #[test]
    fn include_dirs_resolve_includes() {
        if !nvrtc_or_skip("include_dirs_resolve_includes") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("twice.cuh"),
            "__device__ int twice(int v) { return 2 * v; }",
        )
        .unwrap();
        let source = KernelSource {
            name: "uses_dir.cu",
            source: "#include \"twice.cuh\"\n\
                     extern \"C\" __global__ void k(int *x) { x[0] = twice(x[0]); }",
        };
        let opts = CompileOptions {
            include_dirs: vec![dir.path().to_path_buf()],
            ..CompileOptions::default()
        };
        assert!(
            compile_to_ptx(&source, &[], "compute_90", &opts)
                .unwrap()
                .contains(".entry k")
        );
    }

    #[test]
    fn compile_error_returns_the_nvrtc_log() {
        if !nvrtc_or_skip("compile_error_returns_the_nvrtc_log") {
            return;
        }
        let broken = KernelSource {
            name: "broken.cu",
            source: "extern \"C\" __global__ void k(int *x) { x[0] = undeclared_name; }",
        };
        let error =
            compile_to_ptx(&broken, &[], "compute_90", &CompileOptions::default()).unwrap_err();
        let CudaError::Nvrtc { name, code, log } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(name, "broken.cu");
        assert_eq!(*code, nvrtcResult::NVRTC_ERROR_COMPILATION);
        assert!(log.contains("undeclared_name"), "{log}");
        assert!(error.to_string().contains("undeclared_name"));
    }

    #[test]
    fn unsupported_option_is_an_nvrtc_error() {
        if !nvrtc_or_skip("unsupported_option_is_an_nvrtc_error") {
            return;
        }
        let opts = CompileOptions {
            extra: vec!["--no-such-option".into()],
            ..Default::default()
        };
        let error = compile_to_ptx(&ADD_ONE, &[], "compute_90", &opts).unwrap_err();
        assert!(
            matches!(
                error,
                CudaError::Nvrtc {
                    code: nvrtcResult::NVRTC_ERROR_INVALID_OPTION,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn nvrtc_reports_version_and_architectures() {
        if !nvrtc_or_skip("nvrtc_reports_version_and_architectures") {
            return;
        }
        assert!(nvrtc_version().unwrap().0 >= 12);
        assert!(nvrtc_supported_archs().unwrap().contains(&90));
    }

    #[test]
    fn cache_hits_on_identical_inputs_without_recompiling() {
        if !nvrtc_or_skip("cache_hits_on_identical_inputs_without_recompiling") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cache = PtxCache::at(dir.path().join("ptx")).unwrap();
        let opts = CompileOptions::default();
        let (image, outcome) = cache
            .get_or_compile(&ADD_ONE, &[], "compute_90", &opts)
            .unwrap();
        assert_eq!(outcome, CacheOutcome::Miss);
        let files: Vec<PathBuf> = fs::read_dir(cache.dir())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        assert_eq!(fs::read(&files[0]).unwrap(), image.bytes());
        assert_eq!(files[0].extension().unwrap(), "ptx");

        // A planted marker proves the second call reads the file rather than compiling.
        fs::write(&files[0], "// planted marker").unwrap();
        let (again, outcome) = cache
            .get_or_compile(&ADD_ONE, &[], "compute_90", &opts)
            .unwrap();
        assert_eq!(outcome, CacheOutcome::Hit);
        assert_eq!(again, ModuleImage::Ptx("// planted marker".into()));
    }

    #[test]
    fn cache_misses_when_options_headers_arch_or_include_files_change() {
        if !nvrtc_or_skip("cache_misses_when_options_headers_arch_or_include_files_change") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("include");
        fs::create_dir(&include).unwrap();
        fs::write(include.join("a.cuh"), "// one").unwrap();
        let cache = PtxCache::at(dir.path().join("ptx")).unwrap();
        let base = CompileOptions {
            include_dirs: vec![include.clone()],
            extra: vec![],
        };
        let lineinfo = CompileOptions {
            extra: vec!["-lineinfo".into()],
            ..base.clone()
        };
        let miss = |headers: &[Header<'_>], arch: &str, opts: &CompileOptions| {
            cache
                .get_or_compile(&ADD_ONE, headers, arch, opts)
                .unwrap()
                .1
        };
        assert_eq!(miss(&[], "compute_90", &base), CacheOutcome::Miss);
        assert_eq!(miss(&[], "compute_90", &base), CacheOutcome::Hit);
        assert_eq!(miss(&[], "compute_90", &lineinfo), CacheOutcome::Miss);
        assert_eq!(miss(&[], "compute_80", &base), CacheOutcome::Miss);
        assert_eq!(
            miss(&[("unused.cuh", "// x")], "compute_90", &base),
            CacheOutcome::Miss
        );
        fs::write(include.join("a.cuh"), "// two").unwrap();
        assert_eq!(miss(&[], "compute_90", &base), CacheOutcome::Miss);
        assert_eq!(fs::read_dir(cache.dir()).unwrap().count(), 5);
    }

    #[test]
    fn compile_errors_are_not_cached() {
        if !nvrtc_or_skip("compile_errors_are_not_cached") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cache = PtxCache::at(dir.path()).unwrap();
        let broken = KernelSource {
            name: "broken.cu",
            source: "this is not CUDA",
        };
        let result = cache.get_or_compile(&broken, &[], "compute_90", &CompileOptions::default());
        assert!(matches!(result, Err(CudaError::Nvrtc { .. })));
        assert_eq!(fs::read_dir(cache.dir()).unwrap().count(), 0);
    }
}
