//! A pipeline file as text: where each key and value is (from the TOML parser's spans), the
//! `${NAME}` substitution into parsed string values, and the line and column of a problem.
//!
//! Substitution happens on values, never on the text: a `${NAME}` inside a string value is
//! replaced by the variable's value and the whole value is written back as a TOML string
//! (escaped), so a value holding `"` or a newline cannot change the file's structure, and a
//! `${…}` in a comment or a key is left alone. Positions found in the substituted text (by the
//! deserializer) are mapped back to the file as written.

use std::collections::BTreeMap;
use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

use crate::Problem;

/// One replaced string value: its span in the file and its length in the substituted text.
#[derive(Debug, Clone)]
struct Edit {
    orig: Range<usize>,
    new_len: usize,
}

/// The file as written and what the parser says about it.
#[derive(Debug)]
pub(crate) struct Source<'a> {
    text: &'a str,
    /// Key path (`collection.base_url`, `upstream[1].url`) → span of key and value in `text`.
    spans: BTreeMap<String, Range<usize>>,
    /// Replaced values, in file order.
    edits: Vec<Edit>,
    /// The text with `${NAME}` substituted (what is deserialized).
    pub expanded: String,
    /// Every unset variable (without a default), at its value.
    pub unset: Vec<Problem>,
    /// Key paths of the entries blanked out of `expanded` because a value of theirs names an
    /// unset variable: the rest of the file is still read, and a required key among them is
    /// missing as a consequence, not a problem of its own.
    pub blanked: Vec<String>,
}

impl<'a> Source<'a> {
    /// Parses `text` for its spans and substitutes environment variables (`env` looks one
    /// up). A syntax error is the one problem returned (nothing after it can be read); an
    /// unset variable is a problem in [`Source::unset`] and its `key = value` entry is
    /// blanked out of [`Source::expanded`] (same length, so every position holds), so that
    /// the rest of the file is still checked in the same pass.
    pub fn parse(
        text: &'a str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Source<'a>, Vec<Problem>> {
        let syntax = |e: toml_edit::TomlError, text: &str| {
            let at = e.span().map_or(0, |s| s.start);
            let (line, column) = position(text, at);
            vec![Problem {
                line,
                column,
                key: String::new(),
                message: format!("TOML syntax: {}", e.message().trim_end()),
            }]
        };
        let doc = ImDocument::parse(text).map_err(|e| syntax(e, text))?;
        let mut walk = Walk::default();
        walk.table("", doc.as_table());
        // Unset variables first: each is reported, and its entry blanked.
        let mut unset = Vec::new();
        let mut blank: Vec<(Range<usize>, String)> = Vec::new();
        walk.strings.sort_by_key(|(span, _, _)| span.start);
        for (span, key, value) in &walk.strings {
            if let Err(message) = expand(value, env) {
                let (line, column) = position(text, span.start);
                unset.push(Problem {
                    line,
                    column,
                    key: key.clone(),
                    message,
                });
                if let Some(entry) = walk
                    .values
                    .iter()
                    .filter(|(s, _)| s.start <= span.start && span.end <= s.end)
                    .min_by_key(|(s, _)| s.end - s.start)
                    && !blank.contains(entry)
                {
                    blank.push(entry.clone());
                }
            }
        }
        let mut readable = text.to_owned();
        for (span, _) in &blank {
            blank_range(&mut readable, span.clone());
        }
        // The strings left to substitute, from the text with those entries blanked (the
        // same positions as `text`).
        let strings = if blank.is_empty() {
            walk.strings
        } else {
            let doc = ImDocument::parse(readable.as_str()).map_err(|e| syntax(e, text))?;
            let mut w = Walk::default();
            w.table("", doc.as_table());
            w.strings.sort_by_key(|(span, _, _)| span.start);
            w.strings
        };
        let mut edits = Vec::new();
        let mut expanded = String::with_capacity(text.len());
        let mut last = 0;
        for (span, key, value) in strings {
            match expand(&value, env) {
                Ok(new) => {
                    let encoded = Value::from(new).to_string();
                    let encoded = encoded.trim();
                    expanded.push_str(&readable[last..span.start]);
                    expanded.push_str(encoded);
                    edits.push(Edit {
                        orig: span.clone(),
                        new_len: encoded.len(),
                    });
                    last = span.end;
                }
                Err(message) => {
                    // Not reached (every such entry was blanked); reported all the same.
                    let (line, column) = position(text, span.start);
                    unset.push(Problem {
                        line,
                        column,
                        key,
                        message,
                    });
                }
            }
        }
        expanded.push_str(&readable[last..]);
        Ok(Source {
            text,
            spans: walk.spans,
            edits,
            expanded,
            unset,
            blanked: blank.into_iter().map(|(_, key)| key).collect(),
        })
    }

    /// A problem at `key` (or, when the file does not have that key, at the nearest key
    /// above it that it has; line 0 when none).
    pub fn problem(&self, key: &str, message: String) -> Problem {
        let mut k = key;
        let at = loop {
            if let Some(span) = self.spans.get(k) {
                break Some(span.start);
            }
            match k.rfind(['.', '[']) {
                Some(i) => k = &k[..i],
                None => break None,
            }
        };
        let (line, column) = at.map_or((0, 0), |at| position(self.text, at));
        Problem {
            line,
            column,
            key: key.to_owned(),
            message,
        }
    }

    /// A problem the deserializer found at `span` of the substituted text: its position in the
    /// file as written, and the innermost key there.
    pub fn problem_at(&self, span: Option<Range<usize>>, message: String) -> Problem {
        let Some(span) = span else {
            return Problem {
                line: 0,
                column: 0,
                key: String::new(),
                message,
            };
        };
        let at = self.original_offset(span.start);
        let key = self
            .spans
            .iter()
            .filter(|(_, s)| s.start <= at && at < s.end.max(s.start + 1))
            // Of equal spans (an array of tables and its first table share the header), the
            // deeper key.
            .min_by_key(|(k, s)| (s.end - s.start, std::cmp::Reverse(k.len())))
            .map(|(k, _)| k.clone())
            .unwrap_or_default();
        let (line, column) = position(self.text, at);
        Problem {
            line,
            column,
            key,
            message,
        }
    }

    /// The offset in the file as written of `offset` in the substituted text.
    fn original_offset(&self, offset: usize) -> usize {
        let mut shift: isize = 0;
        for e in &self.edits {
            let new_start = (e.orig.start as isize + shift) as usize;
            if offset < new_start {
                break;
            }
            if offset < new_start + e.new_len {
                return e.orig.start;
            }
            shift += e.new_len as isize - (e.orig.end - e.orig.start) as isize;
        }
        (offset as isize - shift).max(0) as usize
    }
}

/// 1-based line and column (in characters) of byte `at` of `text`.
pub(crate) fn position(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// `${NAME}` replaced by the variable's value, `${NAME:-default}` by the default when the
/// variable is unset or empty. An unset variable without a default is an error naming it.
pub(crate) fn expand(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("`${{` without a closing `}}` in `{s}`"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "`${{{inner}}}`: a variable name is letters, digits and `_` (write `${{NAME}}` or `${{NAME:-default}}`)"
            ));
        }
        match (env(name).filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "environment variable `{name}` (used as `${{{name}}}`) is not set (give a default with `${{{name}:-…}}`)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `text` with the innermost `key = value` around byte `at` replaced by spaces (newlines
/// kept, so every position holds); `None` when `at` is not inside a value entry (a table
/// header, a missing key), or `text` does not parse.
pub(crate) fn blank_entry(text: &str, at: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    let mut walk = Walk::default();
    walk.table("", doc.as_table());
    let span = walk
        .values
        .iter()
        .map(|(s, _)| s)
        .filter(|s| s.start <= at && at < s.end)
        .min_by_key(|s| s.end - s.start)?
        .clone();
    let mut out = text.to_owned();
    blank_range(&mut out, span);
    Some(out)
}

/// `text` with the standard table whose header holds byte `at` (`[stor]`, `[[upstreem]]`)
/// replaced by spaces: its header and its body up to the next header (newlines kept, so
/// every position holds). An unknown table is one problem, and the file's other problems
/// are still found with it blanked. `None` when `at` is not in a header, or `text` does not
/// parse.
pub(crate) fn blank_table(text: &str, at: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    let mut walk = Walk::default();
    walk.table("", doc.as_table());
    let header = walk
        .headers
        .values()
        .filter(|h| h.start <= at && at < h.end)
        .min_by_key(|h| h.end - h.start)?
        .clone();
    let end = walk
        .headers
        .values()
        .map(|h| h.start)
        .filter(|&start| start >= header.end)
        .min()
        .unwrap_or(text.len());
    let mut out = text.to_owned();
    blank_range(&mut out, header.start..end);
    Some(out)
}

/// `text[span]` replaced by spaces, newlines kept (so every position holds).
fn blank_range(text: &mut String, span: Range<usize>) {
    let blank: String = text[span.clone()]
        .bytes()
        .map(|b| if b == b'\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(span, &blank);
}

/// Where the body of the standard table at `path` (`collection`, `upstream[1]`; written as
/// a `[header]` or `[[header]]`) begins in `text`: after its header line. `None` when
/// `text` has no such table (it is missing, inline or made of dotted keys).
pub(crate) fn table_body(text: &str, path: &str) -> Option<usize> {
    let doc = ImDocument::parse(text).ok()?;
    let mut walk = Walk::default();
    walk.table("", doc.as_table());
    let header = walk.headers.get(path)?;
    let end = text[header.end..]
        .find('\n')
        .map_or(text.len(), |i| header.end + i + 1);
    Some(end)
}

/// Collects spans and the string values that need substitution.
#[derive(Default)]
struct Walk {
    spans: BTreeMap<String, Range<usize>>,
    /// Spans (key and value) of every `key = value` entry, with its key path.
    values: Vec<(Range<usize>, String)>,
    /// Header spans of the standard tables (`[a]`, `[[a]]`), by key path.
    headers: BTreeMap<String, Range<usize>>,
    /// (span of the value, key path, the value) of strings holding `${`.
    strings: Vec<(Range<usize>, String, String)>,
}

impl Walk {
    fn join(prefix: &str, key: &str) -> String {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    }

    fn record(&mut self, path: &str, key: Option<Range<usize>>, value: Option<Range<usize>>) {
        let span = match (key, value) {
            (Some(k), Some(v)) => k.start.min(v.start)..k.end.max(v.end),
            (Some(s), None) | (None, Some(s)) => s,
            (None, None) => return,
        };
        self.spans.insert(path.to_owned(), span);
    }

    fn table(&mut self, prefix: &str, t: &Table) {
        for (k, item) in t.iter() {
            let path = Self::join(prefix, k);
            let key_span = t.key(k).and_then(|k| k.span());
            match item {
                Item::Table(sub) => {
                    if let Some(h) = sub
                        .span()
                        .filter(|_| !sub.is_implicit() && !sub.is_dotted())
                    {
                        self.headers.insert(path.clone(), h);
                    }
                    self.record(&path, sub.span(), None);
                    self.table(&path, sub);
                }
                Item::ArrayOfTables(a) => {
                    self.record(&path, a.span(), None);
                    for (i, sub) in a.iter().enumerate() {
                        let p = format!("{path}[{i}]");
                        if let Some(h) = sub.span() {
                            self.headers.insert(p.clone(), h);
                        }
                        self.record(&p, sub.span(), None);
                        self.table(&p, sub);
                    }
                }
                Item::Value(v) => {
                    if let (Some(k), Some(v)) = (key_span.clone(), v.span()) {
                        self.values.push((k.start..v.end, path.clone()));
                    }
                    self.record(&path, key_span, v.span());
                    self.value(&path, v);
                }
                Item::None => {}
            }
        }
    }

    fn value(&mut self, path: &str, v: &Value) {
        match v {
            Value::String(s) if s.value().contains("${") => {
                if let Some(span) = s.span() {
                    self.strings
                        .push((span, path.to_owned(), s.value().to_owned()));
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    self.record(&p, None, v.span());
                    self.value(&p, v);
                }
            }
            Value::InlineTable(t) => {
                for (k, v) in t.iter() {
                    let p = Self::join(path, k);
                    let key_span = t.key(k).and_then(|k| k.span());
                    self.record(&p, key_span, v.span());
                    self.value(&p, v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "BUCKET" => Some("data".into()),
            "QUOTE" => Some("a\"b\nc".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn variables_with_and_without_defaults() {
        assert_eq!(expand("s3://${BUCKET}/x", &env).unwrap(), "s3://data/x");
        assert_eq!(expand("${NOPE:-dflt}/y", &env).unwrap(), "dflt/y");
        assert_eq!(expand("${EMPTY:-dflt}", &env).unwrap(), "dflt");
        assert_eq!(expand("${BUCKET:-dflt}", &env).unwrap(), "data");
        let e = expand("${NOPE}", &env).unwrap_err();
        assert!(e.contains("`NOPE`") && e.contains("not set"), "{e}");
        assert!(expand("${a b}", &env).is_err());
        assert!(expand("${OPEN", &env).is_err());
    }

    #[test]
    fn substitution_keeps_the_structure_whatever_the_value_holds() {
        let text = "# ${NOPE} in a comment stays\n[a]\nk = \"${QUOTE}\" # after\nn = 1\n";
        let s = Source::parse(text, &env).unwrap();
        let t: toml::Table = toml::from_str(&s.expanded).unwrap();
        assert_eq!(t["a"]["k"].as_str(), Some("a\"b\nc"));
        assert_eq!(t["a"]["n"].as_integer(), Some(1));
        assert!(s.expanded.starts_with("# ${NOPE} in a comment stays\n"));
    }

    #[test]
    fn positions_are_those_of_the_file_as_written() {
        let text = "[a]\nk = \"${BUCKET}${BUCKET}${BUCKET}\"\nbad = 3\n";
        let s = Source::parse(text, &env).unwrap();
        // `bad` in the substituted text, mapped back.
        let at = s.expanded.find("bad").unwrap();
        let p = s.problem_at(Some(at..at + 3), "x".into());
        assert_eq!((p.line, p.column, p.key.as_str()), (3, 1, "a.bad"));
        let p = s.problem("a.k", "y".into());
        assert_eq!((p.line, p.column), (2, 1));
        let p = s.problem("a.missing", "z".into());
        assert_eq!((p.line, p.key.as_str()), (1, "a.missing"));
    }

    #[test]
    fn every_unset_variable_is_reported_with_its_line() {
        let text = "[a]\nx = \"${ONE}\"\ny = \"${TWO}\"\n";
        let s = Source::parse(text, &env).unwrap();
        let lines: Vec<_> = s.unset.iter().map(|p| (p.line, p.key.as_str())).collect();
        assert_eq!(lines, [(2, "a.x"), (3, "a.y")]);
        // Their entries are blanked (positions kept), so the rest is still read.
        assert_eq!(s.blanked, ["a.x", "a.y"]);
        assert_eq!(s.expanded.len(), text.len());
        let t: toml::Table = toml::from_str(&s.expanded).unwrap();
        assert!(t["a"].as_table().unwrap().is_empty());
    }

    #[test]
    fn blanking_an_entry_keeps_every_position() {
        let text = "[a]\nk = \"vé\"\nn = 1\n";
        let at = text.find("vé").unwrap();
        let out = blank_entry(text, at).unwrap();
        assert_eq!(out.len(), text.len());
        assert_eq!(&out[..4], "[a]\n");
        assert!(out[4..].trim_start().starts_with("n = 1"), "{out:?}");
        assert!(blank_entry(text, 1).is_none(), "a table header is no entry");
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let problems = Source::parse("[a]\nk = \n", &env).unwrap_err();
        assert_eq!(problems[0].line, 2, "{problems:?}");
    }
}
