//! The builder half of the reader: turns raw entries from the tokenizer into typed
//! [`UrlEntry`]s — attributes, datetimes, hashes — and runs the [`Validator`] over them.

use quick_xml::events::BytesStart;
use quick_xml::name::NamespaceResolver;
use rsagg_model::validate::datetime;
use rsagg_model::{
    ChangeFreq, EntrySpans, Header, HeaderSpans, Link, Md, Mode, Pos, Problem, UrlEntry, Validator,
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
}

impl Builder {
    pub(crate) fn new(mode: Mode, max_problems: usize, source: String) -> Self {
        Builder {
            validator: Validator::new(mode).with_max_problems(max_problems),
            resolver: NamespaceResolver::default(),
            scope_gen: None,
            spans: EntrySpans::default(),
            source,
        }
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
        let v = &mut self.validator;
        v.begin_entry(v.entries());
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
