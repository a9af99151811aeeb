//! The kubelet's two gRPC APIs with DRA drivers, written out as prost messages (no protoc here):
//! plugin registration (`pluginregistration.Registration`, package `pluginregistration`, from
//! `k8s.io/kubelet/pkg/apis/pluginregistration/v1`) and the DRA plugin service
//! (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`). Field numbers are upstream's `.proto` files'.
//! [`Client`] calls them over a unix socket; [`serve`] answers them, for drivers written in Rust
//! (the tests' example driver).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

/// The plugin type DRA drivers register with (upstream `DRAPlugin` constant of pluginregistration).
pub const DRA_PLUGIN_TYPE: &str = "DRAPlugin";
/// The DRA service versions the kubelet speaks, preferred first (gRPC service names, as 1.34+
/// drivers list them in `supported_versions`).
pub const DRA_SERVICES: &[&str] = &["v1.DRAPlugin"];
pub const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
pub const NOTIFY_REGISTRATION_STATUS: &str =
    "/pluginregistration.Registration/NotifyRegistrationStatus";
pub const NODE_PREPARE_RESOURCES: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
pub const NODE_UNPREPARE_RESOURCES: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";

#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginInfo {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub endpoint: String,
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatus {
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatusResponse {}

#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Claim {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourcesResponse {
    /// By claim UID.
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodePrepareResourceResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePrepareResourceResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    /// Empty: the device serves every request of the claim.
    #[prost(string, repeated, tag = "1")]
    pub request_names: Vec<String>,
    #[prost(string, tag = "2")]
    pub pool_name: String,
    #[prost(string, tag = "3")]
    pub device_name: String,
    #[prost(string, repeated, tag = "4")]
    pub cdi_device_ids: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourcesResponse {
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodeUnprepareResourceResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnprepareResourceResponse {
    #[prost(string, tag = "1")]
    pub error: String,
}

/// Why a call to a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("connect to {socket}: {message}")]
    Connect { socket: PathBuf, message: String },
    #[error("{method}: {status}")]
    Status {
        method: &'static str,
        status: tonic::Status,
    },
}

/// A gRPC connection to a plugin's unix socket.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    timeout: Duration,
}

impl Client {
    /// Dials `socket`; every call then gives up after `timeout` (upstream: 45 s for
    /// NodePrepareResources, 1 s... 10 s for registration calls).
    pub async fn connect(socket: &Path, timeout: Duration) -> Result<Client, CallError> {
        let path = socket.to_path_buf();
        let fail = |message: String| CallError::Connect {
            socket: socket.to_path_buf(),
            message,
        };
        // The URI is a placeholder: the connector dials the socket.
        let channel = Endpoint::try_from("http://[::1]:50051")
            .map_err(|e| fail(e.to_string()))?
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|e| fail(e.to_string()))?;
        Ok(Client { channel, timeout })
    }

    async fn unary<Req, Resp>(&self, method: &'static str, req: Req) -> Result<Resp, CallError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let status = |status| CallError::Status { method, status };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| status(tonic::Status::unavailable(e.to_string())))?;
        let mut request = tonic::Request::new(req);
        request.set_timeout(self.timeout);
        grpc.unary(
            request,
            PathAndQuery::from_static(method),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map(tonic::Response::into_inner)
        .map_err(status)
    }

    pub async fn get_info(&self) -> Result<PluginInfo, CallError> {
        self.unary(GET_INFO, InfoRequest {}).await
    }

    pub async fn notify_registration_status(
        &self,
        status: RegistrationStatus,
    ) -> Result<(), CallError> {
        self.unary::<_, RegistrationStatusResponse>(NOTIFY_REGISTRATION_STATUS, status)
            .await
            .map(|_| ())
    }

    pub async fn node_prepare_resources(
        &self,
        claims: Vec<Claim>,
    ) -> Result<NodePrepareResourcesResponse, CallError> {
        self.unary(
            NODE_PREPARE_RESOURCES,
            NodePrepareResourcesRequest { claims },
        )
        .await
    }

    pub async fn node_unprepare_resources(
        &self,
        claims: Vec<Claim>,
    ) -> Result<NodeUnprepareResourcesResponse, CallError> {
        self.unary(
            NODE_UNPREPARE_RESOURCES,
            NodeUnprepareResourcesRequest { claims },
        )
        .await
    }
}

/// What a driver written in Rust answers (see [`serve`]).
pub trait Driver: Send + Sync + 'static {
    fn info(&self) -> PluginInfo;
    fn registration_status(&self, status: RegistrationStatus);
    fn prepare(&self, claims: Vec<Claim>) -> NodePrepareResourcesResponse;
    fn unprepare(&self, claims: Vec<Claim>) -> NodeUnprepareResourcesResponse;
}

/// Serves the registration and DRA services of `driver` on `listener` until the future is dropped
/// (one socket for both: the kubelet dials whatever `PluginInfo.endpoint` names).
pub async fn serve(
    listener: tokio::net::UnixListener,
    driver: std::sync::Arc<dyn Driver>,
) -> std::io::Result<()> {
    use hyper::service::service_fn;
    loop {
        let (stream, _) = listener.accept().await?;
        let driver = driver.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let driver = driver.clone();
                async move { Ok::<_, std::convert::Infallible>(dispatch(driver, req).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn dispatch(
    driver: std::sync::Arc<dyn Driver>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<tonic::body::Body> {
    let path = req.uri().path().to_string();
    let req = req.map(tonic::body::Body::new);
    macro_rules! unary {
        ($req:ty, $f:expr) => {{
            let d = driver.clone();
            tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                .unary(
                    tower::service_fn(move |r: tonic::Request<$req>| {
                        let d = d.clone();
                        let out = $f(&*d, r.into_inner());
                        async move { Ok::<_, tonic::Status>(tonic::Response::new(out)) }
                    }),
                    req,
                )
                .await
        }};
    }
    match path.as_str() {
        GET_INFO => unary!(InfoRequest, |d: &dyn Driver, _r| d.info()),
        NOTIFY_REGISTRATION_STATUS => unary!(RegistrationStatus, |d: &dyn Driver, r| {
            d.registration_status(r);
            RegistrationStatusResponse {}
        }),
        NODE_PREPARE_RESOURCES => {
            unary!(
                NodePrepareResourcesRequest,
                |d: &dyn Driver, r: NodePrepareResourcesRequest| d.prepare(r.claims)
            )
        }
        NODE_UNPREPARE_RESOURCES => {
            unary!(
                NodeUnprepareResourcesRequest,
                |d: &dyn Driver, r: NodeUnprepareResourcesRequest| d.unprepare(r.claims)
            )
        }
        _ => tonic::Status::unimplemented(format!("no method {path}")).into_http(),
    }
}
