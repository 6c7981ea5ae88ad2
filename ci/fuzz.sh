#!/usr/bin/env bash
# Runs a cargo-fuzz target with libFuzzer on the stable toolchain (coverage instrumentation by
# rustc's sancov pass; no sanitizer, which would need nightly).
# Usage: ci/fuzz.sh CRATE_DIR TARGET SECONDS   e.g. ci/fuzz.sh crates/gpu-nvme parse_commands 120
set -euo pipefail
crate="$1"; target="$2"; seconds="${3:-60}"
cd "$(dirname "$0")/../$crate/fuzz"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions"
host=$(rustc -vV | sed -n 's/^host: //p')
# --target keeps the instrumentation off build scripts and proc macros.
cargo build --release --target "$host" --bin "$target"
mkdir -p corpus/"$target"
exec ./target/"$host"/release/"$target" corpus/"$target" -max_total_time="$seconds"
