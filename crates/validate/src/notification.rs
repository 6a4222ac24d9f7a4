//! Change Notification payload files (CN 1.0.1 section 3): each read and checked as a
//! document, then their `from`/`until` intervals, in `from` order (a Destination may receive
//! them out of order, section 3), must be consecutive and non-overlapping. Only the headers'
//! times are held, one per file given.

use std::cmp::Ordering;
use std::path::PathBuf;

use rsagg_model::{DocumentKind, W3cDateTime};
use rsagg_sitemap::{ReadOptions, SyncReader};

use crate::report::Collector;
use crate::rules::{Cross, Step, interval_step};
use crate::walk::fatal_problem;
use crate::{Error, Options};

/// Checks `paths` into `out` (on a blocking thread: local files) and gives it back.
pub(crate) async fn check(
    paths: &[PathBuf],
    opts: &Options,
    out: Collector,
) -> Result<Collector, Error> {
    if paths.is_empty() {
        return Ok(out);
    }
    let (paths, opts) = (paths.to_vec(), opts.clone());
    tokio::task::spawn_blocking(move || check_blocking(&paths, &opts, out))
        .await
        .map_err(|e| Error::Io {
            what: "checking notification payloads".into(),
            source: std::io::Error::other(e),
        })?
}

fn check_blocking(
    paths: &[PathBuf],
    opts: &Options,
    mut out: Collector,
) -> Result<Collector, Error> {
    let mut times: Vec<(String, Option<W3cDateTime>, Option<W3cDateTime>)> = Vec::new();
    for path in paths {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| Error::Io {
            what: format!("opening {name}"),
            source,
        })?;
        let read_opts = ReadOptions {
            max_bytes: opts.max_bytes,
            max_entries: opts.max_entries,
            max_problems: out.room(),
            ..ReadOptions::new(opts.mode, name.clone())
        };
        out.summary.notifications += 1;
        let mut reader = match SyncReader::open(std::io::BufReader::new(file), read_opts) {
            Ok(r) => r,
            Err(rsagg_sitemap::Error::Io { error, .. }) => {
                return Err(Error::Io {
                    what: format!("reading {name}"),
                    source: error,
                });
            }
            Err(e) => {
                out.document(&name, vec![fatal_problem(&e)], 1, 0);
                out.read(DocumentKind::Other.name(), 0, 0);
                continue;
            }
        };
        let header = reader.header().clone();
        let kind = header.kind();
        let fatal = loop {
            match reader.next_entry() {
                Ok(Some(_)) => {}
                Ok(None) => break None,
                Err(rsagg_sitemap::Error::Io { error, .. }) => {
                    return Err(Error::Io {
                        what: format!("reading {name}"),
                        source: error,
                    });
                }
                Err(e) => break Some(e),
            }
        };
        let mut problems = reader.take_problems();
        let mut errors = reader.validator().errors();
        if let Some(e) = fatal {
            problems.push(fatal_problem(&e));
            errors += 1;
        }
        problems.sort_by_key(|p| (p.line, p.column));
        out.document(&name, problems, errors, reader.validator().warnings());
        out.read(kind.name(), reader.entries_read(), reader.bytes_read());
        if kind != DocumentKind::ChangeNotification {
            out.cross(
                Cross::CapabilityMismatch,
                "CN 3",
                &name,
                format!(
                    "given as a Change Notification payload, but it is a {}",
                    kind.name()
                ),
            );
            continue;
        }
        let md = header.md.as_ref();
        times.push((name, md.and_then(|m| m.from), md.and_then(|m| m.until)));
    }
    chain(&mut times, &mut out);
    Ok(out)
}

/// Consecutive payloads in `from` order: each `until` the next `from` (CN 3).
fn chain(times: &mut [(String, Option<W3cDateTime>, Option<W3cDateTime>)], out: &mut Collector) {
    times.sort_by(|a, b| match (&a.1, &b.1) {
        (Some(x), Some(y)) => x.cmp_instant(y),
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (None, None) => Ordering::Equal,
    });
    for pair in times.windows(2) {
        let ((prev, _, until), (name, from, _)) = (&pair[0], &pair[1]);
        let (rule, message) = match interval_step(until.as_ref(), from.as_ref()) {
            Step::Consecutive | Step::Unknown | Step::OpenBefore => continue,
            Step::Gap => (
                Cross::IntervalGap,
                format!(
                    "a gap: the previous payload {prev} ends (`until`) at {} but this one begins (`from`) at {}",
                    until.map(|t| t.to_string()).unwrap_or_default(),
                    from.map(|t| t.to_string()).unwrap_or_default()
                ),
            ),
            Step::Overlap => (
                Cross::IntervalOverlap,
                format!(
                    "an overlap: the previous payload {prev} ends (`until`) at {} after this one begins (`from`) at {}",
                    until.map(|t| t.to_string()).unwrap_or_default(),
                    from.map(|t| t.to_string()).unwrap_or_default()
                ),
            ),
        };
        out.cross(rule, "CN 3", name, message).related(prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::Mode;

    fn payload(dir: &std::path::Path, name: &str, from: &str, until: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="change-notification" from="{from}" until="{until}"/>
  <url><loc>http://example.com/res1</loc><rs:md change="updated" datetime="{from}"/></url>
</urlset>
"#
            ),
        )
        .unwrap();
        p
    }

    fn codes(paths: &[PathBuf]) -> Vec<&'static str> {
        let opts = Options {
            mode: Mode::Strict,
            ..Options::default()
        };
        let out = check_blocking(paths, &opts, Collector::new(Mode::Strict, 100)).unwrap();
        assert_eq!(out.summary.notifications, paths.len() as u64);
        out.findings.iter().map(|f| f.code).collect()
    }

    #[test]
    fn consecutive_payloads_in_any_order_pass() {
        let d = tempfile::tempdir().unwrap();
        let a = payload(
            d.path(),
            "a.xml",
            "2013-01-03T00:00:00Z",
            "2013-01-03T00:10:00Z",
        );
        let b = payload(
            d.path(),
            "b.xml",
            "2013-01-03T00:10:00Z",
            "2013-01-03T00:20:00Z",
        );
        assert!(codes(&[b, a]).is_empty());
    }

    #[test]
    fn a_gap_and_an_overlap_between_payloads_are_reported() {
        let d = tempfile::tempdir().unwrap();
        let a = payload(
            d.path(),
            "a.xml",
            "2013-01-03T00:00:00Z",
            "2013-01-03T00:10:00Z",
        );
        let b = payload(
            d.path(),
            "b.xml",
            "2013-01-03T00:11:00Z",
            "2013-01-03T00:20:00Z",
        );
        assert_eq!(codes(&[a.clone(), b]), ["interval-gap"]);
        let c = payload(
            d.path(),
            "c.xml",
            "2013-01-03T00:05:00Z",
            "2013-01-03T00:30:00Z",
        );
        assert_eq!(codes(&[a, c]), ["interval-overlap"]);
    }
}
