//! An error with its causes on one line, for log fields and messages:
//! `tracing::warn!(error = %ErrorChain(&e), …)`.
//!
//! Why here: every crate that logs errors (fetch, store, harvest, publish, notify, pipeline)
//! depends on `rsagg-model`, and the helper needs nothing but `std`.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each [`Error::source`] in turn, separated by `: `, like
/// `anyhow`'s `{:#}`. A cause whose text the line already holds is left out: many of our
/// errors put their source into their own message (`#[error("… {source}")]`), and a log line
/// should not say it twice. The line is redacted ([`crate::redact()`]): reqwest's and
/// object_store's messages quote the URL they failed on, credentials included.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

/// Causes followed at most (a cycle or a pathological chain must not loop forever).
const MAX_CAUSES: usize = 16;

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        let mut n = 0;
        while let Some(c) = cause {
            if n == MAX_CAUSES {
                break;
            }
            let text = c.to_string();
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = c.source();
            n += 1;
        }
        f.write_str(&crate::redact(&line))
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn every_cause_once_on_one_line() {
        let e = E(
            "GET http://up/a: error sending request",
            Some(Box::new(E(
                "client error (Connect)",
                Some(Box::new(E("Connection refused (os error 111)", None))),
            ))),
        );
        assert_eq!(
            ErrorChain(&e).to_string(),
            "GET http://up/a: error sending request: client error (Connect): Connection refused (os error 111)"
        );
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = E(
            "reading http://up/list.xml: timed out",
            Some(Box::new(E("timed out", None))),
        );
        assert_eq!(
            ErrorChain(&e).to_string(),
            "reading http://up/list.xml: timed out"
        );
        let secret = E(
            "GET http://alice:pw@up/a?token=t: error sending request",
            Some(Box::new(E("for url (http://alice:pw@up/a?token=t)", None))),
        );
        let line = ErrorChain(&secret).to_string();
        assert!(!line.contains("pw") && !line.contains("=t"), "{line}");
        let plain = E("alone", None);
        assert_eq!(format!("{:?}", ErrorChain(&plain)), "alone");
    }
}
