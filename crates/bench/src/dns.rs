//! `capstan bench dns`.

#[derive(clap::Args, Debug)]
pub struct DnsArgs {}

pub async fn run(_args: DnsArgs) -> anyhow::Result<()> {
    anyhow::bail!("capstan bench dns: not built yet")
}
