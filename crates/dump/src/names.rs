//! Entry names: what a safe name inside a package looks like.
//!
//! Spec 11.2/13.2 say `path` is "the relative file system path where the bitstream would
//! reside if the ZIP were unpacked". The reader and the writer accept the same names: UTF-8,
//! `/`-separated, relative, every component a plain name. Anything an extractor could resolve
//! outside its target directory, or two ways (`a//b`, `./a`), is refused, so a name means one
//! file on every platform.

/// Why a name is refused, or `None` when it is fine. `name` is the entry name without a
/// trailing `/` for directories.
pub(crate) fn unsafe_reason(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty name");
    }
    if name.contains('\0') {
        return Some("NUL character");
    }
    if name.contains('\\') {
        return Some("backslash (a path separator on Windows; ZIP names use `/`)");
    }
    if name.starts_with('/') {
        return Some("absolute path");
    }
    let b = name.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return Some("drive letter");
    }
    for component in name.split('/') {
        match component {
            ".." => return Some("`..` component (path traversal)"),
            "." => return Some("`.` component"),
            "" => return Some("empty component (`//` or trailing `/`)"),
            _ => {}
        }
        if component.chars().any(|c| c.is_control()) {
            return Some("control character");
        }
    }
    None
}

/// The lookup key of a manifest `path`: the leading `/` the spec writes is stripped (ZIP
/// entry names never start with one).
pub(crate) fn normalise_path(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_relative_names() {
        for ok in [
            "manifest.xml",
            "resources/res1",
            "a/b/c.d",
            "ü/😀.txt",
            "..a/b..",
            "a.b",
        ] {
            assert_eq!(unsafe_reason(ok), None, "{ok}");
        }
    }

    #[test]
    fn refuses_every_unsafe_form() {
        for (bad, why) in [
            ("", "empty"),
            ("../x", "`..`"),
            ("a/../../x", "`..`"),
            ("a/..", "`..`"),
            ("/etc/passwd", "absolute"),
            ("C:/x", "drive"),
            ("c:x", "drive"),
            ("a\\b", "backslash"),
            ("..\\x", "backslash"),
            ("a\0b", "NUL"),
            ("./a", "`.`"),
            ("a//b", "empty component"),
            ("a/", "empty component"),
            ("a\nb", "control"),
        ] {
            let r = unsafe_reason(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(r.contains(why), "{bad:?}: {r}");
        }
    }

    #[test]
    fn strips_one_leading_slash() {
        assert_eq!(normalise_path("/resources/res1"), "resources/res1");
        assert_eq!(normalise_path("resources/res1"), "resources/res1");
        assert_eq!(normalise_path("//x"), "/x");
    }
}
