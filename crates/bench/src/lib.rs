//! `capstan bench`: load generators and measurements against capstan or any Kubernetes.
//!
//! Each benchmark is a subcommand of `capstan bench` and also a library function, so that tests
//! can run it in-process and check its measurements without spawning the binary.

pub mod api;
pub mod auth;
pub mod controllers;
pub mod cri;
pub mod density;
pub mod dns;
mod duration;
pub mod hollow;
mod latency;
pub mod nodes;
pub mod plot;
pub mod podstartup;
pub mod proxy;
pub mod proxy_throughput;
pub mod report;
pub mod scheduler;
pub mod store;
pub mod summary;

pub use report::Measurement;

/// Arguments of `capstan bench`: which benchmark to run.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The benchmarks `capstan bench` knows.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// The store alone: writes, point reads, ranges, watch latency and memory, embedded vs etcd.
    Store(store::StoreArgs),
    /// Any Kubernetes API server through its API: creates, verbs, big lists, many watches,
    /// memory.
    Api(api::ApiArgs),
    /// What authentication and authorization add to each request (in process, with many RBAC
    /// bindings).
    Auth(auth::AuthArgs),
    /// How fast pods get bound: through the API of a running cluster, or the scheduling cycle
    /// alone in process.
    Scheduler(scheduler::SchedulerArgs),
    /// How fast the controllers create what a scaled Deployment asks for, and their memory.
    Controllers(controllers::ControllersArgs),
    /// Kubernetes' density test: pods for every node through Deployments, churn, and the run
    /// judged by Kubernetes' SLOs (API call latency, pod start-up) with the control plane's
    /// CPU and memory.
    Density(density::DensityArgs),
    /// Hollow nodes: Nodes that register, heartbeat and "run" their pods without containers,
    /// to exercise a control plane with many nodes.
    Nodes(nodes::NodesArgs),
    /// Hollow kubelets: many real kubelets in one process over a runtime that runs nothing,
    /// and the process's memory.
    Hollow(hollow::HollowArgs),
    /// Kubernetes' pod start-up latency: many pods created at once on one real node, from
    /// create to Running as a watch sees it, and the kubelet's memory.
    Podstartup(podstartup::PodStartupArgs),
    /// A CRI runtime's own pod start-up, with no kubelet or API server: many pods started at
    /// once straight through CRI — the floor under `podstartup`.
    Cri(cri::CriArgs),
    /// A DNS server's queries per second and latency over UDP (capstan dns, CoreDNS, ...).
    Dns(dns::DnsArgs),
    /// How long a proxy mode takes to program many services (iptables, nftables), in a
    /// private network namespace.
    Proxy(proxy::ProxyArgs),
    /// The userspace proxy's throughput as a share of a direct connection (in a private
    /// network namespace).
    ProxyThroughput(proxy_throughput::ThroughputArgs),
    /// Gather the JSON lines of benchmark runs (`--json`), of capstan and of a reference side
    /// by side, into report.json, a Markdown report and PNG charts.
    Report(summary::ReportArgs),
}

/// Run a benchmark subcommand, printing its measurements to stdout.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Store(args) => store::run(args).await,
        BenchCommand::Api(args) => api::run(args).await,
        BenchCommand::Auth(args) => auth::run(args).await,
        BenchCommand::Scheduler(args) => scheduler::run(args).await,
        BenchCommand::Nodes(args) => nodes::run(args).await,
        BenchCommand::Hollow(args) => hollow::run(args).await,
        BenchCommand::Controllers(args) => controllers::run(args).await,
        BenchCommand::Density(args) => density::run(args).await,
        BenchCommand::Podstartup(args) => podstartup::run(args).await,
        BenchCommand::Cri(args) => cri::run(args).await,
        BenchCommand::Dns(args) => dns::run(args).await,
        BenchCommand::Proxy(args) => proxy::run(args).await,
        BenchCommand::ProxyThroughput(args) => proxy_throughput::run(args).await,
        BenchCommand::Report(args) => summary::run(args).await,
    }
}
