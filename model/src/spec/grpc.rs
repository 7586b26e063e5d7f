//! gRPC tasks (`{"kind":"grpc",…}`): the spec's fields and their checks, and the pure parts of a
//! call that the master (at save time) and the worker (at run time) share: a method's name, a
//! `descriptor_set` decoded into descriptors, the lookup of a unary method among them, and a
//! JSON `request` read as that method's input message (proto3's JSON mapping). No network:
//! the worker's `tasks/grpc` makes the calls.

use std::collections::BTreeMap;

use base64::Engine as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MethodDescriptor};
use serde::de::DeserializeSeed as _;
use serde::{Deserialize, Serialize};

use crate::spec::headers::Secrets;
use crate::spec::SpecError;

/// Longest `endpoint`.
pub const MAX_ENDPOINT_LEN: usize = 2048;
/// Longest `method` (`pkg.Service/Method`).
pub const MAX_METHOD_LEN: usize = 512;
/// Largest `request`, as compact JSON.
pub const MAX_REQUEST_BYTES: usize = 32 * 1024;
/// Largest `descriptor_set`, decoded (its base64 text is a third longer; the whole spec is at
/// most 64 KiB).
pub const MAX_DESCRIPTOR_SET_BYTES: usize = 36 * 1024;
/// Most entries of `metadata` and `secret_metadata` together.
pub const MAX_METADATA_ENTRIES: usize = 64;
/// Longest metadata name.
pub const MAX_METADATA_NAME_LEN: usize = 128;
/// Longest metadata value.
pub const MAX_METADATA_VALUE_LEN: usize = 4096;
/// Metadata names that HTTP/2 or the gRPC client itself sets: a job may not.
pub const RESERVED_METADATA: [&str; 9] = [
    "content-type",
    "te",
    "user-agent",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "keep-alive",
];
/// Prefix of etcron's own metadata (`x-etcron-execution-id`, …), set on every call.
pub const ETCRON_METADATA_PREFIX: &str = "x-etcron-";

/// A gRPC task: one unary call of `method` at `endpoint` with `request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcTask {
    /// `http://host:port` (plaintext HTTP/2) or `https://host[:port]` (TLS).
    pub endpoint: String,
    /// `package.Service/Method`.
    pub method: String,
    /// The request message as proto3 JSON; `{}` (every field at its default) when absent.
    #[serde(default = "empty_object")]
    pub request: serde_json::Value,
    /// Metadata sent with the call (lowercase names).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Metadata the API never shows (e.g. `authorization`), as `secret_headers`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_metadata: Secrets,
    /// A serialized `google.protobuf.FileDescriptorSet`, base64: the method's descriptors,
    /// instead of asking the server's reflection service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptor_set: Option<String>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// A method's name split: `("pkg.Service", "Method")`.
///
/// # Errors
/// What is wrong with the name.
pub fn parse_method(method: &str) -> Result<(&str, &str), String> {
    let shape = || {
        format!(
            "must be package.Service/Method (the service's full name, a slash, the method's name; at most \
             {MAX_METHOD_LEN} bytes), got {method:?}"
        )
    };
    if method.len() > MAX_METHOD_LEN {
        return Err(shape());
    }
    let (service, name) = method.split_once('/').ok_or_else(shape)?;
    let identifier = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if service.split('.').all(identifier) && identifier(name) {
        Ok((service, name))
    } else {
        Err(shape())
    }
}

/// Checks an endpoint: an absolute `http://` or `https://` URL with a host and a valid port and
/// nothing else (no path, query, fragment or credentials).
///
/// # Errors
/// What is wrong with it.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    crate::spec::headers::check_url(endpoint, MAX_ENDPOINT_LEN)
        .map_err(|e| e.replace("URL", "URL (http:// for plaintext, https:// for TLS)"))?;
    let url = url::Url::parse(endpoint).map_err(|e| e.to_string())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold credentials: send them as task.secret_metadata (e.g. authorization)".to_owned());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("must be only scheme, host and port (e.g. http://10.0.0.5:50051): the method goes in task.method"
            .to_owned());
    }
    Ok(())
}

/// Checks a metadata name: 1..[`MAX_METADATA_NAME_LEN`] lowercase letters, digits, `_ - .`, not
/// binary (`-bin`), not `grpc-*`, `x-etcron-*` or one of [`RESERVED_METADATA`].
///
/// # Errors
/// What is wrong with it.
pub fn check_metadata_name(name: &str) -> Result<(), String> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_METADATA_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    if !well_formed {
        return Err(format!(
            "gRPC metadata names are 1..{MAX_METADATA_NAME_LEN} lowercase letters, digits, '-', '_' or '.'"
        ));
    }
    if name.ends_with("-bin") {
        return Err("binary metadata (-bin) is not supported: give a text value under another name".to_owned());
    }
    if name.starts_with("grpc-") {
        return Err("grpc-* metadata is reserved for the gRPC protocol".to_owned());
    }
    if name.starts_with(ETCRON_METADATA_PREFIX) {
        return Err("x-etcron-* metadata is set by etcron on every call".to_owned());
    }
    if RESERVED_METADATA.contains(&name) {
        return Err(format!("{name} is set by etcron's gRPC client on every call"));
    }
    Ok(())
}

/// Checks a metadata value: printable ASCII (space to `~`), at most [`MAX_METADATA_VALUE_LEN`]
/// bytes, as gRPC allows for text metadata.
///
/// # Errors
/// What is wrong with it (never the value itself: it may be a secret).
pub fn check_metadata_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_METADATA_VALUE_LEN {
        return Err(format!("value longer than {MAX_METADATA_VALUE_LEN} bytes"));
    }
    if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return Err(
            "gRPC metadata values are printable ASCII (space to ~): no line breaks, tabs or non-ASCII".to_owned()
        );
    }
    Ok(())
}

/// Checks every field of a gRPC task; with a `descriptor_set`, also that it holds the method as
/// a unary one and that `request` reads as its input message.
///
/// # Errors
/// The first problem, naming its field (`task.method`, `task.metadata.x-a`, `task.request.count`…).
pub fn validate(task: &GrpcTask) -> Result<(), SpecError> {
    check_endpoint(&task.endpoint).map_err(|m| SpecError::at("task.endpoint", m))?;
    parse_method(&task.method).map_err(|m| SpecError::at("task.method", m))?;
    if !task.request.is_object() {
        return Err(SpecError::at("task.request", "must be a JSON object (the request message in proto3 JSON)"));
    }
    if task.request.to_string().len() > MAX_REQUEST_BYTES {
        return Err(SpecError::at("task.request", format!("longer than {MAX_REQUEST_BYTES} bytes as JSON")));
    }
    validate_metadata(task)?;
    if let Some(set) = &task.descriptor_set {
        let pool = descriptor_pool(set).map_err(|m| SpecError::at("task.descriptor_set", m))?;
        let method = unary_method(&pool, &task.method)
            .map_err(|m| SpecError::at("task.method", format!("{m} (looked up in task.descriptor_set)")))?;
        request_message(&method, &task.request).map_err(|e| SpecError::at(&e.field("task.request"), e.message))?;
    }
    Ok(())
}

fn validate_metadata(task: &GrpcTask) -> Result<(), SpecError> {
    if task.metadata.len() > MAX_METADATA_ENTRIES {
        return Err(SpecError::at("task.metadata", format!("at most {MAX_METADATA_ENTRIES} entries")));
    }
    if task.metadata.len() + task.secret_metadata.len() > MAX_METADATA_ENTRIES {
        return Err(SpecError::at(
            "task.secret_metadata",
            format!("at most {MAX_METADATA_ENTRIES} entries with the plain ones"),
        ));
    }
    let plain = task.metadata.iter().map(|(k, v)| ("task.metadata", k, Some(v.as_str())));
    let secret = task.secret_metadata.iter().map(|(k, v)| ("task.secret_metadata", k, v.as_deref()));
    for (field, name, value) in plain.chain(secret) {
        let at = || format!("{field}.{name}");
        check_metadata_name(name).map_err(|m| SpecError::at(&at(), m))?;
        if let Some(value) = value {
            check_metadata_value(value).map_err(|m| SpecError::at(&at(), m))?;
        }
    }
    if let Some(k) = task.secret_metadata.keys().find(|k| task.metadata.contains_key(*k)) {
        return Err(SpecError::at(
            &format!("task.secret_metadata.{k}"),
            "is also in task.metadata; give each name once",
        ));
    }
    Ok(())
}

/// The descriptors of a `descriptor_set` (base64 of a serialized `FileDescriptorSet`), on top of
/// the well-known types (`google/protobuf/*.proto`), which it may then leave out.
///
/// # Errors
/// Why it cannot be read.
pub fn descriptor_pool(descriptor_set: &str) -> Result<DescriptorPool, String> {
    // Checked before decoding: base64 is 4 bytes of text per 3 decoded.
    if descriptor_set.len() > MAX_DESCRIPTOR_SET_BYTES.div_ceil(3) * 4 {
        return Err(format!("longer than {MAX_DESCRIPTOR_SET_BYTES} bytes decoded"));
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(descriptor_set.trim()).map_err(|e| {
        format!(
            "must be base64 (standard alphabet, padded: `base64 -w0 set.pb`) of a serialized FileDescriptorSet: {e}"
        )
    })?;
    if bytes.is_empty() {
        return Err("is empty: give a FileDescriptorSet that holds the method's service".to_owned());
    }
    let mut pool = DescriptorPool::global();
    pool.decode_file_descriptor_set(bytes.as_slice()).map_err(|e| {
        format!("is not a usable FileDescriptorSet (protoc --include_imports --descriptor_set_out): {e}")
    })?;
    Ok(pool)
}

/// The unary method `method` (`pkg.Service/Method`) among `pool`'s services.
///
/// # Errors
/// Why it cannot be called: no such service or method (naming what there is), or a streaming one.
pub fn unary_method(pool: &DescriptorPool, method: &str) -> Result<MethodDescriptor, String> {
    let (service_name, method_name) = parse_method(method)?;
    let Some(service) = pool.get_service_by_name(service_name) else {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_owned()).collect();
        return Err(format!("no service {service_name} (services: {})", list_or_none(&known)));
    };
    let Some(found) = service.methods().find(|m| m.name() == method_name) else {
        let known: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
        return Err(format!(
            "service {service_name} has no method {method_name} (its methods: {})",
            list_or_none(&known)
        ));
    };
    let streaming = match (found.is_client_streaming(), found.is_server_streaming()) {
        (false, false) => return Ok(found),
        (true, true) => "bidirectional streaming",
        (true, false) => "client streaming",
        (false, true) => "server streaming",
    };
    Err(format!("{service_name}/{method_name} is {streaming}: gRPC tasks call unary methods only"))
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// Why a `request` does not read as the method's input message: where (a path inside the
/// request, empty for the whole) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    pub path: String,
    pub message: String,
}

impl RequestError {
    /// The field it names, below `base` (`task.request` → `task.request.inner.count`).
    #[must_use]
    pub fn field(&self, base: &str) -> String {
        match self.path.as_str() {
            "" => base.to_owned(),
            p if p.starts_with('[') => format!("{base}{p}"),
            p => format!("{base}.{p}"),
        }
    }
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// `request` (proto3 JSON: field names as in the .proto or in lowerCamelCase, 64-bit integers
/// as numbers or strings, enums by name or number) as the input message of `method`; a field
/// the message does not have is refused.
///
/// # Errors
/// The path of the offending field and what is wrong with it.
pub fn request_message(method: &MethodDescriptor, request: &serde_json::Value) -> Result<DynamicMessage, RequestError> {
    let mut track = serde_path_to_error::Track::new();
    let deserializer = serde_path_to_error::Deserializer::new(request, &mut track);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let seed = MessageSeed { desc: method.input(), options: &options };
    seed.deserialize(deserializer).map_err(|e: serde_json::Error| {
        let path = track.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let message = e.to_string();
        // "unrecognized field name 'x'": the field is the path's last step.
        let unknown = message
            .strip_prefix("unrecognized field name '")
            .and_then(|rest| rest.split_once('\''))
            .map(|(name, _)| name);
        match unknown {
            Some(name) if path.is_empty() => RequestError { path: name.to_owned(), message },
            Some(name) if !path.ends_with(name) => RequestError { path: format!("{path}.{name}"), message },
            _ => RequestError { path, message },
        }
    })
}

/// A message descriptor with deserialize options, as a serde seed.
struct MessageSeed<'a> {
    desc: prost_reflect::MessageDescriptor,
    options: &'a DeserializeOptions,
}

impl<'de> serde::de::DeserializeSeed<'de> for MessageSeed<'_> {
    type Value = DynamicMessage;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<DynamicMessage, D::Error> {
        DynamicMessage::deserialize_with_options(self.desc, deserializer, self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_are_service_slash_method() {
        assert_eq!(parse_method("etcron.test.Echo/Echo"), Ok(("etcron.test.Echo", "Echo")));
        assert_eq!(parse_method("Svc/Call_2"), Ok(("Svc", "Call_2")));
        for bad in [
            "",
            "Echo",
            "/etcron.Echo/Echo",
            "etcron.Echo/",
            "etcron..Echo/Echo",
            "a.b/c/d",
            "a.1b/C",
            "a b/C",
            "a.B/C-d",
        ] {
            assert!(parse_method(bad).is_err(), "{bad}");
        }
        assert!(parse_method(&format!("a.B/{}", "c".repeat(MAX_METHOD_LEN))).is_err());
    }

    #[test]
    fn endpoints_are_scheme_host_and_port_only() {
        for ok in ["http://127.0.0.1:50051", "https://api.example", "https://api.example:8443/", "http://[::1]:9"] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:50051",
            "grpc://h:1",
            "http://h:99999",
            "http://h:1/pkg.Svc/Method",
            "http://h:1?x=1",
            "https://u:p@h/",
            "http://",
            "not a url",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_names_and_values_follow_grpc() {
        for ok in ["authorization", "x-api-key", "a.b_c-1"] {
            assert_eq!(check_metadata_name(ok), Ok(()), "{ok}");
        }
        for bad in
            ["", "Authorization", "x-etcron-job", "grpc-timeout", "trace-bin", "content-type", "te", "a b", ":path"]
        {
            assert!(check_metadata_name(bad).is_err(), "{bad}");
        }
        assert!(check_metadata_value("Bearer abc ~").is_ok());
        for bad in ["a\nb", "a\tb", "é", "a\0"] {
            assert!(check_metadata_value(bad).is_err(), "{bad:?}");
        }
    }

    /// A set with `t.Svc` (unary `Call`, server-streaming `Watch`) whose input has `count`,
    /// `tags` and a nested `inner { flag }`.
    fn descriptor_set() -> String {
        use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
        use prost_reflect::prost_types::{
            DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto,
            ServiceDescriptorProto,
        };
        let field = |name: &str, number: i32, kind: Type, label: Label, type_name: Option<&str>| FieldDescriptorProto {
            name: Some(name.to_owned()),
            number: Some(number),
            r#type: Some(kind as i32),
            label: Some(label as i32),
            type_name: type_name.map(str::to_owned),
            json_name: None,
            ..Default::default()
        };
        let message = |name: &str, fields: Vec<FieldDescriptorProto>| DescriptorProto {
            name: Some(name.to_owned()),
            field: fields,
            ..Default::default()
        };
        let method = |name: &str, streaming: bool| MethodDescriptorProto {
            name: Some(name.to_owned()),
            input_type: Some(".t.In".to_owned()),
            output_type: Some(".t.In".to_owned()),
            server_streaming: Some(streaming),
            ..Default::default()
        };
        let file = FileDescriptorProto {
            name: Some("t.proto".to_owned()),
            package: Some("t".to_owned()),
            syntax: Some("proto3".to_owned()),
            message_type: vec![
                message("Inner", vec![field("flag", 1, Type::Bool, Label::Optional, None)]),
                message(
                    "In",
                    vec![
                        field("count", 1, Type::Int64, Label::Optional, None),
                        field("tags", 2, Type::String, Label::Repeated, None),
                        field("inner_part", 3, Type::Message, Label::Optional, Some(".t.Inner")),
                    ],
                ),
            ],
            service: vec![ServiceDescriptorProto {
                name: Some("Svc".to_owned()),
                method: vec![method("Call", false), method("Watch", true)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let set = FileDescriptorSet { file: vec![file] };
        base64::engine::general_purpose::STANDARD.encode(prost_reflect::prost::Message::encode_to_vec(&set))
    }

    #[test]
    fn a_descriptor_set_finds_unary_methods_only() {
        let pool = descriptor_pool(&descriptor_set()).unwrap();
        assert_eq!(unary_method(&pool, "t.Svc/Call").unwrap().full_name(), "t.Svc.Call");
        let err = unary_method(&pool, "t.Svc/Watch").unwrap_err();
        assert!(err.contains("server streaming"), "{err}");
        let err = unary_method(&pool, "t.Svc/Nope").unwrap_err();
        assert!(err.contains("its methods: Call, Watch"), "{err}");
        let err = unary_method(&pool, "t.Other/Call").unwrap_err();
        assert!(err.contains("no service t.Other") && err.contains("t.Svc"), "{err}");
        for bad in ["not base64!", "AAAA", ""] {
            assert!(descriptor_pool(bad).is_err(), "{bad}");
        }
        let huge = "A".repeat(MAX_DESCRIPTOR_SET_BYTES.div_ceil(3) * 4 + 4);
        assert!(descriptor_pool(&huge).unwrap_err().contains("longer than"));
    }

    #[test]
    fn requests_read_as_the_input_message_naming_the_bad_field() {
        let pool = descriptor_pool(&descriptor_set()).unwrap();
        let method = unary_method(&pool, "t.Svc/Call").unwrap();
        let ok = serde_json::json!({"count": "12", "tags": ["a"], "innerPart": {"flag": true}});
        let message = request_message(&method, &ok).unwrap();
        assert_eq!(message.get_field_by_name("count").unwrap().as_i64(), Some(12));
        assert!(request_message(&method, &serde_json::json!({"inner_part": {}})).is_ok(), "proto names too");
        let cases = [
            (serde_json::json!({"cuont": 1}), "cuont"),
            (serde_json::json!({"innerPart": {"flg": true}}), "innerPart.flg"),
            (serde_json::json!({"count": "many"}), "count"),
            (serde_json::json!({"tags": ["a", 5]}), "tags[1]"),
        ];
        for (request, path) in cases {
            let err = request_message(&method, &request).unwrap_err();
            assert_eq!(err.path, path, "{request}: {err}");
            assert!(!err.message.is_empty());
        }
        let err = request_message(&method, &serde_json::json!({"cuont": 1})).unwrap_err();
        assert_eq!(err.field("task.request"), "task.request.cuont");
    }

    #[test]
    fn a_task_with_a_descriptor_set_is_checked_against_it() {
        let task = |method: &str, request: serde_json::Value| GrpcTask {
            endpoint: "http://127.0.0.1:1".to_owned(),
            method: method.to_owned(),
            request,
            metadata: BTreeMap::new(),
            secret_metadata: Secrets::new(),
            descriptor_set: Some(descriptor_set()),
        };
        assert_eq!(validate(&task("t.Svc/Call", serde_json::json!({"count": 1}))), Ok(()));
        let field = |t: GrpcTask| validate(&t).unwrap_err().field;
        assert_eq!(field(task("t.Svc/Watch", serde_json::json!({}))).as_deref(), Some("task.method"));
        assert_eq!(field(task("t.Svc/Call", serde_json::json!({"x": 1}))).as_deref(), Some("task.request.x"));
        assert_eq!(field(task("t.Svc/Call", serde_json::json!([1]))).as_deref(), Some("task.request"));
        let mut bad = task("t.Svc/Call", serde_json::json!({}));
        bad.descriptor_set = Some("%%%".to_owned());
        assert_eq!(field(bad).as_deref(), Some("task.descriptor_set"));
    }
}
