//! The content of the generated OAI-PMH records, shared by the bench's provider in process
//! (`oai.rs`) and the generated provider (`oai_gen.rs`): the first datestamp, the metadata's
//! envelope and size, the words and names, and the seeded generator that picks them.

/// The repository's first datestamp; record `i` is `T0 + i` seconds.
pub(crate) const T0: i64 = 1_357_171_200; // 2013-01-03T00:00:00Z

/// The metadata of one record, as a harvester receives it (the `<oai_dc:dc>` element with
/// its namespace declarations), is at least this long: a typical Dublin Core record.
pub(crate) const METADATA_BYTES: usize = 1024;

/// The `<oai_dc:dc>` start tag as lxml serialises the element a harvester takes out of a
/// pyoai page (its own and the inherited namespace declarations), for the size estimate.
pub(crate) const DC_OPEN: &str = "<oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" \
     xmlns:dc=\"http://purl.org/dc/elements/1.1/\" \
     xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
     xmlns=\"http://www.openarchives.org/OAI/2.0/\" \
     xsi:schemaLocation=\"http://purl.org/dc/elements/1.1/ \
     http://www.openarchives.org/OAI/2.0/oai_dc.xsd\">";
pub(crate) const DC_CLOSE: &str = "</oai_dc:dc>";

/// Words of the generated titles, subjects and descriptions: plain ASCII with nothing XML
/// escapes, so the bench's size estimate is exact.
#[rustfmt::skip]
pub(crate) const WORDS: [&str; 32] = [
    "archive",
    "river",
    "survey",
    "letters",
    "harbour",
    "atlas",
    "census",
    "parish",
    "railway",
    "diary",
    "museum",
    "estate",
    "photographs",
    "treaty",
    "mills",
    "garden",
    "charter",
    "manuscript",
    "coast",
    "festival",
    "school",
    "bridge",
    "market",
    "chapel",
    "orchard",
    "lighthouse",
    "weaver",
    "voyage",
    "council",
    "quarry",
    "ledger",
    "almanac",
];
pub(crate) const SURNAMES: [&str; 8] = [
    "Adams", "Brennan", "Castro", "Dubois", "Eriksen", "Fischer", "Gallo", "Hughes",
];
pub(crate) const GIVEN: [&str; 8] = [
    "Ada", "Bruno", "Clara", "Dmitri", "Elif", "Farah", "Goran", "Hana",
];

/// A deterministic stream of word indices for record `i` (xorshift), so two runs of the bench
/// write the same repository.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(i: u64) -> Rng {
        Rng(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        from[(self.0 % from.len() as u64) as usize]
    }

    pub(crate) fn words(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| self.pick(&WORDS))
            .collect::<Vec<_>>()
            .join(" ")
    }
}
