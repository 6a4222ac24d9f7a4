//! The builder half of the reader: turns raw entries from the tokenizer into typed
//! [`UrlEntry`]s — attributes, datetimes, hashes — and runs the [`Validator`] over them.

use quick_xml::events::BytesStart;
use quick_xml::name::NamespaceResolver;
use rsagg_model::validate::datetime;
use rsagg_model::{
    ChangeFreq, EntrySpans, Excerpt, Header, HeaderSpans, Link, Md, Pos, Problem, Rule, UrlEntry,
    Validator,
};

use crate::Error;
use crate::tokenize::{
    AttrTarget, RawBatch, RawElem, apply_unprefixed, parse_attrs_into, syntax_err,
};

/// Typed entries from raw ones, with the document's validator.
pub(crate) struct Builder {
    pub(crate) validator: Validator,
    resolver: NamespaceResolver,
    scope_gen: Option<u32>,
    spans: EntrySpans,
    source: String,
    /// [`crate::ReadOptions::max_uri_bytes`].
    max_uri_bytes: usize,
    /// Entries skipped so far for a URI over `max_uri_bytes`.
    pub(crate) skipped: u64,
    /// The entry built last was skipped: the readers pass over it.
    pub(crate) last_skipped: bool,
}

impl Builder {
    pub(crate) fn new(opts: &crate::ReadOptions) -> Self {
        Builder {
            validator: Validator::new(opts.mode).with_max_problems(opts.max_problems),
            resolver: NamespaceResolver::default(),
            scope_gen: None,
            spans: EntrySpans::default(),
            source: opts.source.clone(),
            max_uri_bytes: opts.max_uri_bytes,
            skipped: 0,
            last_skipped: false,
        }
    }

    /// Records the entry being built as skipped for its over-long `what` (`<loc>`, `<rs:ln href>`) at
    /// `pos`: an error quoting a bounded excerpt, the entry counted but not checked.
    fn skip(&mut self, what: &str, uri: &str, pos: Pos) {
        let max = self.max_uri_bytes;
        self.validator.report(
            Rule::UriTooLong,
            "7",
            pos,
            format!(
                "{what} of {} bytes is longer than the limit of {max} bytes (the Sitemap protocol allows 2,048 characters); entry skipped: `{}`",
                uri.len(),
                Excerpt(uri)
            ),
        );
        self.validator.skip_entry();
        self.skipped += 1;
        self.last_skipped = true;
    }

    /// Checks the header; `problems` are those the tokenizer found reading it.
    pub(crate) fn header(&mut self, h: &Header, spans: &HeaderSpans, problems: Vec<Problem>) {
        self.validator.absorb(problems);
        self.validator.header(h, spans);
    }

    /// Takes in the tokenizer's problems for a batch (before its entries are built).
    pub(crate) fn absorb(&mut self, batch: &mut RawBatch) {
        self.validator.absorb(batch.problems.drain(..));
    }

    /// Builds entry `i` of `batch`, as the readers return it.
    ///
    /// The entry is built in place inside the result rather than built and then wrapped: a
    /// `UrlEntry` is ~450 bytes, and each move on its way to the caller showed as `memmove`
    /// in profiles of the parse benchmark (~10% of the builder thread).
    #[inline]
    pub(crate) fn build(&mut self, batch: &RawBatch, i: usize) -> Result<Option<UrlEntry>, Error> {
        let mut out = Ok(Some(UrlEntry::default()));
        if let Ok(Some(e)) = &mut out
            && let Err(err) = self.fill(batch, i, e)
        {
            return Err(err);
        }
        out
    }

    /// Fills `e` (a default entry) from entry `i` of `batch`, and checks it.
    fn fill(&mut self, batch: &RawBatch, i: usize, e: &mut UrlEntry) -> Result<(), Error> {
        let raw = &batch.entries[i];
        self.validator.begin_entry(self.validator.entries());
        // Checked before anything is copied: a 50 MB `<loc>` is not copied again.
        if let Some(t) = raw.loc {
            let loc = batch.text(t).trim();
            if loc.len() > self.max_uri_bytes {
                self.skip("<loc>", loc, t.pos);
                return Ok(());
            }
        }
        let v = &mut self.validator;
        let spans = &mut self.spans;
        spans.entry = raw.pos;
        spans.loc = raw.loc.map_or(raw.pos, |t| t.pos);
        spans.lastmod = raw.lastmod.map_or(raw.pos, |t| t.pos);
        spans.md = raw.pos;
        spans.links.clear();
        if let Some(t) = raw.loc {
            e.loc = batch.text(t).trim().to_owned();
        }
        if let Some(t) = raw.lastmod {
            e.lastmod = datetime(batch.text(t).trim(), "lastmod", v, t.pos);
        }
        if let Some(t) = raw.changefreq {
            e.changefreq = Some(ChangeFreq::parse(batch.text(t).trim()));
        }
        if let Some(t) = raw.priority {
            e.priority = Some(batch.text(t).trim().to_owned());
        }
        for el in &batch.elems[raw.elems.0..raw.elems.1] {
            if self.scope_gen != Some(el.scope_gen)
                && let Some((g, r)) = batch.resolvers.iter().find(|(g, _)| *g == el.scope_gen)
            {
                self.resolver = r.clone();
                self.scope_gen = Some(*g);
            }
            // Filled in place: an `Md` is large, and moving it showed in profiles.
            if el.is_md {
                let md = e.md.insert(Md::default());
                elem_attrs(md, batch, el, &self.resolver, v, &self.source)?;
                spans.md = el.pos;
            } else {
                e.links.push(Link::default());
                let ln = e.links.last_mut().unwrap_or_else(|| unreachable!());
                elem_attrs(ln, batch, el, &self.resolver, v, &self.source)?;
                spans.links.push(el.pos);
            }
        }
        let max = self.max_uri_bytes;
        if let Some(j) = e.links.iter().position(|l| l.href.len() > max) {
            let pos = spans.links[j];
            let href = std::mem::take(&mut e.links[j].href);
            self.skip("<rs:ln href>", &href, pos);
            return Ok(());
        }
        v.entry(e, spans);
        Ok(())
    }

    /// Document-level checks once the tokenizer reached the end.
    pub(crate) fn finish(&mut self, end: Pos, bytes: u64) {
        self.validator.finish(end, bytes);
    }
}

/// Reads the attributes of `<rs:md>`/`<rs:ln>` `el` into `target`: those the tokenizer split
/// (plain, unprefixed) directly, others from the raw start tag with quick-xml.
fn elem_attrs<T: AttrTarget>(
    target: &mut T,
    batch: &RawBatch,
    el: &RawElem,
    resolver: &NamespaceResolver,
    v: &mut Validator,
    source: &str,
) -> Result<(), Error> {
    match el.attrs {
        Some((a, b)) => {
            for at in &batch.attrs[a..b] {
                let name = &batch.arena[at.name.0..at.name.1];
                let value = &batch.arena[at.value.0..at.value.1];
                apply_unprefixed(target, name, value, v, el.pos);
            }
            Ok(())
        }
        None => {
            let start = BytesStart::from_content(&batch.arena[el.start..el.end], el.name_len);
            parse_attrs_into(target, &start, resolver, v, el.pos)
                .map_err(|m| syntax_err(source, el.pos, m))
        }
    }
}
