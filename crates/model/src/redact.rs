//! What rsagg prints never carries a credential or a whole piece of untrusted input.
//!
//! - [`redact`] / [`Redacted`]: credentials in URLs replaced by [`REDACTED`] — the userinfo
//!   (`http://user:password@host/` → `http://***@host/`) and the values of query parameters
//!   that carry secrets (`?access_token=…`, `X-Amz-Signature=…`, [`SECRET_PARAMS`]). It
//!   works on any text (a URL, an error message that embeds one — reqwest's and object
//!   store's do —, a whole log line, a rendered page), so it is applied where text leaves the
//!   process: log lines, reports, `stats/*.json`, `/status`, `/metrics`, error lines.
//!   Only what is shown is redacted: a credential in a configured URL is still used for the
//!   requests it is meant for.
//! - [`excerpt`] / [`Excerpt`]: text cut to a bounded prefix with a marker saying how much was
//!   left out, for upstream input (a `<loc>`, an error quoting a value) that goes into a log
//!   line, a report field or an error.
//!
//! Why here: every crate that prints, logs or reports depends on `rsagg-model` (see
//! [`crate::ErrorChain`], which redacts through this module too), and the helpers need
//! nothing but `std`.

use std::borrow::Cow;
use std::fmt;

/// What replaces a credential.
pub const REDACTED: &str = "***";

/// Query parameters whose value is a credential (compared ASCII case-insensitively): OAuth
/// and API tokens, passwords, signed-URL signatures and credentials (S3 presigned URLs:
/// `X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`; Google Cloud Storage's
/// `X-Goog-*`; Azure SAS `sig`), and WebSub's `hub.secret`.
pub const SECRET_PARAMS: &[&str] = &[
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "auth",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "key",
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "hub.secret",
    "signature",
    "sig",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
];

/// Bytes of upstream text a log line or report field quotes at most ([`excerpt`]).
pub const EXCERPT_BYTES: usize = 256;

/// Bytes of a whole message made of upstream text (a warning or error of a report, which
/// quotes a URI and an error) kept at most: twice the default URI limit, so a legitimate URI
/// is quoted whole.
pub const MESSAGE_BYTES: usize = 16 * 1024;

/// A byte that ends a URL in running text (never part of a serialized URL's authority or
/// query: the URL standard percent-encodes them there) — white space, quotes, angle
/// brackets, a backslash (JSON escapes).
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace()
        || b.is_ascii_control()
        || matches!(
            b,
            b'"' | b'<' | b'>' | b'`' | b'\\' | b'{' | b'}' | b'|' | b'^'
        )
}

fn is_secret_param(name: &str) -> bool {
    // `&` HTML-escaped (`&amp;token=…` on a rendered page) leaves `amp;` before the name.
    let name = name.strip_prefix("amp;").unwrap_or(name);
    SECRET_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(name))
}

/// `text` with the credentials of every URL in it replaced by [`REDACTED`]: the userinfo of
/// each `scheme://userinfo@host` and the values of [`SECRET_PARAMS`] in its query. Borrowed
/// when there is nothing to replace (the common case costs one scan for `://`).
pub fn redact(text: &str) -> Cow<'_, str> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    // Everything before `copied` is in `out` already.
    let mut copied = 0;
    let mut from = 0;
    while let Some(at) = find(&b[from..], b"://").map(|i| from + i) {
        let start = at + 3;
        // The authority: up to the path, query, fragment or the end of the URL.
        let auth_end = b[start..]
            .iter()
            .position(|&c| matches!(c, b'/' | b'?' | b'#') || ends_url(c))
            .map_or(b.len(), |i| start + i);
        let mut edits: Vec<(usize, usize)> = Vec::new();
        if let Some(i) = b[start..auth_end].iter().rposition(|&c| c == b'@') {
            edits.push((start, start + i));
        }
        // Path, then query: up to a fragment or the end of the URL (a quote ends a URL in
        // running text here; the URL standard encodes `'` in a query).
        let ends_tail = |c: u8| ends_url(c) || c == b'\'';
        let mut i = auth_end;
        while i < b.len() && !ends_tail(b[i]) && b[i] != b'?' && b[i] != b'#' {
            i += 1;
        }
        if i < b.len() && b[i] == b'?' {
            i += 1;
            loop {
                let name_start = i;
                while i < b.len() && !ends_tail(b[i]) && !matches!(b[i], b'=' | b'&' | b'#') {
                    i += 1;
                }
                let name = &text[name_start..i];
                if i < b.len() && b[i] == b'=' {
                    i += 1;
                    let value_start = i;
                    while i < b.len() && !ends_tail(b[i]) && !matches!(b[i], b'&' | b'#') {
                        i += 1;
                    }
                    // Punctuation of the sentence around the URL is not part of the value
                    // (`…?token=t: refused`, as error chains join their causes).
                    let mut end = i;
                    while end > value_start && matches!(b[end - 1], b':' | b',' | b'.' | b';') {
                        end -= 1;
                    }
                    if end > value_start && is_secret_param(name) {
                        edits.push((value_start, end));
                    }
                }
                if i < b.len() && b[i] == b'&' {
                    i += 1;
                    continue;
                }
                break;
            }
        }
        for (s, e) in edits {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
            o.push_str(&text[copied..s]);
            o.push_str(REDACTED);
            copied = e;
        }
        from = i.max(start);
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Displays a URL (or any text holding URLs) through [`redact`]: `%Redacted(&url)` in a log
/// field, `{}` in a message. `T` is anything that is text: `&str`, `String`, `url::Url`.
#[derive(Clone, Copy)]
pub struct Redacted<T>(pub T);

impl<T: AsRef<str>> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(self.0.as_ref()))
    }
}

impl<T: AsRef<str>> fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*redact(self.0.as_ref()), f)
    }
}

/// `text` cut to at most `max` bytes (at a character boundary) followed by a marker
/// `… [N more bytes]` when it is longer; borrowed when it fits.
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… [{} more bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// Displays upstream text redacted ([`redact`]) and cut to [`EXCERPT_BYTES`] ([`excerpt`];
/// in this order, so a cut never leaves part of a credential behind without its `@`).
#[derive(Clone, Copy)]
pub struct Excerpt<'a>(pub &'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&excerpt(&redact(self.0), EXCERPT_BYTES))
    }
}

impl fmt::Debug for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*excerpt(&redact(self.0), EXCERPT_BYTES), f)
    }
}

/// A message for a log line or a report field: redacted and cut to [`MESSAGE_BYTES`].
pub fn bounded(message: &str) -> Cow<'_, str> {
    match redact(message) {
        Cow::Borrowed(b) => excerpt(b, MESSAGE_BYTES),
        Cow::Owned(o) => Cow::Owned(excerpt(&o, MESSAGE_BYTES).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_replaced_wherever_the_url_is() {
        assert_eq!(
            redact("http://alice:Upstr3amPassw0rd@127.0.0.1:8080/.well-known/resourcesync"),
            "http://***@127.0.0.1:8080/.well-known/resourcesync"
        );
        assert_eq!(
            redact("opening s3://KEY:SECRET@bucket/prefix, and file:///tmp/x"),
            "opening s3://***@bucket/prefix, and file:///tmp/x"
        );
        // A user alone may be a token (GitHub-style); an `@` in the path is not userinfo.
        assert_eq!(redact("https://tok3n@h/a@b"), "https://***@h/a@b");
        // JSON and HTML around it, several URLs, no URL.
        assert_eq!(
            redact(r#"{"error":"GET http://u:p@h/x: refused","b":"s3://k:s@b"}"#),
            r#"{"error":"GET http://***@h/x: refused","b":"s3://***@b"}"#
        );
        assert_eq!(redact("<td>http://u:p@h/</td>"), "<td>http://***@h/</td>");
        assert!(matches!(redact("no URL here: a@b"), Cow::Borrowed(_)));
        assert!(matches!(redact("http://h/p?q=1"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_query_parameters_lose_their_values() {
        assert_eq!(
            redact("GET https://h/a?x=1&access_token=abc&Token=d#f done"),
            "GET https://h/a?x=1&access_token=***&Token=***#f done"
        );
        assert_eq!(
            redact(
                "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ff00&X-Amz-Date=1"
            ),
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Date=1"
        );
        // HTML-escaped `&`, a quoted URL, other parameters untouched.
        assert_eq!(
            redact("<a href='http://h/?a=1&amp;api_key=zz'>"),
            "<a href='http://h/?a=1&amp;api_key=***'>"
        );
        assert_eq!(redact("http://h/?keys=1&sig="), "http://h/?keys=1&sig=");
        assert_eq!(
            redact("GET http://h/?token=t0k: refused."),
            "GET http://h/?token=***: refused."
        );
        assert_eq!(
            format!("{}", Redacted("http://a:b@h/?key=v")),
            "http://***@h/?key=***"
        );
    }

    #[test]
    fn excerpts_are_bounded_and_say_what_was_left_out() {
        assert_eq!(excerpt("short", 10), "short");
        let long = "é".repeat(100); // 200 bytes
        let e = excerpt(&long, 11);
        assert_eq!(e, format!("{}… [190 more bytes]", "é".repeat(5)));
        let huge = format!("http://u:p@h/{}", "a".repeat(1 << 20));
        let shown = Excerpt(&huge).to_string();
        assert!(shown.len() < EXCERPT_BYTES + 40, "{}", shown.len());
        assert!(shown.starts_with("http://***@h/aaa"), "{shown}");
        assert!(bounded(&huge).len() < MESSAGE_BYTES + 40);
    }
}
