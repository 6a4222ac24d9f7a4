//! The HTTP `Link` header (RFC 8288) as far as WebSub and CN 1.0.1 4.1 need it: the targets
//! of `rel="self"` (the topic) and `rel="hub"` (the hub).
//!
//! A publisher may send several `Link` headers or one with several comma-separated values,
//! `rel` may be quoted or not and may list several space-separated relations (RFC 8288 3.3);
//! all of that is read here. Commas inside `<…>` or quotes do not split values.

/// One link-value: its target and relation types (lower-cased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkValue {
    /// The URI reference between `<` and `>`, as written.
    pub target: String,
    /// The relation types of its first `rel` parameter, lower-cased.
    pub rels: Vec<String>,
}

/// Parses every link-value of the given `Link` header values (several headers are the same as
/// one joined with commas). Malformed values are skipped.
pub fn parse(values: &[String]) -> Vec<LinkValue> {
    let mut out = Vec::new();
    for value in values {
        parse_one(value, &mut out);
    }
    out
}

/// The target of the first link-value with relation `rel` (case-insensitive).
pub fn find<'a>(links: &'a [LinkValue], rel: &str) -> Option<&'a str> {
    links
        .iter()
        .find(|l| l.rels.iter().any(|r| r.eq_ignore_ascii_case(rel)))
        .map(|l| l.target.as_str())
}

/// The `Link` header a hub sends with a delivery (CN 1.0.1 4.3, WebSub 7):
/// `<topic>; rel="self", <hub>; rel="hub"`.
pub fn format(topic: &str, hub: &str) -> String {
    format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\"")
}

fn parse_one(s: &str, out: &mut Vec<LinkValue>) {
    let b = s.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t') {
            *i += 1;
        }
    };
    // Skips to just after the next top-level comma (or to the end).
    let skip_value = |i: &mut usize| {
        let mut quoted = false;
        let mut angle = false;
        while *i < b.len() {
            match b[*i] {
                b'\\' if quoted => *i += 1,
                b'"' if !angle => quoted = !quoted,
                b'<' if !quoted => angle = true,
                b'>' if !quoted => angle = false,
                b',' if !quoted && !angle => {
                    *i += 1;
                    return;
                }
                _ => {}
            }
            *i += 1;
        }
    };
    while i < b.len() {
        skip_ws(&mut i);
        if i < b.len() && b[i] == b',' {
            i += 1;
            continue;
        }
        if i >= b.len() {
            break;
        }
        if b[i] != b'<' {
            skip_value(&mut i);
            continue;
        }
        let Some(end) = s[i + 1..].find('>') else {
            break;
        };
        let target = s[i + 1..i + 1 + end].trim().to_owned();
        i += end + 2;
        let mut rels: Option<Vec<String>> = None;
        // Parameters: `; name=value` or `; name="value"`, until a top-level comma.
        loop {
            skip_ws(&mut i);
            if i >= b.len() {
                break;
            }
            if b[i] == b',' {
                i += 1;
                break;
            }
            if b[i] != b';' {
                skip_value(&mut i);
                break;
            }
            i += 1;
            skip_ws(&mut i);
            let name_start = i;
            while i < b.len() && !matches!(b[i], b'=' | b';' | b',' | b' ' | b'\t') {
                i += 1;
            }
            let name = &s[name_start..i];
            skip_ws(&mut i);
            let mut value = String::new();
            if i < b.len() && b[i] == b'=' {
                i += 1;
                skip_ws(&mut i);
                if i < b.len() && b[i] == b'"' {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        if b[i] == b'\\' && i + 1 < b.len() {
                            i += 1;
                        }
                        // Multi-byte characters are copied whole.
                        let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
                        value.push(ch);
                        i += ch.len_utf8();
                    }
                    i += 1;
                } else {
                    let start = i;
                    while i < b.len() && !matches!(b[i], b';' | b',') {
                        i += 1;
                    }
                    value = s[start..i].trim().to_owned();
                }
            }
            // RFC 8288 3.3: only the first `rel` parameter counts.
            if name.eq_ignore_ascii_case("rel") && rels.is_none() {
                rels = Some(
                    value
                        .split_ascii_whitespace()
                        .map(str::to_ascii_lowercase)
                        .collect(),
                );
            }
        }
        out.push(LinkValue {
            target,
            rels: rels.unwrap_or_default(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(values: &[&str]) -> Vec<LinkValue> {
        parse(&values.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn reads_the_spec_example_and_variants() {
        // CN 1.0.1 Example 2, folded onto one line.
        let links = p(&["<http://example.com/dataset1/change/> ; rel=\"self\", \
             <http://hub.example.org/websub/> ; rel=\"hub\", \
             <http://www.example.com/dataset1/capabilitylist.xml> ; rel=\"resourcesync\""]);
        assert_eq!(links.len(), 3);
        assert_eq!(
            find(&links, "self"),
            Some("http://example.com/dataset1/change/")
        );
        assert_eq!(find(&links, "HUB"), Some("http://hub.example.org/websub/"));

        let links = p(&[
            "<http://t/a,b>;rel=self",
            "<http://h/>; title=\"x, y\"; rel=\"Hub other\"",
        ]);
        assert_eq!(find(&links, "self"), Some("http://t/a,b"));
        assert_eq!(find(&links, "hub"), Some("http://h/"));
        assert_eq!(find(&links, "other"), Some("http://h/"));

        // Only the first rel parameter counts; garbage is skipped.
        let links = p(&["garbage, <http://x/>; rel=hub; rel=self, <http://y/>"]);
        assert_eq!(find(&links, "hub"), Some("http://x/"));
        assert_eq!(find(&links, "self"), None);
        assert_eq!(links.len(), 2);
    }

    #[test]
    fn formats_what_it_reads() {
        let header = format("http://t/c/", "http://h/");
        let links = p(&[&header]);
        assert_eq!(find(&links, "self"), Some("http://t/c/"));
        assert_eq!(find(&links, "hub"), Some("http://h/"));
    }
}
