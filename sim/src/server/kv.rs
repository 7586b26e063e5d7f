//! etcd's KV gRPC service over the model: every request passes the fault hook and any stall,
//! then applies on the store. `RangeStream` (etcd 3.7) answers in one chunk; the rest is
//! etcd 3.4's KV.

use etcd_client::proto::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvService, PbPutRequest,
    PbPutResponse, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse, PbTxnRequest, PbTxnResponse,
};
use tonic::{Request, Response, Status};

use super::store::{txn_puts, txn_writes};
use super::{Call, ModelEtcd};

pub(super) struct KvService(pub(super) ModelEtcd);

type Chunks = futures::stream::Iter<std::vec::IntoIter<Result<PbRangeStreamResponse, Status>>>;

#[tonic::async_trait]
impl PbKvService for KvService {
    async fn range(&self, request: Request<PbRangeRequest>) -> Result<Response<PbRangeResponse>, Status> {
        let r = request.into_inner();
        let lose = self.0.admit(Call::Range).await?;
        let out = self.0.read(|st, _| st.store.range(&r))?;
        if lose {
            return Err(super::unavailable_after());
        }
        Ok(Response::new(out))
    }

    type RangeStreamStream = Chunks;

    async fn range_stream(&self, request: Request<PbRangeRequest>) -> Result<Response<Chunks>, Status> {
        let out = self.range(request).await?.into_inner();
        let chunk = PbRangeStreamResponse { range_response: Some(out) };
        Ok(Response::new(futures::stream::iter(vec![Ok(chunk)])))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let p = request.into_inner();
        self.0.unary(Call::Put, move |st, now| st.store.put(&p, now)).await
    }

    async fn delete_range(&self, request: Request<PbDeleteRequest>) -> Result<Response<PbDeleteResponse>, Status> {
        let d = request.into_inner();
        self.0.unary(Call::DeleteRange, move |st, now| st.store.delete(&d, now)).await
    }

    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let t = request.into_inner();
        let call = Call::Txn { writes: txn_writes(&t), puts: txn_puts(&t) };
        self.0.unary(call, move |st, now| st.store.txn(&t, now)).await
    }

    async fn compact(&self, request: Request<PbCompactionRequest>) -> Result<Response<PbCompactionResponse>, Status> {
        let c = request.into_inner();
        self.0.unary(Call::Compact, move |st, _| st.store.compact(&c)).await
    }
}
