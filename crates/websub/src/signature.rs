//! `X-Hub-Signature` (WebSub 7.1, "Authenticated Content Distribution"): an HMAC of the
//! delivered body, keyed with the subscriber's `hub.secret`, written `method=hex`.
//!
//! WebSub names four methods (`sha1`, `sha256`, `sha384`, `sha512`); the hub signs with
//! `sha256` (sha1 is kept for verifying what older hubs send). Verification compares in
//! constant time (`Mac::verify_slice`), so a forger learns nothing from response timing.

use hmac::{Hmac, KeyInit, Mac};

use crate::{Error, SignatureFailure};

/// An HMAC method of WebSub 7.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `sha1`: allowed by WebSub for compatibility; prefer the SHA-2 methods.
    Sha1,
    /// `sha256`: what this hub signs with.
    Sha256,
    /// `sha384`.
    Sha384,
    /// `sha512`: what flask-websub signs with.
    Sha512,
}

impl Algorithm {
    /// The method name as written before `=` in the header.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha384 => "sha384",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// Parses a method name (case-insensitive); `None` for a method WebSub does not name.
    pub fn parse(name: &str) -> Option<Algorithm> {
        [
            Algorithm::Sha1,
            Algorithm::Sha256,
            Algorithm::Sha384,
            Algorithm::Sha512,
        ]
        .into_iter()
        .find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

fn mac_bytes<M: Mac + KeyInit>(secret: &[u8], body: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length (RFC 2104 2), so `new_from_slice` cannot fail here.
    let mut mac = <M as KeyInit>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn check<M: Mac + KeyInit>(secret: &[u8], body: &[u8], expected: &[u8]) -> bool {
    let mut mac = <M as KeyInit>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(body);
    mac.verify_slice(expected).is_ok()
}

/// The value of `X-Hub-Signature` for `body` keyed with `secret`: `"{method}={hex}"`
/// (lower-case hex, WebSub 7.1).
pub fn sign(alg: Algorithm, secret: &[u8], body: &[u8]) -> String {
    let mac = match alg {
        Algorithm::Sha1 => mac_bytes::<Hmac<sha1::Sha1>>(secret, body),
        Algorithm::Sha256 => mac_bytes::<Hmac<sha2::Sha256>>(secret, body),
        Algorithm::Sha384 => mac_bytes::<Hmac<sha2::Sha384>>(secret, body),
        Algorithm::Sha512 => mac_bytes::<Hmac<sha2::Sha512>>(secret, body),
    };
    format!("{}={}", alg.name(), hex(&mac))
}

/// Checks an `X-Hub-Signature` header value against `body` and `secret`, in constant time.
///
/// WebSub 7.1: a subscriber that finds a bad signature must still answer 2xx and locally
/// ignore the message; this function only tells which case applies
/// ([`Error::Signature`] with the [`SignatureFailure`]).
pub fn verify(header_value: &str, secret: &[u8], body: &[u8]) -> Result<(), Error> {
    let (method, digest) = header_value
        .trim()
        .split_once('=')
        .ok_or(Error::Signature(SignatureFailure::Malformed))?;
    let alg =
        Algorithm::parse(method.trim()).ok_or(Error::Signature(SignatureFailure::UnknownMethod))?;
    let expected = unhex(digest.trim()).ok_or(Error::Signature(SignatureFailure::Malformed))?;
    let ok = match alg {
        Algorithm::Sha1 => check::<Hmac<sha1::Sha1>>(secret, body, &expected),
        Algorithm::Sha256 => check::<Hmac<sha2::Sha256>>(secret, body, &expected),
        Algorithm::Sha384 => check::<Hmac<sha2::Sha384>>(secret, body, &expected),
        Algorithm::Sha512 => check::<Hmac<sha2::Sha512>>(secret, body, &expected),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Signature(SignatureFailure::Mismatch))
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    s.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2202 (HMAC-SHA-1) and RFC 4231 (HMAC-SHA-2) test cases 1 and 2.
    const VECTORS: &[(Algorithm, &[u8], &[u8], &str)] = &[
        (
            Algorithm::Sha1,
            &[0x0b; 20],
            b"Hi There",
            "b617318655057264e28bc0b6fb378c8ef146be00",
        ),
        (
            Algorithm::Sha1,
            b"Jefe",
            b"what do ya want for nothing?",
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
        ),
        (
            Algorithm::Sha256,
            &[0x0b; 20],
            b"Hi There",
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        ),
        (
            Algorithm::Sha256,
            b"Jefe",
            b"what do ya want for nothing?",
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            Algorithm::Sha384,
            &[0x0b; 20],
            b"Hi There",
            "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59c\
             faea9ea9076ede7f4af152e8b2fa9cb6",
        ),
        (
            Algorithm::Sha384,
            b"Jefe",
            b"what do ya want for nothing?",
            "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e\
             8e2240ca5e69e2c78b3239ecfab21649",
        ),
        (
            Algorithm::Sha512,
            &[0x0b; 20],
            b"Hi There",
            "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde\
             daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854",
        ),
        (
            Algorithm::Sha512,
            b"Jefe",
            b"what do ya want for nothing?",
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
             9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
        ),
    ];

    #[test]
    fn known_vectors_sign_and_verify() {
        for &(alg, key, data, hex_mac) in VECTORS {
            let expected = format!("{}={hex_mac}", alg.name());
            assert_eq!(sign(alg, key, data), expected, "{alg:?}");
            verify(&expected, key, data).unwrap();
            // Upper-case hex and method names are accepted as well.
            verify(&expected.to_ascii_uppercase(), key, data).unwrap();
        }
    }

    #[test]
    fn tampering_and_malformed_headers_are_refused() {
        let good = sign(Algorithm::Sha256, b"secret", b"body");
        let fail = |h: &str, secret: &[u8], body: &[u8]| match verify(h, secret, body) {
            Err(Error::Signature(f)) => f,
            other => panic!("{h}: {other:?}"),
        };
        assert_eq!(fail(&good, b"secret", b"bodx"), SignatureFailure::Mismatch);
        assert_eq!(fail(&good, b"secreT", b"body"), SignatureFailure::Mismatch);
        let truncated = &good[..good.len() - 2];
        assert_eq!(
            fail(truncated, b"secret", b"body"),
            SignatureFailure::Mismatch
        );
        assert_eq!(
            fail("sha256", b"secret", b"body"),
            SignatureFailure::Malformed
        );
        assert_eq!(fail("sha256=xyz0", b"s", b"b"), SignatureFailure::Malformed);
        assert_eq!(fail("sha256=abc", b"s", b"b"), SignatureFailure::Malformed);
        assert_eq!(fail("md5=00", b"s", b"b"), SignatureFailure::UnknownMethod);
        // Same digest under another method name does not pass.
        let relabelled = good.replacen("sha256", "sha512", 1);
        assert_eq!(
            fail(&relabelled, b"secret", b"body"),
            SignatureFailure::Mismatch
        );
    }
}
