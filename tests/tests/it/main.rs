//! Every integration test of etcron, in one binary: a folder per kind (`api/`, `faults/`,
//! `features/`, `meta/`), a module per area, each file a module (cargo links one test binary
//! instead of one per file). Run one area with `cargo nextest run -p etcron-tests --test it
//! <area>::` (e.g. `queue::`), one test by its name.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

/// The API and its clients: routes, validation, roles and teams, the job store, resource pools, etcronctl, the stream, the search.
mod api {
    mod batch;
    mod ctl;
    mod hardening;
    mod history;
    mod job_pages;
    mod job_store;
    mod jobs_api;
    mod masters;
    mod openapi;
    mod pools;
    mod routes;
    mod search_plans;
    mod security;
    mod spec_check;
    mod stream;
    mod teams;
    mod workflows;
}

/// Faults: etcd stalled, full, compacted or cut off, MongoDB down, workers killed, frozen or skewed, bad values in etcd.
mod faults {
    mod admission;
    mod etcd_alarm;
    mod etcd_faults;
    mod etcd_storage;
    mod failover;
    mod malformed;
    mod records;
    mod skew;
    mod watch;
}

/// What jobs do: schedules and their shapes, concurrency, retries, tasks of every kind, alerts, notifications, pauses, backfills, cordons, the console.
mod features {
    mod alerts;
    mod async_http;
    mod backfill;
    mod burst;
    mod calendars;
    mod cordon;
    mod etcd_security;
    mod executors;
    mod grpc;
    mod kill;
    mod limits;
    mod metrics;
    mod misfire;
    mod namespaces;
    mod notify;
    mod pause;
    mod phases;
    mod pools;
    mod progress;
    mod queue;
    mod results;
    mod run_as;
    mod run_params;
    mod schedule_shape;
    mod scheduling;
    mod sdk;
    mod semantics;
    mod task_isolation;
    mod traces;
    mod ui;
    mod workflows;
}

/// The repository itself: the code's layout, the examples in the docs, the deployment files.
mod meta {
    mod deploy_files;
    mod docs_examples;
    mod structure;
}
