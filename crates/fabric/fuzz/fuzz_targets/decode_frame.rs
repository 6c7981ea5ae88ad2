//! Fuzzes pRPC frame decoding (`fabric::frame`), the first thing a server does with bytes from
//! the network: nothing may panic, a decoded frame must stay inside the buffer and under the
//! maximum, re-encode to the same bytes, and decode the same way from any prefix that holds it;
//! a shorter prefix must ask for more bytes or fail the same way. Error-reply payloads too.
#![no_main]

use fabric::frame::{self, Decoded, Flags, HEADER_LEN, Header, Opcode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first two bytes pick the receiver's maximum payload (small, so oversize is reachable)
    // and a split point.
    let (max, split, bytes) = match data {
        [a, b, rest @ ..] => (u32::from(*a) * 4, usize::from(*b), rest),
        _ => return,
    };
    let whole = frame::decode(bytes, max);
    match &whole {
        Ok(Decoded::Frame {
            header,
            payload,
            consumed,
        }) => {
            assert!(*consumed <= bytes.len());
            assert_eq!(*consumed, HEADER_LEN + payload.len());
            assert!(header.payload_len <= max);
            let head: &[u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().expect("24 bytes");
            assert_eq!(&header.encode(), head);
            assert_eq!(Header::decode(head, max).as_ref(), Ok(header));
            if let Ok((_, message)) = frame::decode_error(payload) {
                assert!(message.len() + 4 == payload.len());
            }
        }
        Ok(Decoded::Need(need)) => assert!(*need > 0),
        Err(_) => {}
    }
    // A prefix of the bytes (what a receiver holds after a partial read) never contradicts the
    // whole: it decodes the same frame, asks for more, or reports the same error.
    let cut = split.min(bytes.len());
    match (frame::decode(&bytes[..cut], max), &whole) {
        (
            Ok(Decoded::Frame {
                header, consumed, ..
            }),
            Ok(Decoded::Frame {
                header: h,
                consumed: c,
                ..
            }),
        ) => {
            assert_eq!((&header, consumed), (h, *c));
        }
        (Ok(Decoded::Frame { .. }), other) => {
            panic!("prefix decoded a frame, whole gave {other:?}")
        }
        (Ok(Decoded::Need(_)), _) => {}
        (Err(error), Err(whole_error)) => {
            // A short prefix may fail on the magic before the whole header is there.
            if cut >= HEADER_LEN {
                assert_eq!(&error, whole_error);
            }
        }
        (Err(error), whole) => panic!("prefix failed with {error}, whole gave {whole:?}"),
    }
    let _ = frame::decode_error(bytes);

    // Valid frames are rare in random bytes (the header checksum), so also build one from the
    // input, flip one fuzz-chosen bit (or none), and check it decodes back or is refused.
    if let Some((head, payload)) = bytes.split_first_chunk::<16>() {
        let header = Header {
            opcode: Opcode(u16::from_le_bytes([head[0], head[1]])),
            flags: if head[2] & 1 == 1 {
                Flags::REPLY
            } else {
                Flags::NONE
            },
            request_id: u64::from_le_bytes([
                head[3], head[4], head[5], head[6], head[7], head[8], head[9], head[10],
            ]),
            payload_len: payload.len() as u32,
        };
        let mut wire = header.encode().to_vec();
        wire.extend_from_slice(payload);
        let flip = usize::from(u16::from_le_bytes([head[11], head[12]]));
        let flipped = flip < wire.len() * 8;
        if flipped {
            wire[flip / 8] ^= 1 << (flip % 8);
        }
        match frame::decode(&wire, u32::MAX) {
            Ok(Decoded::Frame {
                header: got,
                payload: body,
                consumed,
            }) => {
                assert_eq!(consumed, wire.len());
                if !flipped || flip >= HEADER_LEN * 8 {
                    assert_eq!(got, header);
                    assert_eq!(body, &wire[HEADER_LEN..]);
                }
                assert!(
                    !flipped || flip >= HEADER_LEN * 8,
                    "a corrupted header decoded"
                );
            }
            Ok(Decoded::Need(_)) => assert!(flipped && flip < HEADER_LEN * 8),
            Err(_) => assert!(flipped && flip < HEADER_LEN * 8),
        }
    }
});
