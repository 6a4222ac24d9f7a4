//! `rsagg hub` (`docs/contract.md`): the WebSub hub, all requests by POST at `/`.
//!
//! Subscriptions and undelivered messages are kept in `--store` (default: `file://` of the
//! directory `rsagg-hub/` under the current directory), so a restart loses nothing. Exit
//! status: 0 after a graceful shutdown (SIGINT or SIGTERM; the queue stays in the store),
//! 2 on a usage error (bad flag values, store URL), 1 when the hub cannot listen, open its
//! store or serve.
//!
//! The hub's outgoing requests go through the address guard of `rsagg-fetch` unless
//! `--allow-private-callbacks` (see `rsagg_websub::HubConfig::allow_private_callbacks`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rsagg_server::hub::HubServer;
use rsagg_websub::{Hub, HubConfig, Url};

/// Default `--listen`: loopback, a port of its own beside `serve`'s 8080.
const DEFAULT_HUB_LISTEN: &str = "127.0.0.1:8090";

/// `rsagg hub`.
#[derive(Debug, clap::Args)]
pub struct HubArgs {
    /// Address to listen on (`HOST:PORT`; port 0 picks a free port, reported on stdout).
    #[arg(long, default_value = DEFAULT_HUB_LISTEN)]
    listen: String,
    /// Object store for subscriptions and queued messages (`file:///dir`, `s3://bucket/prefix`,
    /// `memory://` for tests). Default: `file://` of `./rsagg-hub/`.
    #[arg(long)]
    store: Option<String>,
    /// The hub's public URL (the `rel="hub"` of deliveries). When given, a CN 1.0.1 publish
    /// must name exactly this URL as its `rel="hub"`. Default: `http://{bound address}/`.
    #[arg(long)]
    public_url: Option<String>,
    /// Shortest lease granted, in seconds (WebSub recommends 300).
    #[arg(long, default_value_t = 300, value_name = "S")]
    lease_min: u64,
    /// Longest lease granted, in seconds (WebSub recommends 2678400, 31 days).
    #[arg(long, default_value_t = 2_678_400, value_name = "S")]
    lease_max: u64,
    /// Relay only topics starting with this URL (repeatable); none given: all topics.
    #[arg(long = "allow-publisher", value_name = "URL")]
    allow_publisher: Vec<String>,
    /// Let the hub verify, deliver to and fetch from private, loopback, link-local and
    /// unspecified addresses (callbacks, and topics of `hub.mode=publish`). Off by default:
    /// anyone may give the hub a callback URL, so the hub refuses those (403 for IP literals
    /// and `localhost`; names resolving there are refused when called). For tests and hubs
    /// whose subscribers are on a private network.
    #[arg(long)]
    allow_private_callbacks: bool,
    #[command(flatten)]
    limits: crate::lifecycle::LimitArgs,
}

/// Runs the hub until SIGINT or SIGTERM. Prints `listening http://HOST:PORT` on stdout once
/// connections are accepted.
pub async fn hub(args: HubArgs) -> ExitCode {
    let usage = |m: String| {
        eprintln!("rsagg hub: {m}");
        ExitCode::from(2)
    };
    let failure = |m: String| {
        eprintln!("rsagg hub: {m}");
        ExitCode::from(1)
    };
    let store_url = match args.store {
        Some(s) => s,
        None => match std::env::current_dir() {
            Ok(dir) => format!("file://{}/", dir.join("rsagg-hub").display()),
            Err(e) => return usage(format!("no current directory for the default store: {e}")),
        },
    };
    let public_url = match args.public_url.as_deref().map(Url::parse).transpose() {
        Ok(u) => u,
        Err(e) => return usage(format!("--public-url: {e}")),
    };
    for p in &args.allow_publisher {
        if Url::parse(p).is_err() {
            return usage(format!("--allow-publisher `{p}` is not a URL"));
        }
    }
    let objects = match rsagg_websub::open_store(&store_url) {
        Ok(s) => s,
        Err(e) => return usage(e.to_string()),
    };
    let server = match HubServer::bind(&args.listen).await {
        Ok(s) => s,
        Err(e) => return failure(e.to_string()),
    };
    let server = match &args.limits.probe_listen {
        Some(probes) => match server.bind_probes(probes).await {
            Ok(s) => s,
            Err(e) => return failure(format!("--probe-listen: {e}")),
        },
        None => server,
    };
    let probes = match server.probe_addr() {
        Ok(a) => a,
        Err(e) => return failure(e.to_string()),
    };
    let addr = match server.local_addr() {
        Ok(a) => a,
        Err(e) => return failure(e.to_string()),
    };
    let check_hub_link = public_url.is_some();
    let public_url = match public_url {
        Some(u) => u,
        None => match Url::parse(&format!("http://{addr}/")) {
            Ok(u) => u,
            Err(e) => return failure(format!("public URL of {addr}: {e}")),
        },
    };
    let mut config = HubConfig::new(public_url);
    config.check_hub_link = check_hub_link;
    config.lease_min = Duration::from_secs(args.lease_min);
    config.lease_max = Duration::from_secs(args.lease_max);
    config.allow_publishers = args.allow_publisher;
    config.allow_private_callbacks = args.allow_private_callbacks;
    if let Err(e) = config.validate() {
        return usage(e.to_string());
    }
    // The budget must hold at least one publication of the largest size accepted.
    let server = match args.limits.limits(config.max_publish_bytes) {
        Ok(l) => server.with_limits(l),
        Err(e) => return usage(e),
    };
    let hub = match Hub::open(objects, config).await {
        Ok(h) => Arc::new(h),
        Err(e) => return failure(format!("store `{store_url}`: {e}")),
    };
    if crate::lifecycle::announce_probes(probes).is_err()
        || crate::lifecycle::announce(addr).is_err()
    {
        return ExitCode::from(1);
    }
    match server.run(hub, crate::lifecycle::shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failure(e.to_string()),
    }
}
