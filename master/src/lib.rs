//! etcron master: the HTTP API over the job specs, kill commands and trigger requests in etcd.

pub mod api;
pub mod config;
pub mod error;
