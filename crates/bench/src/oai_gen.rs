//! The generated OAI-PMH provider of `rsagg-bench oai` (hidden subcommand `oai-provider`): a
//! repository of N Dublin Core records computed from their position, so that it holds no
//! list, costs a page (not the repository) per request, and is not what bounds a harvest of
//! 10^6 records (as the `scale` bench's upstream computes its documents from the path).
//!
//! Record `i` (0 ≤ i < N) is `oai:bench.example.org:i`, in set `collection:{i % 10}`, its
//! datestamp `T0 + i·step` with `step` = ten years / N (at least a second): spread over
//! years, so that `from`/`until` select a contiguous run of positions, found by division.
//! Its metadata (about 1 KB of `oai_dc`) is derived from `i` and its version. A list is the
//! positions a request selects (window × set) followed by the records changed since the
//! start (`POST /change`: their datestamps move to now, their version to the next), and a
//! `resumptionToken` is that window and the offset of the next page
//! (`FROM.UNTIL.SET.OFFSET`): every page is computed from its token alone.
//!
//! It runs in a process of its own, so the bench reads its CPU apart from the harvester's,
//! and counts what it serves: requests per verb (`GET /counts`), and since the last
//! `POST /reset` which records it served (a bitmap of N bits) and, since the last
//! `POST /mark`, the `ListRecords` pages and records it served, and how many of them it had
//! served before (`GET /served`): a harvest resumed after a kill re-asks what those say.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use rsagg_model::W3cDateTime;
use serde::{Deserialize, Serialize};

use crate::oai_records::{DC_CLOSE, DC_OPEN, GIVEN, METADATA_BYTES, SURNAMES, T0, WORDS};

/// The span of the repository's datestamps: ten years from [`T0`].
const SPAN_SECS: i64 = 10 * 365 * 86_400 + 2 * 86_400;

/// Sets: record `i` is in `collection:{i % SETS}`.
const SETS: u64 = 10;

const OAI_DC: &str = "oai_dc";

/// Arguments of `oai-provider`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenArgs {
    /// Records in the repository.
    #[arg(long)]
    records: u64,
    /// Records per `ListRecords` page.
    #[arg(long, default_value_t = 100)]
    page_size: u64,
    /// Port on 127.0.0.1 (0: a free one). The first line on stdout is
    /// `listening http://127.0.0.1:PORT/oai`.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Worker threads of the server.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// A changed record: its datestamp and version now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Changed {
    secs: i64,
    version: u32,
}

/// What the provider counted.
#[derive(Debug, Default)]
struct Counts {
    verbs: BTreeMap<String, u64>,
    /// Records served since the last reset, one bit each.
    served: Vec<u64>,
    distinct: u64,
    /// Since the last mark.
    phase: Phase,
}

/// What `GET /served` answers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Phase {
    /// `ListRecords` pages served.
    pub pages: u64,
    /// Pages holding at least one record served before (since the last reset).
    pub pages_again: u64,
    /// Records served.
    pub records: u64,
    /// Records served that had been served before.
    pub records_again: u64,
    /// Distinct records served since the last reset.
    #[serde(default)]
    pub distinct: u64,
}

/// The repository: N records computed from their position, and the few changed ones.
struct Repo {
    n: u64,
    page: u64,
    step: i64,
    /// Changed records by position.
    changed: Mutex<BTreeMap<u64, Changed>>,
    counts: Mutex<Counts>,
}

/// A selection: the positions of the list a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    from: i64,
    until: i64,
    set: Option<u64>,
}

impl Window {
    fn token(&self, offset: u64) -> String {
        let set = self.set.map_or_else(|| "x".to_owned(), |s| s.to_string());
        format!("{}.{}.{set}.{offset}", self.from, self.until)
    }

    fn parse_token(t: &str) -> Option<(Window, u64)> {
        let mut it = t.split('.');
        let from = it.next()?.parse().ok()?;
        let until = it.next()?.parse().ok()?;
        let set = match it.next()? {
            "x" => None,
            s => Some(s.parse().ok().filter(|s| *s < SETS)?),
        };
        let offset = it.next()?.parse().ok()?;
        it.next()
            .is_none()
            .then_some((Window { from, until, set }, offset))
    }
}

/// One record as a page carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    i: u64,
    secs: i64,
    version: u32,
}

impl Repo {
    fn new(n: u64, page: u64) -> Repo {
        Repo {
            n,
            page: page.max(1),
            step: (SPAN_SECS / n.max(1) as i64).max(1),
            changed: Mutex::new(BTreeMap::new()),
            counts: Mutex::new(Counts {
                served: vec![0; n.div_ceil(64) as usize],
                ..Counts::default()
            }),
        }
    }

    fn base_secs(&self, i: u64) -> i64 {
        T0 + i as i64 * self.step
    }

    /// The positions `[lo, hi)` whose original datestamps are in `[from, until]`.
    fn base_range(&self, from: i64, until: i64) -> (u64, u64) {
        let lo = if from <= T0 {
            0
        } else {
            ((from - T0) as u64).div_ceil(self.step as u64)
        };
        let hi = if until < T0 {
            0
        } else {
            (until - T0) as u64 / self.step as u64 + 1
        };
        (lo.min(self.n), hi.min(self.n).max(lo.min(self.n)))
    }

    /// The list of `w`: its base positions (first, count; stride 1, or [`SETS`] with a set)
    /// and the changed records it selects after them, in datestamp order.
    fn list(&self, w: &Window) -> (u64, u64, u64, Vec<Item>) {
        let (lo, hi) = self.base_range(w.from, w.until);
        let (first, stride) = match w.set {
            None => (lo, 1),
            Some(s) => (lo + (s + SETS - lo % SETS) % SETS, SETS),
        };
        let count = if first < hi {
            (hi - first - 1) / stride + 1
        } else {
            0
        };
        let mut moved: Vec<Item> = self
            .changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(i, c)| {
                (w.from..=w.until).contains(&c.secs) && w.set.is_none_or(|s| *i % SETS == s)
            })
            .map(|(i, c)| Item {
                i: *i,
                secs: c.secs,
                version: c.version,
            })
            .collect();
        moved.sort_by_key(|m| (m.secs, m.i));
        (first, stride, count, moved)
    }

    /// The records at positions `[offset, offset + page)` of `w`'s list, and its length. A
    /// changed record is not at its old position (a page may hold fewer records).
    fn page_of(&self, w: &Window, offset: u64) -> (Vec<Item>, u64) {
        let (first, stride, count, moved) = self.list(w);
        let total = count + moved.len() as u64;
        let changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        let mut items = Vec::with_capacity(self.page as usize);
        for p in offset..(offset + self.page).min(total) {
            if p < count {
                let i = first + p * stride;
                if !changed.contains_key(&i) {
                    items.push(Item {
                        i,
                        secs: self.base_secs(i),
                        version: 0,
                    });
                }
            } else {
                items.push(moved[(p - count) as usize]);
            }
        }
        (items, total)
    }

    fn item(&self, i: u64) -> Option<Item> {
        if i >= self.n {
            return None;
        }
        let c = self
            .changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&i)
            .copied();
        Some(match c {
            Some(c) => Item {
                i,
                secs: c.secs,
                version: c.version,
            },
            None => Item {
                i,
                secs: self.base_secs(i),
                version: 0,
            },
        })
    }

    /// `count` records spread over the repository get the datestamp `now` and a new
    /// version; returns their positions.
    fn change(&self, count: u64, now: i64) -> Vec<u64> {
        let count = count.min(self.n).max(1);
        let gap = self.n / count;
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        (0..count)
            .map(|j| {
                let i = j * gap + gap / 2;
                let c = changed.entry(i).or_insert(Changed {
                    secs: now,
                    version: 0,
                });
                c.secs = now;
                c.version += 1;
                i
            })
            .collect()
    }

    fn count_verb(&self, verb: &str) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *c.verbs.entry(verb.to_owned()).or_default() += 1;
    }

    fn count_page(&self, items: &[Item]) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut again = 0;
        for it in items {
            let (w, b) = ((it.i / 64) as usize, 1u64 << (it.i % 64));
            if c.served[w] & b != 0 {
                again += 1;
            } else {
                c.served[w] |= b;
                c.distinct += 1;
            }
        }
        c.phase.pages += 1;
        c.phase.pages_again += u64::from(again > 0);
        c.phase.records += items.len() as u64;
        c.phase.records_again += again;
    }
}

fn datestamp(secs: i64) -> String {
    W3cDateTime::from_unix(secs, 0).to_string()
}

/// `YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ` (section 3.3.1), as Unix seconds; `until` given
/// in days is the end of its day.
fn parse_bound(text: &str, until: bool) -> Option<(i64, bool)> {
    let day = match text.len() {
        10 => true,
        20 if text.ends_with('Z') && text.as_bytes()[10] == b'T' => false,
        _ => return None,
    };
    let secs = rsagg_oai::Datestamp::parse(text)?.unix();
    Some((if day && until { secs + 86_399 } else { secs }, day))
}

/// The metadata of record `it` (an `<oai_dc:dc>` element of at least [`METADATA_BYTES`]),
/// appended to `out`. Nothing in it needs escaping (the words are plain ASCII).
fn write_dc(it: &Item, out: &mut String) {
    let mut rng = crate::oai_records::Rng::new(it.i);
    let start = out.len();
    out.push_str(DC_OPEN);
    let el = |out: &mut String, name: &str, value: &str| {
        let _ = write!(out, "<dc:{name}>{value}</dc:{name}>");
    };
    let title = rng.words(6);
    let title = match it.version {
        0 => format!("{title} ({})", it.i),
        v => format!("{title} ({}, revised {v})", it.i),
    };
    el(out, "title", &title);
    for _ in 0..2 {
        let c = format!("{}, {}", rng.pick(&SURNAMES), rng.pick(&GIVEN));
        el(out, "creator", &c);
    }
    for _ in 0..3 {
        let s = rng.words(2);
        el(out, "subject", &s);
    }
    el(out, "publisher", "rsagg bench repository");
    el(out, "date", &datestamp(it.secs)[..10]);
    el(out, "type", "Text");
    el(out, "format", "application/pdf");
    el(
        out,
        "identifier",
        &format!("http://repository.example.org/item/{}", it.i),
    );
    el(out, "language", "en");
    el(out, "rights", "CC BY 4.0");
    let fixed = out.len() - start + DC_CLOSE.len() + 2 * "dc:description".len() + 5;
    let mut description = rng.words(1);
    while fixed + description.len() < METADATA_BYTES {
        description.push(' ');
        description.push_str(rng.pick(&WORDS));
    }
    el(out, "description", &description);
    out.push_str(DC_CLOSE);
}

fn write_header(it: &Item, out: &mut String) {
    let _ = write!(
        out,
        "<header><identifier>oai:bench.example.org:{}</identifier><datestamp>{}</datestamp>\
         <setSpec>collection:{}</setSpec></header>",
        it.i,
        datestamp(it.secs),
        it.i % SETS
    );
}

/// The envelope of a response to `verb` (`None`: a `badVerb` answer), `body` inside.
fn envelope(base: &str, verb: Option<&str>, body: &str) -> String {
    let request = match verb {
        Some(v) => format!("<request verb=\"{v}\">{base}</request>"),
        None => format!("<request>{base}</request>"),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\" \
         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
         xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/ http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd\">\
         <responseDate>{}</responseDate>{request}{body}</OAI-PMH>\n",
        datestamp(W3cDateTime::now().instant().0)
    )
}

fn oai_error(code: &str, message: &str) -> String {
    format!("<error code=\"{code}\">{message}</error>")
}

/// The answer to one OAI-PMH request (its query's arguments).
fn answer(repo: &Repo, base: &str, args: &[(String, String)]) -> String {
    let mut map: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in args {
        if map.insert(k, v).is_some() {
            return envelope(base, None, &oai_error("badArgument", "a repeated argument"));
        }
    }
    let Some(verb) = map.remove("verb") else {
        return envelope(base, None, &oai_error("badVerb", "no verb"));
    };
    repo.count_verb(verb);
    let allowed: &[&str] = match verb {
        "Identify" => &[],
        "ListMetadataFormats" => &["identifier"],
        "ListSets" => &["resumptionToken"],
        "GetRecord" => &["identifier", "metadataPrefix"],
        "ListRecords" | "ListIdentifiers" => {
            &["metadataPrefix", "from", "until", "set", "resumptionToken"]
        }
        _ => return envelope(base, None, &oai_error("badVerb", "an unknown verb")),
    };
    let v = Some(verb);
    if let Some(k) = map.keys().find(|k| !allowed.contains(k)) {
        let message = format!("{k} is not an argument of {verb}");
        return envelope(base, v, &oai_error("badArgument", &message));
    }
    match verb {
        "Identify" => envelope(
            base,
            v,
            &format!(
                "<Identify><repositoryName>rsagg-bench generated repository</repositoryName>\
                 <baseURL>{base}</baseURL><protocolVersion>2.0</protocolVersion>\
                 <adminEmail>bench@example.org</adminEmail>\
                 <earliestDatestamp>{}</earliestDatestamp><deletedRecord>persistent</deletedRecord>\
                 <granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>",
                datestamp(T0)
            ),
        ),
        "ListMetadataFormats" => envelope(
            base,
            v,
            "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>\
             <schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>\
             <metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace>\
             </metadataFormat></ListMetadataFormats>",
        ),
        "ListSets" => {
            let mut b = String::from("<ListSets>");
            for s in 0..SETS {
                let _ = write!(
                    b,
                    "<set><setSpec>collection:{s}</setSpec><setName>Collection {s}</setName></set>"
                );
            }
            b.push_str("</ListSets>");
            envelope(base, v, &b)
        }
        "GetRecord" => {
            let (Some(id), Some(prefix)) = (map.get("identifier"), map.get("metadataPrefix"))
            else {
                return envelope(
                    base,
                    v,
                    &oai_error("badArgument", "identifier and metadataPrefix are required"),
                );
            };
            if *prefix != OAI_DC {
                return envelope(base, v, &oai_error("cannotDisseminateFormat", prefix));
            }
            let item = id
                .strip_prefix("oai:bench.example.org:")
                .and_then(|i| i.parse::<u64>().ok())
                .and_then(|i| repo.item(i));
            let Some(item) = item else {
                return envelope(base, v, &oai_error("idDoesNotExist", "no such record"));
            };
            let mut b = String::from("<GetRecord><record>");
            write_header(&item, &mut b);
            b.push_str("<metadata>");
            write_dc(&item, &mut b);
            b.push_str("</metadata></record></GetRecord>");
            envelope(base, v, &b)
        }
        _ => list(repo, base, verb, &map),
    }
}

/// `ListRecords` or `ListIdentifiers`.
fn list(repo: &Repo, base: &str, verb: &str, map: &BTreeMap<&str, &str>) -> String {
    let v = Some(verb);
    let bad = |code: &str, message: &str| envelope(base, v, &oai_error(code, message));
    let (w, offset) = if let Some(t) = map.get("resumptionToken") {
        if map.len() > 1 {
            return bad("badArgument", "resumptionToken is an exclusive argument");
        }
        match Window::parse_token(t) {
            Some(x) => x,
            None => return bad("badResumptionToken", "not a token of this repository"),
        }
    } else {
        match map.get("metadataPrefix") {
            None => return bad("badArgument", "metadataPrefix is required"),
            Some(p) if *p != OAI_DC => return bad("cannotDisseminateFormat", p),
            Some(_) => {}
        }
        let from = match map.get("from").map(|f| parse_bound(f, false)) {
            None => (i64::MIN, None),
            Some(Some((s, day))) => (s, Some(day)),
            Some(None) => return bad("badArgument", "from is not a datestamp"),
        };
        let until = match map.get("until").map(|u| parse_bound(u, true)) {
            // The list stays what it was when it started: later changes are not in it.
            None => (W3cDateTime::now().instant().0, None),
            Some(Some((s, day))) => (s, Some(day)),
            Some(None) => return bad("badArgument", "until is not a datestamp"),
        };
        if let (Some(a), Some(b)) = (from.1, until.1)
            && a != b
        {
            return bad("badArgument", "from and until have different granularities");
        }
        let set = match map.get("set") {
            None => None,
            Some(s) => match s
                .strip_prefix("collection:")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n < SETS)
            {
                Some(n) => Some(n),
                None => return bad("noRecordsMatch", "no such set"),
            },
        };
        (
            Window {
                from: from.0,
                until: until.0,
                set,
            },
            0,
        )
    };
    let (items, total) = repo.page_of(&w, offset);
    if total == 0 {
        return bad("noRecordsMatch", "no record in this window");
    }
    if offset >= total {
        return bad("badResumptionToken", "past the end of the list");
    }
    repo.count_page(&items);
    let records = verb == "ListRecords";
    let mut b = String::with_capacity(items.len() * 1400 + 256);
    let _ = write!(b, "<{verb}>");
    for it in &items {
        if records {
            b.push_str("<record>");
        }
        write_header(it, &mut b);
        if records {
            b.push_str("<metadata>");
            write_dc(it, &mut b);
            b.push_str("</metadata></record>");
        }
    }
    let next = offset + repo.page;
    if next < total {
        let _ = write!(
            b,
            "<resumptionToken completeListSize=\"{total}\" cursor=\"{offset}\">{}</resumptionToken>",
            w.token(next)
        );
    } else if offset > 0 {
        let _ = write!(
            b,
            "<resumptionToken completeListSize=\"{total}\" cursor=\"{offset}\"/>"
        );
    }
    let _ = write!(b, "</{verb}>");
    envelope(base, v, &b)
}

fn json(v: impl Serialize) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(&v).unwrap_or_default(),
    )
        .into_response()
}

/// Everything but `/oai`: the counters and the change.
fn control(repo: &Repo, path: &str, query: &[(String, String)]) -> Response {
    match path {
        "/counts" => {
            let c = repo.counts.lock().unwrap_or_else(|e| e.into_inner());
            json(&c.verbs)
        }
        "/served" => {
            let c = repo.counts.lock().unwrap_or_else(|e| e.into_inner());
            json(Phase {
                distinct: c.distinct,
                ..c.phase
            })
        }
        "/mark" => {
            repo.counts.lock().unwrap_or_else(|e| e.into_inner()).phase = Phase::default();
            json("marked")
        }
        "/reset" => {
            let mut c = repo.counts.lock().unwrap_or_else(|e| e.into_inner());
            c.served.iter_mut().for_each(|w| *w = 0);
            c.distinct = 0;
            c.phase = Phase::default();
            json("reset")
        }
        "/change" => {
            let count = query
                .iter()
                .find(|(k, _)| k == "count")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(100);
            let now = W3cDateTime::now().instant().0;
            let changed = repo.change(count, now);
            json(serde_json::json!({"changed": changed.len(), "datestamp": datestamp(now)}))
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `rsagg-bench oai-provider`: serves the generated repository until killed.
pub fn serve(a: GenArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.records > 0, "--records must be > 0");
    let listener = std::net::TcpListener::bind(("127.0.0.1", a.port))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let base = format!("http://127.0.0.1:{port}/oai");
    let repo = Arc::new(Repo::new(a.records, a.page_size));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        println!("listening {base}");
        use std::io::Write as _;
        std::io::stdout().flush()?;
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let (repo, base) = (repo.clone(), base.clone());
            async move {
                let args: Vec<(String, String)> =
                    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                        .into_owned()
                        .collect();
                if uri.path() != "/oai" {
                    return control(&repo, uri.path(), &args);
                }
                // A page of 1,000 records is ~1.4 MB to write: off the runtime's threads.
                let body = tokio::task::spawn_blocking(move || answer(&repo, &base, &args))
                    .await
                    .unwrap_or_default();
                ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], body).into_response()
            }
        });
        axum::serve(listener, app).await.context("serving")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(q: &str) -> Vec<(String, String)> {
        url::form_urlencoded::parse(q.as_bytes())
            .into_owned()
            .collect()
    }

    fn identifiers(page: &str) -> Vec<u64> {
        page.match_indices("<identifier>oai:bench.example.org:")
            .map(|(at, m)| {
                let rest = &page[at + m.len()..];
                rest[..rest.find('<').unwrap()].parse().unwrap()
            })
            .collect()
    }

    fn token(page: &str) -> Option<String> {
        let at = page.find("<resumptionToken")?;
        let rest = &page[at..];
        let open = rest.find('>')?;
        if rest[..open].ends_with('/') {
            return None;
        }
        Some(rest[open + 1..rest.find("</resumptionToken>")?].to_owned())
    }

    /// Every identifier of a list, following its tokens through `answer`.
    fn whole(repo: &Repo, first: &str) -> Vec<u64> {
        let mut page = answer(repo, "http://b/oai", &args(first));
        let mut out = identifiers(&page);
        while let Some(t) = token(&page) {
            page = answer(
                repo,
                "http://b/oai",
                &args(&format!("verb=ListRecords&resumptionToken={t}")),
            );
            out.extend(identifiers(&page));
        }
        out
    }

    #[test]
    fn a_list_is_every_record_once_in_pages_computed_from_their_token() {
        let repo = Repo::new(1_005, 100);
        let ids = whole(&repo, "verb=ListRecords&metadataPrefix=oai_dc");
        assert_eq!(ids, (0..1_005).collect::<Vec<_>>());
        let c = repo.counts.lock().unwrap();
        assert_eq!(c.verbs["ListRecords"], 11);
        assert_eq!(c.phase.pages, 11);
        assert_eq!(c.phase.records, 1_005);
        assert_eq!((c.phase.pages_again, c.phase.records_again), (0, 0));
        assert_eq!(c.distinct, 1_005);
    }

    #[test]
    fn records_carry_a_kilobyte_of_dublin_core_that_nothing_escapes() {
        let repo = Repo::new(10, 10);
        let page = answer(
            &repo,
            "http://b/oai",
            &args("verb=GetRecord&identifier=oai:bench.example.org:7&metadataPrefix=oai_dc"),
        );
        let dc = &page[page.find("<oai_dc:dc").unwrap()..page.find("</metadata>").unwrap()];
        assert!(
            (METADATA_BYTES..METADATA_BYTES + 20).contains(&dc.len()),
            "{}",
            dc.len()
        );
        let inner = &dc[DC_OPEN.len()..];
        assert!(!inner.contains('&') && !inner.contains('"'), "{inner}");
        assert!(page.contains("<setSpec>collection:7</setSpec>"));
        // the parser rsagg uses reads it as one record with that metadata
        let p = rsagg_oai::parse("http://b/oai", page.as_bytes()).unwrap();
        match p.response {
            rsagg_oai::Response::Records { records, .. } => {
                assert_eq!(records.len(), 1);
                assert_eq!(records[0].header.identifier, "oai:bench.example.org:7");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn from_until_and_set_select_subsets_spread_over_years() {
        let repo = Repo::new(1_000, 100);
        // step: ten years / 1,000, about 3.65 days
        assert!(repo.step > 86_400 * 3);
        let from = datestamp(repo.base_secs(100));
        let until = datestamp(repo.base_secs(199));
        let ids = whole(
            &repo,
            &format!("verb=ListRecords&metadataPrefix=oai_dc&from={from}&until={until}"),
        );
        assert_eq!(ids, (100..200).collect::<Vec<_>>());
        let ids = whole(
            &repo,
            &format!(
                "verb=ListRecords&metadataPrefix=oai_dc&from={from}&until={until}&set=collection:3"
            ),
        );
        assert_eq!(ids, (103..200).step_by(10).collect::<Vec<_>>());
        // days: until is the end of its day
        let day = &datestamp(repo.base_secs(5))[..10];
        let ids = whole(
            &repo,
            &format!("verb=ListRecords&metadataPrefix=oai_dc&until={day}"),
        );
        assert_eq!(ids.last(), Some(&5));
        let none = answer(
            &repo,
            "http://b/oai",
            &args("verb=ListRecords&metadataPrefix=oai_dc&until=2000-01-01"),
        );
        assert!(none.contains("noRecordsMatch"), "{none}");
        let wrong = answer(
            &repo,
            "http://b/oai",
            &args("verb=ListRecords&metadataPrefix=marc"),
        );
        assert!(wrong.contains("cannotDisseminateFormat"), "{wrong}");
        let bad = answer(
            &repo,
            "http://b/oai",
            &args("verb=ListRecords&resumptionToken=nope"),
        );
        assert!(bad.contains("badResumptionToken"), "{bad}");
        let mixed = answer(
            &repo,
            "http://b/oai",
            &args(
                "verb=ListRecords&metadataPrefix=oai_dc&from=2014-01-01&until=2015-01-01T00:00:00Z",
            ),
        );
        assert!(mixed.contains("badArgument"), "{mixed}");
    }

    #[test]
    fn changed_records_move_to_now_and_an_incremental_list_names_only_them() {
        let repo = Repo::new(10_000, 100);
        let now = W3cDateTime::now().instant().0;
        let changed = repo.change(100, now);
        assert_eq!(changed.len(), 100);
        assert_eq!(changed[0], 50);
        let from = datestamp(now - 1);
        let ids = whole(
            &repo,
            &format!("verb=ListRecords&metadataPrefix=oai_dc&from={from}"),
        );
        assert_eq!(ids, changed);
        // the whole list still names every record once, the changed ones last
        let all = whole(&repo, "verb=ListRecords&metadataPrefix=oai_dc");
        assert_eq!(all.len(), 10_000);
        assert_eq!(&all[all.len() - 100..], &changed[..]);
        let page = answer(
            &repo,
            "http://b/oai",
            &args("verb=GetRecord&identifier=oai:bench.example.org:50&metadataPrefix=oai_dc"),
        );
        assert!(page.contains("(50, revised 1)"), "{page}");
    }

    #[test]
    fn records_served_again_are_counted_per_phase() {
        let repo = Repo::new(300, 100);
        whole(&repo, "verb=ListRecords&metadataPrefix=oai_dc");
        repo.counts.lock().unwrap().phase = Phase::default();
        let page = answer(
            &repo,
            "http://b/oai",
            &args("verb=ListRecords&resumptionToken=-9223372036854775808.99999999999.x.100"),
        );
        assert_eq!(identifiers(&page), (100..200).collect::<Vec<_>>());
        let c = repo.counts.lock().unwrap();
        assert_eq!(
            c.phase,
            Phase {
                pages: 1,
                pages_again: 1,
                records: 100,
                records_again: 100,
                distinct: 0
            }
        );
        assert_eq!(c.distinct, 300);
    }
}
