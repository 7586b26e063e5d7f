//! Runs gRPC tasks: one unary call per execution of any method, built from JSON with the
//! method's descriptors (from the server's reflection service, or the job's `descriptor_set`),
//! the gRPC status deciding success, the response as JSON in the output; timeout, kill and
//! lease loss cancel the call.
//!
//! Decisions an operator may want to know:
//! - **Descriptors.** Without `descriptor_set`, the worker asks the server's reflection service
//!   (v1, else v1alpha) for the file defining the method's service and its imports, and keeps
//!   them [`reflection::DESCRIPTOR_TTL`] per endpoint and service; any failed run forgets them.
//!   With `descriptor_set`, the server is never asked (and need not offer reflection).
//!   Reflection requests carry the call's metadata, credentials included.
//! - **Messages.** The request is read from the spec's JSON with proto3's JSON mapping (an
//!   unknown field fails the run naming it) and sent through a codec of dynamic messages: no
//!   generated code. The response, at most [`MAX_RESPONSE_BYTES`] on the wire, is held whole
//!   and written as proto3 JSON with every field (defaults included), pretty-printed, straight
//!   into the bounded output (never whole in memory). Decoding can take far more memory than
//!   the wire bytes (a packed repeated field is a byte per element on the wire, a value each
//!   decoded): a response whose decoded size, estimated from its bytes before decoding
//!   ([`wire_size`]), passes [`MAX_RESPONSE_MEMORY`] fails the run naming the limit, logged and
//!   counted (`etcron_worker_grpc_limits_total{limit="response_memory"}`).
//! - **Output** is `gRPC OK` (or `gRPC NOT_FOUND the server's message`) on a line, then the
//!   response as JSON, bounded to `max_output` bytes as the first and last halves. **Success** is
//!   status OK and nothing else; the record's `error` names a failing status
//!   (`gRPC status NOT_FOUND: …`). Records carry no gRPC field of their own: `http_status` stays
//!   empty.
//! - **Channels.** One HTTP/2 channel per endpoint, connected on first use and kept for every
//!   later call (tonic reconnects it when the connection drops); connecting is limited to
//!   [`CONNECT_TIMEOUT`] whatever the job's timeout. Every connection (reconnects too) goes
//!   through [`CheckedConnector`]: the endpoint's host is resolved and each address checked by
//!   [`crate::tasks::network`], and the connection made to those addresses only; a refusal
//!   fails the run, its reason the output's line too. A call that fails without a status from
//!   the server drops the channel, so the next run connects afresh and says why it cannot.
//! - **TLS** for `https://` endpoints: rustls with aws-lc-rs (chosen by tonic, no process-wide
//!   provider needed), server certificates checked against the system's CA roots
//!   (`SSL_CERT_FILE`/`SSL_CERT_DIR` are honoured), ALPN `h2`.
//! - **Timeout.** The job's `timeout` bounds the whole run (descriptors, connecting, the call):
//!   the call carries what is left of it as its gRPC deadline (`grpc-timeout`), and a local timer
//!   cancels it when it runs out, so the run is recorded `timed_out` whether the server honours
//!   deadlines or not. A stop (kill, lease loss, shutdown) cancels the call (HTTP/2
//!   `RST_STREAM`): the server sees the call cancelled.
//! - **Metadata**: the job's `metadata` and `secret_metadata`, and the execution's identity as
//!   `x-etcron-*` entries (added by the caller with `http_task::with_default_headers`); `user-agent` is
//!   `etcron-worker/{version}` (tonic appends its own). The parents' results go as
//!   `x-etcron-parent-result` / `x-etcron-parents`, left out (and the output's last lines say
//!   so) past [`crate::tasks::progress::MAX_PARENT_HEADER_BYTES`].
//! - **Result.** The response of a call that ended OK is the run's result, as the JSON the
//!   output shows (every field), when it is at most 64 KiB as JSON (compact); a larger one gives
//!   no result, and the output's last line says so. No option: a response is what a call
//!   answers.

mod reflection;
mod wire_size;

use std::collections::BTreeMap;

use etcron_common::hash::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use etcron_model::output::BoundedOutput;
use etcron_model::spec::grpc::{parse_method, request_message, unary_method};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions};
use tokio::sync::watch;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Code;

use crate::tasks::network::{NoAddress, TaskNetwork};
use crate::tasks::shell::{run_request, Ending, Finished, StopReason};

/// How long connecting (TCP, TLS, HTTP/2) may take, whatever the job's timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response message read; a larger one fails the run (`OUT_OF_RANGE`, from tonic).
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Most memory a response may take once decoded (estimated from its bytes before decoding:
/// [`RESPONSE_COSTS`]); a larger one fails the run, naming this limit.
pub const MAX_RESPONSE_MEMORY: usize = 64 * 1024 * 1024;
/// A decoded response's elements: a `DynamicMessage` (its field map's node), a `Value`.
const RESPONSE_COSTS: wire_size::Costs = wire_size::Costs { message: 1024, value: 96 };
/// Longest status message kept in a record's `error` (the output has it whole, bounded).
const MAX_ERROR_MESSAGE: usize = 1024;
/// Most endpoints with a channel kept; past it every channel is dropped (and reconnected when
/// used again).
const MAX_CHANNELS: usize = 1024;
/// A call the server ends `DEADLINE_EXCEEDED` this close to the job's deadline counts as the
/// job's timeout (the server's clock for the deadline started a little after the worker's).
const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// A gRPC task ready to run.
#[derive(Debug, Clone)]
pub struct GrpcJob {
    pub endpoint: String,
    /// `package.Service/Method`.
    pub method: String,
    /// The request message as proto3 JSON.
    pub request: serde_json::Value,
    /// Everything sent as metadata: the job's, its secrets and the identity.
    pub metadata: BTreeMap<String, String>,
    /// The job's `descriptor_set` (base64): no reflection when given.
    pub descriptor_set: Option<String>,
    /// Limit of the whole run; none when `None` (connecting is still limited).
    pub timeout: Option<Duration>,
    /// Bound of the captured output (status line and response).
    pub max_output: usize,
    /// Where its channel may connect.
    pub network: std::sync::Arc<TaskNetwork>,
    /// Lines for the end of the output (a parents' results entry left out).
    pub notes: Vec<String>,
}

/// Runs `job` until the call ends, fails, the timeout passes, or `stop` carries a reason; the
/// latter two cancel the call.
pub async fn run_grpc(job: GrpcJob, mut stop: watch::Receiver<Option<StopReason>>) -> Finished {
    let mut output = BoundedOutput::new(job.max_output);
    let mut result = None;
    let deadline = job.timeout.map(|t| tokio::time::Instant::now() + t);
    // Dropping the call's future resets its HTTP/2 stream: the server sees it cancelled.
    let ending = run_request(&mut stop, deadline, call(&job, deadline, &mut output, &mut result)).await;
    let mut notes = Vec::new();
    let result = match result {
        Some(Ok(value)) if matches!(ending, Ending::Grpc { code: "OK", .. }) => Some(value),
        Some(Err(why)) => {
            notes.push(format!("etcron: no result: {why}"));
            None
        }
        _ => None,
    };
    notes.extend(job.notes.iter().cloned());
    if !notes.is_empty() {
        let start = if output.total() == 0 || output.render().ends_with('\n') { "" } else { "\n" };
        output.push(format!("{start}{}\n", notes.join("\n")).as_bytes());
    }
    let mut done = Finished::of_request(ending, None, (output.render(), output.truncated()));
    done.result = result;
    done
}

/// Descriptors, then the call; `output` gets the status line and the response, `result` the
/// response as the run's result (or why it is none).
async fn call(
    job: &GrpcJob,
    deadline: Option<tokio::time::Instant>,
    output: &mut BoundedOutput,
    result: &mut Option<Result<serde_json::Value, String>>,
) -> Ending {
    let Ok((service, _)) = parse_method(&job.method) else {
        return Ending::RequestFailed(format!("invalid method {:?}", job.method));
    };
    let channel = match channel(job).await {
        Ok(c) => c,
        Err((e, refused)) => {
            if refused {
                output.push(format!("{e}\n").as_bytes());
            }
            return Ending::RequestFailed(e);
        }
    };
    let metadata = match metadata_map(&job.metadata) {
        Ok(m) => m,
        Err(e) => return Ending::RequestFailed(e),
    };
    let method = match method(job, &channel, service, &metadata).await {
        Ok(m) => m,
        Err(e) => return Ending::RequestFailed(e),
    };
    let request = match request_message(&method, &job.request) {
        Ok(r) => r,
        Err(e) => {
            return Ending::RequestFailed(format!(
                "{}: {} (the request does not fit {})",
                e.field("task.request"),
                e.message,
                method.input().full_name()
            ))
        }
    };
    let (ending, response) = unary(job, channel, &method, request, metadata, deadline, output).await;
    *result = response;
    if !matches!(ending, Ending::Grpc { code: "OK", .. }) && job.descriptor_set.is_none() {
        reflection::forget(&job.endpoint, service);
    }
    ending
}

/// The method's descriptor: from the job's descriptor set, else from the server.
async fn method(
    job: &GrpcJob,
    channel: &Channel,
    service: &str,
    metadata: &MetadataMap,
) -> Result<MethodDescriptor, String> {
    let pool: DescriptorPool = match &job.descriptor_set {
        Some(set) => etcron_model::spec::grpc::descriptor_pool(set).map_err(|e| format!("task.descriptor_set {e}"))?,
        None => reflection::descriptors(channel, &job.endpoint, service, metadata).await?,
    };
    let source = if job.descriptor_set.is_some() { "task.descriptor_set" } else { "the server's reflection service" };
    unary_method(&pool, &job.method).map_err(|e| format!("calling {} failed: {e} (according to {source})", job.method))
}

/// The call itself, its outcome written to `output`; after OK, the response as the run's result
/// (or why it is none).
async fn unary(
    job: &GrpcJob,
    channel: Channel,
    method: &MethodDescriptor,
    message: DynamicMessage,
    metadata: MetadataMap,
    deadline: Option<tokio::time::Instant>,
    output: &mut BoundedOutput,
) -> (Ending, Option<Result<serde_json::Value, String>>) {
    let Ok(path) = PathAndQuery::try_from(format!("/{}", job.method)) else {
        return (Ending::RequestFailed(format!("invalid method {:?}", job.method)), None);
    };
    let mut request = tonic::Request::new(message);
    *request.metadata_mut() = metadata;
    if let Some(d) = deadline {
        request.set_timeout(d.saturating_duration_since(tokio::time::Instant::now()));
    }
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
        .max_encoding_message_size(MAX_RESPONSE_BYTES);
    if let Err(e) = grpc.ready().await {
        drop_channel(&job.endpoint);
        let why = format!("connecting to {} failed: {}", job.endpoint, error_chain(&e));
        return (Ending::RequestFailed(why), None);
    }
    let codec = DynamicCodec { output: method.output() };
    match grpc.unary(request, path, codec).await {
        Ok(response) => {
            output.push(b"gRPC OK\n");
            let response = response.into_inner();
            write_json(&response, output);
            (Ending::Grpc { code: "OK", message: String::new() }, Some(result_of(&response)))
        }
        Err(status) => match std::error::Error::source(&status).and_then(|e| e.downcast_ref::<TooLarge>()) {
            Some(too_large) => {
                let why = too_large.to_string();
                tracing::warn!(endpoint = job.endpoint, method = job.method, "gRPC response refused: {why}");
                crate::metrics::METRICS.grpc_limits.with_label_values(&["response_memory"]).inc();
                output.push(format!("{why}\n").as_bytes());
                (Ending::RequestFailed(why), None)
            }
            None => (failed(job, &status, deadline, output), None),
        },
    }
}

/// The response as the run's result: its JSON as the output shows it (every field), or why it
/// is none (over the result's limit as compact JSON, which is never made whole to find out).
fn result_of(message: &DynamicMessage) -> Result<serde_json::Value, String> {
    let max = etcron_model::progress::MAX_RESULT_BYTES;
    let options = SerializeOptions::new().skip_default_fields(false);
    let mut json = Capped { bytes: Vec::new(), max, over: false };
    let written = message.serialize_with_options(&mut serde_json::Serializer::new(&mut json), &options);
    match written {
        Ok(()) => {
            serde_json::from_slice(&json.bytes).map_err(|e| format!("the response's JSON does not read back: {e}"))
        }
        Err(_) if json.over => Err(format!("the response is over {max} bytes as JSON, more than a result may be")),
        Err(e) => Err(format!("the response could not be written as JSON: {e}")),
    }
}

/// Bytes written, up to `max`: writing more fails (and says `over`).
struct Capped {
    bytes: Vec<u8>,
    max: usize,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + bytes.len() > self.max {
            self.over = true;
            return Err(std::io::Error::other("over the limit"));
        }
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A response whose decoded size would pass [`MAX_RESPONSE_MEMORY`].
#[derive(Debug)]
struct TooLarge {
    message: String,
    bytes: usize,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the response ({} bytes of {}) was not read: decoded it would take more than the worker's \
             response_memory limit of {} MiB",
            self.bytes,
            self.message,
            MAX_RESPONSE_MEMORY / (1024 * 1024)
        )
    }
}

impl std::error::Error for TooLarge {}

/// A call that ended with a status other than OK.
fn failed(
    job: &GrpcJob,
    status: &tonic::Status,
    deadline: Option<tokio::time::Instant>,
    output: &mut BoundedOutput,
) -> Ending {
    let near_deadline = deadline.is_some_and(|d| tokio::time::Instant::now() + DEADLINE_SLACK >= d);
    if status.code() == Code::DeadlineExceeded && near_deadline {
        return Ending::TimedOut;
    }
    // No status from the server (the connection broke, the stream was reset): connect afresh
    // next time.
    if std::error::Error::source(status).is_some() {
        drop_channel(&job.endpoint);
    }
    let code = code_name(status.code());
    output.push(format!("gRPC {code} {}\n", status.message()).as_bytes());
    Ending::Grpc { code, message: etcron_model::output::clipped(status.message(), MAX_ERROR_MESSAGE) }
}

/// The response as proto3 JSON with every field, pretty-printed, written into `output` as it
/// is made (the output keeps its head and tail; the whole text is never held).
fn write_json(message: &DynamicMessage, output: &mut BoundedOutput) {
    let options = SerializeOptions::new().skip_default_fields(false);
    let mut writer = std::io::BufWriter::with_capacity(8 * 1024, IntoOutput(output));
    let mut serializer = serde_json::Serializer::pretty(&mut writer);
    let written = message.serialize_with_options(&mut serializer, &options);
    drop(std::io::Write::flush(&mut writer));
    drop(writer);
    if let Err(e) = written {
        output.push(format!("\n(the response could not be written as JSON: {e})").as_bytes());
    }
}

/// Bytes written go into the bounded output.
struct IntoOutput<'a>(&'a mut BoundedOutput);

impl std::io::Write for IntoOutput<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.push(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static CHANNELS: LazyLock<Mutex<HashMap<String, Channel>>> = LazyLock::new(Mutex::default);

fn channels() -> std::sync::MutexGuard<'static, HashMap<String, Channel>> {
    CHANNELS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The endpoint's channel: the kept one, or a new connection; the error says whether
/// `task_network` refused it.
async fn channel(job: &GrpcJob) -> Result<Channel, (String, bool)> {
    let endpoint = job.endpoint.as_str();
    if let Some(c) = channels().get(endpoint) {
        return Ok(c.clone());
    }
    let connector = CheckedConnector { network: job.network.clone() };
    let channel =
        endpoint_of(endpoint).map_err(|e| (e, false))?.connect_with_connector(connector).await.map_err(|e| {
            match refusal(&e) {
                Some(r) => (format!("{endpoint} was not called: {r}"), true),
                None => (format!("connecting to {endpoint} failed: {}", error_chain(&e)), false),
            }
        })?;
    let mut kept = channels();
    if kept.len() >= MAX_CHANNELS {
        kept.clear();
    }
    kept.insert(endpoint.to_owned(), channel.clone());
    Ok(channel)
}

/// The `task_network` refusal among the causes of `e`, if it is one.
fn refusal<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a crate::tasks::network::Refused> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<crate::tasks::network::Refused>() {
            return Some(r);
        }
        cause = c.source();
    }
    None
}

/// Connects a channel (TLS, when the endpoint is https, goes on top) to the addresses
/// `task_network` checked for the endpoint's host, and nowhere else.
#[derive(Clone)]
struct CheckedConnector {
    network: std::sync::Arc<TaskNetwork>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tonic::codegen::Service<tonic::codegen::http::Uri> for CheckedConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::codegen::http::Uri) -> Self::Future {
        let network = self.network.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| format!("{uri} has no host"))?;
            let default = if uri.scheme_str() == Some("https") { 443 } else { 80 };
            let port = uri.port_u16().unwrap_or(default);
            let addrs = match network.addresses("a gRPC task's connection", host, port).await {
                Ok(addrs) => addrs,
                Err(NoAddress::Refused(r)) => return Err(Box::new(r) as BoxError),
                Err(NoAddress::Lookup(e)) => return Err(e.into()),
            };
            let stream = tokio::net::TcpStream::connect(&addrs[..]).await?;
            stream.set_nodelay(true)?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        })
    }
}

fn drop_channel(endpoint: &str) {
    channels().remove(endpoint);
}

/// How to reach `endpoint`: HTTP/2, plaintext or TLS with the system's roots.
fn endpoint_of(endpoint: &str) -> Result<Endpoint, String> {
    let invalid = |e: &dyn std::fmt::Display| format!("invalid endpoint {endpoint}: {e}");
    let mut ep = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| invalid(&e))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .user_agent(concat!("etcron-worker/", env!("CARGO_PKG_VERSION")))
        .map_err(|e| invalid(&e))?;
    if endpoint.starts_with("https://") {
        ep = ep.tls_config(ClientTlsConfig::new().with_native_roots()).map_err(|e| {
            format!("connecting to {endpoint} failed: https is unavailable on this worker: {}", error_chain(&e))
        })?;
    }
    Ok(ep)
}

/// The metadata to send, from names and values the spec checked (and the identity's).
fn metadata_map(metadata: &BTreeMap<String, String>) -> Result<MetadataMap, String> {
    let mut map = MetadataMap::new();
    for (name, value) in metadata {
        let key = MetadataKey::from_bytes(name.as_bytes()).map_err(|_| format!("invalid metadata name {name:?}"))?;
        // The value itself is not repeated: it may be a credential.
        let value =
            MetadataValue::try_from(value.as_str()).map_err(|_| format!("invalid value for metadata {name}"))?;
        map.insert(key, value);
    }
    Ok(map)
}

/// A status code as gRPC names it (`NOT_FOUND`).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The causes of a transport error, most specific last, without wrappers that add nothing.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = match c.downcast_ref::<std::io::Error>() {
            // "connection refused" reads better than "Connection refused (os error 111)".
            Some(io) if io.raw_os_error().is_some() && io.kind() != std::io::ErrorKind::Other => io.kind().to_string(),
            _ => c.to_string(),
        };
        let wrapper = matches!(text.as_str(), "transport error" | "tcp connect error" | "error trying to connect")
            || text.starts_with("client error (");
        if !wrapper && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    if parts.is_empty() {
        parts.push(e.to_string());
    }
    parts.join(": ")
}

/// Encodes dynamic messages and decodes the method's output type.
struct DynamicCodec {
    output: MessageDescriptor,
}

struct DynamicEncoder;

struct DynamicDecoder(MessageDescriptor);

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.output.clone())
    }
}

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = tonic::Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.encode(dst).map_err(|e| tonic::Status::internal(format!("etcron could not encode the request: {e}")))
    }
}

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, tonic::Status> {
        use prost::bytes::Buf as _;
        let bytes = src.copy_to_bytes(src.remaining());
        if wire_size::decoded_size(&self.0, &bytes, RESPONSE_COSTS, MAX_RESPONSE_MEMORY).is_err() {
            let too_large = TooLarge { message: self.0.full_name().to_owned(), bytes: bytes.len() };
            let mut status = tonic::Status::resource_exhausted(too_large.to_string());
            status.set_source(std::sync::Arc::new(too_large));
            return Err(status);
        }
        DynamicMessage::decode(self.0.clone(), bytes).map(Some).map_err(|e| {
            tonic::Status::internal(format!("etcron could not decode the response as {}: {e}", self.0.full_name()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_becomes_a_map_and_bad_entries_are_named_without_their_value() {
        let ok = BTreeMap::from([("authorization".to_owned(), "Bearer t".to_owned())]);
        assert_eq!(metadata_map(&ok).unwrap().get("authorization").unwrap(), "Bearer t");
        let bad = BTreeMap::from([("authorization".to_owned(), "s3cret\n".to_owned())]);
        let err = metadata_map(&bad).unwrap_err();
        assert!(err.contains("authorization") && !err.contains("s3cret"), "{err}");
        assert!(metadata_map(&BTreeMap::from([("Bad Name".to_owned(), "v".to_owned())])).is_err());
    }

    #[test]
    fn checkpoints_go_as_ascii_json() {
        let value = serde_json::json!({"name": "é😀", "n": 1});
        let text = etcron_model::json::ascii(&value);
        assert!(text.bytes().all(|b| (b' '..=b'~').contains(&b)), "{text}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), value);
        assert!(MetadataValue::try_from(text.as_str()).is_ok());
    }

    #[test]
    fn the_response_costs_cover_what_decoding_allocates() {
        // A list element is a `Value` (its vector may have twice the room); a message at least
        // its field map's leaf node (11 keys and values).
        assert!(RESPONSE_COSTS.value >= std::mem::size_of::<prost_reflect::Value>() + 32);
        assert!(RESPONSE_COSTS.message >= 11 * (4 + std::mem::size_of::<prost_reflect::Value>()));
    }

    #[test]
    fn a_response_is_the_result_as_its_json_within_the_limit() {
        use prost_reflect::ReflectMessage as _;
        let file = prost_types::FileDescriptorProto { name: Some("a.proto".to_owned()), ..Default::default() };
        let result = result_of(&file.transcode_to_dynamic()).unwrap();
        assert_eq!(result["name"], "a.proto");
        assert_eq!(result["dependency"], serde_json::json!([]), "every field, as the output shows it");
        let max = etcron_model::progress::MAX_RESULT_BYTES;
        let big = prost_types::FileDescriptorProto { name: Some("x".repeat(max)), ..Default::default() };
        let why = result_of(&big.transcode_to_dynamic()).unwrap_err();
        assert_eq!(why, format!("the response is over {max} bytes as JSON, more than a result may be"));
    }

    #[test]
    fn codes_have_their_grpc_names() {
        assert_eq!(code_name(Code::NotFound), "NOT_FOUND");
        assert_eq!(code_name(Code::from_i32(14)), "UNAVAILABLE");
        assert_eq!(code_name(Code::from_i32(99)), "UNKNOWN");
    }

    fn job(endpoint: &str) -> GrpcJob {
        GrpcJob {
            endpoint: endpoint.to_owned(),
            method: "etcron.test.Echo/Echo".to_owned(),
            request: serde_json::json!({}),
            metadata: BTreeMap::new(),
            descriptor_set: None,
            timeout: Some(Duration::from_secs(30)),
            max_output: 64 * 1024,
            network: std::sync::Arc::new(TaskNetwork::new(crate::tasks::network::loopback(), Vec::new())),
            notes: Vec::new(),
        }
    }

    #[tokio::test]
    async fn refused_connection_names_the_endpoint() {
        // A port that was just free: nobody listens there.
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let done = run_grpc(job(&endpoint), watch::channel(None).1).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("connecting to {endpoint} failed: ")), "{message}");
        assert!(message.contains("connection refused"), "{message}");
        assert_eq!(done.output, "");
        // A name is resolved and connected to by the channel's own connector.
        let by_name = format!("http://localhost:{port}");
        let done = run_grpc(job(&by_name), watch::channel(None).1).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("connecting to {by_name} failed: ")), "{message}");
        assert!(message.contains("connection refused"), "{message}");
    }

    #[tokio::test]
    async fn a_refused_endpoint_is_never_connected_to() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let strict = std::sync::Arc::new(TaskNetwork::new(Vec::new(), Vec::new()));
        let done = run_grpc(GrpcJob { network: strict, ..job(&endpoint) }, watch::channel(None).1).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("{endpoint} was not called: refused to connect to ")), "{message}");
        assert!(message.contains("task_network_allow"), "{message}");
        assert_eq!(done.output, format!("{message}\n"));
        assert!(listener.accept().is_err(), "nothing was sent");
    }

    #[tokio::test]
    async fn stop_before_start_sends_nothing() {
        let (stop_tx, stop_rx) = watch::channel(Some(StopReason::LeaseLost));
        let done = run_grpc(job("http://127.0.0.1:9"), stop_rx).await;
        drop(stop_tx);
        assert_eq!(done.ending, Ending::Stopped(StopReason::LeaseLost));
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_a_stop_cancels() {
        // Accepts connections and never speaks HTTP/2: connecting hangs until the timer.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        etcron_common::task::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let done =
            run_grpc(GrpcJob { timeout: Some(Duration::from_millis(300)), ..job(&endpoint) }, watch::channel(None).1)
                .await;
        assert_eq!(done.ending, Ending::TimedOut);
        let (stop_tx, stop_rx) = watch::channel(None);
        let run = etcron_common::task::spawn(run_grpc(GrpcJob { timeout: None, ..job(&endpoint) }, stop_rx));
        stop_tx.send(Some(StopReason::Killed("kill command at revision 9".to_owned()))).unwrap();
        assert_eq!(
            run.await.unwrap().ending,
            Ending::Stopped(StopReason::Killed("kill command at revision 9".to_owned()))
        );
    }
}
