//! Generates the gRPC echo peer of the `ipc` suite from proto/echo.proto
//! with the vendored protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // A build script is single-threaded: setting PROTOC races with nothing.
    std::env::set_var("PROTOC", protoc);
    tonic_prost_build::configure().compile_protos(&["proto/echo.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/echo.proto");
    Ok(())
}
