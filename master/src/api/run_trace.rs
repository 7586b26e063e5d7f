//! The trace of `POST /api/jobs/{job}/run`: the request's span (continuing an incoming W3C
//! `traceparent`, else a new trace) and the `run request` span under it, whose context the run
//! request carries through etcd to the worker. With tracing off no span is built, and an
//! incoming `traceparent` is passed on as it came, so the task still continues the caller's trace.

use axum::http::HeaderMap;
use axum::response::Response;
use etcron_common::trace::{Kind, Span, TraceContext, Tracer};

use crate::error::ApiResult;

/// The route, as the request span names it.
const ROUTE: &str = "/api/jobs/{job}/run";

/// The spans of one run request, and the context the run continues.
pub(super) struct RunTrace {
    request: Option<Span>,
    run_request: Option<Span>,
    traceparent: Option<String>,
}

impl RunTrace {
    /// Starts the spans (when tracing is on and the caller sampled its trace).
    pub(super) fn start(tracer: &Tracer, headers: &HeaderMap, job: &str) -> Self {
        let incoming = headers.get("traceparent").and_then(|v| v.to_str().ok()).and_then(TraceContext::parse);
        if !tracer.is_on() {
            return Self { request: None, run_request: None, traceparent: incoming.map(|c| c.traceparent()) };
        }
        let context = incoming.map_or_else(TraceContext::root, |c| c.child());
        let request = tracer.span("POST /api/jobs/{job}/run", Kind::Server, context, incoming.as_ref());
        let run_context = context.child();
        let run_request = tracer.span("run request", Kind::Producer, run_context, Some(&context));
        let traceparent = match &run_request {
            Some(_) => Some(run_context.traceparent()),
            None => incoming.map(|c| c.traceparent()),
        };
        let mut trace = Self { request, run_request, traceparent };
        for span in trace.spans() {
            span.set("etcron.job", job);
        }
        if let Some(span) = trace.request.as_mut() {
            span.set("http.request.method", "POST");
            span.set("http.route", ROUTE);
        }
        trace
    }

    fn spans(&mut self) -> impl Iterator<Item = &mut Span> {
        self.request.iter_mut().chain(self.run_request.iter_mut())
    }

    /// The `traceparent` the run request carries: the `run request` span's, or the caller's.
    pub(super) fn traceparent(&self) -> Option<String> {
        self.traceparent.clone()
    }

    /// The run request is written: its span ends, naming the execution.
    pub(super) fn requested(&mut self, execution_id: &str) {
        for span in self.spans() {
            span.set("etcron.execution_id", execution_id);
        }
        self.run_request.take();
    }

    /// The request is answered: its span ends with the status (an error's message as well).
    pub(super) fn end(mut self, answer: &ApiResult<Response>) {
        let status = match answer {
            Ok(response) => response.status(),
            Err(e) => e.status,
        };
        for span in self.spans() {
            span.set("http.response.status_code", i64::from(status.as_u16()));
            if let Err(e) = answer {
                span.fail(&e.message);
            }
        }
    }
}
