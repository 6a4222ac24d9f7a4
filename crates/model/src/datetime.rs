//! W3C Datetime (the profile of ISO 8601 at <https://www.w3.org/TR/NOTE-datetime>), the format of
//! every time attribute and `<lastmod>` in ResourceSync documents (spec section 7).
//!
//! A value keeps the granularity and offset it was written with, so a document reads back to an
//! equal model after being written again. Comparisons between values are always made on the
//! instant ([`W3cDateTime::instant`]), never on the text: `2013-01-03T00:00:00Z`,
//! `2013-01-03T01:00:00.000+01:00` and `2013-01-03` denote the same instant (a partial date is
//! placed at the start of its interval, in UTC).

use std::cmp::Ordering;
use std::fmt;

/// How much of a datetime was given; each step adds the components of the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// `YYYY`
    Year,
    /// `YYYY-MM`
    Month,
    /// `YYYY-MM-DD`
    Day,
    /// `YYYY-MM-DDThh:mmTZD`
    Minute,
    /// `YYYY-MM-DDThh:mm:ssTZD`
    Second,
    /// `YYYY-MM-DDThh:mm:ss.sTZD` with this many fraction digits (1..=9; more digits than
    /// nanoseconds can hold are truncated when read).
    Fraction(u8),
}

/// The time zone designator of a value that has a time part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tzd {
    /// No designator: a date without time, or (lenient reading only) a time written without one,
    /// which is then taken as UTC.
    None,
    /// `Z`
    Utc,
    /// `+hh:mm` or `-hh:mm`, in minutes east of UTC (`+00:00` is kept apart from `Z`).
    Offset(i16),
}

/// A W3C Datetime value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct W3cDateTime {
    secs: i64,
    nanos: u32,
    precision: Precision,
    tzd: Tzd,
}

/// Why a text is not a W3C Datetime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DateTimeError {
    /// The text does not have the shape of any W3C Datetime granularity.
    #[error(
        "`{0}` is not a W3C Datetime (YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss[.s]]TZD)"
    )]
    Syntax(String),
    /// The components are well formed but out of range (month 13, 30 February, hour 25, …).
    #[error("`{0}` is not a valid date or time")]
    Range(String),
}

/// Outcome of a successful parse: the value and whether it needed leniency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// The value.
    pub value: W3cDateTime,
    /// True when a time was given without a time zone designator (not W3C conformant; the
    /// value was taken as UTC).
    pub missing_tzd: bool,
}

impl W3cDateTime {
    /// Parses any W3C Datetime granularity. A time without a designator is accepted and
    /// reported through [`Parsed::missing_tzd`] so that a lenient reader can warn about it.
    pub fn parse(text: &str) -> Result<Parsed, DateTimeError> {
        parse(text.trim())
    }

    /// A value with second precision in UTC, from Unix seconds and nanoseconds (nanoseconds
    /// other than zero select nanosecond fraction precision).
    pub fn from_unix(secs: i64, nanos: u32) -> Self {
        let nanos = nanos.min(999_999_999);
        let precision = if nanos == 0 {
            Precision::Second
        } else {
            Precision::Fraction(9)
        };
        W3cDateTime {
            secs,
            nanos,
            precision,
            tzd: Tzd::Utc,
        }
    }

    /// A value with exactly the given fraction digits in UTC.
    pub fn from_unix_with_precision(secs: i64, nanos: u32, precision: Precision) -> Self {
        W3cDateTime {
            secs,
            nanos: truncate_nanos(nanos.min(999_999_999), precision),
            precision,
            tzd: Tzd::Utc,
        }
    }

    /// The current time in UTC with microsecond precision.
    pub fn now() -> Self {
        let now = chrono::Utc::now();
        W3cDateTime::from_unix_with_precision(
            now.timestamp(),
            now.timestamp_subsec_nanos(),
            Precision::Fraction(6),
        )
    }

    /// The instant (Unix seconds, nanoseconds) this value denotes; partial dates denote the
    /// start of their interval in UTC.
    pub fn instant(&self) -> (i64, u32) {
        (self.secs, self.nanos)
    }

    /// Nanoseconds since the Unix epoch (saturating), handy for arithmetic on instants.
    pub fn unix_nanos(&self) -> i128 {
        i128::from(self.secs) * 1_000_000_000 + i128::from(self.nanos)
    }

    /// Compares the instants of two values (never their text).
    pub fn cmp_instant(&self, other: &Self) -> Ordering {
        self.instant().cmp(&other.instant())
    }

    /// The granularity the value was written with.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The time zone designator the value was written with.
    pub fn tzd(&self) -> Tzd {
        self.tzd
    }

    /// Writes the value with its own granularity and designator into `buf`, returning the text.
    pub fn format_into<'b>(&self, buf: &'b mut [u8; 40]) -> &'b str {
        let mut n = 0;
        self.encode(|bytes| {
            buf[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        });
        // Only ASCII was written.
        std::str::from_utf8(&buf[..n]).unwrap_or_default()
    }

    /// Appends the value, as [`W3cDateTime::format_into`] writes it, to `out` (the writers'
    /// fast path: no intermediate string).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        self.encode(|bytes| out.extend_from_slice(bytes));
    }

    fn encode(&self, mut put: impl FnMut(&[u8])) {
        let offset_min = match self.tzd {
            Tzd::Offset(m) => i64::from(m),
            _ => 0,
        };
        let local = self.secs + offset_min * 60;
        let (year, month, day) = civil_from_days(local.div_euclid(86_400));
        let sod = local.rem_euclid(86_400) as u32;
        let (hour, minute, second) = (sod / 3600, sod / 60 % 60, sod % 60);
        if (0..=9999).contains(&year) {
            put(&digits::<4>(year as u32));
        } else {
            // Out of W3C range; still written so nothing is silently lost.
            put(year.to_string().as_bytes());
        }
        if self.precision == Precision::Year {
            return;
        }
        put(&[b'-', b'0' + (month / 10) as u8, b'0' + (month % 10) as u8]);
        if self.precision == Precision::Month {
            return;
        }
        put(&[b'-', b'0' + (day / 10) as u8, b'0' + (day % 10) as u8]);
        if self.precision == Precision::Day {
            return;
        }
        let two = |v: u32| [b'0' + (v / 10) as u8, b'0' + (v % 10) as u8];
        let (h, m) = (two(hour), two(minute));
        put(&[b'T', h[0], h[1], b':', m[0], m[1]]);
        if self.precision != Precision::Minute {
            let s = two(second);
            put(&[b':', s[0], s[1]]);
        }
        if let Precision::Fraction(d) = self.precision {
            put(b".");
            let all = digits::<9>(self.nanos);
            put(&all[..usize::from(d.clamp(1, 9))]);
        }
        match self.tzd {
            Tzd::None => {}
            Tzd::Utc => put(b"Z"),
            Tzd::Offset(m) => {
                let abs = u32::from(m.unsigned_abs());
                let (oh, om) = (two(abs / 60), two(abs % 60));
                put(&[
                    if m < 0 { b'-' } else { b'+' },
                    oh[0],
                    oh[1],
                    b':',
                    om[0],
                    om[1],
                ]);
            }
        }
    }

    /// The same instant with the same precision, written in UTC with `Z`: the form rsagg
    /// writes every datetime in, whatever an upstream wrote.
    ///
    /// Why: rsagg copies upstream datetimes into its own documents (the `modified` of a
    /// `via` link, spec 14.8), and real Sources write times without a designator
    /// (`2018-11-06T17:41:16.901455`, read as UTC, see [`Parsed::missing_tzd`]) or with an
    /// offset. Written back as read, the first is not a W3C Datetime at all, so rsagg's own
    /// documents would fail strict validation (spec 7 requires W3C Datetime; `YYYY-MM-DDThh:mm:ss[.s]Z`
    /// in UTC is what the spec recommends for `at`, `from`, …). The fraction digits are kept,
    /// so no precision the upstream gave is lost or invented. A value without a time part
    /// (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`) has no designator to write and is returned as is.
    /// Values are still compared as instants ([`W3cDateTime::cmp_instant`]): normalising
    /// changes the text, never the instant.
    pub fn to_utc(&self) -> Self {
        match self.precision {
            Precision::Year | Precision::Month | Precision::Day => *self,
            _ => W3cDateTime {
                tzd: Tzd::Utc,
                ..*self
            },
        }
    }

    /// True when the value is written as [`W3cDateTime::to_utc`] writes it (UTC with `Z`,
    /// or a date without time).
    pub fn is_utc(&self) -> bool {
        *self == self.to_utc()
    }

    /// Appends the value normalised to UTC ([`W3cDateTime::to_utc`]) to `out`: the
    /// formatter rsagg's writers use, so nothing rsagg writes carries an upstream's missing
    /// designator or offset.
    pub fn write_utc_to(&self, out: &mut Vec<u8>) {
        self.to_utc().write_to(out);
    }

    /// This instant plus `nanos` nanoseconds, in UTC with nanosecond precision (used to make
    /// strictly increasing change datetimes).
    pub fn plus_nanos(&self, nanos: u64) -> Self {
        let total = self.unix_nanos() + i128::from(nanos);
        let secs = total.div_euclid(1_000_000_000) as i64;
        let sub = total.rem_euclid(1_000_000_000) as u32;
        W3cDateTime::from_unix_with_precision(secs, sub, Precision::Fraction(9))
    }
}

impl fmt::Display for W3cDateTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 40];
        f.write_str(self.format_into(&mut buf))
    }
}

impl serde::Serialize for W3cDateTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for W3cDateTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        W3cDateTime::parse(&text)
            .map(|p| p.value)
            .map_err(serde::de::Error::custom)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn truncate_nanos(nanos: u32, precision: Precision) -> u32 {
    match precision {
        Precision::Fraction(d) => {
            let d = u32::from(d.clamp(1, 9));
            let unit = 10u32.pow(9 - d);
            nanos / unit * unit
        }
        _ => 0,
    }
}

fn digits<const N: usize>(mut v: u32) -> [u8; N] {
    let mut out = [b'0'; N];
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

/// Reads exactly `n` ASCII digits at `*i`.
fn num(b: &[u8], i: &mut usize, n: usize) -> Option<u32> {
    let s = b.get(*i..*i + n)?;
    let mut v = 0u32;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    *i += n;
    Some(v)
}

fn expect(b: &[u8], i: &mut usize, c: u8) -> Option<()> {
    (b.get(*i) == Some(&c)).then(|| *i += 1)
}

fn parse(text: &str) -> Result<Parsed, DateTimeError> {
    let syntax = || DateTimeError::Syntax(text.to_owned());
    let range = || DateTimeError::Range(text.to_owned());
    let b = text.as_bytes();
    let mut i = 0;
    let year = num(b, &mut i, 4).ok_or_else(syntax)?;
    let mut month = 1;
    let mut day = 1;
    let (mut hour, mut minute, mut second, mut nanos) = (0, 0, 0, 0);
    let mut precision = Precision::Year;
    let mut tzd = Tzd::None;
    let mut missing_tzd = false;
    if i < b.len() {
        expect(b, &mut i, b'-').ok_or_else(syntax)?;
        month = num(b, &mut i, 2).ok_or_else(syntax)?;
        precision = Precision::Month;
    }
    if i < b.len() {
        expect(b, &mut i, b'-').ok_or_else(syntax)?;
        day = num(b, &mut i, 2).ok_or_else(syntax)?;
        precision = Precision::Day;
    }
    if i < b.len() {
        expect(b, &mut i, b'T').ok_or_else(syntax)?;
        hour = num(b, &mut i, 2).ok_or_else(syntax)?;
        expect(b, &mut i, b':').ok_or_else(syntax)?;
        minute = num(b, &mut i, 2).ok_or_else(syntax)?;
        precision = Precision::Minute;
        if b.get(i) == Some(&b':') {
            i += 1;
            second = num(b, &mut i, 2).ok_or_else(syntax)?;
            precision = Precision::Second;
            if b.get(i) == Some(&b'.') {
                i += 1;
                let start = i;
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                let all = &b[start..i];
                if all.is_empty() {
                    return Err(syntax());
                }
                let kept = &all[..all.len().min(9)];
                let mut v = 0u32;
                for &c in kept {
                    v = v * 10 + u32::from(c - b'0');
                }
                nanos = v * 10u32.pow(9 - kept.len() as u32);
                precision = Precision::Fraction(kept.len() as u8);
            }
        }
        match b.get(i) {
            Some(b'Z') => {
                i += 1;
                tzd = Tzd::Utc;
            }
            Some(&sign @ (b'+' | b'-')) => {
                i += 1;
                let oh = num(b, &mut i, 2).ok_or_else(syntax)?;
                expect(b, &mut i, b':').ok_or_else(syntax)?;
                let om = num(b, &mut i, 2).ok_or_else(syntax)?;
                if oh > 23 || om > 59 {
                    return Err(range());
                }
                let m = (oh * 60 + om) as i16;
                tzd = Tzd::Offset(if sign == b'-' { -m } else { m });
            }
            None => missing_tzd = true,
            Some(_) => return Err(syntax()),
        }
    }
    if i != b.len() {
        return Err(syntax());
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(range());
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year as i64, month) {
        return Err(range());
    }
    // A leap second (:60) is folded onto the next second for ordering purposes.
    let base = days_from_civil(i64::from(year), month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60);
    let offset = match tzd {
        Tzd::Offset(m) => i64::from(m) * 60,
        _ => 0,
    };
    Ok(Parsed {
        value: W3cDateTime {
            secs: base + i64::from(second) - offset,
            nanos,
            precision,
            tzd,
        },
        missing_tzd,
    })
}

/// Where rsagg's own datetimes come from: the system clock, or (tests) a clock that stands
/// still until it is moved ([`Clock::manual`], [`Clock::advance`]). The state's commit
/// times and the Change Lists' ages are read from one, so that a test of an age or a cut
/// moves the clock instead of sleeping (a fixed wait is slow and, on a loaded machine,
/// still not sure to be long enough).
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None`: the system clock.
    manual: Option<std::sync::Arc<std::sync::Mutex<W3cDateTime>>>,
}

impl Clock {
    /// The system clock ([`W3cDateTime::now`]).
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock standing at `start` until [`Clock::advance`] moves it; clones share it.
    pub fn manual(start: W3cDateTime) -> Clock {
        Clock {
            manual: Some(std::sync::Arc::new(std::sync::Mutex::new(start))),
        }
    }

    /// Now, in UTC with microsecond precision (as [`W3cDateTime::now`]).
    pub fn now(&self) -> W3cDateTime {
        match &self.manual {
            None => W3cDateTime::now(),
            Some(m) => *m.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Moves a manual clock on by `by` (to whole microseconds); the system clock cannot be
    /// moved (false).
    pub fn advance(&self, by: std::time::Duration) -> bool {
        let Some(m) = &self.manual else {
            return false;
        };
        let mut t = m.lock().unwrap_or_else(|e| e.into_inner());
        let moved = t.plus_nanos(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX));
        let (secs, nanos) = moved.instant();
        *t = W3cDateTime::from_unix_with_precision(secs, nanos, Precision::Fraction(6));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let start = W3cDateTime::parse("2026-01-01T00:00:00Z").unwrap().value;
        let c = Clock::manual(start);
        let shared = c.clone();
        assert_eq!(c.now().cmp_instant(&start), Ordering::Equal);
        assert!(shared.advance(std::time::Duration::from_millis(1500)));
        let later = W3cDateTime::parse("2026-01-01T00:00:01.5Z").unwrap().value;
        assert_eq!(c.now().cmp_instant(&later), Ordering::Equal);
        assert!(!Clock::system().advance(std::time::Duration::from_secs(1)));
    }

    fn p(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    #[test]
    fn every_granularity_round_trips() {
        for s in [
            "2013",
            "2013-01",
            "2013-01-03",
            "2013-01-03T09:00Z",
            "2013-01-03T09:00:00Z",
            "2013-01-03T09:00:00.5Z",
            "2013-01-03T09:00:00.123456789Z",
            "2013-01-03T09:00:00+01:00",
            "2013-01-03T09:00:00-05:30",
            "2013-01-03T09:00:00.000+00:00",
        ] {
            assert_eq!(p(s).to_string(), s, "{s}");
        }
    }

    #[test]
    fn compares_instants_not_text() {
        let a = p("2013-01-03T00:00:00Z");
        let b = p("2013-01-03T01:00:00.000000+01:00");
        let c = p("2013-01-03");
        assert_eq!(a.cmp_instant(&b), Ordering::Equal);
        assert_eq!(a.cmp_instant(&c), Ordering::Equal);
        assert_ne!(a, b, "representation differs");
        // Text order would say the opposite.
        let d = p("2013-01-02T23:30:00-01:00");
        assert_eq!(d.cmp_instant(&a), Ordering::Greater);
        let e = p("2013-01-03T00:00:00.1Z");
        let f = p("2013-01-03T00:00:00.09999Z");
        assert_eq!(e.cmp_instant(&f), Ordering::Greater);
        assert_eq!(
            p("2013").cmp_instant(&p("2012-12-31T23:59:59Z")),
            Ordering::Greater
        );
    }

    #[test]
    fn rejects_malformed_values() {
        for s in [
            "",
            "13",
            "2013-1-03",
            "2013-01-03T09Z",
            "2013-01-03 09:00:00Z",
            "2013-01-03T09:00:00.Z",
            "2013-01-03T09:00:00z",
            "2013-01-03T09:00:00+0100",
            "2013-01-03T09:00:00Zjunk",
        ] {
            assert!(W3cDateTime::parse(s).is_err(), "{s}");
        }
        for s in [
            "2013-13-01",
            "2013-02-30",
            "2013-01-03T24:00:00Z",
            "2013-01-03T09:61Z",
        ] {
            assert!(
                matches!(W3cDateTime::parse(s), Err(DateTimeError::Range(_))),
                "{s}"
            );
        }
    }

    #[test]
    fn missing_designator_is_reported() {
        let r = W3cDateTime::parse("2013-01-03T09:00:00").unwrap();
        assert!(r.missing_tzd);
        assert_eq!(
            r.value.cmp_instant(&p("2013-01-03T09:00:00Z")),
            Ordering::Equal
        );
        assert!(!W3cDateTime::parse("2013-01-03").unwrap().missing_tzd);
    }

    #[test]
    fn long_fractions_are_truncated_to_nanoseconds() {
        let v = p("2013-01-03T09:00:00.1234567891234Z");
        assert_eq!(v.instant().1, 123_456_789);
        assert_eq!(v.to_string(), "2013-01-03T09:00:00.123456789Z");
    }

    #[test]
    fn calendar_arithmetic_matches_chrono() {
        for days in (-800_000i64..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            let c = chrono::DateTime::from_timestamp(days * 86_400, 0)
                .unwrap()
                .date_naive();
            use chrono::Datelike;
            assert_eq!((y, m, d), (i64::from(c.year()), c.month(), c.day()));
        }
        assert!(W3cDateTime::parse("2000-02-29").is_ok());
        assert!(W3cDateTime::parse("1900-02-29").is_err());
        assert!(W3cDateTime::parse("2024-04-31").is_err());
    }

    #[test]
    fn to_utc_keeps_instant_and_precision_and_writes_z() {
        for (text, utc) in [
            // Real producers: no designator, microseconds (read as UTC).
            ("2018-11-06T17:41:16.901455", "2018-11-06T17:41:16.901455Z"),
            ("2018-11-06T17:41:16", "2018-11-06T17:41:16Z"),
            ("2018-11-06T17:41", "2018-11-06T17:41Z"),
            // Offsets move to UTC, across a day boundary too.
            ("2013-01-03T01:00:00.000+01:00", "2013-01-03T00:00:00.000Z"),
            ("2013-01-02T23:30:00-01:00", "2013-01-03T00:30:00Z"),
            ("2013-01-03T09:00:00+00:00", "2013-01-03T09:00:00Z"),
            (
                "2013-01-03T09:00:00.123456789Z",
                "2013-01-03T09:00:00.123456789Z",
            ),
            // Dates have no designator to write.
            ("2013-01-03", "2013-01-03"),
            ("2013-01", "2013-01"),
            ("2013", "2013"),
        ] {
            let v = p(text);
            let u = v.to_utc();
            assert_eq!(u.to_string(), utc, "{text}");
            assert_eq!(u.cmp_instant(&v), Ordering::Equal, "{text}");
            assert_eq!(u.precision(), v.precision(), "{text}");
            assert!(u.is_utc(), "{text}");
            let mut out = Vec::new();
            v.write_utc_to(&mut out);
            assert_eq!(out, utc.as_bytes(), "{text}");
            // The written form is a strict W3C Datetime.
            assert!(!W3cDateTime::parse(utc).unwrap().missing_tzd, "{text}");
        }
        assert!(!p("2018-11-06T17:41:16").is_utc());
        assert!(!p("2013-01-03T09:00:00+00:00").is_utc());
    }

    #[test]
    fn plus_nanos_is_strictly_increasing() {
        let a = p("2013-01-03T09:00:00Z");
        let b = a.plus_nanos(1);
        assert_eq!(b.cmp_instant(&a), Ordering::Greater);
        assert_eq!(b.to_string(), "2013-01-03T09:00:00.000000001Z");
    }
}
