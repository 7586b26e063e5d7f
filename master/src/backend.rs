//! What handlers reach: the state they share (etcd, MongoDB, the job store, auth, audit).
//! Route modules import it from here (and errors from `error`), never from another route
//! module.

use etcd_client::Client;
use etcron_common::store::MongoStore;
use etcron_model::keys::Keys;

use crate::job_store::JobStore;

#[derive(Clone)]
pub struct AppState {
    pub client: Client,
    pub keys: Keys,
    pub store: MongoStore,
    pub auth: crate::layers::auth::Auth,
    pub audit: crate::layers::audit::AuditLog,
    pub guard: crate::layers::guard::Guard,
    /// etcd's database size as last polled.
    pub storage: crate::duties::etcd_storage::StorageWatch,
    /// The stored job specs this version refuses, as last checked.
    pub specs: crate::duties::spec_check::SpecWatch,
    /// What each team's jobs may use on the workers (the config's `[teams.NAME]`).
    pub teams: std::sync::Arc<crate::team_policy::TeamPolicies>,
    /// The change byte budgets (of this master process), the job quota per team and the
    /// history kept per job.
    pub limits: std::sync::Arc<crate::change_limits::ChangeLimits>,
    /// Trace spans of run requests: off without `otlp_endpoint`.
    pub tracer: etcron_common::trace::Tracer,
    /// Every stored job's team, pool and placement, kept by a watch (pages of workers, pools).
    pub job_index: crate::job_index::JobIndex,
    /// The namespaces this master serves, the default one first (`GET /api/namespaces`).
    pub namespaces: std::sync::Arc<Vec<String>>,
}

impl AppState {
    /// The one writer of job specs.
    #[must_use]
    pub fn jobs(&self) -> JobStore {
        JobStore::new(self.client.clone(), self.keys.clone())
            .with_policies(self.teams.clone())
            .with_limits(self.limits.clone())
    }
}
