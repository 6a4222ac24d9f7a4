//! Fencing is final (issue 26, point 2): two `rsagg run --once` started together on one
//! SeaweedFS prefix end with one exit 0 and one exit 3, and what the store holds afterwards
//! (the history, the stats object, the published Resource List) comes from the winner only.
//!
//! Before, the loser of a pair often exited 1 ("reading the quarantine: … fenced out", or
//! slatedb's "transactional object (e.g. manifest) version already exists" when both raced
//! to create the state), and after being fenced it still wrote the Source Description, the
//! Capability List, `stats/last-run.json` and `stats/history.json` (whose history then held
//! the loser's failed passes). And about one pair in 20 to 40 ended with both exiting 3:
//! the earlier process's compactor, started last, fenced the later one's compactor, which
//! closed the later writer (the compactor ran inside the writer); now the compactor runs
//! beside it and is replaced while the writer holds the state (`rsagg-store`'s
//! `compaction.rs`).

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use serde_json::Value;

/// Pairs run by default; `RSAGG_FENCING_PAIRS` for a soak.
const PAIRS: usize = 20;

fn get_json(objects: &std::sync::Arc<dyn object_store::ObjectStore>, path: &str) -> Result<Value> {
    let (objects, path) = (objects.clone(), object_store::path::Path::from(path));
    block_on(async move {
        let b = object_store::ObjectStoreExt::get(objects.as_ref(), &path)
            .await?
            .bytes()
            .await?;
        Ok(serde_json::from_slice(&b)?)
    })
}

fn get_text(objects: &std::sync::Arc<dyn object_store::ObjectStore>, path: &str) -> Result<String> {
    let (objects, path) = (objects.clone(), object_store::path::Path::from(path));
    block_on(async move {
        let b = object_store::ObjectStoreExt::get(objects.as_ref(), &path)
            .await?
            .bytes()
            .await?;
        Ok(String::from_utf8(b.to_vec())?)
    })
}

/// The `at` of a document's `<rs:md>` (rsagg writes it as `at="…"`).
fn md_at(doc: &str) -> Option<String> {
    let md = &doc[doc.find("<rs:md ")?..];
    let at = &md[md.find(" at=\"")? + 5..];
    Some(at[..at.find('"')?].to_owned())
}

#[test]
fn two_writers_started_together_end_with_one_winner_and_its_output_only() -> Result<()> {
    let pairs = std::env::var("RSAGG_FENCING_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PAIRS);
    let site = Site::new()?;
    let res: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("/f/{i}.txt"), format!("fenced {i}").into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = res.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &refs)?;
    // Each resource answers after 500 ms and two go at a time: a harvest lasts ~1.5 s,
    // longer than the two processes take to start and open the state, so the two nearly
    // always overlap. They may not: when both create the state at once, the one that loses
    // the creation retries its open (about a second later), and on a loaded machine the
    // other may be done by then. Then both exit 0 and that is right (one writer at a time);
    // such a pair is recognised by the later run finding everything stored, and at most a
    // quarter of the pairs may be such.
    for (p, _) in &res {
        site.fx.set_delay(p, Duration::from_millis(500));
    }
    let mut winners = [0usize; 2];
    let mut one_after_the_other = 0usize;
    for pair in 0..pairs {
        let case = Case::published_at(
            Store::s3(&format!("fencing-{pair}"))?,
            &[upstream(UP, &site.url("/.well-known/resourcesync"), "")],
            "http://agg.example.org/fencing/",
            "",
        )?;
        let toml = std::fs::read_to_string(&case.toml)?
            .replace("[fetch]\n", "[fetch]\nconcurrency = 2\nper_host = 2\n");
        std::fs::write(&case.toml, toml)?;
        let env: Vec<(String, String)> = Vec::new();
        let a = case.spawn_run(&env)?;
        let b = case.spawn_run(&env)?;
        let (a, b) = (
            a.finish(Duration::from_secs(60))?,
            b.finish(Duration::from_secs(60))?,
        );
        let mut codes = [a.code, b.code];
        codes.sort();
        if codes == [0, 0] {
            // Not a race: the later run must have found the earlier one's harvest whole.
            let mut created = [a.n("created"), b.n("created")];
            created.sort();
            let unchanged = a.n("unchanged") + b.n("unchanged");
            ensure!(
                created == [0, 6] && unchanged == 6,
                "pair {pair}: both exited 0 and both harvested (two writers at once)\nA: {a:#?}\nB: {b:#?}"
            );
            one_after_the_other += 1;
            continue;
        }
        ensure!(
            codes == [0, 3],
            "pair {pair}: exit codes {:?}, expected one 0 and one 3\nA: {a:#?}\nB: {b:#?}",
            [a.code, b.code]
        );
        let (winner, loser) = if a.code == 0 { (&a, &b) } else { (&b, &a) };
        winners[usize::from(a.code != 0)] += 1;
        winner.assert_ok();
        assert_eq!(
            winner.n("created") + winner.n("unchanged"),
            6,
            "{winner:#?}"
        );
        // The loser says why, once, and prints no report.
        assert!(loser.report.is_none(), "pair {pair}: {loser:#?}");
        assert!(
            loser.stderr.contains("rsagg run:") && loser.stderr.contains("fenced out"),
            "pair {pair}: {loser:#?}"
        );

        let objects = case.store.objects()?;
        let report = winner.report.as_ref().context("winner's report")?;
        // The history holds one run: the winner's (a fenced writer records nothing).
        let history = get_json(&objects, "stats/history.json")?;
        let runs = history["runs"].as_array().context("history runs")?;
        assert_eq!(runs.len(), 1, "pair {pair}: {history:#}");
        assert_eq!(history["totals"]["runs"], 1, "pair {pair}: {history:#}");
        assert_eq!(
            runs[0]["seconds"], report["seconds"],
            "pair {pair}: {history:#}"
        );
        assert_eq!(
            runs[0]["upstreams"][0]["ok"], true,
            "pair {pair}: {history:#}"
        );
        // The stats object is the winner's report.
        let stats = get_json(&objects, "stats/last-run.json")?;
        assert_eq!(stats["report"]["seconds"], report["seconds"], "pair {pair}");
        assert_eq!(
            stats["report"]["upstreams"], report["upstreams"],
            "pair {pair}"
        );
        // The Resource List was published by the winner's publish, within its run, and
        // names every resource.
        let list = get_text(&objects, "resourcelist.xml")?;
        let at = md_at(&list).context("resource list at")?;
        let (started, finished) = (
            runs[0]["started"].as_str().context("started")?,
            runs[0]["finished"].as_str().context("finished")?,
        );
        let instant = |s: &str| -> Result<rsagg_model::W3cDateTime> {
            Ok(rsagg_model::W3cDateTime::parse(s)?.value)
        };
        assert!(
            instant(&at)?.cmp_instant(&instant(started)?).is_ge()
                && instant(&at)?.cmp_instant(&instant(finished)?).is_le(),
            "pair {pair}: resource list at {at}, winner ran {started} .. {finished}"
        );
        for (p, _) in &res {
            assert!(list.contains(&site.url(p)), "pair {pair}: {p} not listed");
        }
        assert!(
            get_text(&objects, "capabilitylist.xml")?.contains("resourcelist.xml"),
            "pair {pair}"
        );
    }
    eprintln!(
        "{pairs} pairs: first started won {}, second won {}, {one_after_the_other} ran one after the other",
        winners[0], winners[1]
    );
    ensure!(
        one_after_the_other * 4 <= pairs,
        "{one_after_the_other} of {pairs} pairs did not overlap: the test no longer races two writers"
    );
    Ok(())
}
