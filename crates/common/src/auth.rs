//! Unforgeable identity tokens for file access control (GoFS §3.6, "File access control",
//! Fig. 8).
//!
//! The GPU-side daemon cannot ask an OS kernel for a caller's user and group ids, so the
//! trusted host client (which can) registers each user process: it draws a random nonce and
//! signs (uid, gid, nonce) with HMAC-SHA256 under a key only the client and daemon hold. The
//! process presents the identity and its [`Token`] with each request; the daemon recomputes
//! the MAC and compares in constant time before checking file permissions.
//!
//! Signed message (33 bytes): the domain-separation prefix `b"gofs-identity-v1\0"` (17 bytes),
//! then `uid` (u32), `gid` (u32) and `nonce` (u64), each little-endian. The prefix keeps these
//! MACs from ever being valid for another message format signed with the same key; the fixed
//! field widths make the encoding unambiguous.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::str::FromStr;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Domain-separation prefix of every signed identity message.
const DOMAIN: &[u8; 17] = b"gofs-identity-v1\0";

/// Length of the signed message: prefix, uid, gid, nonce.
const MESSAGE_LEN: usize = DOMAIN.len() + 4 + 4 + 8;

/// Where keys and nonces come from.
const RANDOM_SOURCE: &str = "/dev/urandom";

/// Errors from key generation, verification and token parsing.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// could not read random bytes from /dev/urandom
    #[error("could not read random bytes from {RANDOM_SOURCE}")]
    Random(#[source] io::Error),
    /// token does not match the identity
    #[error("token does not match the identity")]
    BadToken,
    /// a token is 64 hex digits, got {len} bytes
    #[error("a token is 64 hex digits, got {len} bytes")]
    HexLength {
        /// Length of the rejected input in bytes.
        len: usize,
    },
    /// invalid hex digit at byte {index} of the token
    #[error("invalid hex digit at byte {index} of the token")]
    HexDigit {
        /// Byte offset of the first invalid character.
        index: usize,
    },
}

/// Fills `buf` from the kernel's random source.
fn fill_random(buf: &mut [u8]) -> Result<(), AuthError> {
    File::open(RANDOM_SOURCE)
        .and_then(|mut f| f.read_exact(buf))
        .map_err(AuthError::Random)
}

/// An HMAC-SHA256 instance keyed with `key`.
fn new_mac(key: &[u8]) -> HmacSha256 {
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// The user identity the host client vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// User id of the registered process.
    pub uid: u32,
    /// Group id of the registered process.
    pub gid: u32,
    /// Random per registration, so tokens of separate registrations differ.
    pub nonce: u64,
}

impl Identity {
    /// The identity of a new registration of (`uid`, `gid`), with a fresh random nonce.
    pub fn with_random_nonce(uid: u32, gid: u32) -> Result<Self, AuthError> {
        let mut nonce = [0u8; 8];
        fill_random(&mut nonce)?;
        Ok(Self {
            uid,
            gid,
            nonce: u64::from_le_bytes(nonce),
        })
    }

    /// The canonical signed message (layout in the module documentation).
    fn message(&self) -> [u8; MESSAGE_LEN] {
        let mut msg = [0u8; MESSAGE_LEN];
        let (prefix, fields) = msg.split_at_mut(DOMAIN.len());
        prefix.copy_from_slice(DOMAIN);
        fields[0..4].copy_from_slice(&self.uid.to_le_bytes());
        fields[4..8].copy_from_slice(&self.gid.to_le_bytes());
        fields[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        msg
    }
}

/// The secret HMAC key shared by the host client (signer) and the daemon (verifier).
///
/// `Debug` never prints it, and its bytes are overwritten with zeros on drop (best effort:
/// transient copies inside the HMAC state are not).
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    /// A key from 32 bytes of secret material.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh key from the kernel's random source.
    pub fn generate() -> Result<Self, AuthError> {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// The key material, to hand to the verifying daemon over a trusted channel.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The token vouching for `identity`.
    pub fn sign(&self, identity: &Identity) -> Token {
        Token(self.mac_of(identity).finalize().into_bytes().into())
    }

    /// Checks in constant time that `token` was signed for exactly `identity` with this key.
    pub fn verify(&self, identity: &Identity, token: &Token) -> Result<(), AuthError> {
        self.mac_of(identity)
            .verify_slice(&token.0)
            .map_err(|_| AuthError::BadToken)
    }

    fn mac_of(&self, identity: &Identity) -> HmacSha256 {
        let mut mac = new_mac(&self.0);
        mac.update(&identity.message());
        mac
    }
}

impl Drop for IdentityKey {
    fn drop(&mut self) {
        self.0.fill(0);
        // Makes the zeroed bytes observable so the stores are not elided as dead.
        std::hint::black_box(&self.0);
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdentityKey(<redacted>)")
    }
}

/// An HMAC-SHA256 tag over an [`Identity`]. `Display` and `FromStr` use 64 lowercase hex
/// digits (either case is accepted) for passing it between processes; equality is
/// constant-time, and `Debug` does not print it, since a token is a bearer credential.
#[derive(Clone, Copy, Eq)]
pub struct Token(pub [u8; 32]);

impl PartialEq for Token {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl FromStr for Token {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s.as_bytes();
        if digits.len() != 64 {
            return Err(AuthError::HexLength { len: digits.len() });
        }
        let nibble = |index: usize| -> Result<u8, AuthError> {
            let value = char::from(digits[index]).to_digit(16);
            // A hex digit is below 16, so the narrowing is lossless.
            value.map(|v| v as u8).ok_or(AuthError::HexDigit { index })
        };
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = nibble(2 * i)? << 4 | nibble(2 * i + 1)?;
        }
        Ok(Token(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(fill: u8) -> IdentityKey {
        IdentityKey::from_bytes([fill; 32])
    }

    const ALICE: Identity = Identity {
        uid: 1000,
        gid: 100,
        nonce: 0x0123_4567_89AB_CDEF,
    };

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_sha256_matches_rfc4231_cases_1_and_2() {
        let mut mac = new_mac(&[0x0b; 20]);
        mac.update(b"Hi There");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let mut mac = new_mac(b"Jefe");
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn message_is_prefix_then_little_endian_fields() {
        let msg = Identity {
            uid: 0x0403_0201,
            gid: 0x0807_0605,
            nonce: 0x100F_0E0D_0C0B_0A09,
        }
        .message();
        assert_eq!(&msg[..17], b"gofs-identity-v1\0");
        assert_eq!(&msg[17..], &(1u8..=16).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn signed_token_verifies_and_equals_hmac_of_the_message() {
        let k = key(7);
        let token = k.sign(&ALICE);
        assert!(k.verify(&ALICE, &token).is_ok());
        let mut mac = new_mac(&[7; 32]);
        mac.update(&ALICE.message());
        assert_eq!(token.0[..], mac.finalize().into_bytes()[..]);
    }

    #[test]
    fn any_single_bit_flip_of_the_token_is_rejected() {
        let k = key(7);
        let token = k.sign(&ALICE);
        for bit in 0..256 {
            let mut forged = token;
            forged.0[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(k.verify(&ALICE, &forged), Err(AuthError::BadToken)),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn any_single_bit_flip_of_uid_gid_or_nonce_is_rejected() {
        let k = key(7);
        let token = k.sign(&ALICE);
        let mut altered = Vec::new();
        for bit in 0..32 {
            altered.push(Identity {
                uid: ALICE.uid ^ 1 << bit,
                ..ALICE
            });
            altered.push(Identity {
                gid: ALICE.gid ^ 1 << bit,
                ..ALICE
            });
        }
        for bit in 0..64 {
            altered.push(Identity {
                nonce: ALICE.nonce ^ 1 << bit,
                ..ALICE
            });
        }
        for identity in altered {
            assert!(
                matches!(k.verify(&identity, &token), Err(AuthError::BadToken)),
                "{identity:?}"
            );
        }
    }

    #[test]
    fn token_from_another_key_is_rejected() {
        let token = key(1).sign(&ALICE);
        assert!(matches!(
            key(2).verify(&ALICE, &token),
            Err(AuthError::BadToken)
        ));
    }

    #[test]
    fn generated_keys_and_nonces_are_fresh() {
        let (a, b) = (
            IdentityKey::generate().unwrap(),
            IdentityKey::generate().unwrap(),
        );
        assert_ne!(a.as_bytes(), b.as_bytes());
        assert_ne!(a.sign(&ALICE), b.sign(&ALICE));
        let (x, y) = (
            Identity::with_random_nonce(5, 6).unwrap(),
            Identity::with_random_nonce(5, 6).unwrap(),
        );
        assert_eq!((x.uid, x.gid), (5, 6));
        assert_ne!(x.nonce, y.nonce);
    }

    #[test]
    fn debug_output_reveals_neither_key_nor_token() {
        let k = key(0xAB);
        let token = k.sign(&ALICE);
        assert_eq!(format!("{k:?}"), "IdentityKey(<redacted>)");
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    #[test]
    fn hex_decoding_rejects_bad_length_and_digits_and_accepts_uppercase() {
        let text = key(3).sign(&ALICE).to_string();
        assert!(matches!(
            "".parse::<Token>(),
            Err(AuthError::HexLength { len: 0 })
        ));
        assert!(matches!(
            text[..63].parse::<Token>(),
            Err(AuthError::HexLength { len: 63 })
        ));
        assert!(matches!(
            format!("{text}0").parse::<Token>(),
            Err(AuthError::HexLength { len: 65 })
        ));
        let mut bad = text.clone().into_bytes();
        bad[10] = b'g';
        let bad = String::from_utf8(bad).unwrap();
        assert!(matches!(
            bad.parse::<Token>(),
            Err(AuthError::HexDigit { index: 10 })
        ));
        let multibyte = format!("é{}", &text[2..]);
        assert!(matches!(
            multibyte.parse::<Token>(),
            Err(AuthError::HexDigit { index: 0 })
        ));
        assert_eq!(
            text.to_uppercase().parse::<Token>().unwrap(),
            key(3).sign(&ALICE)
        );
    }

    proptest! {
        #[test]
        fn hex_encoding_roundtrips(bytes in any::<[u8; 32]>()) {
            let text = Token(bytes).to_string();
            prop_assert_eq!(text.len(), 64);
            prop_assert!(text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            prop_assert_eq!(text.parse::<Token>().unwrap().0, bytes);
        }
    }
}
