//! `capstan store ...`: direct access to the embedded store (like etcdctl), and the hidden
//! `capstan debug store-writer` used by the crash test.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use bytes::Bytes;
use capstan_store::embedded::{EmbeddedStore, Options};
use capstan_store::{RangeRequest, Store};

#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// The store's directory (the server keeps it in DATA_DIR/store).
    #[arg(long)]
    store_dir: PathBuf,
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(clap::Subcommand, Debug)]
enum StoreCommand {
    /// Print a key's value and revisions.
    Get { key: String },
    /// List keys under a prefix with their revisions.
    List {
        prefix: String,
        #[arg(long, default_value_t = 0)]
        limit: usize,
    },
    /// Write a key (creating or overwriting it).
    Put { key: String, value: String },
    /// Delete a key.
    Delete { key: String },
    /// Print the current and compacted revisions and the data size.
    Status,
}

pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    let store = EmbeddedStore::open(&args.store_dir)
        .with_context(|| format!("opening {}", args.store_dir.display()))?;
    let mut out = std::io::stdout().lock();
    match args.command {
        StoreCommand::Get { key } => match store.get(key.as_bytes(), 0).await?.0 {
            Some(kv) => writeln!(
                out,
                "{}\tcreate={} mod={} version={}\n{}",
                key,
                kv.create_revision,
                kv.mod_revision,
                kv.version,
                String::from_utf8_lossy(&kv.value)
            )?,
            None => anyhow::bail!("key {key} not found"),
        },
        StoreCommand::List { prefix, limit } => {
            let resp = store
                .range(RangeRequest::prefix(prefix).limit(limit))
                .await?;
            for kv in resp.kvs {
                writeln!(
                    out,
                    "{}\tmod={} {} bytes",
                    String::from_utf8_lossy(&kv.key),
                    kv.mod_revision,
                    kv.value.len()
                )?;
            }
            writeln!(out, "{} keys at revision {}", resp.count, resp.revision)?;
        }
        StoreCommand::Put { key, value } => {
            let value = Bytes::from(value);
            let rev = match store.get(key.as_bytes(), 0).await?.0 {
                Some(kv) => {
                    store
                        .update(key.as_bytes(), value, kv.mod_revision, 0)
                        .await?
                }
                None => store.create(key.as_bytes(), value, 0).await?,
            };
            writeln!(out, "revision {rev}")?;
        }
        StoreCommand::Delete { key } => {
            let resp = store.delete(key.as_bytes(), None).await?;
            writeln!(out, "revision {}", resp.revision)?;
        }
        StoreCommand::Status => {
            let (live, history) = store.data_bytes();
            writeln!(
                out,
                "revision {}\ncompacted {}\nlive bytes {live}\nhistory bytes {history}",
                store.current_revision().await?,
                store.compacted_revision().await?
            )?;
        }
    }
    Ok(())
}

#[derive(clap::Subcommand, Debug)]
pub enum DebugCommand {
    /// Write to an embedded store as fast as possible from many tasks, printing one line
    /// `<key> <revision>` per acknowledged write (the crash test kills this process).
    StoreWriter {
        #[arg(long)]
        store_dir: PathBuf,
        /// Concurrent writers.
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Start a new log segment after this many bytes (small values exercise snapshots).
        #[arg(long, default_value_t = 256 << 10)]
        segment_bytes: u64,
        /// Each writer overwrites its own key this many times before moving to a new key.
        #[arg(long, default_value_t = 4)]
        overwrites: u64,
    },
}

pub async fn debug(cmd: DebugCommand) -> anyhow::Result<()> {
    match cmd {
        DebugCommand::StoreWriter {
            store_dir,
            writers,
            segment_bytes,
            overwrites,
        } => store_writer(store_dir, writers, segment_bytes, overwrites).await,
    }
}

async fn store_writer(
    dir: PathBuf,
    writers: usize,
    segment_bytes: u64,
    overwrites: u64,
) -> anyhow::Result<()> {
    let mut opts = Options::new(&dir);
    opts.segment_bytes = segment_bytes;
    let store = std::sync::Arc::new(
        EmbeddedStore::open_with(opts).with_context(|| format!("opening {}", dir.display()))?,
    );
    let start = store.current_revision().await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for w in 0..writers {
        let store = store.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let value = Bytes::from(vec![b'v'; 512]);
            for n in 0.. {
                let key = format!("/crash/{start}/w{w}/{n}");
                let mut rev = match store.create(key.as_bytes(), value.clone(), 0).await {
                    Ok(rev) => rev,
                    Err(e) => {
                        let _ = tx.send(format!("error {e}"));
                        return;
                    }
                };
                let _ = tx.send(format!("{key} {rev}"));
                for _ in 1..overwrites {
                    match store.update(key.as_bytes(), value.clone(), rev, 0).await {
                        Ok(r) => rev = r,
                        Err(e) => {
                            let _ = tx.send(format!("error {e}"));
                            return;
                        }
                    }
                    let _ = tx.send(format!("{key} {rev}"));
                }
            }
        });
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    while let Some(line) = rx.recv().await {
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    Ok(())
}
