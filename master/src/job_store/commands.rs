//! The job writes that are not saves: pause and resume (the `{ns}/paused/{job}` key, and the
//! spec's `enabled` for a job declared disabled), run requests and kill commands. Each is one
//! etcd transaction, conditioned on the job as it was read (and its team checked with the
//! request's [`Scope`]), so that it never outlives or overwrites the job it was read for, nor
//! acts on a job that moved to a team the caller holds no such role on meanwhile.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::keys::{ExecutionId, KillTarget};
use etcron_model::record::RunParams;
use etcron_model::spec::{validate_name, JobSpec};
use etcron_model::stored::{KillCommand, Pause, TriggerRequest};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};

use super::{etcd, JobStore, JobStoreError};
use crate::access::{team_of, Scope};

/// Lease of kill commands and run requests: long enough for a reconnecting worker.
pub const COMMAND_LEASE: Duration = Duration::from_secs(60);
/// Retries of read-modify-write updates (pause/resume) under contention.
const RMW_ATTEMPTS: usize = 5;

/// A job's key as read.
#[derive(Debug, Clone)]
pub struct StoredJob {
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub create_revision: i64,
}

/// What a pause did.
#[derive(Debug)]
pub struct Paused {
    pub job: StoredJob,
    pub pause: Pause,
    /// The pause it replaced.
    pub previous: Option<Pause>,
}

/// What a resume did.
#[derive(Debug)]
pub struct Resumed {
    /// The job as it is after the resume.
    pub job: StoredJob,
    /// The pause it deleted.
    pub was_paused: Option<Pause>,
    /// The spec it replaced, when it set a declared-disabled spec's `enabled` to true.
    pub spec_before: Option<Vec<u8>>,
    /// Nothing to do: the job was neither paused nor disabled.
    pub unchanged: bool,
}

/// Reads the value of `{ns}/paused/{job}`: the key's existence is the pause, so a value that
/// does not parse is logged and taken as a pause by someone unknown.
#[must_use]
pub fn stored_pause(job: &str, value: &[u8]) -> Pause {
    Pause::from_bytes(value).unwrap_or_else(|e| {
        tracing::warn!(job = %job, error = %e, "pause in etcd is malformed; the job counts as paused all the same");
        Pause::default()
    })
}

fn valid_spec(name: &str, job: &StoredJob) -> Result<JobSpec, JobStoreError> {
    JobSpec::from_json(&job.value).map_err(|e| JobStoreError::StoredSpecInvalid {
        message: format!("stored spec of job {name:?} is invalid ({e}); replace it with PUT"),
    })
}

impl JobStore {
    /// The job and its pause, read at one revision (one read-only transaction), when `scope`
    /// allows its route on the job's team; 404 when the job does not exist or the caller does
    /// not see it, 403 when its role on the job's team is too low.
    pub async fn read(&self, name: &str, scope: &Scope) -> Result<(StoredJob, Option<Pause>), JobStoreError> {
        let (job, pause) = self.read_unchecked(name).await?;
        scope.check_job(name, team_of(&job.value).as_deref()).map_err(JobStoreError::denied)?;
        Ok((job, pause))
    }

    /// The team of job `name` as stored (`None`: it has none, or does not exist), for what has
    /// no team of its own to check: an execution without a record yet.
    pub async fn team(&self, name: &str) -> Result<Option<String>, JobStoreError> {
        let resp = etcd("get_job", self.client.kv_client().get(self.keys.job(name), None)).await?;
        Ok(resp.kvs().first().and_then(|kv| team_of(kv.value())))
    }

    async fn read_unchecked(&self, name: &str) -> Result<(StoredJob, Option<Pause>), JobStoreError> {
        validate_name(name)?;
        let txn =
            Txn::new().and_then([TxnOp::get(self.keys.job(name), None), TxnOp::get(self.keys.paused(name), None)]);
        let mut kv = self.client.kv_client();
        let resp = etcd("get_job", kv.txn(txn)).await?;
        let mut found = resp.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| StoredJob {
                value: kv.value().to_vec(),
                mod_revision: kv.mod_revision(),
                create_revision: kv.create_revision(),
            }),
            _ => None,
        });
        let (job, pause) = (found.next().flatten(), found.next().flatten());
        let job = job.ok_or_else(|| JobStoreError::no_job(name))?;
        Ok((job, pause.map(|p| stored_pause(name, &p.value))))
    }

    /// Pauses a job: puts `{ns}/paused/{job}` and leaves the spec alone, so saving the spec
    /// again never resumes it. Only while the job read is the one there (not changed, deleted,
    /// nor deleted and created again): a pause never outlives its job. Pausing a paused job
    /// records the new who and why.
    pub async fn pause(
        &self,
        name: &str,
        (reason, until_ms): (Option<String>, Option<UnixMs>),
        scope: &Scope,
    ) -> Result<Paused, JobStoreError> {
        let by = scope.caller.name.as_str();
        for _ in 0..RMW_ATTEMPTS {
            let (job, previous) = self.read(name, scope).await?;
            valid_spec(name, &job)?;
            let pause = Pause {
                by: Some(by.to_owned()),
                at_ms: Some(now_ms()),
                reason: reason.clone(),
                until_ms,
                execution_id: None,
            };
            let value = serde_json::to_vec(&pause).map_err(|e| JobStoreError::internal(&e))?;
            let txn = Txn::new()
                .when([Compare::mod_revision(self.keys.job(name), CompareOp::Equal, job.mod_revision)])
                .and_then([TxnOp::put(self.keys.paused(name), value, None)]);
            let mut kv = self.client.kv_client();
            if etcd("txn", kv.txn(txn)).await?.succeeded() {
                tracing::info!(job = %name, by, reason = reason.as_deref().unwrap_or(""), "job paused");
                return Ok(Paused { job, pause, previous });
            }
        }
        Err(JobStoreError::Conflict { message: format!("job {name:?} is being changed concurrently; retry") })
    }

    /// Resumes a job: deletes its pause and, only when the stored spec itself says `enabled:
    /// false` (declared disabled, or an `@at` job the workers disabled after its run), sets it
    /// to true — refused when such a schedule never fires again; both in one transaction on
    /// the revision read, so a concurrent edit is never overwritten.
    pub async fn resume(&self, name: &str, origin: &super::Origin, scope: &Scope) -> Result<Resumed, JobStoreError> {
        let key = self.keys.job(name);
        for _ in 0..RMW_ATTEMPTS {
            let (job, pause) = self.read(name, scope).await?;
            let mut spec = valid_spec(name, &job)?;
            if pause.is_none() && spec.enabled {
                return Ok(Resumed { job, was_paused: None, spec_before: None, unchanged: true });
            }
            let mut ops = vec![TxnOp::delete(self.keys.paused(name), None)];
            let enabled = if spec.enabled {
                None
            } else {
                spec.enabled = true;
                super::checks::fires_again(name, &spec)?;
                let value = serde_json::to_vec(&spec).map_err(|e| JobStoreError::internal(&e))?;
                ops.push(TxnOp::put(key.clone(), value.clone(), None));
                let (history_key, version) = origin.entry(&self.keys, name, &value, None);
                ops.push(TxnOp::put(history_key, version, None));
                Some(value)
            };
            let txn =
                Txn::new().when([Compare::mod_revision(key.clone(), CompareOp::Equal, job.mod_revision)]).and_then(ops);
            let mut kv = self.client.kv_client();
            let resp = etcd("txn", kv.txn(txn)).await?;
            if !resp.succeeded() {
                continue;
            }
            tracing::info!(job = %name, spec_enabled = enabled.is_some(), "job resumed");
            let after = match &enabled {
                Some(value) => StoredJob {
                    value: value.clone(),
                    mod_revision: resp.header().map_or(0, |h| h.revision()),
                    create_revision: job.create_revision,
                },
                None => job.clone(),
            };
            let spec_before = enabled.map(|_| job.value);
            return Ok(Resumed { job: after, was_paused: pause, spec_before, unchanged: false });
        }
        Err(JobStoreError::Conflict { message: format!("job {name:?} is being edited concurrently; retry") })
    }

    /// Requests a manual run of an existing job with `params`: a run request on a 60 s lease,
    /// claimed once by a worker. The request id and the id its execution will have. Environment
    /// overrides are refused for a job whose task is not a shell command. Also the job's team.
    pub async fn request_run(
        &self,
        name: &str,
        reason: &str,
        params: RunParams,
        scope: &Scope,
    ) -> Result<(String, ExecutionId, Option<String>), JobStoreError> {
        self.request_run_at(name, reason, (params, None, None), scope).await
    }

    /// [`request_run`](Self::request_run) with the run's own priority (0 to 100, checked by the
    /// caller) instead of the job's: how it goes before or after other runs waiting for a pool's
    /// slots or a worker's capacity; and the `traceparent` the run continues.
    pub async fn request_run_at(
        &self,
        name: &str,
        reason: &str,
        (params, priority, traceparent): (RunParams, Option<u8>, Option<String>),
        scope: &Scope,
    ) -> Result<(String, ExecutionId, Option<String>), JobStoreError> {
        let id = format!("{:016x}", rand::random::<u64>());
        let request = TriggerRequest {
            scheduled_ms: params.as_of_ms,
            params,
            priority,
            traceparent,
            ..TriggerRequest::manual(now_ms(), reason)
        };
        let value = serde_json::to_vec(&request).map_err(|e| JobStoreError::internal(&e))?;
        let lease = self.command_lease().await?;
        let (_, job) = self
            .put_for_job(name, scope, "put_trigger", (self.keys.trigger(name, &id), value, lease), |job| {
                run_env_allowed(name, &job.value, &request.params.env)
            })
            .await?;
        tracing::info!(job = %name, request_id = %id, "manual run requested");
        let execution = request.execution(name, &id);
        Ok((id, execution, team_of(&job.value)))
    }

    /// Writes a kill command (60 s lease) for every running execution of a job or one of
    /// them; the revision it was written at, and the job's team.
    pub async fn kill(
        &self,
        name: &str,
        target: &KillTarget,
        reason: &str,
        scope: &Scope,
    ) -> Result<(i64, Option<String>), JobStoreError> {
        let lease = self.command_lease().await?;
        let command = KillCommand { requested_at: rfc3339_ms(now_ms()), reason: reason.to_owned() };
        let value = serde_json::to_vec(&command).map_err(|e| JobStoreError::internal(&e))?;
        let key = self.keys.kill(name, target);
        let (revision, job) = self.put_for_job(name, scope, "put_kill", (key, value, lease), |_| Ok(())).await?;
        tracing::info!(job = %name, target = %target, revision, "kill requested");
        Ok((revision, team_of(&job.value)))
    }

    /// Puts `key` on `lease` for job `name`, read with `scope` (its team checked) and accepted
    /// by `check`, only while the job is as read; the revision of the put and the job read.
    async fn put_for_job(
        &self,
        name: &str,
        scope: &Scope,
        op: &'static str,
        (key, value, lease): (String, Vec<u8>, i64),
        check: impl Fn(&StoredJob) -> Result<(), JobStoreError>,
    ) -> Result<(i64, StoredJob), JobStoreError> {
        for _ in 0..RMW_ATTEMPTS {
            let (job, _) = self.read(name, scope).await?;
            check(&job)?;
            let txn = Txn::new()
                .when([Compare::mod_revision(self.keys.job(name), CompareOp::Equal, job.mod_revision)])
                .and_then([TxnOp::put(key.as_str(), value.clone(), Some(PutOptions::new().with_lease(lease)))]);
            let resp = etcd(op, self.client.kv_client().txn(txn)).await?;
            if resp.succeeded() {
                return Ok((resp.header().map_or(0, |h| h.revision()), job));
            }
        }
        Err(JobStoreError::Conflict { message: format!("job {name:?} is being changed concurrently; retry") })
    }

    async fn command_lease(&self) -> Result<i64, JobStoreError> {
        let mut leases = self.client.lease_client();
        let ttl = i64::try_from(COMMAND_LEASE.as_secs()).unwrap_or(60);
        Ok(etcd("lease_grant", leases.grant(ttl, None)).await?.id())
    }
}

/// A manual run's `env` against the job it runs: only the parameters its shell task declares
/// (`etcron_model::spec::params`), none for HTTP and gRPC tasks.
fn run_env_allowed(
    name: &str,
    job: &[u8],
    env: &std::collections::BTreeMap<String, String>,
) -> Result<(), JobStoreError> {
    if env.is_empty() {
        return Ok(());
    }
    let spec = JobSpec::from_json(job).map_err(|e| JobStoreError::StoredSpecInvalid {
        message: format!("job {name:?} has an invalid spec: {}", e.message),
    })?;
    match &spec.task {
        etcron_model::spec::Task::Shell(shell) => {
            etcron_model::spec::params::run_env(&shell.params, env)?;
            Ok(())
        }
        task => {
            let kind = if task.kind() == "grpc" { "a gRPC" } else { "an HTTP" };
            Err(JobStoreError::Invalid {
                field: Some("env".to_owned()),
                message: format!("job {name:?} runs {kind} task: run parameters apply to shell tasks only"),
            })
        }
    }
}
