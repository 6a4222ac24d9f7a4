//! OAI-PMH upstreams through the runner in process (`run --once`), against an OAI-PMH 2.0
//! provider served by axum on 127.0.0.1:0 and a `file://` store: baseline, incremental
//! harvests with `from`, deletions, the re-list of a repository that keeps no deletions, and
//! the quirks of real providers (day granularity, datestamps without `Z`, tokens with
//! `expirationDate` and `completeListSize`, an empty token ending a list, a record with
//! characters XML does not allow, `503` with `Retry-After`, an expired token, a provider
//! that ignores `from`). The provider's clock (`responseDate`) is the test's to move, so no
//! test waits on the wall clock.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rsagg_layout::report::{UpstreamReport, Verdict};
use rsagg_pipeline::{
    Action, AuditOptions, Discrepancy, Pipeline, RunOptions, RunReport, WindowStatus, audit,
    dry_run, oai_refetch, oai_reharvest, oai_windows, quarantine_retry, run_once,
};

#[derive(Clone)]
struct Rec {
    /// `YYYY-MM-DDThh:mm:ssZ`.
    datestamp: String,
    deleted: bool,
    title: String,
    /// Metadata with a character XML 1.0 does not allow (U+0001).
    bad: bool,
    /// `setSpec`s (`all` when none is given).
    sets: Vec<String>,
}

/// The repository and how the provider behaves.
struct Repo {
    day_granularity: bool,
    /// `deletedRecord`.
    deleted_record: &'static str,
    /// The provider's clock (`responseDate`).
    now: String,
    records: BTreeMap<String, Rec>,
    batch: usize,
    /// Datestamps written without their `Z`.
    no_z: bool,
    ignore_from: bool,
    /// The next N requests are answered `503` with `Retry-After: 0`.
    busy: usize,
    /// The Nth request carrying a token (1-based) is answered `badResumptionToken`.
    expire_token: Option<usize>,
    token_requests: usize,
    /// `from` of every first `ListRecords` request.
    froms: Vec<Option<String>>,
    /// `noRecordsMatch` answered with this HTTP status (InvenioRDM: 422).
    no_records_status: u16,
    /// Every token handed out names the page just sent again (a provider that loops).
    loop_token: bool,
    /// `Identify` requests answered.
    identifies: usize,
    /// Every page after the first is empty with a new token, forever.
    endless_empty: bool,
    /// Datestamps written `YYYYMMDD` (Harvard LibraryCloud), granularity `YYYY-MM-DD`.
    compact: bool,
    /// The `ListRecords` page with a token at this cursor is cut short in its last record.
    cut_at: Option<usize>,
    /// `ListRecords` answers 500 (a provider whose ListRecords breaks on some record);
    /// `ListIdentifiers` and `GetRecord` work.
    broken_list_records: bool,
    /// Every request is answered `503` with `Retry-After: 3600` (maintenance).
    maintenance: bool,
    /// Tokens name this generation; a token of another (the provider restarted since it
    /// handed it out) is answered `badResumptionToken`.
    generation: u32,
    /// The Nth request carrying a token (1-based) is answered `400` with a plain body (the
    /// harvest stops there, its window's token kept).
    refuse_token: Option<usize>,
    /// Added to every `completeListSize` (a provider whose list loses records).
    overstate: usize,
    /// Requests answered, per verb.
    verbs: BTreeMap<String, usize>,
    /// `set` of every first `ListRecords` / `ListIdentifiers` request.
    set_args: Vec<Option<String>>,
}

impl Default for Repo {
    fn default() -> Self {
        Repo {
            day_granularity: false,
            deleted_record: "persistent",
            now: "2025-01-01T00:00:00Z".into(),
            records: BTreeMap::new(),
            batch: 2,
            no_z: false,
            ignore_from: false,
            busy: 0,
            expire_token: None,
            token_requests: 0,
            froms: Vec::new(),
            no_records_status: 200,
            loop_token: false,
            identifies: 0,
            endless_empty: false,
            compact: false,
            cut_at: None,
            broken_list_records: false,
            maintenance: false,
            generation: 0,
            refuse_token: None,
            overstate: 0,
            verbs: BTreeMap::new(),
            set_args: Vec::new(),
        }
    }
}

impl Repo {
    fn put(&mut self, id: &str, datestamp: &str, title: &str) {
        self.records.insert(
            id.into(),
            Rec {
                datestamp: datestamp.into(),
                deleted: false,
                title: title.into(),
                bad: false,
                sets: Vec::new(),
            },
        );
    }

    fn put_in(&mut self, id: &str, datestamp: &str, title: &str, sets: &[&str]) {
        self.put(id, datestamp, title);
        self.records.get_mut(id).unwrap().sets = sets.iter().map(|s| (*s).to_owned()).collect();
    }

    fn delete(&mut self, id: &str, datestamp: &str) {
        let r = self.records.get_mut(id).unwrap();
        r.deleted = true;
        r.datestamp = datestamp.into();
    }

    fn written(&self, datestamp: &str) -> String {
        if self.compact {
            datestamp[..10].replace('-', "")
        } else if self.day_granularity {
            datestamp[..10].to_owned()
        } else if self.no_z {
            datestamp.trim_end_matches('Z').to_owned()
        } else {
            datestamp.to_owned()
        }
    }
}

type Shared = (String, Arc<Mutex<Repo>>);

fn envelope(repo: &Repo, base: &str, body: &str) -> Response {
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<responseDate>{}</responseDate><request>{base}oai</request>
{body}
</OAI-PMH>"#,
        repo.now
    );
    ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], xml).into_response()
}

/// `from`/`until` as comparable `YYYY-MM-DDThh:mm:ssZ` (a day covers the whole day).
fn bound(v: &str, end: bool) -> String {
    if v.len() == 10 {
        format!("{v}T{}Z", if end { "23:59:59" } else { "00:00:00" })
    } else if v.ends_with('Z') {
        v.to_owned()
    } else {
        format!("{v}Z")
    }
}

async fn oai(
    State((base, repo)): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut repo = repo.lock().unwrap();
    if repo.busy > 0 {
        repo.busy -= 1;
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "0")],
            "busy",
        )
            .into_response();
    }
    let verb = q.get("verb").map(String::as_str).unwrap_or("");
    *repo.verbs.entry(verb.to_owned()).or_default() += 1;
    if repo.maintenance {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "3600")],
            "down for maintenance",
        )
            .into_response();
    }
    if verb == "ListRecords" && repo.broken_list_records {
        return (StatusCode::INTERNAL_SERVER_ERROR, "ListRecords is broken").into_response();
    }
    let headers_only = verb == "ListIdentifiers";
    match verb {
        "ListSets" => {
            let mut specs: Vec<String> = repo
                .records
                .values()
                .flat_map(|r| {
                    if r.sets.is_empty() {
                        vec!["all".to_owned()]
                    } else {
                        r.sets.clone()
                    }
                })
                .collect();
            specs.sort();
            specs.dedup();
            if specs.is_empty() {
                return envelope(
                    &repo,
                    &base,
                    "<error code=\"noSetHierarchy\">no sets</error>",
                );
            }
            // One set a page, to be followed by its token.
            let at: usize = q
                .get("resumptionToken")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            let token = if at + 1 < specs.len() {
                format!("<resumptionToken>{}</resumptionToken>", at + 1)
            } else {
                String::new()
            };
            envelope(
                &repo,
                &base,
                &format!(
                    "<ListSets><set><setSpec>{}</setSpec><setName>Set</setName></set>{token}</ListSets>",
                    specs[at]
                ),
            )
        }
        "Identify" => {
            repo.identifies += 1;
            let body = format!(
                "<Identify><repositoryName>Fixture</repositoryName><baseURL>{base}oai</baseURL><protocolVersion>2.0</protocolVersion><adminEmail>a@example.org</adminEmail><earliestDatestamp>{}</earliestDatestamp><deletedRecord>{}</deletedRecord><granularity>{}</granularity></Identify>",
                repo.written("2000-01-01T00:00:00Z"),
                repo.deleted_record,
                if repo.day_granularity {
                    "YYYY-MM-DD"
                } else {
                    "YYYY-MM-DDThh:mm:ssZ"
                }
            );
            envelope(&repo, &base, &body)
        }
        "ListMetadataFormats" => envelope(
            &repo,
            &base,
            "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix><schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema><metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace></metadataFormat></ListMetadataFormats>",
        ),
        "GetRecord" => {
            let id = q.get("identifier").cloned().unwrap_or_default();
            match repo.records.get(&id) {
                Some(r) => {
                    let record = record_xml(&repo, &id, r);
                    envelope(&repo, &base, &format!("<GetRecord>{record}</GetRecord>"))
                }
                None => envelope(
                    &repo,
                    &base,
                    "<error code=\"idDoesNotExist\">no such record</error>",
                ),
            }
        }
        "ListRecords" | "ListIdentifiers" => {
            let (offset, from, until, set) = match q.get("resumptionToken") {
                Some(t) => {
                    repo.token_requests += 1;
                    if repo.expire_token == Some(repo.token_requests) {
                        return envelope(
                            &repo,
                            &base,
                            "<error code=\"badResumptionToken\">expired</error>",
                        );
                    }
                    let mut parts = t.split('|');
                    let offset: usize = parts.next().unwrap().parse().unwrap();
                    let from = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
                    let until = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
                    let set = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
                    if parts
                        .next()
                        .is_some_and(|g| g != repo.generation.to_string())
                    {
                        return envelope(
                            &repo,
                            &base,
                            "<error code=\"badResumptionToken\">unknown token</error>",
                        );
                    }
                    if repo.refuse_token == Some(repo.token_requests) {
                        return (StatusCode::BAD_REQUEST, "bad request").into_response();
                    }
                    (offset, from, until, set)
                }
                None => {
                    assert_eq!(q.get("metadataPrefix").map(String::as_str), Some("oai_dc"));
                    let from = q.get("from").cloned();
                    repo.froms.push(from.clone());
                    let set = q.get("set").cloned();
                    repo.set_args.push(set.clone());
                    (0, from, q.get("until").cloned(), set)
                }
            };
            let (lo, hi) = if repo.ignore_from {
                (None, None)
            } else {
                (
                    from.as_deref().map(|f| bound(f, false)),
                    until.as_deref().map(|u| bound(u, true)),
                )
            };
            let matching: Vec<(&String, &Rec)> = repo
                .records
                .iter()
                .filter(|(_, r)| lo.as_ref().is_none_or(|lo| r.datestamp >= *lo))
                .filter(|(_, r)| hi.as_ref().is_none_or(|hi| r.datestamp <= *hi))
                .filter(|(_, r)| {
                    set.as_ref().is_none_or(|s| {
                        r.sets
                            .iter()
                            .any(|t| t == s || t.starts_with(&format!("{s}:")))
                    })
                })
                .collect();
            if matching.is_empty() {
                let mut r = envelope(&repo, &base, "<error code=\"noRecordsMatch\">none</error>");
                *r.status_mut() = StatusCode::from_u16(repo.no_records_status).unwrap();
                return r;
            }
            if repo.endless_empty && offset > 0 {
                return envelope(
                    &repo,
                    &base,
                    &format!(
                        "<ListRecords><resumptionToken>{}||</resumptionToken></ListRecords>",
                        offset + 1
                    ),
                );
            }
            let mut body = format!("<{verb}>");
            for (id, r) in matching.iter().skip(offset).take(repo.batch) {
                let xml = record_xml(&repo, id, r);
                if headers_only {
                    let header =
                        &xml[xml.find("<header").unwrap()..xml.find("</header>").unwrap() + 9];
                    body.push_str(header);
                } else {
                    body.push_str(&xml);
                }
            }
            let next = if repo.loop_token && offset > 0 {
                offset
            } else {
                offset + repo.batch
            };
            let size = matching.len();
            if next < size {
                body.push_str(&format!(
                    "<resumptionToken expirationDate=\"2099-01-01T00:00:00Z\" completeListSize=\"{}\" cursor=\"{offset}\">{next}|{}|{}|{}|{}</resumptionToken>",
                    size + repo.overstate,
                    from.unwrap_or_default(),
                    until.unwrap_or_default(),
                    set.unwrap_or_default(),
                    repo.generation
                ));
            } else if offset > 0 {
                // The last page of a list in several: an empty token (section 3.5).
                body.push_str(&format!(
                    "<resumptionToken completeListSize=\"{}\" cursor=\"{offset}\"/>",
                    size + repo.overstate
                ));
            }
            body.push_str(&format!("</{verb}>"));
            if repo.cut_at == Some(offset) {
                // The connection dropped in the page's last record: what arrived is a
                // prefix, ending before the record's title.
                let cut = body.rfind("<dc:title>").unwrap();
                body.truncate(cut);
                let xml = format!(
                    r#"<?xml version="1.0" encoding="UTF-8"?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><responseDate>{}</responseDate><request>{base}oai</request>
{body}"#,
                    repo.now
                );
                return ([(header::CONTENT_TYPE, "text/xml")], xml).into_response();
            }
            envelope(&repo, &base, &body)
        }
        _ => envelope(&repo, &base, "<error code=\"badVerb\">no such verb</error>"),
    }
}

/// One `<record>` (section 2.5): a deleted one is its header alone.
fn record_xml(repo: &Repo, id: &str, r: &Rec) -> String {
    let ds = repo.written(&r.datestamp);
    if r.deleted {
        return format!(
            "<record><header status=\"deleted\"><identifier>{id}</identifier><datestamp>{ds}</datestamp></header></record>"
        );
    }
    let title = if r.bad {
        format!("{}\u{1}", r.title)
    } else {
        r.title.clone()
    };
    let sets: String = if r.sets.is_empty() {
        "<setSpec>all</setSpec>".into()
    } else {
        r.sets
            .iter()
            .map(|s| format!("<setSpec>{s}</setSpec>"))
            .collect()
    };
    format!(
        "<record><header><identifier>{id}</identifier><datestamp>{ds}</datestamp>{sets}</header><metadata><oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>{title}</dc:title><dc:identifier>{id}</dc:identifier></oai_dc:dc></metadata></record>"
    )
}

/// Serves `repo` on 127.0.0.1:0; returns the server's base URL (the repository's base URL
/// is `{base}oai`).
async fn serve(repo: Arc<Mutex<Repo>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/oai", axum::routing::get(oai))
        .with_state((base.clone(), repo));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn pipeline(base: &str, store: &Path, extra: &str) -> Pipeline {
    let text = format!(
        r#"
[collection]
name = "oai-fixture"
base_url = "https://agg.example.org/oai-fixture/"

[store]
url = "file://{}"

[[upstream]]
name = "repo"
url = "{base}oai"
kind = "oai-pmh"
allow_private = true
{extra}
"#,
        store.display()
    );
    Pipeline::parse(Path::new("oai.toml"), &text).unwrap()
}

fn only(r: &RunReport) -> &UpstreamReport {
    &r.upstreams[0]
}

/// (created, updated, deleted, unchanged) of a run that went well.
fn counts(r: &RunReport) -> (u64, u64, u64, u64) {
    let u = only(r);
    assert_eq!(u.verdict, Verdict::Ok, "{r:?}");
    (u.created, u.updated, u.deleted, u.unchanged)
}

/// What the published Resource List(s) name: each entry's `via` link, the upstream URI
/// of the copy (its `GetRecord` URL).
fn published(store: &Path) -> Vec<String> {
    let mut vias: Vec<String> = common::resource_lists(store)
        .iter()
        .flat_map(|text| {
            text.split("<url>").skip(1).map(|url| {
                url.split("<rs:ln ")
                    .skip(1)
                    .find(|l| l.contains("rel=\"via\""))
                    .and_then(|l| l.split("href=\"").nth(1))
                    .and_then(|h| h.split('"').next())
                    .expect("every entry has a via link")
                    .to_owned()
            })
        })
        .collect();
    vias.sort();
    vias
}

/// Every stored blob's text (the records' copies), for checking what was kept.
fn blobs(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![store.join("blobs")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(t) = std::fs::read_to_string(&p) {
                out.push(t);
            }
        }
    }
    out
}

/// An audit with every check: blobs read back, records listed again.
fn every_check() -> AuditOptions {
    AuditOptions {
        read_data: true,
        fetch: true,
        max_items: 100,
    }
}

fn get_record(base: &str, id: &str) -> String {
    format!(
        "{base}oai?verb=GetRecord&amp;identifier={}&amp;metadataPrefix=oai_dc",
        id.replace(':', "%3A")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_then_incremental_harvests_with_from_updates_and_deletions() {
    let repo = Arc::new(Mutex::new(Repo::default()));
    {
        let mut r = repo.lock().unwrap();
        for i in 1..=5 {
            r.put(
                &format!("oai:fx:{i}"),
                &format!("2024-0{i}-01T00:00:00Z"),
                &format!("Title {i}"),
            );
        }
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let opts = RunOptions::default();

    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (5, 0, 0, 0));
    assert_eq!(only(&r).route.as_deref(), Some("OaiPmh"));
    let locs = published(dir.path());
    assert_eq!(locs.len(), 5, "{locs:?}");
    assert!(locs.contains(&get_record(&base, "oai:fx:3")), "{locs:?}");
    let copies = blobs(dir.path());
    let copy = copies
        .iter()
        .find(|t| t.contains("Title 3"))
        .expect("record 3 stored");
    assert!(
        copy.contains("<oai_dc:dc") && copy.contains("xmlns:dc="),
        "{copy}"
    );
    assert!(
        !copy.contains("<header>"),
        "the copy is the metadata alone: {copy}"
    );

    let audit_opts = every_check();
    let a = audit(&p, audit_opts).await.unwrap();
    assert!(a.in_sync, "{a:?}");

    // The provider's clock moves on; one update, one creation, one deletion.
    {
        let mut r = repo.lock().unwrap();
        r.now = "2025-01-02T00:00:00Z".into();
        r.put("oai:fx:2", "2025-01-01T12:00:00Z", "Title 2, revised");
        r.put("oai:fx:6", "2025-01-01T13:00:00Z", "Title 6");
        r.delete("oai:fx:4", "2025-01-01T14:00:00Z");
    }
    // The audit sees what the next run will do, and the dry run says it.
    let a = audit(&p, audit_opts).await.unwrap();
    assert!(!a.in_sync);
    let mut found: Vec<(Discrepancy, String)> =
        a.items.iter().map(|i| (i.kind, i.uri.clone())).collect();
    found.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        found,
        vec![
            (
                Discrepancy::Changed,
                get_record(&base, "oai:fx:2").replace("&amp;", "&")
            ),
            (
                Discrepancy::Extra,
                get_record(&base, "oai:fx:4").replace("&amp;", "&")
            ),
            (
                Discrepancy::Missing,
                get_record(&base, "oai:fx:6").replace("&amp;", "&")
            ),
        ],
        "{a:?}"
    );
    let plan = dry_run(&p, &opts, 100).await.unwrap();
    let mut planned: Vec<(Action, String)> = plan
        .items
        .iter()
        .map(|i| (i.action, i.uri.clone()))
        .collect();
    planned.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        planned,
        vec![
            (
                Action::Update,
                get_record(&base, "oai:fx:2").replace("&amp;", "&")
            ),
            (
                Action::Delete,
                get_record(&base, "oai:fx:4").replace("&amp;", "&")
            ),
            (
                Action::Create,
                get_record(&base, "oai:fx:6").replace("&amp;", "&")
            ),
        ],
        "{plan:?}"
    );
    assert_eq!(plan.upstreams[0].sets[0].mode, "incremental", "{plan:?}");
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (1, 1, 1, 0), "{r:?}");
    let froms = repo.lock().unwrap().froms.clone();
    assert_eq!(froms[0], None, "the baseline lists everything");
    assert_eq!(
        froms.last().cloned().flatten().as_deref(),
        Some("2024-12-31T23:59:59Z"),
        "the second harvest asks from the first's until minus one second: {froms:?}"
    );
    let locs = published(dir.path());
    assert_eq!(locs.len(), 5, "{locs:?}");
    assert!(!locs.contains(&get_record(&base, "oai:fx:4")), "{locs:?}");
    assert!(
        blobs(dir.path())
            .iter()
            .any(|t| t.contains("Title 2, revised"))
    );

    // Nothing changed: nothing stored, nothing listed but the overlap.
    repo.lock().unwrap().now = "2025-01-03T00:00:00Z".into();
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 0, 0, 0), "{r:?}");
    let a = audit(&p, audit_opts).await.unwrap();
    assert!(a.in_sync, "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quirks_of_real_providers_lose_and_double_nothing() {
    let repo = Arc::new(Mutex::new(Repo {
        day_granularity: true,
        batch: 2,
        busy: 2,
        expire_token: Some(2),
        ..Repo::default()
    }));
    {
        let mut r = repo.lock().unwrap();
        for i in 1..=7 {
            r.put(
                &format!("oai:q:{i}"),
                &format!("2024-03-0{i}T10:00:00Z"),
                &format!("Q {i}"),
            );
        }
        r.records.get_mut("oai:q:5").unwrap().bad = true;
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "window = \"none\"");
    let opts = RunOptions::default();

    // Two 503s, an expired token on the second page: the list starts again, and the record
    // with a control character is quarantined while the six others are stored once each.
    let r = run_once(&p, &opts).await.unwrap();
    let u = only(&r);
    assert_eq!((u.created, u.updated, u.quarantined), (6, 0, 1), "{r:?}");
    assert_eq!(published(dir.path()).len(), 6);
    {
        let r = repo.lock().unwrap();
        assert_eq!(
            r.froms.len(),
            2,
            "the list was restarted once: {:?}",
            r.froms
        );
    }

    // The provider fixes record 5: `quarantine retry` asks for it again (GetRecord) and
    // releases it; then it is quarantined again to let the next run store it.
    repo.lock().unwrap().records.get_mut("oai:q:5").unwrap().bad = false;
    let retried = quarantine_retry(&p, None, None, &opts).await.unwrap();
    let u = only(&retried);
    assert_eq!((u.created, u.quarantined), (1, 0), "{retried:?}");
    assert_eq!(published(dir.path()).len(), 7);
    repo.lock().unwrap().records.get_mut("oai:q:5").unwrap().bad = true;

    // A day-granularity repository: the next harvest asks from the day before; a provider
    // that ignores `from` and writes datestamps without `Z` sends everything again, and
    // nothing is stored twice.
    {
        let mut r = repo.lock().unwrap();
        r.now = "2025-02-01T08:00:00Z".into();
        r.day_granularity = false;
        r.no_z = true;
        r.ignore_from = true;
        r.put("oai:q:1", "2025-02-01T07:00:00Z", "Q 1, revised");
    }
    let r = run_once(&p, &opts).await.unwrap();
    let u = only(&r);
    // Record 5, broken again, is quarantined again (its copy from the retry stays); record 1
    // is updated; the five others are the same bytes as their copies.
    assert_eq!((u.created, u.updated, u.deleted), (0, 1, 0), "{r:?}");
    assert_eq!((u.unchanged, u.quarantined), (5, 1), "{r:?}");
    assert_eq!(published(dir.path()).len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_without_persistent_deletions_is_relisted_to_find_them() {
    let repo = Arc::new(Mutex::new(Repo {
        deleted_record: "no",
        ..Repo::default()
    }));
    {
        let mut r = repo.lock().unwrap();
        for i in 1..=4 {
            r.put(
                &format!("oai:n:{i}"),
                &format!("2024-01-0{i}T00:00:00Z"),
                &format!("N {i}"),
            );
        }
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    // One list per pass (no date windows), so that each pass is one first request.
    let p = pipeline(
        &base,
        dir.path(),
        "relist_every = \"1d\"\nwindow = \"none\"",
    );
    let opts = RunOptions::default();
    assert_eq!(counts(&run_once(&p, &opts).await.unwrap()), (4, 0, 0, 0));

    // Record 2 vanishes without a trace (deletedRecord `no`). An incremental harvest within
    // the day cannot see it...
    {
        let mut r = repo.lock().unwrap();
        r.records.remove("oai:n:2");
        r.now = "2025-01-01T12:00:00Z".into();
    }
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 0, 0, 0), "{r:?}");
    assert_eq!(published(dir.path()).len(), 4);

    // ...the re-list a day after the last full one does.
    repo.lock().unwrap().now = "2025-01-02T00:00:01Z".into();
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 0, 1, 3), "{r:?}");
    assert!(
        only(&r).resyncs.iter().any(|s| s.contains("re-listed")),
        "{r:?}"
    );
    let locs = published(dir.path());
    assert_eq!(locs.len(), 3, "{locs:?}");
    assert!(!locs.contains(&get_record(&base, "oai:n:2")));
    let froms = repo.lock().unwrap().froms.clone();
    assert_eq!(froms.len(), 3);
    assert_eq!(froms[2], None, "the re-list asks without from");
}

/// InenioRDM (Zenodo) answers a `from`/`until` range without records with HTTP 422 and
/// `<error code="noRecordsMatch"/>`: an empty list, so a run with no change goes well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_records_match_in_a_422_is_an_empty_list() {
    let repo = Arc::new(Mutex::new(Repo {
        no_records_status: 422,
        ..Repo::default()
    }));
    repo.lock()
        .unwrap()
        .put("oai:z:1", "2024-12-01T00:00:00Z", "Z 1");
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let opts = RunOptions::default();
    assert_eq!(counts(&run_once(&p, &opts).await.unwrap()), (1, 0, 0, 0));
    repo.lock().unwrap().now = "2025-01-02T00:00:00Z".into();
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 0, 0, 0), "{r:?}");
    assert!(repo.lock().unwrap().froms.last().unwrap().is_some());
}

/// A provider whose token names the same page again: the list stops with an error naming
/// the token (not an endless harvest); what it gave is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_resumption_token_stops_the_list_naming_the_token() {
    let (_, r) = one_bounded_run(
        Repo {
            loop_token: true,
            ..Repo::default()
        },
        "l",
        6,
    )
    .await;
    let u = only(&r);
    assert_eq!(u.verdict, Verdict::Failed, "{r:?}");
    let error = u.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("resumptionToken `2|") && error.contains("handed out before"),
        "{error}"
    );
    // The first two pages' records (2 + 2) are stored; no record twice.
    assert_eq!(u.created, 4, "{r:?}");
}

/// `Identify` is asked once per run and repository, however many sets are harvested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_is_asked_once_per_run() {
    let repo = Arc::new(Mutex::new(Repo::default()));
    repo.lock()
        .unwrap()
        .put_in("oai:i:1", "2024-12-01T00:00:00Z", "I 1", &["a", "b", "c"]);
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "sets = [\"a\", \"b\", \"c\"]");
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    assert_eq!(only(&r).verdict, Verdict::Ok, "{r:?}");
    assert_eq!(repo.lock().unwrap().identifies, 1);
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    assert_eq!(only(&r).verdict, Verdict::Ok, "{r:?}");
    assert_eq!(
        repo.lock().unwrap().identifies,
        2,
        "once more for the second run"
    );
}

/// A provider that hands out new tokens with empty pages forever: the list stops after
/// `MAX_EMPTY_PAGES` (100) pages in a row without a record, naming the last token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_empty_pages_stops_the_list() {
    let (repo, r) = one_bounded_run(
        Repo {
            endless_empty: true,
            ..Repo::default()
        },
        "e",
        3,
    )
    .await;
    let u = only(&r);
    assert_eq!(u.verdict, Verdict::Failed, "{r:?}");
    let error = u.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("100 pages in a row without a record"),
        "{error}"
    );
    assert_eq!(repo.lock().unwrap().token_requests, 100, "{error}");
    assert_eq!(u.created, 2, "{r:?}");
}

/// Datestamps as Harvard LibraryCloud sends them (`20210311`): read as days, with one
/// warning per list, not quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_datestamps_are_read_with_a_warning() {
    let repo = Arc::new(Mutex::new(Repo {
        compact: true,
        day_granularity: true,
        ..Repo::default()
    }));
    for i in 1..=5 {
        repo.lock()
            .unwrap()
            .put(&format!("oai:h:{i}"), "2021-03-11T00:00:00Z", "H");
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    assert_eq!(counts(&r), (5, 0, 0, 0), "{r:?}");
    let u = only(&r);
    assert_eq!(u.quarantined, 0, "{r:?}");
    let compact: Vec<&String> = u
        .warnings
        .iter()
        .filter(|w| w.contains("compact form YYYYMMDD"))
        .collect();
    assert_eq!(compact.len(), 1, "one warning per list: {:?}", u.warnings);
}

/// A page that is not well-formed XML: an unescaped `&` in one record's title (as real
/// providers send from their databases) loses only that record, quarantined under its URI;
/// the list goes on by the page's token. A page cut short in its last record keeps its whole
/// records and stops the list (its token cannot be read), naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_that_are_not_well_formed_lose_only_what_cannot_be_read() {
    let repo = Arc::new(Mutex::new(Repo::default()));
    for i in 1..=6 {
        repo.lock()
            .unwrap()
            .put(&format!("oai:w:{i}"), "2024-12-01T00:00:00Z", "W");
    }
    repo.lock()
        .unwrap()
        .records
        .get_mut("oai:w:2")
        .unwrap()
        .title = "Tom & Jerry".into();
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    let u = only(&r);
    assert_eq!((u.created, u.quarantined), (5, 1), "{r:?}");
    assert_eq!(u.verdict, Verdict::Ok, "{r:?}");
    // The damaged page's bytes are kept: the quarantined record's blob is the page.
    let mut kept = Vec::new();
    rsagg_pipeline::quarantine_list(&p, |q| kept.push(q))
        .await
        .unwrap();
    assert_eq!(kept.len(), 1);
    let blob = kept[0].blob.clone().expect("the page's blob");
    let page = blobs(dir.path())
        .into_iter()
        .find(|b| b.contains("Tom & Jerry") && b.contains("<ListRecords>"));
    assert!(page.is_some(), "blob {blob} holds the page");

    // Cut short: pages of two, the second page (cursor 2) cut in its last record.
    let repo = Arc::new(Mutex::new(Repo {
        cut_at: Some(2),
        ..Repo::default()
    }));
    for i in 1..=6 {
        repo.lock()
            .unwrap()
            .put(&format!("oai:t:{i}"), "2024-12-01T00:00:00Z", "T");
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    let u = only(&r);
    assert_eq!(u.verdict, Verdict::Failed, "{r:?}");
    let error = u.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("resumptionToken cannot be read") && error.contains("as blob sha256:"),
        "{error}"
    );
    // Page one's two records and page two's whole one; the cut record is quarantined.
    assert_eq!((u.created, u.quarantined), (3, 1), "{r:?}");
    assert_eq!(u.checkpoint, None, "the checkpoint stays: {r:?}");
}

/// A provider behaving as `repo` says, holding records `oai:{prefix}:1..=n` of 2024-12-01,
/// served and harvested once (bounded: a harvest that never ends fails the test).
async fn one_bounded_run(repo: Repo, prefix: &str, n: usize) -> (Arc<Mutex<Repo>>, RunReport) {
    let repo = Arc::new(Mutex::new(repo));
    for i in 1..=n {
        repo.lock()
            .unwrap()
            .put(&format!("oai:{prefix}:{i}"), "2024-12-01T00:00:00Z", "R");
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_once(&p, &RunOptions::default()),
    )
    .await
    .expect("the harvest ends")
    .unwrap();
    (repo, r)
}

/// Issue 44 point 4: `strategy = "identifiers"` harvests a provider whose `ListRecords`
/// fails by `ListIdentifiers` and one `GetRecord` per identifier (none for a deletion),
/// with windows and checkpoints as `ListRecords`; the next run asks only what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identifiers_strategy_harvests_by_get_record_when_list_records_is_broken() {
    let repo = Arc::new(Mutex::new(Repo {
        broken_list_records: true,
        ..Repo::default()
    }));
    {
        let mut r = repo.lock().unwrap();
        for i in 1..=5 {
            r.put(
                &format!("oai:i:{i}"),
                &format!("2024-0{i}-01T00:00:00Z"),
                &format!("I {i}"),
            );
        }
        r.delete("oai:i:5", "2024-06-01T00:00:00Z");
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "strategy = \"identifiers\"");
    let opts = RunOptions::default();
    assert_eq!(counts(&run_once(&p, &opts).await.unwrap()), (4, 0, 0, 0));
    assert_eq!(published(dir.path()).len(), 4);
    {
        let r = repo.lock().unwrap();
        assert_eq!(r.verbs.get("ListRecords"), None, "{:?}", r.verbs);
        assert_eq!(
            r.verbs["GetRecord"], 4,
            "one per record, none for the deletion"
        );
    }
    // Record 2 changes: the next pass lists from the checkpoint and asks for it alone.
    {
        let mut r = repo.lock().unwrap();
        r.put("oai:i:2", "2025-01-01T12:00:00Z", "I 2, revised");
        r.now = "2025-01-02T00:00:00Z".into();
    }
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 1, 0, 0), "{r:?}");
    assert_eq!(repo.lock().unwrap().verbs["GetRecord"], 5);
    let audit_opts = every_check();
    let a = audit(&p, audit_opts).await.unwrap();
    assert!(a.in_sync, "{a:?}");
}

/// Issue 44 point 5: the sets of one repository are harvested side by side, a record in
/// two of them stored once (created once, found unchanged by the other set); `ListSets`
/// checks the names first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_are_harvested_together_and_a_record_in_two_sets_is_stored_once() {
    let repo = Arc::new(Mutex::new(Repo::default()));
    {
        let mut r = repo.lock().unwrap();
        r.put_in("oai:s:1", "2024-01-01T00:00:00Z", "S 1", &["a"]);
        r.put_in("oai:s:2", "2024-01-02T00:00:00Z", "S 2", &["b"]);
        r.put_in("oai:s:3", "2024-01-03T00:00:00Z", "S 3", &["a", "b"]);
        r.put_in("oai:s:4", "2024-01-04T00:00:00Z", "S 4", &["a:x"]);
        r.put_in("oai:s:5", "2024-01-05T00:00:00Z", "S 5", &["c"]);
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(
        &base,
        dir.path(),
        "sets = [\"a\", \"b\"]\nwindow = \"none\"",
    );
    let opts = RunOptions::default();
    let r = run_once(&p, &opts).await.unwrap();
    // 1, 3 and 4 (a:x is in a) from `a`, 2 and 3 from `b`: 3 is stored once.
    assert_eq!(counts(&r), (4, 0, 0, 1), "{r:?}");
    assert_eq!(published(dir.path()).len(), 4);
    {
        let r = repo.lock().unwrap();
        let mut sets = r.set_args.clone();
        sets.sort();
        assert_eq!(sets, [Some("a".to_owned()), Some("b".to_owned())]);
        assert!(
            r.verbs["ListSets"] >= 2,
            "paged by its tokens: {:?}",
            r.verbs
        );
    }

    // A set the repository does not have is refused by name.
    let p = pipeline(&base, dir.path(), "sets = [\"a\", \"nope\"]");
    let r = run_once(&p, &opts).await.unwrap();
    let u = only(&r);
    assert_eq!(u.verdict, Verdict::Failed, "{r:?}");
    let error = u.error.clone().unwrap_or_default();
    assert!(
        error.contains("no set `nope`") && error.contains("4.6"),
        "{error}"
    );
}

/// Issue 44 points 2 and 4: the operator's view of the windows (`rsagg oai windows`), a
/// range marked to be harvested again by the next run (`rsagg oai reharvest`), and records
/// asked again now (`rsagg oai refetch`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_are_listed_a_range_is_reharvested_and_records_refetched() {
    let repo = Arc::new(Mutex::new(Repo::default()));
    {
        let mut r = repo.lock().unwrap();
        for (i, y) in [2021, 2022, 2023].iter().enumerate() {
            r.put(
                &format!("oai:w:{i}"),
                &format!("{y}-06-01T00:00:00Z"),
                &format!("W {i}"),
            );
        }
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let opts = RunOptions::default();
    assert_eq!(counts(&run_once(&p, &opts).await.unwrap()), (3, 0, 0, 0));

    let sets = oai_windows(&p, None).await.unwrap();
    assert_eq!(sets.len(), 1);
    let pass = sets[0].pass.clone().unwrap();
    // 2000-01-01 … 2025-01-01 in windows of 365 days.
    assert!(pass.complete && pass.full && !pass.resumed, "{pass:?}");
    assert_eq!(pass.windows.len(), 26, "{pass:?}");
    assert!(pass.windows.iter().all(|w| w.status == WindowStatus::Done));
    assert_eq!(pass.windows.iter().map(|w| w.records).sum::<u64>(), 3);
    assert!(
        oai_windows(&p, Some("nope")).await.unwrap_err().is_config(),
        "an unknown upstream is a usage error"
    );

    // The provider changed record 1's bytes without a new datestamp: a reharvest of its
    // year finds it; the checkpoint does not move back.
    let cp_before = sets[0].checkpoint;
    {
        let mut r = repo.lock().unwrap();
        r.records.get_mut("oai:w:1").unwrap().title = "W 1, corrected".into();
        r.froms.clear();
    }
    let t = |s: &str| rsagg_model::W3cDateTime::parse(s).unwrap().value;
    let marked = oai_reharvest(&p, "repo", None, t("2022-01-01"), Some(t("2022-12-31")))
        .await
        .unwrap();
    assert!(marked[0].pass.as_ref().unwrap().windows[0].reharvest);
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 1, 0, 0), "{r:?}");
    {
        let r = repo.lock().unwrap();
        assert!(
            r.froms.contains(&Some("2022-01-01T00:00:00Z".into())),
            "{:?}",
            r.froms
        );
    }
    let after = oai_windows(&p, None).await.unwrap();
    assert!(
        after[0]
            .checkpoint
            .unwrap()
            .cmp_instant(&cp_before.unwrap())
            .is_ge()
    );
    assert!(after[0].pass.as_ref().unwrap().complete);

    // Record 2 changed the same way: refetched by its identifier, it is updated now.
    repo.lock()
        .unwrap()
        .records
        .get_mut("oai:w:2")
        .unwrap()
        .title = "W 2, corrected".into();
    let r = oai_refetch(
        &p,
        "repo",
        &["oai:w:2".to_owned(), "oai:w:9".to_owned()],
        &opts,
    )
    .await
    .unwrap();
    let u = only(&r);
    assert_eq!(u.updated, 1, "{r:?}");
    assert!(
        u.warnings
            .iter()
            .any(|w| w.contains("oai:w:9") && w.contains("idDoesNotExist")),
        "{r:?}"
    );
    assert!(
        blobs(dir.path())
            .iter()
            .any(|b| b.contains("W 2, corrected"))
    );
}

/// Issue 44 point 3: a provider answering `503` with `Retry-After` beyond `[fetch]
/// retry_after_max` is asked once, not retried; the upstream is parked until then (this
/// run and the next ask it nothing) while the run goes on with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_retry_after_parks_the_upstream_and_the_run_goes_on() {
    let down = Arc::new(Mutex::new(Repo {
        maintenance: true,
        ..Repo::default()
    }));
    let up = Arc::new(Mutex::new(Repo::default()));
    up.lock()
        .unwrap()
        .put("oai:u:1", "2024-12-01T00:00:00Z", "U 1");
    let (down_base, up_base) = (serve(down.clone()).await, serve(up.clone()).await);
    let dir = tempfile::tempdir().unwrap();
    let other = format!(
        "window = \"none\"\n\n[[upstream]]\nname = \"other\"\nurl = \"{up_base}oai\"\nkind = \"oai-pmh\"\nallow_private = true\nwindow = \"none\""
    );
    let p = pipeline(&down_base, dir.path(), &other);
    let opts = RunOptions::default();
    let before = rsagg_model::W3cDateTime::now();
    let r = run_once(&p, &opts).await.unwrap();
    let parked = &r.upstreams[0];
    assert_eq!(parked.verdict, Verdict::Failed, "{r:?}");
    let until = parked.parked_until.expect("parked");
    let ahead = until.instant().0 - before.instant().0;
    assert!((3590..=3610).contains(&ahead), "{ahead}");
    assert_eq!(
        down.lock().unwrap().verbs.values().sum::<usize>(),
        1,
        "asked once, never retried"
    );
    assert_eq!(r.upstreams[1].verdict, Verdict::Ok, "{r:?}");
    assert_eq!(r.upstreams[1].created, 1, "{r:?}");

    // The next run (before the hour is out) asks the parked provider nothing.
    let r = run_once(&p, &opts).await.unwrap();
    let parked = &r.upstreams[0];
    assert_eq!(parked.parked_until, Some(until), "{r:?}");
    assert!(
        parked
            .error
            .as_deref()
            .is_some_and(|e| e.contains("parked until")),
        "{r:?}"
    );
    assert_eq!(down.lock().unwrap().verbs.values().sum::<usize>(), 1);
}

/// Issue 44 point 1: a run stopped mid-list keeps its window's token; when the provider no
/// longer knows it (restarted since: `badResumptionToken`), only that window is listed
/// again from its `from`, not the whole list, and nothing is stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_token_the_provider_forgot_restarts_only_its_window() {
    let repo = Arc::new(Mutex::new(Repo {
        batch: 2,
        refuse_token: Some(2),
        ..Repo::default()
    }));
    {
        let mut r = repo.lock().unwrap();
        // Three years of four records: yearly windows of two pages each.
        for (y, year) in [2021, 2022, 2023].iter().enumerate() {
            for i in 0..4 {
                r.put(
                    &format!("oai:k:{y}{i}"),
                    &format!("{year}-06-0{}T00:00:00Z", i + 1),
                    "K",
                );
            }
        }
    }
    let base = serve(repo.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path(), "");
    let opts = RunOptions::default();
    // The second token request (the 2022 window's second page) is refused: the run stops
    // there with what it stored committed.
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(only(&r).verdict, Verdict::Failed, "{r:?}");
    let first = only(&r).created;
    let stopped = oai_windows(&p, None).await.unwrap()[0]
        .pass
        .clone()
        .unwrap();
    let resumable: Vec<_> = stopped
        .windows
        .iter()
        .filter(|w| w.token.is_some())
        .collect();
    assert_eq!(resumable.len(), 1, "{stopped:?}");
    let window = (resumable[0].from, resumable[0].until);

    // The provider restarts: its old tokens are unknown now.
    {
        let mut r = repo.lock().unwrap();
        r.generation = 1;
        r.refuse_token = None;
        r.froms.clear();
    }
    let r = run_once(&p, &opts).await.unwrap();
    let u = only(&r);
    assert_eq!(u.verdict, Verdict::Ok, "{r:?}");
    assert_eq!(first + u.created, 12, "every record created once: {r:?}");
    let froms = repo.lock().unwrap().froms.clone();
    let from = window.0.map(|f| f.to_utc().to_string());
    assert_eq!(
        froms.iter().filter(|f| **f == from).count(),
        1,
        "the window is listed again from its from: {froms:?}"
    );
    assert!(
        !froms.contains(&None),
        "the windows done are not asked again: {froms:?}"
    );
    let pass = oai_windows(&p, None).await.unwrap()[0]
        .pass
        .clone()
        .unwrap();
    assert!(pass.complete && pass.resumed, "{pass:?}");
    let again = pass
        .windows
        .iter()
        .find(|w| (w.from, w.until) == window)
        .unwrap();
    assert_eq!(again.attempts, 2, "{again:?}");
}

/// Issue 44 point 6: a list that ends with fewer records than its `completeListSize` is
/// reported (a warning and `incomplete_lists`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_shorter_than_its_complete_list_size_is_reported() {
    let (_, r) = one_bounded_run(
        Repo {
            overstate: 3,
            ..Repo::default()
        },
        "c",
        5,
    )
    .await;
    let u = only(&r);
    assert_eq!(u.created, 5, "{r:?}");
    assert_eq!(u.incomplete_lists, 1, "{r:?}");
    assert!(
        u.warnings
            .iter()
            .any(|w| w.contains("completeListSize 8 but its list gave 5 records")),
        "{r:?}"
    );
    assert_eq!(
        u.listing.map(|l| (l.done, l.total)),
        Some((5, Some(8))),
        "{r:?}"
    );
}
