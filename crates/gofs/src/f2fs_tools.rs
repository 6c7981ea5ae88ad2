//! Wrappers around the real f2fs-tools (`mkfs.f2fs`, `sload.f2fs`, `fsck.f2fs`, `dump.f2fs`)
//! for tests and benchmarks that check GoFS images against the reference implementation
//! (papers/gofs.md §3.5: GoFS keeps F2FS's format, so F2FS's own tools must accept its images).

use std::path::Path;
use std::process::{Command, Stdio};

/// What a tool run reported.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// exit status code (-1 when killed)
    pub code: i32,
    /// stdout and stderr together
    pub text: String,
}

/// Errors of the tool wrappers.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// the program could not be started
    #[error("cannot run {0}: {1}")]
    Spawn(String, std::io::Error),
    /// the program failed
    #[error("{0} failed ({1}): {2}")]
    Failed(String, i32, String),
}

fn run(
    prog: &str,
    args: &[&std::ffi::OsStr],
    stdin: Option<&[u8]>,
) -> Result<ToolOutput, ToolError> {
    let mut c = Command::new(prog);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = c.spawn().map_err(|e| ToolError::Spawn(prog.into(), e))?;
    if let (Some(input), Some(mut si)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        let _ = si.write_all(input);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| ToolError::Spawn(prog.into(), e))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(ToolOutput {
        code: out.status.code().unwrap_or(-1),
        text,
    })
}

fn checked(prog: &str, args: &[&std::ffi::OsStr]) -> Result<ToolOutput, ToolError> {
    let o = run(prog, args, None)?;
    if o.code != 0 {
        return Err(ToolError::Failed(prog.into(), o.code, o.text));
    }
    Ok(o)
}

/// `mkfs.f2fs -f IMAGE`.
pub fn mkfs(image: &Path) -> Result<ToolOutput, ToolError> {
    checked("mkfs.f2fs", &["-f".as_ref(), image.as_os_str()])
}

/// `sload.f2fs -f SRC -t / IMAGE`: copies a host tree into the image.
pub fn sload(src: &Path, image: &Path) -> Result<ToolOutput, ToolError> {
    checked(
        "sload.f2fs",
        &[
            "-f".as_ref(),
            src.as_os_str(),
            "-t".as_ref(),
            "/".as_ref(),
            image.as_os_str(),
        ],
    )
}

/// `fsck.f2fs --dry-run IMAGE`.
pub fn fsck(image: &Path) -> Result<ToolOutput, ToolError> {
    run(
        "fsck.f2fs",
        &["--dry-run".as_ref(), image.as_os_str()],
        None,
    )
}

/// `fsck.f2fs --dry-run -f IMAGE` (full check even on a clean image).
pub fn fsck_full(image: &Path) -> Result<ToolOutput, ToolError> {
    run(
        "fsck.f2fs",
        &["--dry-run".as_ref(), "-f".as_ref(), image.as_os_str()],
        None,
    )
}

/// The problems fsck reported: lines with a failed check, an assertion, or a fix it would
/// make. Empty means a clean run.
pub fn fsck_problems(out: &ToolOutput) -> Vec<String> {
    let mut v: Vec<String> = out
        .text
        .lines()
        .filter(|l| {
            l.contains("[Fail]")
                || l.contains("ASSERT")
                || l.contains("[FIX]")
                || l.contains("[FSCK] Unreachable") && !l.contains("[Ok..]")
                || l.contains("Invalid")
                || l.contains("corrupted") && !l.contains("[Ok..]")
                || l.contains("Wrong")
                || l.contains("mismatch")
        })
        .map(str::to_owned)
        .collect();
    if out.code != 0 {
        v.push(format!("exit status {}", out.code));
    }
    v
}

/// `dump.f2fs -i INO IMAGE` run in `dir`, answering `y` to its question: extracts one file
/// into `dir/lost_found/` (dump.f2fs 1.15 has no output option).
pub fn dump(image: &Path, ino: u32, dir: &Path) -> Result<ToolOutput, ToolError> {
    let ino = ino.to_string();
    let image = std::path::absolute(image).map_err(|e| ToolError::Spawn("dump.f2fs".into(), e))?;
    let mut c = Command::new("dump.f2fs");
    c.args(["-i".as_ref(), ino.as_ref(), image.as_os_str()])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| ToolError::Spawn("dump.f2fs".into(), e))?;
    if let Some(mut si) = child.stdin.take() {
        use std::io::Write;
        let _ = si.write_all(b"y\n");
    }
    let out = child
        .wait_with_output()
        .map_err(|e| ToolError::Spawn("dump.f2fs".into(), e))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let code = out.status.code().unwrap_or(-1);
    if code != 0 {
        return Err(ToolError::Failed("dump.f2fs".into(), code, text));
    }
    Ok(ToolOutput { code, text })
}
