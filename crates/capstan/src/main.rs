//! `capstan`: the one binary. This file only parses the command line and wires components.

#[cfg(not(feature = "system-allocator"))]
use std::ffi::c_int;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod agent_cmd;
mod controller_manager_cmd;
mod dashboard_cmd;
mod datadir;
mod dns_cmd;
mod ingress_cmd;
mod kubectl_cmd;
mod kubelet_cmd;
mod node;
mod proxy_cmd;
mod scheduler_cmd;
mod server_cmd;
mod store_cmd;
mod token_cmd;
mod up_cmd;

/// The server allocates and frees many small JSON values per request; mimalloc does that
/// faster than the system allocator (figures in docs/apiserver.md). The `system-allocator`
/// feature leaves it out, so that heap profilers that wrap malloc (heaptrack) see every
/// allocation.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options this binary sets (indices of `mi_option_t` in the mimalloc.h that
/// libmimalloc-sys vendors; the `allocator` test in tests/operate.rs checks their effect).
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_ARENA_EAGER_COMMIT: c_int = 4;
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_ALLOW_THP: c_int = 43;

#[cfg(not(feature = "system-allocator"))]
unsafe extern "C" {
    /// mimalloc's own; the `mimalloc` crate links it (its `extended` feature would only
    /// declare it again).
    fn mi_option_set(option: c_int, value: std::ffi::c_long);
    fn getenv(name: *const std::ffi::c_char) -> *mut std::ffi::c_char;
}

/// Two mimalloc defaults cost memory and buy nothing here:
/// - it asks for transparent huge pages for its arenas, so one small allocation made a
///   2 MiB page resident: `capstan up` idle held 30 MB of huge pages for a heap of 14 MB
///   (RssAnon 41 -> 18 MB without them, release build);
/// - it commits arenas up front, and freed memory then stayed resident.
///
/// The environment (MIMALLOC_ALLOW_THP, MIMALLOC_ARENA_EAGER_COMMIT) still decides when
/// set. This runs from `.init_array`, before Rust's runtime makes the first allocation
/// (mimalloc reserves its first arena then), and allocates nothing itself.
#[cfg(not(feature = "system-allocator"))]
extern "C" fn tune_allocator() {
    for (var, option) in [
        (c"MIMALLOC_ALLOW_THP", MI_OPTION_ALLOW_THP),
        (c"MIMALLOC_ARENA_EAGER_COMMIT", MI_OPTION_ARENA_EAGER_COMMIT),
    ] {
        // SAFETY: runs before main, single-threaded; getenv reads the environment the
        // loader set up and mi_option_set stores into mimalloc's static option table.
        unsafe {
            if getenv(var.as_ptr()).is_null() {
                mi_option_set(option, 0);
            }
        }
    }
}

#[cfg(not(feature = "system-allocator"))]
#[used]
#[link_section = ".init_array"]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

#[derive(Parser, Debug)]
#[command(
    name = "capstan",
    version = datadir::version_text(),
    about = "Kubernetes, rebuilt in Rust as one fast binary"
)]
struct Cli {
    /// Log filter, as RUST_LOG (for example `info,capstan_store=debug`); `info` by default,
    /// `warn` for `capstan up`, whose progress display says what starts.
    #[arg(long, global = true, env = "CAPSTAN_LOG")]
    log_level: Option<String>,

    /// Log format: text or json.
    #[arg(long, global = true, default_value = "text")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a whole single-node cluster in this process: control plane, kubelet and a
    /// managed containerd.
    Up(Box<up_cmd::UpArgs>),
    /// Run the control plane: the API server over the store, in the data directory.
    Server(server_cmd::ServerArgs),
    /// Run the scheduler alone against an API server (kube-scheduler's job).
    Scheduler(scheduler_cmd::SchedulerArgs),
    /// Run the controllers alone against an API server (kube-controller-manager's job).
    ControllerManager(controller_manager_cmd::ControllerManagerArgs),
    /// Run the node agent against an API server and a CRI runtime (the kubelet's job).
    Kubelet(kubelet_cmd::KubeletArgs),
    /// Join this machine to a cluster as a node: kubelet and proxy, after a TLS bootstrap with a
    /// bootstrap token.
    Agent(agent_cmd::AgentArgs),
    /// Make Services reach their endpoints on this node (kube-proxy's job).
    Proxy(proxy_cmd::ProxyArgs),
    /// Serve cluster DNS (CoreDNS's job): service and pod names, forwarding the rest.
    Dns(dns_cmd::DnsArgs),
    /// Serve Ingresses (an ingress controller, ingress-nginx's job): HTTP and HTTPS routed by
    /// host and path to the services' endpoints.
    Ingress(ingress_cmd::IngressArgs),
    /// Serve the web dashboard: the cluster in a browser, as the user whose token signs in.
    Dashboard(dashboard_cmd::DashboardArgs),
    /// Bootstrap tokens that nodes join the cluster with (`capstan agent --token`).
    Token(token_cmd::TokenArgs),
    /// Run kubectl against this machine's cluster (its admin kubeconfig), passing every
    /// argument through.
    Kubectl(kubectl_cmd::KubectlArgs),
    /// Read and write the embedded store directly (like etcdctl), for inspection and repair.
    Store(store_cmd::StoreArgs),
    /// Benchmarks against capstan or any other Kubernetes.
    Bench(capstan_bench::BenchArgs),
    /// Internal helpers used by capstan's own tests.
    #[command(hide = true, subcommand)]
    Debug(store_cmd::DebugCommand),
}

/// /var/lib/capstan as root, ~/.local/share/capstan otherwise.
pub(crate) fn default_data_dir() -> PathBuf {
    let is_root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || std::env::var("HOME").map(|h| h == "/root").unwrap_or(false);
    if is_root {
        return PathBuf::from("/var/lib/capstan");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/capstan"),
        None => PathBuf::from("capstan-data"),
    }
}

fn init_logging(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Up(_) => "warn",
        _ => "info",
    };
    init_logging(
        cli.log_level.as_deref().unwrap_or(default_level),
        cli.log_format,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("capstan: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(cli.command)) {
        eprintln!("capstan: {e:#}");
        std::process::exit(1);
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Up(args) => up_cmd::run(*args).await,
        Command::Server(args) => server_cmd::run(args).await,
        Command::Store(args) => store_cmd::run(args).await,
        Command::Token(args) => token_cmd::run(args).await,
        Command::Kubectl(args) => kubectl_cmd::run(args).await,
        Command::Scheduler(args) => scheduler_cmd::run(args).await,
        Command::ControllerManager(args) => controller_manager_cmd::run(args).await,
        Command::Kubelet(args) => kubelet_cmd::run(args).await,
        Command::Agent(args) => agent_cmd::run(args).await,
        Command::Proxy(args) => proxy_cmd::run(args).await,
        Command::Dns(args) => dns_cmd::run(args).await,
        Command::Ingress(args) => ingress_cmd::run(args).await,
        Command::Dashboard(args) => dashboard_cmd::run(args).await,
        Command::Bench(args) => capstan_bench::run(args).await,
        Command::Debug(cmd) => store_cmd::debug(cmd).await,
    }
}
