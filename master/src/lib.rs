//! etcron master: the HTTP API over the job specs, kill commands and trigger requests in etcd,
//! and the operator UI.

pub mod access;
pub mod api;
pub mod audit;
pub mod auth;
pub mod backend;
pub mod change_limits;
pub mod client;
pub mod compactor;
pub mod config;
pub mod error;
pub mod etcd_storage;
pub mod guard;
pub mod job_store;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod pause_expiry;
pub mod query;
pub mod stream;
pub mod team_policy;
pub mod web;
