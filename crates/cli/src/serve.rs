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
use rsagg_server::{Collection, DEFAULT_LISTEN, Server};

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
    let server = match Server::bind(&args.listen, collections).await {
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
