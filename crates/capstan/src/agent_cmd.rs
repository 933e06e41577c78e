//! `capstan agent`.

#[derive(clap::Args, Debug)]
pub struct AgentArgs {}

pub async fn run(_args: AgentArgs) -> anyhow::Result<()> {
    anyhow::bail!("capstan agent: not built yet")
}
