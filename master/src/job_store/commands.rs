//! The job writes that are not saves: pause and resume (the `{ns}/paused/{job}` key, and the
//! spec's `enabled` for a job declared disabled), run requests and kill commands. Each is one
//! etcd transaction or put, conditioned so that it never outlives or overwrites the job it was
//! read for.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_common::job::{validate_name, JobSpec};
use etcron_common::keys::{ExecutionId, KillTarget};
use etcron_common::model::{KillCommand, Pause, RunParams, TriggerRequest};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};

use super::JobStore;
use crate::error::{etcd, ApiError, ApiResult};

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

fn valid_spec(name: &str, job: &StoredJob) -> ApiResult<JobSpec> {
    JobSpec::from_json(&job.value)
        .map_err(|e| ApiError::conflict(format!("stored spec of job {name:?} is invalid ({e}); replace it with PUT")))
}

impl JobStore {
    /// The job and its pause, read at one revision (one read-only transaction); 404 when the
    /// job does not exist.
    pub async fn read(&self, name: &str) -> ApiResult<(StoredJob, Option<Pause>)> {
        validate_name(name).map_err(ApiError::from)?;
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
        let job = job.ok_or_else(|| ApiError::not_found(format!("job {name:?} does not exist")))?;
        Ok((job, pause.map(|p| stored_pause(name, &p.value))))
    }

    /// Pauses a job: puts `{ns}/paused/{job}` and leaves the spec alone, so saving the spec
    /// again never resumes it. Only while the job read is the one there (not deleted, nor
    /// deleted and created again): a pause never outlives its job. Pausing a paused job
    /// records the new who and why.
    pub async fn pause(
        &self,
        name: &str,
        by: &str,
        reason: Option<String>,
        until_ms: Option<UnixMs>,
    ) -> ApiResult<Paused> {
        for _ in 0..RMW_ATTEMPTS {
            let (job, previous) = self.read(name).await?;
            valid_spec(name, &job)?;
            let pause = Pause {
                by: Some(by.to_owned()),
                at_ms: Some(now_ms()),
                reason: reason.clone(),
                until_ms,
                execution_id: None,
            };
            let value = serde_json::to_vec(&pause).map_err(|e| ApiError::internal(&e))?;
            let txn = Txn::new()
                .when([Compare::create_revision(self.keys.job(name), CompareOp::Equal, job.create_revision)])
                .and_then([TxnOp::put(self.keys.paused(name), value, None)]);
            let mut kv = self.client.kv_client();
            if etcd("txn", kv.txn(txn)).await?.succeeded() {
                tracing::info!(job = %name, by, reason = reason.as_deref().unwrap_or(""), "job paused");
                return Ok(Paused { job, pause, previous });
            }
        }
        Err(ApiError::conflict(format!("job {name:?} is being deleted and created again concurrently; retry")))
    }

    /// Resumes a job: deletes its pause and, only when the stored spec itself says `enabled:
    /// false` (declared disabled, or an `@at` job the workers disabled after its run), sets it
    /// to true — refused when such a schedule never fires again; both in one transaction on
    /// the revision read, so a concurrent edit is never overwritten.
    pub async fn resume(&self, name: &str, origin: &super::Origin) -> ApiResult<Resumed> {
        let key = self.keys.job(name);
        for _ in 0..RMW_ATTEMPTS {
            let (job, pause) = self.read(name).await?;
            let mut spec = valid_spec(name, &job)?;
            if pause.is_none() && spec.enabled {
                return Ok(Resumed { job, was_paused: None, spec_before: None, unchanged: true });
            }
            let mut ops = vec![TxnOp::delete(self.keys.paused(name), None)];
            let enabled = if spec.enabled {
                None
            } else {
                spec.enabled = true;
                super::fires_again(name, &spec)?;
                let value = serde_json::to_vec(&spec).map_err(|e| ApiError::internal(&e))?;
                ops.push(TxnOp::put(key.clone(), value.clone(), None));
                let (history_key, version) = origin.entry(&self.keys, name, &value);
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
        Err(ApiError::conflict(format!("job {name:?} is being edited concurrently; retry")))
    }

    /// Requests a manual run of an existing job with `params`: a run request on a 60 s lease,
    /// claimed once by a worker. The request id and the id its execution will have. Environment
    /// overrides are refused for a job whose task is not a shell command.
    pub async fn request_run(&self, name: &str, reason: &str, params: RunParams) -> ApiResult<(String, ExecutionId)> {
        let (job, _) = self.read(name).await?;
        let kind = JobSpec::from_json(&job.value).map_or("shell", |spec| spec.task.kind());
        if !params.env.is_empty() && kind != "shell" {
            let kind = if kind == "grpc" { "a gRPC" } else { "an HTTP" };
            return Err(ApiError::bad_request(
                Some("env".to_owned()),
                format!("job {name:?} runs {kind} task: environment overrides apply to shell tasks only"),
            ));
        }
        let id = format!("{:016x}", rand::random::<u64>());
        let request =
            TriggerRequest { scheduled_ms: params.as_of_ms, params, ..TriggerRequest::manual(now_ms(), reason) };
        let lease = self.command_lease().await?;
        let value = serde_json::to_vec(&request).map_err(|e| ApiError::internal(&e))?;
        let mut kv = self.client.kv_client();
        let key = self.keys.trigger(name, &id);
        etcd("put_trigger", kv.put(key, value, Some(PutOptions::new().with_lease(lease)))).await?;
        tracing::info!(job = %name, request_id = %id, "manual run requested");
        let execution = request.execution(name, &id);
        Ok((id, execution))
    }

    /// Writes a kill command (60 s lease) for every running execution of a job or one of
    /// them; the revision it was written at.
    pub async fn kill(&self, name: &str, target: &KillTarget, reason: &str) -> ApiResult<i64> {
        let lease = self.command_lease().await?;
        let command = KillCommand { requested_at: rfc3339_ms(now_ms()), reason: reason.to_owned() };
        let value = serde_json::to_vec(&command).map_err(|e| ApiError::internal(&e))?;
        let mut kv = self.client.kv_client();
        let key = self.keys.kill(name, target);
        let resp = etcd("put_kill", kv.put(key, value, Some(PutOptions::new().with_lease(lease)))).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        tracing::info!(job = %name, target = %target, revision, "kill requested");
        Ok(revision)
    }

    async fn command_lease(&self) -> ApiResult<i64> {
        let mut leases = self.client.lease_client();
        let ttl = i64::try_from(COMMAND_LEASE.as_secs()).unwrap_or(60);
        Ok(etcd("lease_grant", leases.grant(ttl, None)).await?.id())
    }
}
