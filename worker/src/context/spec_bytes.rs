//! A job's spec as the worker keeps it between fires: the bytes etcd holds (a few hundred,
//! where the parsed spec takes 1–2 KB), decoded again when a tick fires or a sweep needs the
//! spec. This is what keeps a worker holding 1 000 000 jobs within 1 KB of memory per job.

use std::sync::Arc;

use etcron_model::spec::JobSpec;

/// Bytes of a spec the worker accepted (`JobSpec::from_json_cached`), shared by the scheduler's
/// table and the context's.
#[derive(Debug, Clone)]
pub struct SpecBytes(Arc<[u8]>);

impl SpecBytes {
    /// Keeps `bytes`, which the validating parse accepted.
    #[must_use]
    pub fn accepted(bytes: &[u8]) -> Self {
        Self(Arc::from(bytes))
    }

    /// The spec. `None` only if the bytes no longer decode — they were validated when kept, so
    /// that is a defect of this version: said in a log line and counted
    /// (`etcron_worker_spec_decode_errors_total`); the job is then treated as not known.
    #[must_use]
    pub fn decode(&self, job: &str) -> Option<Arc<JobSpec>> {
        match JobSpec::from_validated_json(&self.0) {
            Ok(spec) => Some(Arc::new(spec)),
            Err(e) => {
                tracing::error!(job, error = %e, bytes = self.0.len(), "a job spec this worker accepted does not decode again; the job is treated as unknown");
                crate::metrics::METRICS.spec_decode_errors.inc();
                None
            }
        }
    }
}
