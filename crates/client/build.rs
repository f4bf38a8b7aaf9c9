//! Generates the gRPC code from proto/tabos.proto with the vendored protoc,
//! so a fresh machine needs no protobuf compiler installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // prost-build finds protoc through this variable; a build script is
    // single-threaded, so setting it here races with nothing.
    std::env::set_var("PROTOC", protoc);
    // Our codec: prost's, with undecodable bytes INVALID_ARGUMENT
    // (src/codec.rs).
    tonic_prost_build::configure()
        .codec_path("crate::codec::Codec")
        .compile_protos(&["proto/tabos.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/tabos.proto");
    Ok(())
}
