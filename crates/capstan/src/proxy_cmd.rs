//! `capstan proxy`.

#[derive(clap::Args, Debug)]
pub struct ProxyArgs {}

pub async fn run(_args: ProxyArgs) -> anyhow::Result<()> {
    anyhow::bail!("capstan proxy: not built yet")
}
