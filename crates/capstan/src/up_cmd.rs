//! `capstan up`: a whole single-node cluster in one process.

#[derive(clap::Args, Debug)]
pub struct UpArgs {}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("capstan up is not built yet")
}
