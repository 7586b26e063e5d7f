//! Tasks: how a run's task is started, watched, stopped and reported — shell tasks (their
//! process set-up, accounts, network and keeper), HTTP (with asynchronous polling) and gRPC,
//! live output and progress. A task knows its execution id and its limits, nothing of claims,
//! records or the fire path: this folder imports only `metrics`.

pub mod child;
pub mod grpc;
pub mod handler;
pub mod http;
pub mod http_client;
pub mod http_poll;
pub mod keeper;
pub mod live_output;
pub mod netns;
pub mod network;
pub mod progress;
pub mod run_as;
pub mod shell;
pub mod uids;
