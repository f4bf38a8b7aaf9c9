"""Generated from crates/client/proto/tabos.proto by generate.sh; do not edit."""
