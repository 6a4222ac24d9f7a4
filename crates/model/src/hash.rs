//! The `hash` attribute (spec section 7): a whitespace-delimited list of `algorithm:hexdigest`
//! tokens, e.g. `md5:1584abdf… sha-256:854f6129…`.

use std::fmt;

/// A digest algorithm named in a `hash` token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HashAlgorithm {
    /// `md5:` — 32 hex digits.
    Md5,
    /// `sha-1:` — 40 hex digits.
    Sha1,
    /// `sha-256:` — 64 hex digits.
    Sha256,
    /// Any other token; kept so documents round-trip, never used for verification.
    Other(String),
}

impl HashAlgorithm {
    /// The token as written before the colon.
    pub fn as_str(&self) -> &str {
        match self {
            HashAlgorithm::Md5 => "md5",
            HashAlgorithm::Sha1 => "sha-1",
            HashAlgorithm::Sha256 => "sha-256",
            HashAlgorithm::Other(s) => s,
        }
    }

    /// Number of hex digits a digest of this algorithm has, when known.
    pub fn hex_len(&self) -> Option<usize> {
        match self {
            HashAlgorithm::Md5 => Some(32),
            HashAlgorithm::Sha1 => Some(40),
            HashAlgorithm::Sha256 => Some(64),
            HashAlgorithm::Other(_) => None,
        }
    }

    fn from_token(t: &str) -> Self {
        match t {
            "md5" => HashAlgorithm::Md5,
            "sha-1" => HashAlgorithm::Sha1,
            "sha-256" => HashAlgorithm::Sha256,
            other => HashAlgorithm::Other(other.to_owned()),
        }
    }
}

/// One `algorithm:digest` token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HashValue {
    /// The algorithm.
    pub algorithm: HashAlgorithm,
    /// The digest as written (lower-cased hex when valid; anything, in lenient reading).
    pub digest: String,
}

impl HashValue {
    /// A hash token from raw digest bytes, hex-encoded in lower case.
    pub fn from_bytes(algorithm: HashAlgorithm, bytes: &[u8]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut digest = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            digest.push(HEX[usize::from(b >> 4)] as char);
            digest.push(HEX[usize::from(b & 15)] as char);
        }
        HashValue { algorithm, digest }
    }

    /// True when the digest is hex of the length the algorithm requires.
    pub fn is_well_formed(&self) -> bool {
        self.algorithm
            .hex_len()
            .is_some_and(|n| self.digest.len() == n && is_hex(self.digest.as_bytes()))
    }

    /// Whether two tokens of the same algorithm denote the same digest (hex is
    /// case-insensitive). `None` when the algorithms differ.
    pub fn matches(&self, other: &HashValue) -> Option<bool> {
        (self.algorithm == other.algorithm).then(|| self.digest.eq_ignore_ascii_case(&other.digest))
    }
}

const HEX: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = (c as u8).is_ascii_hexdigit();
        c += 1;
    }
    t
};

/// Hex check without an early exit, so the loop stays branch-free (this runs for every entry
/// of every list read).
fn is_hex(b: &[u8]) -> bool {
    b.iter().fold(true, |ok, &c| ok & HEX[usize::from(c)])
}

/// A parsed `hash` attribute: tokens in document order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Hashes(pub Vec<HashValue>);

/// Something wrong with one token of a `hash` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashIssue {
    /// The token has no `algorithm:` prefix; it was dropped.
    NoAlgorithm(String),
    /// The digest is not hex of the right length for a known algorithm; it was kept.
    BadDigest {
        /// The algorithm token.
        algorithm: String,
        /// The digest as written.
        digest: String,
        /// Required number of hex digits.
        expected_len: usize,
    },
    /// The algorithm is not one of `md5`, `sha-1`, `sha-256`; it was kept.
    UnknownAlgorithm(String),
    /// The same algorithm appears twice; both were kept.
    Repeated(String),
    /// The attribute has no token at all.
    Empty,
}

impl fmt::Display for HashIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashIssue::NoAlgorithm(t) => write!(f, "hash token `{t}` has no `algorithm:` prefix"),
            HashIssue::BadDigest {
                algorithm,
                digest,
                expected_len,
            } => write!(
                f,
                "{algorithm} digest `{digest}` is not {expected_len} hexadecimal digits"
            ),
            HashIssue::UnknownAlgorithm(a) => {
                write!(f, "hash algorithm `{a}` is not one of md5, sha-1, sha-256")
            }
            HashIssue::Repeated(a) => write!(f, "hash algorithm `{a}` is given more than once"),
            HashIssue::Empty => f.write_str("hash attribute is empty"),
        }
    }
}

impl Hashes {
    /// Parses an attribute value, reporting each token's issues to `issue` (well-formed values
    /// report nothing). Tokens without an algorithm are dropped; everything else is kept.
    pub fn parse(text: &str, mut issue: impl FnMut(HashIssue)) -> Hashes {
        // Most attributes hold one well-formed token: no tokenizing needed.
        if let Some((alg, digest)) = text.split_once(':') {
            let algorithm = HashAlgorithm::from_token(alg);
            if algorithm.hex_len() == Some(digest.len()) && is_hex(digest.as_bytes()) {
                return Hashes(vec![HashValue {
                    algorithm,
                    digest: digest.to_owned(),
                }]);
            }
        }
        let mut out = Vec::with_capacity(2);
        for token in text.split_ascii_whitespace() {
            let Some((alg, digest)) = token.split_once(':') else {
                issue(HashIssue::NoAlgorithm(token.to_owned()));
                continue;
            };
            let algorithm = HashAlgorithm::from_token(alg);
            let value = HashValue {
                algorithm,
                digest: digest.to_owned(),
            };
            match value.algorithm.hex_len() {
                None => issue(HashIssue::UnknownAlgorithm(alg.to_owned())),
                Some(n) if !value.is_well_formed() => issue(HashIssue::BadDigest {
                    algorithm: alg.to_owned(),
                    digest: digest.to_owned(),
                    expected_len: n,
                }),
                Some(_) => {}
            }
            if out
                .iter()
                .any(|h: &HashValue| h.algorithm == value.algorithm)
            {
                issue(HashIssue::Repeated(alg.to_owned()));
            }
            out.push(value);
        }
        if out.is_empty() && text.trim().is_empty() {
            issue(HashIssue::Empty);
        }
        Hashes(out)
    }

    /// The token for `algorithm`, if present.
    pub fn get(&self, algorithm: &HashAlgorithm) -> Option<&HashValue> {
        self.0.iter().find(|h| &h.algorithm == algorithm)
    }

    /// True when there is no token.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Hashes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, h) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}:{}", h.algorithm.as_str(), h.digest)?;
        }
        Ok(())
    }
}

/// Serde as the attribute value (`md5:… sha-256:…`).
impl serde::Serialize for Hashes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Hashes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Hashes::parse(&text, |_| {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(s: &str) -> (Hashes, Vec<HashIssue>) {
        let mut v = Vec::new();
        let h = Hashes::parse(s, |i| v.push(i));
        (h, v)
    }

    #[test]
    fn several_tokens_with_any_whitespace() {
        let (h, v) = issues(
            "md5:1e0d5cb8ef6ba40c99b14c0237be735e \n   sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784",
        );
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(h.0.len(), 2);
        assert!(h.get(&HashAlgorithm::Sha256).is_some());
        assert_eq!(
            h.to_string(),
            "md5:1e0d5cb8ef6ba40c99b14c0237be735e sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784"
        );
    }

    #[test]
    fn malformed_tokens_are_reported() {
        let (h, v) = issues("sha-256:f4OxZX_x_DFGFDgghgdfb6rtSx-iosjf6735432nklj");
        assert_eq!(h.0.len(), 1, "kept for lenient readers");
        assert!(matches!(
            v[0],
            HashIssue::BadDigest {
                expected_len: 64,
                ..
            }
        ));
        let (_, v) = issues("md5:abc");
        assert!(matches!(
            v[0],
            HashIssue::BadDigest {
                expected_len: 32,
                ..
            }
        ));
        let (h, v) = issues("deadbeef");
        assert!(h.is_empty());
        assert!(matches!(v[0], HashIssue::NoAlgorithm(_)));
        let (_, v) = issues("sha-512:00");
        assert!(matches!(v[0], HashIssue::UnknownAlgorithm(_)));
        let (_, v) =
            issues("md5:1584abdf8ebdc9802ac0c6a7402c03b6 md5:1584abdf8ebdc9802ac0c6a7402c03b6");
        assert!(matches!(v[0], HashIssue::Repeated(_)));
        let (_, v) = issues("  ");
        assert_eq!(v, vec![HashIssue::Empty]);
    }

    #[test]
    fn matching_is_case_insensitive_per_algorithm() {
        let a = HashValue::from_bytes(HashAlgorithm::Md5, &[0xAB, 0xCD]);
        assert_eq!(a.digest, "abcd");
        let b = HashValue {
            algorithm: HashAlgorithm::Md5,
            digest: "ABCD".into(),
        };
        assert_eq!(a.matches(&b), Some(true));
        let c = HashValue {
            algorithm: HashAlgorithm::Sha1,
            digest: "abcd".into(),
        };
        assert_eq!(a.matches(&c), None);
    }
}
