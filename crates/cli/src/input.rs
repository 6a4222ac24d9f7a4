//! Opening a document from a path, stdin or an http(s) URL as buffered async input, inflating
//! gzip (by magic number, as `.xml.gz` Sitemaps and `Content-Encoding: gzip` both occur).

use std::pin::Pin;

use anyhow::{Context, bail};
use async_compression::tokio::bufread::GzipDecoder;
use futures::TryStreamExt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};

/// Buffered async input of any origin.
pub type Input = Pin<Box<dyn AsyncBufRead + Send>>;

/// What to read a document from.
pub enum Source {
    /// A plain local file: read with blocking calls by the parsing thread (the fast path).
    File(std::fs::File),
    /// Anything else, gzip already inflated.
    Async(Input),
}

/// Opens `target`: `-` is stdin, `http://`/`https://` is fetched, anything else is a path.
pub async fn open_source(target: &str) -> anyhow::Result<Source> {
    let remote = target == "-" || target.starts_with("http://") || target.starts_with("https://");
    if !remote {
        use std::io::{Read, Seek};
        let mut f = std::fs::File::open(target).with_context(|| format!("opening {target}"))?;
        let mut magic = [0u8; 2];
        let n = f
            .read(&mut magic)
            .with_context(|| format!("reading {target}"))?;
        f.rewind().with_context(|| format!("reading {target}"))?;
        if n < 2 || magic != [0x1f, 0x8b] {
            return Ok(Source::File(f));
        }
    }
    Ok(Source::Async(open(target).await?))
}

/// Opens `target` as async input (see [`open_source`]).
pub async fn open(target: &str) -> anyhow::Result<Input> {
    let raw: Input = if target == "-" {
        Box::pin(BufReader::with_capacity(256 * 1024, tokio::io::stdin()))
    } else if target.starts_with("http://") || target.starts_with("https://") {
        let client = reqwest::Client::builder()
            .user_agent(concat!("rsagg/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the HTTP client")?;
        let resp = client
            .get(target)
            .send()
            .await
            .with_context(|| format!("GET {target}"))?;
        let status = resp.status();
        if !status.is_success() {
            bail!("GET {target}: HTTP {status}");
        }
        let stream = resp.bytes_stream().map_err(std::io::Error::other);
        Box::pin(BufReader::with_capacity(
            256 * 1024,
            tokio_util::io::StreamReader::new(stream),
        ))
    } else {
        let f = tokio::fs::File::open(target)
            .await
            .with_context(|| format!("opening {target}"))?;
        Box::pin(BufReader::with_capacity(256 * 1024, f))
    };
    gunzip_if_needed(raw)
        .await
        .with_context(|| format!("reading {target}"))
}

async fn gunzip_if_needed(mut raw: Input) -> std::io::Result<Input> {
    let head = raw.fill_buf().await?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut dec = GzipDecoder::new(raw);
        dec.multiple_members(true);
        Ok(Box::pin(BufReader::with_capacity(256 * 1024, dec)))
    } else {
        Ok(raw)
    }
}
