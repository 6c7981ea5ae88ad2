//! Compiles the master's gRPC protocol with protox (no `protoc` needed) and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/master.proto");
    let fds = protox::compile(["proto/master.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
