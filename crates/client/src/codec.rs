//! The gRPC codec of every tabos service: prost's encoding, with bytes that
//! do not decode as the message refused as `INVALID_ARGUMENT` (the caller
//! sent them) instead of tonic-prost's `INTERNAL`, which says the server
//! failed and invites a retry that can only fail the same way (issue 36,
//! item 5). Named by the build script (`codec_path`), so the generated
//! clients and servers both use it.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic::Status;

/// [`tonic_prost::ProstCodec`] with a decoder that blames the sender.
#[derive(Debug)]
pub struct Codec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec { _pd: PhantomData }
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = MessageDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder { _pd: PhantomData }
    }
}

/// Decodes one `U`; malformed, truncated or mistyped bytes are the
/// sender's error.
#[derive(Debug)]
pub struct MessageDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: Message + Default> Decoder for MessageDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
