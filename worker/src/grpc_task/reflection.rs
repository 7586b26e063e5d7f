//! The descriptors of a gRPC task's service, asked of the server's reflection service
//! (`grpc.reflection.v1.ServerReflection`, or `v1alpha` when v1 is unimplemented), and kept for
//! [`DESCRIPTOR_TTL`] per endpoint and service so a job firing every second does not pay a
//! reflection round trip per run.
//!
//! The file that defines the service is asked for by symbol, then every file it imports by name,
//! round after round, until nothing is missing (the well-known `google/protobuf/*.proto` types
//! need not come from the server). The two protocol versions have the same messages field for
//! field, so the v1 messages are sent to whichever path answers. Reflection requests carry the
//! job's metadata (as grpcurl's `-H` does), so a server that wants credentials for reflection
//! gets them; the descriptors kept are shared by every job calling the same service there.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::Code;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

/// How long a service's descriptors are used before they are asked for again. A run that fails
/// (any status but OK, or no answer) forgets them at once ([`forget`]).
pub const DESCRIPTOR_TTL: Duration = Duration::from_secs(60);
/// Most files one service's descriptors may span (its file and every import, transitively).
pub const MAX_FILES: usize = 256;
/// Largest reflection answer read.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Most (endpoint, service) entries kept; past it the expired ones go, then all.
const MAX_ENTRIES: usize = 1024;

const V1: &str = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const V1ALPHA: &str = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

type Key = (String, String);

static CACHE: LazyLock<Mutex<HashMap<Key, (Instant, DescriptorPool)>>> = LazyLock::new(Mutex::default);

fn cache() -> std::sync::MutexGuard<'static, HashMap<Key, (Instant, DescriptorPool)>> {
    CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The descriptors of `service` at `endpoint` (reached through `channel`): from the cache while
/// they are younger than [`DESCRIPTOR_TTL`], else from the server's reflection service.
///
/// # Errors
/// Why the server could not say: no reflection service, an unknown service (naming those it
/// has), an answer that is no descriptor.
pub async fn descriptors(
    channel: &Channel,
    endpoint: &str,
    service: &str,
    metadata: &MetadataMap,
) -> Result<DescriptorPool, String> {
    let key = (endpoint.to_owned(), service.to_owned());
    if let Some((at, pool)) = cache().get(&key) {
        if at.elapsed() < DESCRIPTOR_TTL {
            return Ok(pool.clone());
        }
    }
    let server = Server { channel, metadata };
    let pool = ask_server(&server, service).await?;
    let mut entries = cache();
    if entries.len() >= MAX_ENTRIES {
        entries.retain(|_, (at, _)| at.elapsed() < DESCRIPTOR_TTL);
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
    }
    entries.insert(key, (Instant::now(), pool.clone()));
    Ok(pool)
}

/// Forgets what the cache holds for `service` at `endpoint` (a run with them failed: the server
/// may have changed).
pub fn forget(endpoint: &str, service: &str) {
    cache().remove(&(endpoint.to_owned(), service.to_owned()));
}

/// Where reflection requests go, and the metadata they carry.
struct Server<'a> {
    channel: &'a Channel,
    metadata: &'a MetadataMap,
}

/// Asks v1, then v1alpha when the server does not implement v1.
async fn ask_server(server: &Server<'_>, service: &str) -> Result<DescriptorPool, String> {
    match resolve(server, V1, service).await {
        Err(Failure::Status(status)) if status.code() == Code::Unimplemented => {
            resolve(server, V1ALPHA, service).await.map_err(|f| f.describe(service))
        }
        other => other.map_err(|f| f.describe(service)),
    }
}

/// Why reflection failed.
enum Failure {
    /// The call itself failed (no reflection service, a transport error).
    Status(tonic::Status),
    /// The service answered, but not with what was needed.
    Answer(String),
}

impl Failure {
    fn describe(self, service: &str) -> String {
        match self {
            Failure::Status(s) if s.code() == Code::Unimplemented => format!(
                "asking the server's reflection service for {service} failed: the server offers none \
                 (grpc.reflection.v1 and v1alpha are UNIMPLEMENTED); register it, or give task.descriptor_set"
            ),
            Failure::Status(s) => format!(
                "asking the server's reflection service for {service} failed: {} {}",
                super::code_name(s.code()),
                s.message()
            ),
            Failure::Answer(why) => format!("asking the server's reflection service for {service} failed: {why}"),
        }
    }
}

/// The file defining `service` and everything it imports, as a descriptor pool.
async fn resolve(server: &Server<'_>, path: &'static str, service: &str) -> Result<DescriptorPool, Failure> {
    let mut pool = DescriptorPool::global();
    let mut files: BTreeMap<String, FileDescriptorProto> = BTreeMap::new();
    let mut asks = vec![MessageRequest::FileContainingSymbol(service.to_owned())];
    while !asks.is_empty() {
        let first = files.is_empty();
        let found = match ask_files(server, path, asks).await {
            // Some servers answer an unknown symbol with an error answer, others end the stream.
            Err(Failure::Status(s)) if s.code() == Code::NotFound && first => {
                let known = list_services(server, path).await.unwrap_or_else(|_| "unknown".to_owned());
                return Err(Failure::Answer(format!("the server has no service {service} (its services: {known})")));
            }
            Err(Failure::Status(s)) if s.code() == Code::NotFound => {
                return Err(Failure::Answer(format!("a file the service's files import is missing: {}", s.message())));
            }
            other => other?,
        };
        files.extend(found.into_iter().map(|f| (f.name().to_owned(), f)));
        if files.len() > MAX_FILES {
            return Err(Failure::Answer(format!("its files and imports are more than {MAX_FILES}")));
        }
        asks = missing(&files, &pool).into_iter().map(MessageRequest::FileByFilename).collect();
    }
    pool.add_file_descriptor_protos(files.into_values())
        .map_err(|e| Failure::Answer(format!("the descriptors it sent do not fit together: {e}")))?;
    Ok(pool)
}

/// Imports that neither `files` nor `pool` (the well-known types) hold.
fn missing(files: &BTreeMap<String, FileDescriptorProto>, pool: &DescriptorPool) -> BTreeSet<String> {
    files
        .values()
        .flat_map(|f| f.dependency.iter())
        .filter(|d| !files.contains_key(*d) && pool.get_file_by_name(d).is_none())
        .cloned()
        .collect()
}

/// The files the answers to `asks` hold; an error answer is a failed status.
async fn ask_files(
    server: &Server<'_>,
    path: &'static str,
    asks: Vec<MessageRequest>,
) -> Result<Vec<FileDescriptorProto>, Failure> {
    let mut files = Vec::new();
    for answer in ask(server, path, asks).await? {
        match answer.message_response {
            Some(MessageResponse::FileDescriptorResponse(r)) => {
                for bytes in &r.file_descriptor_proto {
                    let file = FileDescriptorProto::decode(bytes.as_slice())
                        .map_err(|e| Failure::Answer(format!("it sent a file descriptor that does not decode: {e}")))?;
                    files.push(file);
                }
            }
            Some(MessageResponse::ErrorResponse(e)) => {
                return Err(Failure::Status(tonic::Status::new(Code::from_i32(e.error_code), e.error_message)));
            }
            _ => return Err(Failure::Answer("it answered something other than file descriptors".to_owned())),
        }
    }
    Ok(files)
}

/// The services the server lists, comma-separated (reflection's own left out).
async fn list_services(server: &Server<'_>, path: &'static str) -> Result<String, Failure> {
    let answers = ask(server, path, vec![MessageRequest::ListServices(String::new())]).await?;
    let names: Vec<String> = answers
        .into_iter()
        .filter_map(|a| match a.message_response {
            Some(MessageResponse::ListServicesResponse(list)) => Some(list.service),
            _ => None,
        })
        .flatten()
        .map(|s| s.name)
        .filter(|n| !n.starts_with("grpc.reflection."))
        .collect();
    Ok(if names.is_empty() { "none".to_owned() } else { names.join(", ") })
}

/// Sends `asks` on one reflection stream and reads as many answers.
async fn ask(
    server: &Server<'_>,
    path: &'static str,
    asks: Vec<MessageRequest>,
) -> Result<Vec<ServerReflectionResponse>, Failure> {
    let expected = asks.len();
    let requests: Vec<ServerReflectionRequest> =
        asks.into_iter().map(|m| ServerReflectionRequest { host: String::new(), message_request: Some(m) }).collect();
    let mut grpc = tonic::client::Grpc::new(server.channel.clone()).max_decoding_message_size(MAX_ANSWER_BYTES);
    grpc.ready().await.map_err(|e| Failure::Status(tonic::Status::unavailable(super::error_chain(&e))))?;
    let codec = tonic_prost::ProstCodec::<ServerReflectionRequest, ServerReflectionResponse>::default();
    let mut request = tonic::Request::new(futures::stream::iter(requests));
    *request.metadata_mut() = server.metadata.clone();
    let response = grpc.streaming(request, PathAndQuery::from_static(path), codec).await.map_err(Failure::Status)?;
    let mut answers = response.into_inner();
    let mut out = Vec::with_capacity(expected);
    while out.len() < expected {
        match answers.message().await.map_err(Failure::Status)? {
            Some(answer) => out.push(answer),
            None => {
                return Err(Failure::Answer(format!("it ended the stream after {} of {expected} answers", out.len())))
            }
        }
    }
    Ok(out)
}
