//! The pipeline config loader (`rsagg_config::Pipeline::parse_with_env`: TOML, typed
//! sections with `deny_unknown_fields`, `${NAME}` / `${NAME:-default}` substitution, every
//! problem with line, column and key) on arbitrary text.
//!
//! The environment is a fixed function: names starting with `A`–`M` are set (to a value
//! that is itself a `${…}` reference, which must not be expanded again), others are unset.
//!
//! Invariants beyond "no panic":
//! - parsing is deterministic (same result twice);
//! - an invalid file reports at least one problem, in file order (problems without a line
//!   last), each at a line and column inside the text, with a message;
//! - a valid file's `base_url` is its `collection.base_url`.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rsagg_config::{Error, Pipeline};

fn env(name: &str) -> Option<String> {
    name.starts_with(|c: char| ('A'..='M').contains(&c))
        .then(|| "${NOT_AGAIN}".to_owned())
}

fn outcome(text: &str) -> String {
    match Pipeline::parse_with_env(Path::new("fuzz.toml"), text, &env) {
        Ok(p) => format!("{:?}", p.config),
        Err(e) => format!("{e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    match Pipeline::parse_with_env(path, text, &env) {
        Ok(p) => assert_eq!(p.base_url, p.config.collection.base_url),
        Err(Error::Invalid { problems, .. }) => {
            assert!(!problems.is_empty(), "invalid without a problem");
            let lines = text.split('\n').count();
            let mut last = (false, 0, 0);
            for p in &problems {
                assert!(!p.message.is_empty(), "{p:?}");
                assert!(p.line <= lines, "{p:?}: the text has {lines} lines");
                if p.line > 0 {
                    let line = text.split('\n').nth(p.line - 1).unwrap_or("");
                    let width = line.chars().count() + 1;
                    assert!(p.column <= width, "{p:?}: line {} is {width} wide", p.line);
                }
                let key = (p.line == 0, p.line, p.column);
                assert!(key >= last, "problems out of order: {problems:?}");
                last = key;
            }
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
    assert_eq!(outcome(text), outcome(text), "not deterministic");
});
