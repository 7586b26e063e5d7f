//! Every integration test of etcron, in one binary: one module per area, each file a module
//! (cargo links one test binary instead of one per file, and runs every test from one list).
//! Run one area with `cargo test -p etcron-tests --test it <module>::`, one test by its name.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

mod admission;
mod alerts;
mod api;
mod async_http;
mod backfill;
mod batch;
mod burst;
mod calendars;
mod ctl;
mod deploy_files;
mod docs_examples;
mod etcd_alarm;
mod etcd_faults;
mod etcd_security;
mod etcd_storage;
mod failover;
mod grpc;
mod hardening;
mod history;
mod job_store;
mod jobs_api;
mod kill;
mod limits;
mod malformed;
mod masters;
mod metrics;
mod misfire;
mod notify;
mod openapi;
mod pause;
mod progress;
mod queue;
mod records;
mod run_as;
mod run_params;
mod schedule_shape;
mod scheduling;
mod search_plans;
mod security;
mod semantics;
mod skew;
mod stream;
mod structure;
mod task_isolation;
mod teams;
mod ui;
mod watch;
