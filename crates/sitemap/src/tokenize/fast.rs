//! The tokenizer's fast path: entries of the common shape (plain text children, empty
//! `<rs:md/>`/`<rs:ln/>` with plain attributes, nothing to report) read straight from the
//! input buffer ([`Tokenizer::fast_entry`], [`scan_entry`]), their attributes split so the
//! builder need not re-parse the tag. Anything else goes through quick-xml (the parent
//! module). Both ways yield the same raw entries and problems: `tests/fastpath.rs` checks it
//! on every fixture, also corrupted.
//!
//! Why a path of its own: quick-xml's nine events per entry made the tokenizer thread set
//! the pace of the whole parse (profiles of the 1M-entry benchmark).

use std::io::BufRead;

use rsagg_model::Pos;

use super::{RawAttr, RawBatch, RawElem, RawEntry, RawText, Scopes, Simple, Tokenizer};

/// Children an entry may have for [`scan_entry`] (more go the general way).
const FAST_CHILDREN: usize = 8;

#[derive(Debug, Clone, Copy)]
enum FastKind {
    /// A text child, by [`RawEntry::slot`] number.
    Text(u8),
    /// An empty `<rs:md/>` or `<rs:ln/>`, with its attributes when they are plain
    /// (`FastEntry::attrs[a..b]`).
    Elem {
        is_md: bool,
        attrs: Option<(u8, u8)>,
    },
}

/// Plain attributes [`scan_entry`] splits per entry (more: the builder splits them).
const FAST_ATTRS: usize = 16;

/// One child found by [`scan_entry`]; offsets are into the scanned buffer.
#[derive(Debug, Clone, Copy)]
struct FastChild {
    kind: FastKind,
    /// The `<` of its start tag.
    tag: usize,
    /// Text, or the start tag's content (name and attributes, as quick-xml gives it).
    start: usize,
    end: usize,
    /// Length of the name at the start of the content (elements only).
    name_len: usize,
}

/// An entry found by [`scan_entry`]; one per tokenizer, reused (it is too large to return
/// by value for every entry).
#[derive(Debug)]
pub(super) struct FastEntry {
    is_url: bool,
    /// The `<` of `<url>`/`<sitemap>`.
    start: usize,
    /// Just after its end tag.
    end: usize,
    children: [FastChild; FAST_CHILDREN],
    n: usize,
    /// Plain attributes of the children: name and value, as offsets into the buffer.
    attrs: [(u32, u32, u32, u32); FAST_ATTRS],
    n_attrs: usize,
}

/// Equality of two short byte strings (element and attribute names): a plain loop, cheaper
/// than a call to `memcmp` for a few bytes.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Byte classes of the fast path's scanning, one table lookup per byte.
const WS: u8 = 1;
/// Ends an element name (white space, `/`, `>`).
const NAME_END: u8 = 2;
/// Never in a name the fast path accepts.
const NAME_BAD: u8 = 4;
/// Ends an attribute name (`=`, and the bytes of `NAME_END | NAME_BAD`, and `:`).
const ATTR_NAME_STOP: u8 = 8;
/// Makes an attribute value need normalization or unescaping (or be malformed).
const VALUE_BAD: u8 = 16;
/// Ends a text (`<`) or makes it need unescaping (`&`).
const TEXT_STOP: u8 = 32;
/// `"`
const DQUOTE: u8 = 64;
/// `'`
const SQUOTE: u8 = 128;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let ws = [b' ', b'\t', b'\r', b'\n'];
    let mut k = 0;
    while k < ws.len() {
        t[ws[k] as usize] = WS | NAME_END | ATTR_NAME_STOP;
        k += 1;
    }
    t[b'\t' as usize] |= VALUE_BAD;
    t[b'\r' as usize] |= VALUE_BAD;
    t[b'\n' as usize] |= VALUE_BAD;
    t[b'/' as usize] = NAME_END | ATTR_NAME_STOP;
    t[b'>' as usize] = NAME_END | ATTR_NAME_STOP;
    let bad = [b'<', b'!', b'?', b'"', b'\'', b'&', b'='];
    let mut k = 0;
    while k < bad.len() {
        t[bad[k] as usize] = NAME_BAD | ATTR_NAME_STOP;
        k += 1;
    }
    t[b'<' as usize] |= VALUE_BAD | TEXT_STOP;
    t[b'&' as usize] |= VALUE_BAD | TEXT_STOP;
    t[b'"' as usize] |= DQUOTE;
    t[b'\'' as usize] |= SQUOTE;
    t[b':' as usize] = ATTR_NAME_STOP;
    t
};

/// Index of the first byte from `buf[i]` whose class has any of `stop`, if any. Texts and
/// values here are a few dozen bytes: a table-driven loop beats a call to `memchr`, and finds
/// the end and any byte that disqualifies the fast path in one pass.
fn find_class(buf: &[u8], mut i: usize, stop: u8) -> Option<usize> {
    while i < buf.len() {
        if CLASS[usize::from(buf[i])] & stop != 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && CLASS[usize::from(buf[i])] & WS != 0 {
        i += 1;
    }
    i
}

/// End of the element name starting at `buf[i]`: the index of the white space, `/` or `>`
/// that ends it. `None` for an empty name, a byte no plain name has, or the end of `buf`.
fn name_end(buf: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    while j < buf.len() {
        let c = CLASS[usize::from(buf[j])];
        if c & (NAME_END | NAME_BAD) != 0 {
            return (c & NAME_END != 0 && j > i).then_some(j);
        }
        j += 1;
    }
    None
}

/// Index of the `>` ending the tag whose attributes start at `buf[i]`; `>` inside quotes
/// does not count (the same rule as quick-xml's).
fn tag_end(buf: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let j = i + memchr::memchr3(b'>', b'"', b'\'', &buf[i..])?;
        let q = buf[j];
        if q == b'>' {
            return Some(j);
        }
        i = j + 1 + memchr::memchr(q, &buf[j + 1..])? + 1;
    }
}

/// Splits the attributes of an empty element, from `buf[i]` (just after its name) to its
/// `/>`, when all are plain: `name="value"` (or single quotes) with an unprefixed name, no
/// white space around `=`, white space before each, and a value without references, markup
/// or white space other than spaces, so that it reads the same without normalization. Their
/// offsets go to `out[*n..]`; returns the index of the `>`. `None` when any is not plain (or
/// there are too many), leaving the attributes to the builder's general reading.
fn split_attrs(
    buf: &[u8],
    mut i: usize,
    out: &mut [(u32, u32, u32, u32); FAST_ATTRS],
    n: &mut usize,
) -> Option<usize> {
    // Offsets are kept as u32: buffers are far smaller.
    let off = |x: usize| u32::try_from(x).ok();
    let first = *n;
    loop {
        let ws = i;
        i = skip_ws(buf, i);
        match *buf.get(i)? {
            b'/' => return (buf.get(i + 1) == Some(&b'>')).then_some(i + 1),
            _ if ws == i => return None,
            _ => {}
        }
        let n0 = i;
        while i < buf.len() && CLASS[usize::from(buf[i])] & ATTR_NAME_STOP == 0 {
            i += 1;
        }
        if i == n0 || buf.get(i) != Some(&b'=') {
            return None;
        }
        let n1 = i;
        let q = *buf.get(i + 1)?;
        if q != b'"' && q != b'\'' {
            return None;
        }
        let v0 = i + 2;
        let quote = if q == b'"' { DQUOTE } else { SQUOTE };
        let v1 = find_class(buf, v0, quote | VALUE_BAD)?;
        if buf[v1] != q {
            return None;
        }
        let name = &buf[n0..n1];
        if *n == FAST_ATTRS
            || out[first..*n]
                .iter()
                .any(|&(a, b, _, _)| same(&buf[a as usize..b as usize], name))
        {
            return None;
        }
        out[*n] = (off(n0)?, off(n1)?, off(v0)?, off(v1)?);
        *n += 1;
        i = v1 + 1;
    }
}

/// If `buf[i..]` starts with exactly `</name>`, the index after it.
fn end_tag(buf: &[u8], i: usize, name: &[u8]) -> Option<usize> {
    let close = buf.get(i..i + name.len() + 3)?;
    (close[..2] == *b"</" && same(&close[2..2 + name.len()], name) && close[name.len() + 2] == b'>')
        .then_some(i + name.len() + 3)
}

/// Recognises, at the start of `buf` (after white space), one complete entry of the shape
/// nearly every document uses: `<url>` (or `<sitemap>`) without attributes, whose children,
/// separated by white space only, are `<loc>`, `<lastmod>`, `<changefreq>`, `<priority>`
/// (each at most once, no attributes, text without references or markup) and empty
/// `<rs:md …/>` (at most once) / `<rs:ln …/>` that declare no namespace, all closed by
/// exact end tags. Element names are classified with the bindings in force, as the general
/// path does. Anything else (comments, CDATA, references, extensions, problems to report,
/// the end of the buffer) gives `None`, and the general path reads it instead, so both ways
/// yield the same entries and problems.
fn scan_entry(buf: &[u8], scopes: &mut Scopes, f: &mut FastEntry) -> Option<()> {
    static XMLNS: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"xmlns"));
    let start = skip_ws(buf, 0);
    if buf.get(start) != Some(&b'<') {
        return None;
    }
    let ne = name_end(buf, start + 1)?;
    if buf[ne] != b'>' {
        return None;
    }
    let name = &buf[start + 1..ne];
    f.is_url = match scopes.simple_tag(name) {
        Simple::Url => true,
        Simple::Sitemap => false,
        _ => return None,
    };
    f.start = start;
    f.n = 0;
    f.n_attrs = 0;
    let mut seen = [false; 4];
    let mut seen_md = false;
    let mut i = ne + 1;
    loop {
        i = skip_ws(buf, i);
        if buf.get(i) != Some(&b'<') {
            return None;
        }
        if buf.get(i + 1) == Some(&b'/') {
            f.end = end_tag(buf, i, name)?;
            return Some(());
        }
        if f.n == FAST_CHILDREN {
            return None;
        }
        let tag = i;
        let ce = name_end(buf, i + 1)?;
        let cname = &buf[i + 1..ce];
        let child = match scopes.simple_tag(cname) {
            Simple::Text(slot) => {
                if buf[ce] != b'>' || std::mem::replace(&mut seen[usize::from(slot)], true) {
                    return None;
                }
                let t0 = ce + 1;
                let t1 = find_class(buf, t0, TEXT_STOP)?;
                if buf[t1] != b'<' {
                    return None;
                }
                i = end_tag(buf, t1, cname)?;
                FastChild {
                    kind: FastKind::Text(slot),
                    tag,
                    start: t0,
                    end: t1,
                    name_len: 0,
                }
            }
            t @ (Simple::Md | Simple::Ln) => {
                let is_md = matches!(t, Simple::Md);
                if is_md && std::mem::replace(&mut seen_md, true) {
                    return None;
                }
                let first = f.n_attrs;
                let (gt, attrs) = match split_attrs(buf, ce, &mut f.attrs, &mut f.n_attrs) {
                    Some(gt) => (gt, Some((first as u8, f.n_attrs as u8))),
                    None => {
                        f.n_attrs = first;
                        (tag_end(buf, ce)?, None)
                    }
                };
                // Empty element only, its name ended by white space or by the `/>` itself.
                if buf[gt - 1] != b'/' || (buf[ce] == b'/' && ce + 1 != gt) {
                    return None;
                }
                if XMLNS.find(&buf[ce..gt]).is_some() {
                    return None;
                }
                i = gt + 1;
                FastChild {
                    kind: FastKind::Elem { is_md, attrs },
                    tag,
                    start: tag + 1,
                    end: gt - 1,
                    name_len: ce - tag - 1,
                }
            }
            _ => return None,
        };
        f.children[f.n] = child;
        f.n += 1;
    }
}

impl Default for FastEntry {
    fn default() -> Self {
        FastEntry {
            is_url: true,
            start: 0,
            end: 0,
            children: [FastChild {
                kind: FastKind::Text(0),
                tag: 0,
                start: 0,
                end: 0,
                name_len: 0,
            }; FAST_CHILDREN],
            n: 0,
            attrs: [(0, 0, 0, 0); FAST_ATTRS],
            n_attrs: 0,
        }
    }
}

impl<R: BufRead> Tokenizer<R> {
    /// Reads the next root child straight from the input buffer when it is an entry of the
    /// common shape (see [`scan_entry`]), producing exactly the [`RawEntry`] that
    /// [`Tokenizer::read_entry`] would; false, with nothing consumed, for anything else (also
    /// an entry that crosses the end of the buffer), which then goes the general way.
    ///
    /// Why: the XML reader costs an event (copied into a buffer, several `fill_buf` calls)
    /// per tag and text, nine per entry; profiles of the 1M-entry Resource List Index showed
    /// the tokenizer thread, at ~640 ns per entry, setting the pace of the whole parse.
    ///
    /// Must only be called when the XML reader is between two pieces of markup (after an end
    /// tag or an empty element), so that consuming whole elements leaves its state valid.
    pub(super) fn fast_entry(&mut self, batch: &mut RawBatch) -> bool {
        if self.entries >= self.opts.max_entries {
            return false;
        }
        let counting = self.xml.get_mut();
        let base = counting.consumed();
        let Ok(buf) = counting.fill_buf() else {
            return false;
        };
        if scan_entry(buf, &mut self.scopes, &mut self.fast).is_none() {
            return false;
        }
        let f = &self.fast;
        // One UTF-8 check for the whole entry: its pieces are cut at ASCII delimiters.
        let Ok(text) = std::str::from_utf8(&buf[..f.end]) else {
            return false;
        };
        let first_elem = batch.elems.len();
        let mut raw = RawEntry {
            pos: Pos::default(),
            loc: None,
            lastmod: None,
            changefreq: None,
            priority: None,
            elems: (first_elem, first_elem),
        };
        for c in &f.children[..f.n] {
            let start = batch.arena.len();
            batch.arena.push_str(&text[c.start..c.end]);
            let end = batch.arena.len();
            match c.kind {
                FastKind::Text(slot) => {
                    *raw.slot(slot) = Some(RawText {
                        pos: Pos::default(),
                        start,
                        end,
                    });
                }
                FastKind::Elem { is_md, attrs } => {
                    let attrs = attrs.map(|(a, b)| {
                        let first = batch.attrs.len();
                        // Offsets into the tag content, which now starts at `start`.
                        let at = |x: u32| start + (x as usize - c.start);
                        for &(n0, n1, v0, v1) in &f.attrs[usize::from(a)..usize::from(b)] {
                            batch.attrs.push(RawAttr {
                                name: (at(n0), at(n1)),
                                value: (at(v0), at(v1)),
                            });
                        }
                        (first, batch.attrs.len())
                    });
                    if self.sent_gen != Some(self.scopes.generation) {
                        batch
                            .resolvers
                            .push((self.scopes.generation, self.scopes.ns.clone()));
                        self.sent_gen = Some(self.scopes.generation);
                    }
                    batch.elems.push(RawElem {
                        is_md,
                        pos: Pos::default(),
                        start,
                        end,
                        name_len: c.name_len,
                        scope_gen: self.scopes.generation,
                        attrs,
                    });
                }
            }
        }
        let (f_start, f_end, is_url) = (f.start, f.end, f.is_url);
        let f = &self.fast;
        let counting = self.xml.get_mut();
        counting.consume(f_end);
        self.skipped += f_end as u64;
        // Positions in document order (line tracking only moves forward).
        raw.pos = counting.pos(base + f_start as u64);
        let mut elem = first_elem;
        for c in &f.children[..f.n] {
            let pos = counting.pos(base + c.tag as u64);
            match c.kind {
                FastKind::Text(slot) => {
                    if let Some(t) = raw.slot(slot) {
                        t.pos = pos;
                    }
                }
                FastKind::Elem { .. } => {
                    batch.elems[elem].pos = pos;
                    elem += 1;
                }
            }
        }
        raw.elems.1 = batch.elems.len();
        self.begin_entry(is_url, raw.pos);
        batch.entries.push(raw);
        if !self.validator.problems().is_empty() {
            batch.problems.append(&mut self.validator.take_problems());
        }
        batch.bytes = self.bytes_read();
        true
    }
}
