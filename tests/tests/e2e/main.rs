//! The end-to-end tests of rsagg against the real peers, one module per concern, in one
//! test binary (one link, one shared SeaweedFS), so a cold build links it once instead of
//! eighteen times. Run one concern with `cargo test -p rsagg-e2e --test e2e <module>::`.

mod common;

mod chain;
mod crash;
mod deadlines;
mod deploy;
mod fencing;
mod fleet;
mod hardening;
mod harvest;
mod interval;
mod layering;
mod logging;
mod notify;
mod oai;
mod ops;
mod peers;
mod publisher;
mod push;
mod republish;
mod status;
mod store;
