//! A real gRPC server for the gRPC-task tests: tonic's server on a free loopback port
//! (plaintext, or TLS with a given certificate; optionally wanting a token for every request,
//! reflection included), serving `etcron.test.Echo` through hand-written
//! prost messages and tonic's prost codec (not the worker's dynamic-message codec, so the two
//! sides do not share a bug), with the reflection service (v1, v1alpha, or none) registered from
//! descriptors built here. It records every call (method, metadata, request) and every call
//! that was cancelled before it finished.
//!
//! ```proto
//! // etcron/test/common.proto
//! package etcron.test;
//! message Pair { string name = 1; string value = 2; }
//! // etcron/test/echo.proto
//! package etcron.test;
//! import "etcron/test/common.proto";
//! import "google/protobuf/empty.proto";   // not served: a well-known type
//! message EchoRequest { string text = 1; int32 count = 2; repeated string tags = 3; }
//! message EchoReply { string text = 1; int32 count = 2; repeated string tags = 3; repeated Pair metadata = 4; }
//! message FailRequest { int32 code = 1; string message = 2; }
//! message SleepRequest { int32 millis = 1; }
//! message SleepReply { int32 slept_millis = 1; }
//! message NumbersRequest { int32 count = 1; }
//! message NumbersReply { repeated int32 values = 1; }   // packed: a byte per small element
//! service Echo {
//!   rpc Echo(EchoRequest) returns (EchoReply);          // the request back, with the x-* metadata received
//!   rpc Fail(FailRequest) returns (google.protobuf.Empty); // the status asked for (0: OK, empty)
//!   rpc Sleep(SleepRequest) returns (SleepReply);       // sleeps; a cancelled sleep is recorded
//!   rpc Watch(EchoRequest) returns (stream EchoReply);  // server streaming: never served
//!   rpc Numbers(NumbersRequest) returns (NumbersReply); // `count` ones
//! }
//! ```
//!
//! A hostile server ([`Hostile`]) answers reflection with what a budget must stop: files just
//! under the 4 MiB message limit importing each other, or files that are small on the wire and
//! huge once decoded.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Result;
use base64::Engine as _;
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto,
    ServiceDescriptorProto,
};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};

/// `etcron.test.Pair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Pair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `etcron.test.EchoRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    #[prost(string, tag = "1")]
    pub text: String,
    #[prost(int32, tag = "2")]
    pub count: i32,
    #[prost(string, repeated, tag = "3")]
    pub tags: Vec<String>,
}

/// `etcron.test.EchoReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    #[prost(string, tag = "1")]
    pub text: String,
    #[prost(int32, tag = "2")]
    pub count: i32,
    #[prost(string, repeated, tag = "3")]
    pub tags: Vec<String>,
    #[prost(message, repeated, tag = "4")]
    pub metadata: Vec<Pair>,
}

/// `etcron.test.FailRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FailRequest {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `etcron.test.SleepRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SleepRequest {
    #[prost(int32, tag = "1")]
    pub millis: i32,
}

/// `etcron.test.SleepReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SleepReply {
    #[prost(int32, tag = "1")]
    pub slept_millis: i32,
}

/// `etcron.test.NumbersRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumbersRequest {
    #[prost(int32, tag = "1")]
    pub count: i32,
}

/// `etcron.test.NumbersReply` (prost packs repeated scalars).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumbersReply {
    #[prost(int32, repeated, tag = "1")]
    pub values: Vec<i32>,
}

/// The service's full name.
pub const SERVICE: &str = "etcron.test.Echo";

/// The descriptors of the two files above (without `google/protobuf/empty.proto`).
#[must_use]
pub fn descriptor_set() -> FileDescriptorSet {
    let field = |name: &str, number: i32, kind: Type, repeated: bool, type_name: Option<&str>| FieldDescriptorProto {
        name: Some(name.to_owned()),
        number: Some(number),
        r#type: Some(kind as i32),
        label: Some(if repeated { Label::Repeated } else { Label::Optional } as i32),
        type_name: type_name.map(str::to_owned),
        ..Default::default()
    };
    let message = |name: &str, field: Vec<FieldDescriptorProto>| DescriptorProto {
        name: Some(name.to_owned()),
        field,
        ..Default::default()
    };
    let method = |name: &str, input: &str, output: &str, streaming: bool| MethodDescriptorProto {
        name: Some(name.to_owned()),
        input_type: Some(input.to_owned()),
        output_type: Some(output.to_owned()),
        server_streaming: Some(streaming),
        ..Default::default()
    };
    let common = FileDescriptorProto {
        name: Some("etcron/test/common.proto".to_owned()),
        package: Some("etcron.test".to_owned()),
        syntax: Some("proto3".to_owned()),
        message_type: vec![message(
            "Pair",
            vec![field("name", 1, Type::String, false, None), field("value", 2, Type::String, false, None)],
        )],
        ..Default::default()
    };
    let echo_fields = || {
        vec![
            field("text", 1, Type::String, false, None),
            field("count", 2, Type::Int32, false, None),
            field("tags", 3, Type::String, true, None),
        ]
    };
    let mut reply_fields = echo_fields();
    reply_fields.push(field("metadata", 4, Type::Message, true, Some(".etcron.test.Pair")));
    let echo = FileDescriptorProto {
        name: Some("etcron/test/echo.proto".to_owned()),
        package: Some("etcron.test".to_owned()),
        syntax: Some("proto3".to_owned()),
        dependency: vec!["etcron/test/common.proto".to_owned(), "google/protobuf/empty.proto".to_owned()],
        message_type: vec![
            message("EchoRequest", echo_fields()),
            message("EchoReply", reply_fields),
            message(
                "FailRequest",
                vec![field("code", 1, Type::Int32, false, None), field("message", 2, Type::String, false, None)],
            ),
            message("SleepRequest", vec![field("millis", 1, Type::Int32, false, None)]),
            message("SleepReply", vec![field("slept_millis", 1, Type::Int32, false, None)]),
            message("NumbersRequest", vec![field("count", 1, Type::Int32, false, None)]),
            message("NumbersReply", vec![field("values", 1, Type::Int32, true, None)]),
        ],
        service: vec![ServiceDescriptorProto {
            name: Some("Echo".to_owned()),
            method: vec![
                method("Echo", ".etcron.test.EchoRequest", ".etcron.test.EchoReply", false),
                method("Fail", ".etcron.test.FailRequest", ".google.protobuf.Empty", false),
                method("Sleep", ".etcron.test.SleepRequest", ".etcron.test.SleepReply", false),
                method("Watch", ".etcron.test.EchoRequest", ".etcron.test.EchoReply", true),
                method("Numbers", ".etcron.test.NumbersRequest", ".etcron.test.NumbersReply", false),
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    FileDescriptorSet { file: vec![common, echo] }
}

/// [`descriptor_set`] as a spec's `descriptor_set` (base64 of its bytes).
#[must_use]
pub fn descriptor_set_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(descriptor_set().encode_to_vec())
}

/// How the server is started.
#[derive(Debug, Clone)]
pub struct Options {
    pub reflection: Reflection,
    /// A certificate chain and its key (PEM): TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// The `authorization` every request must carry (reflection's too), else `UNAUTHENTICATED`.
    pub token: Option<String>,
    /// Reflection (v1) answered by a hostile service instead of tonic's.
    pub hostile: Option<Hostile>,
}

impl Options {
    #[must_use]
    pub fn new(reflection: Reflection) -> Self {
        Self { reflection, tls: None, token: None, hostile: None }
    }
}

/// What a hostile reflection service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// The service's file imports [`HOSTILE_FILES`]` - 1` others; every file is padded to just
    /// under 4 MiB (a long string), so all of them together are about 1 GiB.
    LargeFiles,
    /// One file of 1 MiB of empty message descriptors: two bytes each on the wire, a message
    /// each once decoded.
    BloatedFiles,
}

/// How many files [`Hostile::LargeFiles`] offers (the worker's per-run file count).
pub const HOSTILE_FILES: usize = 256;

/// Which reflection service the server offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reflection {
    V1,
    V1Alpha,
    None,
}

/// One call the server got.
#[derive(Debug, Clone)]
pub struct Call {
    /// `Echo`, `Fail`, `Sleep`.
    pub method: String,
    /// Every ASCII metadata entry received (names lowercase).
    pub metadata: BTreeMap<String, String>,
    /// The request's fields as JSON.
    pub request: serde_json::Value,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    /// Methods of calls dropped before they answered (the client cancelled them, or their
    /// deadline passed).
    cancelled: Vec<String>,
}

type Shared = Arc<(Mutex<State>, tokio::sync::Notify)>;

/// The server; it stops when dropped.
pub struct GrpcServer {
    /// `http://127.0.0.1:{port}`, or `https://127.0.0.1:{port}` with TLS.
    pub endpoint: String,
    state: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl GrpcServer {
    /// Starts a plaintext server.
    pub async fn start(reflection: Reflection) -> Result<Self> {
        Self::start_with(Options::new(reflection)).await
    }

    /// Starts a server as `options` say.
    pub async fn start_with(options: Options) -> Result<Self> {
        let Options { reflection, tls, token, hostile } = options;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = format!("{scheme}://{}", listener.local_addr()?);
        let state: Shared = Arc::default();
        let mut builder = tonic::transport::Server::builder();
        if let Some((cert, key)) = tls {
            // Both ring and aws-lc-rs are linked: rustls cannot pick one for tonic's server by
            // itself. (Another caller may have installed it first: either is fine.)
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let identity = tonic::transport::Identity::from_pem(cert, key);
            builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
        }
        let reflect = || tonic_reflection::server::Builder::configure().register_file_descriptor_set(descriptor_set());
        let v1 = (reflection == Reflection::V1 && hostile.is_none()).then(|| reflect().build_v1()).transpose()?;
        let v1alpha = (reflection == Reflection::V1Alpha).then(|| reflect().build_v1alpha()).transpose()?;
        let router = builder
            .layer(tonic::service::InterceptorLayer::new(move |request: Request<()>| {
                authorized(token.as_deref(), request)
            }))
            .add_service(EchoService(state.clone()))
            .add_optional_service(v1)
            .add_optional_service(v1alpha)
            .add_optional_service(hostile.map(|h| HostileReflection(h, state.clone())));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(async move {
            let _ = router.serve_with_incoming_shutdown(incoming, async { drop(stopped.await) }).await;
        });
        Ok(Self { endpoint, state, stop: Some(stop) })
    }

    /// The calls received so far.
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.state).calls.clone()
    }

    /// The methods of the calls that were cancelled so far.
    #[must_use]
    pub fn cancelled(&self) -> Vec<String> {
        lock(&self.state).cancelled.clone()
    }

    /// Waits (at most `limit`) until `check` holds for the calls and the cancelled ones.
    pub async fn wait(&self, limit: Duration, what: &str, check: impl Fn(&[Call], &[String]) -> bool) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.state.1.notified();
            {
                let state = lock(&self.state);
                if check(&state.calls, &state.cancelled) {
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                anyhow::bail!("timed out after {limit:?} waiting for {what}; calls: {:?}", self.calls());
            }
        }
    }
}

/// Lets `request` through when no token is wanted, or it carries the token as `authorization`.
fn authorized(token: Option<&str>, request: Request<()>) -> Result<Request<()>, Status> {
    let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
    match token {
        Some(token) if given != Some(token) => Err(Status::unauthenticated("this server wants a bearer token")),
        _ => Ok(request),
    }
}

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, State> {
    state.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn record(state: &Shared, method: &str, metadata: &tonic::metadata::MetadataMap, request: serde_json::Value) {
    let metadata = metadata
        .iter()
        .filter_map(|entry| match entry {
            tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((k.to_string(), v.to_str().ok()?.to_owned())),
            tonic::metadata::KeyAndValueRef::Binary(..) => None,
        })
        .collect();
    lock(state).calls.push(Call { method: method.to_owned(), metadata, request });
    state.1.notify_waiters();
}

/// Records its call as cancelled when dropped before [`Finish::done`].
struct Finish {
    state: Shared,
    method: &'static str,
    done: bool,
}

impl Drop for Finish {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.state).cancelled.push(self.method.to_owned());
            self.state.1.notify_waiters();
        }
    }
}

type Answer<T> = Pin<Box<dyn Future<Output = Result<Response<T>, Status>> + Send>>;

/// One unary method: a function of the shared state and the request.
struct Method<Req, Resp>(Shared, fn(Shared, Request<Req>) -> Answer<Resp>);

impl<Req, Resp> UnaryService<Req> for Method<Req, Resp> {
    type Response = Resp;
    type Future = Answer<Resp>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        (self.1)(self.0.clone(), request)
    }
}

fn echo(state: Shared, request: Request<EchoRequest>) -> Answer<EchoReply> {
    Box::pin(async move {
        let (metadata, _, req) = request.into_parts();
        let body = serde_json::json!({"text": req.text, "count": req.count, "tags": req.tags});
        record(&state, "Echo", &metadata, body);
        // The x-* entries back (x-etcron-* and the job's own); never e.g. `authorization`.
        let seen = metadata.into_headers();
        let mut pairs: Vec<Pair> = seen
            .iter()
            .filter(|(k, _)| k.as_str().starts_with("x-"))
            .map(|(k, v)| Pair { name: k.to_string(), value: v.to_str().unwrap_or_default().to_owned() })
            .collect();
        pairs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Response::new(EchoReply { text: req.text, count: req.count, tags: req.tags, metadata: pairs }))
    })
}

fn fail(state: Shared, request: Request<FailRequest>) -> Answer<()> {
    Box::pin(async move {
        let (metadata, _, req) = request.into_parts();
        record(&state, "Fail", &metadata, serde_json::json!({"code": req.code, "message": req.message}));
        match tonic::Code::from_i32(req.code) {
            tonic::Code::Ok => Ok(Response::new(())),
            code => Err(Status::new(code, req.message)),
        }
    })
}

fn sleep(state: Shared, request: Request<SleepRequest>) -> Answer<SleepReply> {
    Box::pin(async move {
        let (metadata, _, req) = request.into_parts();
        record(&state, "Sleep", &metadata, serde_json::json!({"millis": req.millis}));
        let mut finish = Finish { state, method: "Sleep", done: false };
        tokio::time::sleep(Duration::from_millis(u64::try_from(req.millis).unwrap_or(0))).await;
        finish.done = true;
        Ok(Response::new(SleepReply { slept_millis: req.millis }))
    })
}

fn numbers(state: Shared, request: Request<NumbersRequest>) -> Answer<NumbersReply> {
    Box::pin(async move {
        let (metadata, _, req) = request.into_parts();
        record(&state, "Numbers", &metadata, serde_json::json!({"count": req.count}));
        Ok(Response::new(NumbersReply { values: vec![1; usize::try_from(req.count).unwrap_or(0)] }))
    })
}

/// `etcron.test.Echo`, routed by path as tonic's generated servers do.
#[derive(Clone)]
struct EchoService(Shared);

impl NamedService for EchoService {
    const NAME: &'static str = SERVICE;
}

impl tonic::codegen::Service<http::Request<Body>> for EchoService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let state = self.0.clone();
        match req.uri().path() {
            "/etcron.test.Echo/Echo" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<EchoReply, EchoRequest>::default());
                Ok(grpc.unary(Method(state, echo), req).await)
            }),
            "/etcron.test.Echo/Fail" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<(), FailRequest>::default());
                Ok(grpc.unary(Method(state, fail), req).await)
            }),
            "/etcron.test.Echo/Numbers" => Box::pin(async move {
                let mut grpc =
                    tonic::server::Grpc::new(tonic_prost::ProstCodec::<NumbersReply, NumbersRequest>::default())
                        .max_encoding_message_size(usize::MAX);
                Ok(grpc.unary(Method(state, numbers), req).await)
            }),
            "/etcron.test.Echo/Sleep" => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<SleepReply, SleepRequest>::default());
                Ok(grpc.unary(Method(state, sleep), req).await)
            }),
            // `Watch` among them: the tests check that the worker never calls it.
            other => {
                let method = other.rsplit('/').next().unwrap_or_default().to_owned();
                Box::pin(async move {
                    lock(&state).calls.push(Call {
                        method,
                        metadata: BTreeMap::new(),
                        request: serde_json::Value::Null,
                    });
                    state.1.notify_waiters();
                    Ok(Status::unimplemented("not served by the test server").into_http())
                })
            }
        }
    }
}

/// `grpc.reflection.v1.ServerReflection` answering as [`Hostile`] says; each stream is recorded
/// as a call of `ServerReflectionInfo`.
#[derive(Clone)]
struct HostileReflection(Hostile, Shared);

impl NamedService for HostileReflection {
    const NAME: &'static str = "grpc.reflection.v1.ServerReflection";
}

type ReflectionAnswers = Pin<
    Box<
        dyn tonic::codegen::tokio_stream::Stream<
                Item = Result<tonic_reflection::pb::v1::ServerReflectionResponse, Status>,
            > + Send,
    >,
>;

impl tonic::server::StreamingService<tonic_reflection::pb::v1::ServerReflectionRequest> for HostileReflection {
    type Response = tonic_reflection::pb::v1::ServerReflectionResponse;
    type ResponseStream = ReflectionAnswers;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ReflectionAnswers>, Status>> + Send>>;

    fn call(
        &mut self,
        request: Request<tonic::Streaming<tonic_reflection::pb::v1::ServerReflectionRequest>>,
    ) -> Self::Future {
        use tonic::codegen::tokio_stream::StreamExt as _;
        let hostile = self.0;
        record(&self.1, "ServerReflectionInfo", request.metadata(), serde_json::Value::Null);
        let answers = request.into_inner().map(move |ask| Ok(hostile_answer(hostile, &ask?)));
        Box::pin(async move { Ok(Response::new(Box::pin(answers) as ReflectionAnswers)) })
    }
}

/// The hostile answer to `ask`.
fn hostile_answer(
    hostile: Hostile,
    ask: &tonic_reflection::pb::v1::ServerReflectionRequest,
) -> tonic_reflection::pb::v1::ServerReflectionResponse {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::{FileDescriptorResponse, ListServiceResponse, ServiceResponse};
    let file = |name: &str, dependency: Vec<String>| match hostile {
        Hostile::LargeFiles => FileDescriptorProto {
            name: Some(name.to_owned()),
            dependency,
            package: Some("p".repeat(4 * 1024 * 1024 - 16 * 1024)),
            ..Default::default()
        },
        Hostile::BloatedFiles => FileDescriptorProto {
            name: Some(name.to_owned()),
            message_type: vec![DescriptorProto::default(); 512 * 1024],
            ..Default::default()
        },
    };
    let files = match &ask.message_request {
        Some(MessageRequest::FileContainingSymbol(_)) => {
            let imports = match hostile {
                Hostile::LargeFiles => (1..HOSTILE_FILES).map(|i| format!("hostile/{i}.proto")).collect(),
                Hostile::BloatedFiles => Vec::new(),
            };
            vec![file("hostile/0.proto", imports)]
        }
        Some(MessageRequest::FileByFilename(name)) => vec![file(name, Vec::new())],
        _ => {
            let service = vec![ServiceResponse { name: SERVICE.to_owned() }];
            let list = MessageResponse::ListServicesResponse(ListServiceResponse { service });
            return tonic_reflection::pb::v1::ServerReflectionResponse {
                message_response: Some(list),
                ..Default::default()
            };
        }
    };
    let file_descriptor_proto = files.iter().map(prost::Message::encode_to_vec).collect();
    tonic_reflection::pb::v1::ServerReflectionResponse {
        message_response: Some(MessageResponse::FileDescriptorResponse(FileDescriptorResponse {
            file_descriptor_proto,
        })),
        ..Default::default()
    }
}

impl tonic::codegen::Service<http::Request<Body>> for HostileReflection {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<
                tonic_reflection::pb::v1::ServerReflectionResponse,
                tonic_reflection::pb::v1::ServerReflectionRequest,
            >::default();
            let mut grpc = tonic::server::Grpc::new(codec).max_encoding_message_size(usize::MAX);
            Ok(grpc.streaming(service, req).await)
        })
    }
}
