//! The Container Runtime Interface, v1: the gRPC API through which the kubelet
//! drives a container runtime such as containerd.
//!
//! [`v1`] holds the messages generated from the CRI wire schema. [`Runtime`] is
//! the seam the kubelet codes against: one method per RPC, request in and
//! response out. [`Cri`] implements it over a Unix socket; unit tests implement
//! it with an in-memory fake.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The generated CRI v1 messages and clients (package `runtime.v1`).
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}

use v1::image_service_client::ImageServiceClient;
use v1::runtime_service_client::RuntimeServiceClient;

pub use tonic::{Code, Status};

/// The result of one CRI call.
pub type Result<T> = std::result::Result<T, Status>;

macro_rules! cri_methods {
    ($( $client:ident { $( $method:ident($req:ident) -> $resp:ident; )* } )*) => {
        /// Every CRI v1 call the kubelet makes. Each method sends one request
        /// and returns the runtime's response or its gRPC status.
        #[async_trait::async_trait]
        pub trait Runtime: Send + Sync + 'static {
            $($(
                #[allow(missing_docs)]
                async fn $method(&self, req: v1::$req) -> Result<v1::$resp>;
            )*)*
        }

        #[async_trait::async_trait]
        impl Runtime for Cri {
            $($(
                async fn $method(&self, req: v1::$req) -> Result<v1::$resp> {
                    let mut client = self.$client.clone();
                    Ok(client.$method(tonic::Request::new(req)).await?.into_inner())
                }
            )*)*
        }
    };
}

/// Calls macro `$callback` with every CRI RPC the kubelet uses, grouped by service
/// (`runtime { method(Request) -> Response; ... } image { ... }`): the one list that both
/// [`Runtime`] and wrappers of it (such as the kubelet's shutdown gate) are generated from.
#[macro_export]
macro_rules! cri_rpcs {
    ($callback:ident) => {
        $callback! {
            runtime {
                version(VersionRequest) -> VersionResponse;
                run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
                stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
                remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
                pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
                list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
                create_container(CreateContainerRequest) -> CreateContainerResponse;
                start_container(StartContainerRequest) -> StartContainerResponse;
                stop_container(StopContainerRequest) -> StopContainerResponse;
                remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
                list_containers(ListContainersRequest) -> ListContainersResponse;
                container_status(ContainerStatusRequest) -> ContainerStatusResponse;
                update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
                reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
                exec_sync(ExecSyncRequest) -> ExecSyncResponse;
                exec(ExecRequest) -> ExecResponse;
                attach(AttachRequest) -> AttachResponse;
                port_forward(PortForwardRequest) -> PortForwardResponse;
                container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
                list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
                pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
                list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
                update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
                status(StatusRequest) -> StatusResponse;
            }
            image {
                list_images(ListImagesRequest) -> ListImagesResponse;
                image_status(ImageStatusRequest) -> ImageStatusResponse;
                pull_image(PullImageRequest) -> PullImageResponse;
                remove_image(RemoveImageRequest) -> RemoveImageResponse;
                image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
            }
        }
    };
}

cri_rpcs!(cri_methods);

/// A CRI runtime reached over gRPC on a Unix socket.
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

/// Messages up to this size are accepted (a ListContainers of a busy node is large).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

impl Cri {
    /// Connects to `endpoint`: `unix:///run/containerd/containerd.sock` or a bare
    /// socket path. The connection is made lazily and re-made after a failure, so
    /// a runtime that starts later (or restarts) is picked up.
    pub fn connect(endpoint: &str) -> std::result::Result<Cri, String> {
        let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        if endpoint.contains("://") && !endpoint.starts_with("unix://") {
            return Err(format!(
                "container runtime endpoint {endpoint:?}: only unix:// sockets are supported"
            ));
        }
        // The URI is required by tonic but unused: the connector dials the socket.
        let channel = Endpoint::try_from("http://cri.invalid")
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE),
            image: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
        })
    }
}
