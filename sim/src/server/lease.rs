//! etcd's Lease gRPC service over the model, and the lessor's expiry on tokio time. Grant,
//! revoke, time-to-live and list pass the fault hook as unary requests; on a keep-alive stream
//! each message does, and a failure ends the stream. Expiry is exact: a lease whose TTL passed
//! without a keep-alive is revoked at that instant (real etcd checks every 500 ms), by the
//! timer task or, first, by any request that arrives then.

use std::sync::Weak;

use etcd_client::proto::{
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseKeepAliveRequest, PbLeaseKeepAliveResponse, PbLeaseLeasesRequest,
    PbLeaseLeasesResponse, PbLeaseRevokeRequest, PbLeaseRevokeResponse, PbLeaseService, PbLeaseTimeToLiveRequest,
    PbLeaseTimeToLiveResponse,
};
use futures::stream::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::store::header;
use super::{Call, ModelEtcd, Shared};

pub(super) struct LeaseService(pub(super) ModelEtcd);

type KeepAlives = BoxStream<'static, Result<PbLeaseKeepAliveResponse, Status>>;

#[tonic::async_trait]
impl PbLeaseService for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<PbLeaseGrantRequest>,
    ) -> Result<Response<PbLeaseGrantResponse>, Status> {
        let g = request.into_inner();
        self.0.unary(Call::LeaseGrant, move |st, now| st.store.lease_grant(&g, now)).await
    }

    async fn lease_revoke(
        &self,
        request: Request<PbLeaseRevokeRequest>,
    ) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        let id = request.into_inner().id;
        self.0.unary(Call::LeaseRevoke, move |st, now| st.store.lease_revoke(id, now)).await
    }

    type LeaseKeepAliveStream = KeepAlives;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAlives>, Status> {
        let input = request.into_inner();
        let stream = futures::stream::unfold(Some((self.0.clone(), input)), |open| async move {
            let (model, mut input) = open?;
            let id = match input.message().await {
                Ok(Some(req)) => req.id,
                Ok(None) => return None,
                Err(e) => return Some((Err(e), None)),
            };
            let lose = match model.admit(Call::LeaseKeepAlive).await {
                Ok(lose) => lose,
                Err(e) => return Some((Err(e), None)),
            };
            let resp = model.with(|st, now| {
                let ttl = st.store.lease_keep_alive(id, now);
                PbLeaseKeepAliveResponse { header: header(st.store.revision()), id, ttl }
            });
            if lose {
                return Some((Err(super::unavailable_after()), None));
            }
            Some((Ok(resp), Some((model, input))))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        let r = request.into_inner();
        self.0.unary(Call::LeaseTimeToLive, move |st, now| Ok(st.store.lease_time_to_live(&r, now))).await
    }

    async fn lease_leases(
        &self,
        _request: Request<PbLeaseLeasesRequest>,
    ) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        self.0.unary(Call::LeaseLeases, move |st, _| Ok(st.store.lease_leases())).await
    }
}

/// The lessor's timer: sleeps until the soonest expiry (or the end of a stall), expires what is
/// due, and starts over when anything changes. Ends with the model.
pub(super) async fn expiry_timer(shared: Weak<Shared>, mut ticks: tokio::sync::watch::Receiver<u64>) {
    loop {
        let Some(shared) = shared.upgrade() else { return };
        let model = ModelEtcd { shared, who: 0 };
        let next = model.read(|st, _| {
            let soonest = st.store.next_expiry()?;
            Some(st.stall_until.map_or(soonest, |u| soonest.max(u)))
        });
        drop(model);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            changed = ticks.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = sleep => {}
        }
    }
}
