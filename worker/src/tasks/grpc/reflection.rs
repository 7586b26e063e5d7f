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
//!
//! A hostile server must not make the worker pay for it: one run's exchange has a budget
//! ([`MAX_REFLECTION_BYTES`] received, [`MAX_FILES`] files, [`MAX_ANSWERS`] answers, and
//! [`MAX_REFLECTION_MEMORY`] for the decoded descriptors, estimated from their bytes before each
//! is decoded); answers are handled one at a time as they arrive, and a run that passes the
//! budget fails naming it, is logged and counted (`etcron_worker_grpc_limits_total{limit}`), and
//! is remembered as refused for [`DESCRIPTOR_TTL`] so the runs after it do not pay it again. What
//! is kept is bounded too ([`MAX_ENTRIES`], [`MAX_CACHE_MEMORY`], the oldest going first), and
//! each entry is dropped when it expires, whether or not a later run looks.

use std::collections::{BTreeMap, BTreeSet};

use etcron_common::hash::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
use prost_reflect::{DescriptorPool, ReflectMessage as _};
use prost_types::FileDescriptorProto;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::Code;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

use super::wire_size::{self, Costs};

/// How long a service's descriptors are used before they are asked for again. A run that fails
/// (any status but OK, or no answer) forgets them at once ([`forget`]); a run refused by the
/// budget is remembered as refused as long.
pub const DESCRIPTOR_TTL: Duration = Duration::from_secs(60);
/// Largest reflection answer read.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// The budget of one run's reflection exchange (both protocol versions together): bytes
/// received in all answers.
pub const MAX_REFLECTION_BYTES: usize = 8 * 1024 * 1024;
/// The budget of one run's reflection exchange: file descriptors received (as sent, the same
/// file twice counts twice); one service's files and imports are at most this many.
pub const MAX_FILES: usize = 256;
/// The budget of one run's reflection exchange: answers read (listing the services included).
pub const MAX_ANSWERS: usize = 512;
/// The budget of one run's reflection exchange: the memory its file descriptors take once
/// decoded, estimated from their bytes before decoding ([`wire_size`]).
pub const MAX_REFLECTION_MEMORY: usize = 64 * 1024 * 1024;
/// What the descriptors of every service kept take in memory together (estimated as for
/// [`MAX_REFLECTION_MEMORY`]); past it the oldest entries go.
pub const MAX_CACHE_MEMORY: usize = 128 * 1024 * 1024;
/// Most (endpoint, service) entries kept; past it the oldest go.
pub const MAX_ENTRIES: usize = 256;
/// Most service names a "no such service" error lists.
const MAX_LISTED: usize = 16;
/// A descriptor decoded: the prost message and the pool's own index of it.
const DESCRIPTOR_COSTS: Costs = Costs { message: 1024, value: 64 };

const V1: &str = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const V1ALPHA: &str = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

type Key = (String, String);

/// What is kept for one service.
#[derive(Clone)]
enum Kept {
    /// Its descriptors, and the memory they take (estimated).
    Pool(DescriptorPool, usize),
    /// The last run's exchange passed the budget: runs fail at once with this until it expires.
    Refused(String),
}

struct Entry {
    at: Instant,
    kept: Kept,
}

impl Entry {
    fn memory(&self) -> usize {
        match &self.kept {
            Kept::Pool(_, bytes) => *bytes,
            Kept::Refused(why) => why.len(),
        }
    }
}

static CACHE: LazyLock<Mutex<HashMap<Key, Entry>>> = LazyLock::new(Mutex::default);

fn cache() -> std::sync::MutexGuard<'static, HashMap<Key, Entry>> {
    CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The descriptors of `service` at `endpoint` (reached through `channel`): from the cache while
/// they are younger than [`DESCRIPTOR_TTL`], else from the server's reflection service.
///
/// # Errors
/// Why the server could not say: no reflection service, an unknown service (naming those it
/// has), an answer that is no descriptor, answers past the budget (naming it).
pub async fn descriptors(
    channel: &Channel,
    endpoint: &str,
    service: &str,
    metadata: &MetadataMap,
) -> Result<DescriptorPool, String> {
    let key = (endpoint.to_owned(), service.to_owned());
    if let Some(kept) = cached(&key) {
        return match kept {
            Kept::Pool(pool, _) => Ok(pool),
            Kept::Refused(why) => Err(format!(
                "{why} (refused within the last {} s: the server is asked again after that)",
                DESCRIPTOR_TTL.as_secs()
            )),
        };
    }
    let server = Server { channel, metadata };
    let mut budget = Budget::default();
    match ask_server(&server, service, &mut budget).await {
        Ok((pool, memory)) => {
            keep(key, Kept::Pool(pool.clone(), memory));
            Ok(pool)
        }
        Err(why) => {
            if let Some(limit) = budget.exceeded {
                tracing::warn!(endpoint, service, limit = limit.name(), "gRPC reflection refused: {why}");
                crate::metrics::METRICS.grpc_limits.with_label_values(&[limit.name()]).inc();
                keep(key, Kept::Refused(why.clone()));
            }
            Err(why)
        }
    }
}

/// What the cache holds for `key`, if younger than [`DESCRIPTOR_TTL`]; expired entries go.
fn cached(key: &Key) -> Option<Kept> {
    let mut entries = cache();
    entries.retain(|_, e| e.at.elapsed() < DESCRIPTOR_TTL);
    entries.get(key).map(|e| e.kept.clone())
}

/// Keeps `kept` for `key`, the oldest entries going past [`MAX_ENTRIES`] or
/// [`MAX_CACHE_MEMORY`]; it goes itself after [`DESCRIPTOR_TTL`] even if nothing asks again.
fn keep(key: Key, kept: Kept) {
    let at = Instant::now();
    let mut entries = cache();
    entries.insert(key.clone(), Entry { at, kept });
    while entries.len() > MAX_ENTRIES || entries.values().map(Entry::memory).sum::<usize>() > MAX_CACHE_MEMORY {
        let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.at).map(|(k, _)| k.clone()) else { break };
        entries.remove(&oldest);
    }
    drop(entries);
    // Released when it expires, not when a later run happens to look.
    etcron_common::task::spawn(async move {
        tokio::time::sleep(DESCRIPTOR_TTL).await;
        let mut entries = cache();
        if entries.get(&key).is_some_and(|e| e.at == at) {
            entries.remove(&key);
        }
    });
}

/// How many (endpoint, service) entries are kept, and their memory (estimated).
#[cfg(test)]
fn kept() -> (usize, usize) {
    let entries = cache();
    (entries.len(), entries.values().map(Entry::memory).sum())
}

/// Which bound of the reflection budget was passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Bytes,
    Files,
    Answers,
    Memory,
}

impl Limit {
    /// The metric's label.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Bytes => "reflection_bytes",
            Limit::Files => "reflection_files",
            Limit::Answers => "reflection_answers",
            Limit::Memory => "reflection_memory",
        }
    }

    fn describe(self) -> String {
        let mib = |b: usize| b / (1024 * 1024);
        let what = match self {
            Limit::Bytes => format!("more than {} MiB of answers", mib(MAX_REFLECTION_BYTES)),
            Limit::Files => format!("more than {MAX_FILES} file descriptors"),
            Limit::Answers => format!("more than {MAX_ANSWERS} answers"),
            Limit::Memory => {
                format!("file descriptors that would take more than {} MiB once decoded", mib(MAX_REFLECTION_MEMORY))
            }
        };
        format!("its answers passed the worker's reflection budget ({}): {what} in one run", self.name())
    }
}

/// What one run's reflection exchange has received so far, against its bounds.
#[derive(Debug, Default)]
struct Budget {
    bytes: usize,
    files: usize,
    answers: usize,
    memory: usize,
    /// The bound passed, once one is.
    exceeded: Option<Limit>,
}

impl Budget {
    /// Counts an answer of `bytes` (encoded).
    fn answer(&mut self, bytes: usize) -> Result<(), Failure> {
        self.answers += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.answers > MAX_ANSWERS {
            return self.exceed(Limit::Answers);
        }
        if self.bytes > MAX_REFLECTION_BYTES {
            return self.exceed(Limit::Bytes);
        }
        Ok(())
    }

    /// Counts a file descriptor (encoded as `bytes`), before it is decoded.
    fn file(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.files += 1;
        if self.files > MAX_FILES {
            return self.exceed(Limit::Files);
        }
        let room = MAX_REFLECTION_MEMORY.saturating_sub(self.memory);
        let desc = FileDescriptorProto::default().descriptor();
        match wire_size::decoded_size(&desc, bytes, DESCRIPTOR_COSTS, room) {
            Ok(memory) => {
                self.memory += memory;
                Ok(())
            }
            Err(wire_size::Over) => self.exceed(Limit::Memory),
        }
    }

    fn exceed(&mut self, limit: Limit) -> Result<(), Failure> {
        self.exceeded = Some(limit);
        Err(Failure::Answer(limit.describe()))
    }
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

/// Asks v1, then v1alpha when the server does not implement v1; the pool and its memory
/// (estimated). Both count against one `budget`; once it is passed, nothing more is asked.
async fn ask_server(
    server: &Server<'_>,
    service: &str,
    budget: &mut Budget,
) -> Result<(DescriptorPool, usize), String> {
    match resolve(server, V1, service, budget).await {
        Err(Failure::Status(status)) if status.code() == Code::Unimplemented => {
            resolve(server, V1ALPHA, service, budget).await.map_err(|f| f.describe(service))
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

/// The file defining `service` and everything it imports, as a descriptor pool, and its memory
/// (estimated).
async fn resolve(
    server: &Server<'_>,
    path: &'static str,
    service: &str,
    budget: &mut Budget,
) -> Result<(DescriptorPool, usize), Failure> {
    let mut pool = DescriptorPool::global();
    let mut files: BTreeMap<String, FileDescriptorProto> = BTreeMap::new();
    let mut asks = vec![MessageRequest::FileContainingSymbol(service.to_owned())];
    let memory_before = budget.memory;
    while !asks.is_empty() {
        let first = files.is_empty();
        let found = match ask_files(server, path, asks, budget).await {
            // Some servers answer an unknown symbol with an error answer, others end the stream.
            Err(Failure::Status(s)) if s.code() == Code::NotFound && first => {
                let known = list_services(server, path, budget).await.unwrap_or_else(|_| "unknown".to_owned());
                return Err(Failure::Answer(format!("the server has no service {service} (its services: {known})")));
            }
            Err(Failure::Status(s)) if s.code() == Code::NotFound => {
                return Err(Failure::Answer(format!("a file the service's files import is missing: {}", s.message())));
            }
            other => other?,
        };
        let before = files.len();
        files.extend(found.into_iter().map(|f| (f.name().to_owned(), f)));
        let wanted = missing(&files, &pool);
        if files.len() == before {
            // Asked again, it would answer the same: a loop that costs the server nothing.
            let names: Vec<&str> = wanted.iter().map(String::as_str).take(MAX_LISTED).collect();
            let asked = if first { format!("the file defining {service}") } else { names.join(", ") };
            return Err(Failure::Answer(format!("it did not send the files asked for: {asked}")));
        }
        asks = wanted.into_iter().map(MessageRequest::FileByFilename).collect();
    }
    pool.add_file_descriptor_protos(files.into_values())
        .map_err(|e| Failure::Answer(format!("the descriptors it sent do not fit together: {e}")))?;
    Ok((pool, budget.memory - memory_before))
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

/// The files the answers to `asks` hold, each counted against `budget` before it is decoded;
/// an error answer is a failed status.
async fn ask_files(
    server: &Server<'_>,
    path: &'static str,
    asks: Vec<MessageRequest>,
    budget: &mut Budget,
) -> Result<Vec<FileDescriptorProto>, Failure> {
    let mut files = Vec::new();
    ask(server, path, asks, budget, |answer, budget| {
        match answer.message_response {
            Some(MessageResponse::FileDescriptorResponse(r)) => {
                for bytes in &r.file_descriptor_proto {
                    budget.file(bytes)?;
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
        Ok(())
    })
    .await?;
    Ok(files)
}

/// The services the server lists (at most [`MAX_LISTED`]), comma-separated (reflection's own
/// left out).
async fn list_services(server: &Server<'_>, path: &'static str, budget: &mut Budget) -> Result<String, Failure> {
    let mut names: Vec<String> = Vec::new();
    let mut more = false;
    ask(server, path, vec![MessageRequest::ListServices(String::new())], budget, |answer, _| {
        if let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response {
            for name in list.service.into_iter().map(|s| s.name).filter(|n| !n.starts_with("grpc.reflection.")) {
                if names.len() < MAX_LISTED {
                    names.push(etcron_model::output::clipped(&name, 256));
                } else {
                    more = true;
                }
            }
        }
        Ok(())
    })
    .await?;
    if more {
        names.push("…".to_owned());
    }
    Ok(if names.is_empty() { "none".to_owned() } else { names.join(", ") })
}

/// Sends `asks` on one reflection stream and hands as many answers to `each`, one at a time
/// as they arrive, each counted against `budget` first.
async fn ask(
    server: &Server<'_>,
    path: &'static str,
    asks: Vec<MessageRequest>,
    budget: &mut Budget,
    mut each: impl FnMut(ServerReflectionResponse, &mut Budget) -> Result<(), Failure>,
) -> Result<(), Failure> {
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
    for read in 0..expected {
        match answers.message().await.map_err(Failure::Status)? {
            Some(answer) => {
                budget.answer(answer.encoded_len())?;
                each(answer, budget)?;
            }
            None => return Err(Failure::Answer(format!("it ended the stream after {read} of {expected} answers"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache is the process's: tests that fill or time it take turns.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    fn limit_of(result: Result<(), Failure>, budget: &Budget) -> Option<Limit> {
        match result {
            Err(Failure::Answer(why)) => {
                let limit = budget.exceeded.expect("a refusal names its limit");
                assert!(why.contains(limit.name()), "{why}");
                Some(limit)
            }
            Err(Failure::Status(s)) => panic!("{s:?}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn the_budget_counts_bytes_answers_files_and_decoded_memory() {
        let mut budget = Budget::default();
        assert_eq!(limit_of(budget.answer(MAX_REFLECTION_BYTES - 10), &budget), None);
        assert_eq!(limit_of(budget.answer(11), &budget), Some(Limit::Bytes));

        let mut budget = Budget::default();
        for _ in 0..MAX_ANSWERS {
            assert_eq!(limit_of(budget.answer(0), &budget), None);
        }
        assert_eq!(limit_of(budget.answer(0), &budget), Some(Limit::Answers));

        let empty = FileDescriptorProto::default().encode_to_vec();
        let mut budget = Budget::default();
        for _ in 0..MAX_FILES {
            assert_eq!(limit_of(budget.file(&empty), &budget), None);
        }
        assert_eq!(limit_of(budget.file(&empty), &budget), Some(Limit::Files));

        // Small on the wire, large once decoded: 2 bytes per empty message.
        let many = |n| {
            FileDescriptorProto { message_type: vec![prost_types::DescriptorProto::default(); n], ..Default::default() }
                .encode_to_vec()
        };
        let mut budget = Budget::default();
        assert_eq!(limit_of(budget.file(&many(1000)), &budget), None);
        let past = MAX_REFLECTION_MEMORY / DESCRIPTOR_COSTS.message;
        let bloated = many(past);
        assert!(bloated.len() < MAX_REFLECTION_BYTES / 16, "{}", bloated.len());
        assert_eq!(limit_of(budget.file(&bloated), &budget), Some(Limit::Memory));
        assert!(Limit::Memory.describe().contains("64 MiB once decoded"), "{}", Limit::Memory.describe());
    }

    #[tokio::test]
    async fn the_cache_is_bounded_in_entries_and_memory_oldest_first() {
        let _serial = SERIAL.lock().await;
        let pool = DescriptorPool::global();
        let key = |i: usize| (format!("http://cache-test-{i}"), "s".to_owned());
        for i in 0..MAX_ENTRIES + 10 {
            keep(key(i), Kept::Pool(pool.clone(), 1));
        }
        assert!(kept().0 <= MAX_ENTRIES, "{:?}", kept());
        assert!(cached(&key(0)).is_none(), "the oldest went");
        assert!(cached(&key(MAX_ENTRIES + 9)).is_some());
        let big = MAX_CACHE_MEMORY / 2 + 1;
        keep(key(1000), Kept::Pool(pool.clone(), big));
        keep(key(1001), Kept::Pool(pool.clone(), big));
        assert!(kept().1 <= MAX_CACHE_MEMORY, "{:?}", kept());
        assert!(cached(&key(1000)).is_none() && cached(&key(1001)).is_some());
        // A refusal is kept too, and answered without asking.
        keep(key(2000), Kept::Refused("passed the budget".to_owned()));
        assert!(matches!(cached(&key(2000)), Some(Kept::Refused(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_is_released_at_its_expiry_without_another_run() {
        let _serial = SERIAL.lock().await;
        let key = ("http://expiry-test".to_owned(), "s".to_owned());
        let pool = DescriptorPool::global();
        keep(key.clone(), Kept::Pool(pool.clone(), 1));
        // The pool is shared by the cache and by us.
        let held = || cache().get(&key).map(|e| matches!(&e.kept, Kept::Pool(p, _) if *p == pool));
        assert_eq!(held(), Some(true));
        tokio::time::sleep(DESCRIPTOR_TTL + Duration::from_millis(1)).await;
        // Nothing looked up the cache (which drops expired entries too): the timer did.
        assert_eq!(held(), None);
    }
}
