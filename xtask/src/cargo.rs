//! Running cargo and other programs, and reading the workspace's layout from `cargo metadata`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask's manifest directory has a parent")
}

/// A `cargo` command (the one running us, when run through cargo) in the workspace root.
pub fn command() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(workspace_root());
    command
}

/// The command as a shell-like line, for logs.
pub fn describe(command: &Command) -> String {
    let quoted = |word: &std::ffi::OsStr| {
        let word = word.to_string_lossy();
        if word.contains(char::is_whitespace) {
            format!("'{word}'")
        } else {
            word.into_owned()
        }
    };
    let environment = command.get_envs().filter_map(|(key, value)| {
        value.map(|value| format!("{}={}", key.to_string_lossy(), quoted(value)))
    });
    let words = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(quoted);
    environment.chain(words).collect::<Vec<_>>().join(" ")
}

/// Runs `command` with inherited output; fails unless it exits successfully.
pub fn run(command: &mut Command) -> Result<()> {
    let line = describe(command);
    eprintln!("$ {line}");
    let status = command
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Whether `program args…` starts and exits successfully (output discarded).
pub fn program_runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The workspace as `cargo metadata --no-deps` describes it.
#[derive(Debug, Deserialize)]
pub struct Workspace {
    /// Where cargo puts build outputs (honours `CARGO_TARGET_DIR`).
    #[serde(rename = "target_directory")]
    pub target_dir: PathBuf,
    /// Workspace members.
    pub packages: Vec<Package>,
}

/// One workspace member.
#[derive(Debug, Deserialize)]
pub struct Package {
    /// Package name.
    pub name: String,
    /// Its build targets.
    pub targets: Vec<Target>,
}

/// One build target of a package.
#[derive(Debug, Deserialize)]
pub struct Target {
    /// Target name (for an integration test, its file stem).
    pub name: String,
    /// Target kinds (`lib`, `bin`, `test`, `bench`, …).
    #[serde(rename = "kind")]
    pub kinds: Vec<String>,
}

impl Target {
    /// Whether this is a binary (`src/main.rs`, `src/bin/*`).
    pub fn is_binary(&self) -> bool {
        self.kinds.iter().any(|kind| kind == "bin")
    }

    /// Whether this is an integration test (`tests/*.rs`).
    pub fn is_integration_test(&self) -> bool {
        self.kinds.iter().any(|kind| kind == "test")
    }
}

impl Workspace {
    /// Reads the workspace layout.
    pub fn load() -> Result<Self> {
        let mut metadata = command();
        metadata.args(["metadata", "--no-deps", "--format-version", "1"]);
        let output = metadata
            .stderr(Stdio::inherit())
            .output()
            .context("cannot run `cargo metadata`")?;
        if !output.status.success() {
            bail!("`cargo metadata` failed ({})", output.status);
        }
        serde_json::from_slice(&output.stdout).context("cannot read `cargo metadata` output")
    }

    /// The member named `name`, if the workspace has one.
    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|package| package.name == name)
    }
}

/// An executable cargo built, from a `compiler-artifact` message.
#[derive(Debug, Deserialize)]
pub struct Artifact {
    /// The target it was built from.
    pub target: Target,
    /// Whether it is a test harness.
    pub profile: ArtifactProfile,
    /// The built executable.
    pub executable: PathBuf,
}

/// The profile part of a `compiler-artifact` message.
#[derive(Debug, Deserialize)]
pub struct ArtifactProfile {
    /// Built as a test harness (`cargo test`).
    pub test: bool,
}

/// Runs a cargo build given `--message-format=json-render-diagnostics` and returns the
/// executables it produced.
pub fn built_executables(command: &mut Command) -> Result<Vec<Artifact>> {
    let line = describe(command);
    eprintln!("$ {line}");
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !output.status.success() {
        bail!("`{line}` failed ({})", output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut artifacts = Vec::new();
    for message in stdout.lines() {
        let value: serde_json::Value = serde_json::from_str(message)
            .with_context(|| format!("unexpected cargo output line: {message}"))?;
        let is_executable =
            value["reason"] == "compiler-artifact" && !value["executable"].is_null();
        if is_executable {
            artifacts.push(serde_json::from_value(value).context("unexpected artifact message")?);
        }
    }
    Ok(artifacts)
}
