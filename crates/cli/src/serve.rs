//! `rsagg serve` (`docs/contract.md`): read-only HTTP serving of what one or more
//! pipelines published, straight from their stores.
//!
//! It never opens a pipeline's state database (a second opener would fence the running
//! job), only the published objects. Exit status: 0 after a graceful shutdown (SIGINT or
//! SIGTERM), 2 on a usage or config error (nothing is served), 1 when the server cannot
//! listen or fails.

use std::path::PathBuf;
use std::process::ExitCode;

use rsagg_pipeline::Pipeline;
use rsagg_server::{Collection, DEFAULT_LISTEN, Options, Server, StatsRefresh};

/// `rsagg serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Pipeline files, or directories of them (their `*.toml` files); each one's collection
    /// is served under the path of its base_url.
    #[arg(required = true)]
    pipelines: Vec<PathBuf>,
    /// Address to listen on (`HOST:PORT`; port 0 picks a free port, reported on stdout).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: String,
    #[command(flatten)]
    limits: crate::lifecycle::LimitArgs,
    /// How long what a collection's store says about its runs (stats, history, garbage
    /// collection, Resource List size) is reused by /metrics, /status and /readyz before the
    /// store is asked again: `auto` (60 ms per collection served: 4 min at 4,000, ~22 store
    /// requests a second at most in all, whatever the scrape rate) or a duration (`0s`: ask
    /// at every request).
    #[arg(long, default_value = "auto", value_name = "auto|DURATION", value_parser = stats_refresh)]
    stats_refresh: StatsRefresh,
    /// Write the /metrics series per upstream (label `upstream`); `false` leaves them out
    /// and keeps the collections' own (`rsagg_collection_upstreams_failed`,
    /// `rsagg_collection_lag_seconds`), for fleets with many upstreams.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    metrics_upstreams: bool,
}

/// `auto` or a `humantime` duration.
fn stats_refresh(s: &str) -> Result<StatsRefresh, String> {
    if s == "auto" {
        return Ok(StatsRefresh::Auto);
    }
    humantime::parse_duration(s)
        .map(StatsRefresh::Every)
        .map_err(|e| format!("`auto` or a duration such as `60s`: {e}"))
}

/// Serves the pipelines' published documents and copies until SIGINT or SIGTERM. Prints
/// `listening http://HOST:PORT` on stdout once connections are accepted.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let files = match rsagg_pipeline::fleet::pipeline_files(&args.pipelines) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rsagg serve: {e}");
            return ExitCode::from(2);
        }
    };
    let mut collections = Vec::with_capacity(files.len());
    for path in &files {
        let collection = Pipeline::load(path)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                Collection::from_pipeline(&p).map_err(|e| format!("{}: {e}", path.display()))
            });
        match collection {
            Ok(c) => collections.push(c),
            Err(e) => {
                eprintln!("rsagg serve: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Err(e) = rsagg_server::check_collections(&collections) {
        eprintln!("rsagg serve: {e}");
        return ExitCode::from(2);
    }
    // `serve` reads no request body (the WebSub callbacks are `run --follow --listen`'s).
    let limits = match args.limits.limits(0) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rsagg serve: {e}");
            return ExitCode::from(2);
        }
    };
    let mut options = Options::default();
    options.stats_refresh = args.stats_refresh;
    options.metrics_upstreams = args.metrics_upstreams;
    let server = match Server::bind_with_options(&args.listen, collections, None, options).await {
        Ok(s) => s.with_limits(limits),
        Err(e) => {
            eprintln!("rsagg serve: {e}");
            return ExitCode::from(1);
        }
    };
    let server = match &args.limits.probe_listen {
        Some(probes) => match server.bind_probes(probes).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rsagg serve: --probe-listen: {e}");
                return ExitCode::from(1);
            }
        },
        None => server,
    };
    let (addr, probes) = match server
        .local_addr()
        .and_then(|a| Ok((a, server.probe_addr()?)))
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rsagg serve: {e}");
            return ExitCode::from(1);
        }
    };
    if crate::lifecycle::announce_probes(probes).is_err()
        || crate::lifecycle::announce(addr).is_err()
    {
        return ExitCode::from(1);
    }
    match server.run(crate::lifecycle::shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsagg serve: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        Cmd::try_parse_from(["serve", "p.toml"].iter().chain(args)).map(|c| c.serve)
    }

    #[test]
    fn the_refresh_bound_and_the_upstream_series_are_options() {
        let d = parse(&[]).unwrap();
        assert_eq!(
            (d.stats_refresh, d.metrics_upstreams),
            (StatsRefresh::Auto, true)
        );
        let a = parse(&["--stats-refresh", "90s", "--metrics-upstreams=false"]).unwrap();
        assert_eq!(
            (a.stats_refresh, a.metrics_upstreams),
            (
                StatsRefresh::Every(std::time::Duration::from_secs(90)),
                false
            )
        );
        let zero = parse(&["--stats-refresh=0s", "--metrics-upstreams", "true"]).unwrap();
        assert_eq!(
            zero.stats_refresh,
            StatsRefresh::Every(std::time::Duration::ZERO)
        );
        for bad in [
            &["--stats-refresh", "soon"][..],
            &["--metrics-upstreams=no"][..],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
