//! etcron master: the HTTP API over the job specs, kill commands and trigger requests in etcd,
//! and the operator UI.

pub mod access;
pub mod api;
pub mod backend;
pub mod change_limits;
pub mod config;
pub mod duties;
pub mod error;
pub mod job_index;
pub mod job_store;
pub mod layers;
pub mod metrics;
pub mod openapi;
pub mod query;
pub mod team_policy;
pub mod web;
