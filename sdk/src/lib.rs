//! `etcron-sdk`: an application's own async functions run as etcron jobs.
//!
//! An [`Executor`] embeds an etcron worker whose tasks are the application's **handlers**: it
//! registers under a session lease like any worker, advertising the handlers' names, and races
//! for the ticks of jobs whose task is `{"kind":"handler","name":…}` — those only (it never runs
//! a shell, HTTP or gRPC task). Exactly once, fencing, records in MongoDB, live output,
//! progress, kills, timeouts, retries and failover with checkpoints are the worker's, unchanged.
//! [`ensure_jobs`] declares the application's jobs through a master's API at start.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let executor = etcron_sdk::Executor::from_args(["--worker-id", "hot-list-1", "--data-dir", "/var/lib/app/etcron"])?
//!     .handler("hot-list", |ctx: etcron_sdk::Context| async move {
//!         let start = ctx.checkpoint().and_then(|c| c["step"].as_u64()).unwrap_or(0);
//!         for step in start..10 {
//!             ctx.progress(step as f64 * 10.0, &format!("step {step}")).await;
//!             ctx.save_checkpoint(serde_json::json!({"step": step + 1})).await?;
//!         }
//!         Ok(serde_json::json!({"steps": 10}))
//!     });
//! executor.run(async { tokio::signal::ctrl_c().await.ok(); }).await
//! # }
//! ```
//!
//! The manual is `docs/sdk.md`; `examples/hot_list.rs` runs as it describes.

mod context;
mod jobs;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use etcron_worker::config::{Cli, Config};
use etcron_worker::tasks::handler::{Call, Handlers, Run};

pub use context::Context;
pub use jobs::{ensure_jobs, Ensured, MANAGED_BY};

/// What a handler returns: a JSON value for its record's `result` (`null`: none), or an error
/// that fails the run (its message is the record's `error`).
pub type HandlerResult = Result<serde_json::Value, HandlerError>;

/// A handler's failure: any error converts into it (`?` works on `anyhow`, I/O, … errors).
#[derive(Debug)]
pub struct HandlerError(pub String);

impl<E: std::fmt::Display> From<E> for HandlerError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

type Handler = Arc<dyn Fn(Context) -> std::pin::Pin<Box<dyn Future<Output = HandlerResult> + Send>> + Send + Sync>;

/// An executor of the application's handlers: a worker of the cluster (its configuration is a
/// worker's: flags, `ETCRON_*` variables or a config file) that runs only them.
pub struct Executor {
    config: Config,
    handlers: BTreeMap<String, Handler>,
}

impl Executor {
    /// An executor configured as `etcron-worker` would be by these flags (and the `ETCRON_*`
    /// variables, and `--config FILE`): etcd endpoints, namespace, MongoDB, `--worker-id`,
    /// `--data-dir`, `--capacity`, `--session-ttl`, labels, teams.
    ///
    /// # Errors
    /// A flag or value the worker would refuse, naming it.
    pub fn from_args<I, S>(args: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        let argv = std::iter::once(std::ffi::OsString::from("etcron-executor")).chain(args.into_iter().map(Into::into));
        let cli = Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Self { config: Config::resolve(cli)?, handlers: BTreeMap::new() })
    }

    /// Registers `f` as handler `name`: the jobs whose task is `{"kind":"handler","name":name}`
    /// run it, on whichever live executor that registered it wins the tick.
    ///
    /// # Panics
    /// When `name` is not a valid handler name (`[A-Za-z0-9][A-Za-z0-9._-]{0,127}`).
    #[must_use]
    pub fn handler<F, Fut>(mut self, name: &str, f: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        if let Err(e) = etcron_model::keys::validate_id(name) {
            panic!("handler name {name:?}: {e}");
        }
        let f = Arc::new(f);
        self.handlers.insert(name.to_owned(), Arc::new(move |ctx| Box::pin(f(ctx))));
        self
    }

    /// The worker id this executor registers as.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// Joins the cluster and runs handlers until `shutdown` resolves, then leaves as a worker
    /// does on SIGTERM: no new runs, running handlers get `shutdown_grace`, the session revoked.
    ///
    /// # Errors
    /// No handler registered; the data dir held by another process; etcd or MongoDB unreachable
    /// at start.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        anyhow::ensure!(!self.handlers.is_empty(), "an executor needs at least one handler");
        let _data_dir =
            etcron_worker::cluster::identity::lock_data_dir(&self.config.data_dir).map_err(anyhow::Error::msg)?;
        let client = etcron_common::etcd::connect(&self.config.etcd).await.context("connecting to etcd")?;
        let session_client = etcron_common::etcd::connect(&self.config.etcd).await.context("connecting to etcd")?;
        let store = etcron_common::store::MongoStore::connect(&self.config.mongodb_uri, &self.config.mongodb_db)
            .await
            .context("mongodb_uri")?;
        let handlers: Arc<dyn Handlers> = Arc::new(Registry(self.handlers));
        let parts = etcron_worker::node::Parts {
            client,
            session_client,
            store: Some(store),
            simulated: None,
            handlers: Some(handlers),
        };
        etcron_worker::node::run(self.config, parts, shutdown).await
    }
}

/// The handlers by name, as the worker calls them.
struct Registry(BTreeMap<String, Handler>);

impl Handlers for Registry {
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    fn run(&self, call: Call) -> Run {
        let Some(handler) = self.0.get(&call.name).cloned() else {
            let why = format!("no handler {:?} on this executor", call.name);
            return Box::pin(async move { Err(why) });
        };
        Box::pin(async move {
            match handler(Context::new(call)).await {
                Ok(serde_json::Value::Null) => Ok(None),
                Ok(value) => Ok(Some(value)),
                Err(HandlerError(why)) => Err(why),
            }
        })
    }
}
