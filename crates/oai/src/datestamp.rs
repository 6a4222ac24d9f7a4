//! Datestamps (OAI-PMH 2.0 section 3.3.1): UTC, `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`, the
//! finest a repository supports being its `granularity` (`Identify`, section 4.2).
//!
//! Read leniently, as harvesters must: real providers write second-granularity datestamps
//! without the `Z`, or day datestamps where seconds were announced. A value without a zone
//! is taken as UTC (the protocol has no other). Written strictly in the repository's
//! granularity, since a provider must refuse a `from` finer than it supports (`badArgument`).

use rsagg_model::Precision;
use rsagg_model::W3cDateTime;

/// A repository's datestamp granularity (section 3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// `YYYY-MM-DD`
    Day,
    /// `YYYY-MM-DDThh:mm:ssZ`
    Second,
}

impl Granularity {
    /// The `<granularity>` of `Identify`: `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`.
    pub fn parse(text: &str) -> Option<Granularity> {
        match text.trim() {
            "YYYY-MM-DD" => Some(Granularity::Day),
            "YYYY-MM-DDThh:mm:ssZ" => Some(Granularity::Second),
            _ => None,
        }
    }

    /// One unit of this granularity, in seconds.
    pub fn unit_secs(self) -> i64 {
        match self {
            Granularity::Day => 86_400,
            Granularity::Second => 1,
        }
    }
}

/// A datestamp: an instant in UTC, at whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Datestamp {
    /// Seconds since the Unix epoch.
    secs: i64,
}

impl Datestamp {
    /// Reads a datestamp: `YYYY-MM-DD`, or a time of day with `Z`, without a zone (taken as
    /// UTC) or with an offset (converted). Fractions of a second are dropped (no
    /// granularity has them). `None` for anything else.
    pub fn parse(text: &str) -> Option<Datestamp> {
        Datestamp::read(text).map(|(d, _)| d)
    }

    /// [`Datestamp::parse`], saying how the text departs from the protocol's two forms
    /// (section 3.3.1) when it does, for a warning. The forms read, each only where its
    /// meaning is unambiguous (`docs/contract.md`, OAI-PMH upstreams, Quirks):
    /// - `YYYY-MM-DDThh:mm:ss` without a zone: UTC (the protocol knows no other);
    /// - a UTC offset (`+01:00`): converted to UTC;
    /// - fractions of a second: dropped (no granularity has them);
    /// - a space for the `T` (`YYYY-MM-DD hh:mm:ss`): as with `T`;
    /// - `YYYYMMDD` (eight digits, a valid date, Harvard LibraryCloud): `YYYY-MM-DD`.
    ///
    /// Anything else (a year or month alone, other digit runs, words) is `None`.
    pub fn read(text: &str) -> Option<(Datestamp, Option<&'static str>)> {
        let t = text.trim();
        let b = t.as_bytes();
        if b.len() == 8 && b.iter().all(u8::is_ascii_digit) {
            let day = format!("{}-{}-{}", &t[..4], &t[4..6], &t[6..]);
            let d = Datestamp::strict(&day)?;
            return Some((d, Some("in the compact form YYYYMMDD (read as YYYY-MM-DD)")));
        }
        if b.len() >= 19 && b[10] == b' ' && b[4] == b'-' && b[13] == b':' {
            let with_t = format!("{}T{}", &t[..10], &t[11..]);
            let (d, _) = Datestamp::read(&with_t)?;
            return Some((d, Some("with a space for the `T`")));
        }
        let d = Datestamp::strict(t)?;
        let quirk = if b.len() > 10 && !t.ends_with('Z') && !t[11..].contains(['+', '-']) {
            Some("without a zone designator (taken as UTC)")
        } else if b.len() > 10 && !t.ends_with('Z') {
            Some("with a UTC offset (converted to UTC)")
        } else if t.contains('.') {
            Some("with fractions of a second (dropped)")
        } else {
            None
        };
        Some((d, quirk))
    }

    /// A W3C Datetime of at least day precision.
    fn strict(text: &str) -> Option<Datestamp> {
        let parsed = W3cDateTime::parse(text).ok()?.value;
        match parsed.precision() {
            Precision::Year | Precision::Month => None,
            _ => Some(Datestamp {
                secs: parsed.instant().0,
            }),
        }
    }

    /// From Unix seconds.
    pub fn from_unix(secs: i64) -> Datestamp {
        Datestamp { secs }
    }

    /// Seconds since the Unix epoch.
    pub fn unix(self) -> i64 {
        self.secs
    }

    /// The datestamp one unit of `g` earlier. Datestamps are not unique: a record changed
    /// in the same second (or day) as the last one harvested, after that harvest, has the
    /// same datestamp, so the next incremental harvest asks `from` one unit before it and
    /// meets the records of that unit again (which the harvester recognises as unchanged).
    pub fn minus_unit(self, g: Granularity) -> Datestamp {
        Datestamp {
            secs: self.secs - g.unit_secs(),
        }
    }

    /// Truncated to the start of its unit of `g`.
    pub fn floor(self, g: Granularity) -> Datestamp {
        Datestamp {
            secs: self.secs - self.secs.rem_euclid(g.unit_secs()),
        }
    }

    /// Written in granularity `g` (`YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`), as `from` and
    /// `until` must be.
    pub fn format(self, g: Granularity) -> String {
        let t = W3cDateTime::from_unix(self.secs, 0);
        let full = t.to_string();
        match g {
            Granularity::Day => full[..10].to_owned(),
            Granularity::Second => full,
        }
    }

    /// As a W3C Datetime (the `lastmod` of the resource a record becomes).
    pub fn to_w3c(self) -> W3cDateTime {
        W3cDateTime::from_unix(self.secs, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datestamps_with_and_without_z_are_the_same_instant() {
        let z = Datestamp::parse("2024-03-01T10:20:30Z").unwrap();
        assert_eq!(Datestamp::parse("2024-03-01T10:20:30").unwrap(), z);
        assert_eq!(Datestamp::parse(" 2024-03-01T11:20:30+01:00 ").unwrap(), z);
        assert_eq!(Datestamp::parse("2024-03-01T10:20:30.75Z").unwrap(), z);
        let day = Datestamp::parse("2024-03-01").unwrap();
        assert_eq!(day.format(Granularity::Day), "2024-03-01");
        assert_eq!(day.format(Granularity::Second), "2024-03-01T00:00:00Z");
        assert_eq!(z.format(Granularity::Second), "2024-03-01T10:20:30Z");
        assert_eq!(z.floor(Granularity::Day), day);
        assert_eq!(Datestamp::parse("2024"), None);
        assert_eq!(Datestamp::parse("yesterday"), None);
    }

    #[test]
    fn the_common_non_standard_forms_are_read_and_named() {
        let day = Datestamp::parse("2021-03-11").unwrap();
        let z = Datestamp::parse("2021-03-11T10:20:30Z").unwrap();
        for (text, want, quirk) in [
            ("2021-03-11", day, None),
            ("2021-03-11T10:20:30Z", z, None),
            ("20210311", day, Some("compact")),
            ("2021-03-11T10:20:30", z, Some("without a zone")),
            ("2021-03-11T11:20:30+01:00", z, Some("offset")),
            ("2021-03-11T10:20:30.123Z", z, Some("fractions")),
            ("2021-03-11 10:20:30Z", z, Some("space")),
            ("2021-03-11 10:20:30", z, Some("space")),
        ] {
            let (got, q) = Datestamp::read(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(got, want, "{text}");
            match quirk {
                None => assert_eq!(q, None, "{text}"),
                Some(w) => assert!(q.is_some_and(|q| q.contains(w)), "{text}: {q:?}"),
            }
        }
        for bad in [
            "20211311",
            "2021031",
            "202103111",
            "2021-03",
            "11/03/2021",
            "yesterday",
        ] {
            assert_eq!(Datestamp::read(bad), None, "{bad}");
        }
    }

    #[test]
    fn from_is_one_unit_of_the_granularity_before() {
        let z = Datestamp::parse("2024-03-01T00:00:00Z").unwrap();
        assert_eq!(
            z.minus_unit(Granularity::Second)
                .format(Granularity::Second),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            z.minus_unit(Granularity::Day).format(Granularity::Day),
            "2024-02-29"
        );
        assert_eq!(Granularity::parse("YYYY-MM-DD"), Some(Granularity::Day));
        assert_eq!(
            Granularity::parse("YYYY-MM-DDThh:mm:ssZ"),
            Some(Granularity::Second)
        );
        assert_eq!(Granularity::parse("YYYY"), None);
    }
}
