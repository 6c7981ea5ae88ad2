//! Fuzzes pRPC payload decoding (`peakfs::protocol`), what a server does with every request
//! and a client with every reply after fabric has framed them: nothing may panic, a decoded
//! request has the opcode it was decoded for, and whatever decodes re-encodes to a payload
//! that decodes to the same message (λ included).
#![no_main]

use fabric::Opcode;
use libfuzzer_sys::fuzz_target;
use peakfs::protocol::{MAX_IO, Reply, Request, op, xfer_reply_len};

fuzz_target!(|data: &[u8]| {
    // The first byte picks a PeakFS opcode (most inputs, so the decoders' bodies get the
    // attention) or, with the next two bytes, any raw opcode.
    let (opcode, payload) = match data {
        [sel, rest @ ..] if usize::from(*sel) < 2 * op::ALL.len() => {
            (op::ALL[usize::from(*sel) % op::ALL.len()], rest)
        }
        [_, a, b, rest @ ..] => (Opcode(u16::from_le_bytes([*a, *b])), rest),
        _ => return,
    };

    // An XFER's reply length: only from a payload holding one, never past a frame's data.
    if let Some(n) = xfer_reply_len(payload) {
        assert!(payload.len() >= 4 && n <= MAX_IO as usize);
    }

    if let Ok((lambda, req)) = Request::decode(opcode, payload) {
        assert_eq!(req.opcode(), opcode);
        let wire = req.encode(lambda);
        assert_eq!(
            Request::decode(opcode, &wire),
            Ok((lambda, req)),
            "re-encoded request decodes differently"
        );
        // The zero-copy form (head, then a WRITE's data) is the same payload.
        let mut head = Vec::new();
        req.encode_head(lambda, &mut head);
        if let Request::Write { data, .. } = req {
            head.extend_from_slice(data);
        }
        assert_eq!(head, wire);
    }

    if let Ok(reply) = Reply::decode(opcode, payload) {
        let mut wire = Vec::new();
        reply.encode(&mut wire);
        assert_eq!(
            Reply::decode(opcode, &wire).as_ref(),
            Ok(&reply),
            "re-encoded reply decodes differently"
        );
    }
});
