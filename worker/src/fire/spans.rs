//! The trace spans of one fire on this worker: `tick` (the fire, a child of its run request's
//! span when the request carries a `traceparent`), `claim`, `run` and `close` under it, and
//! `record` under the close (ended when MongoDB took the record, by the sink). Each carries the
//! execution's attributes. Spans are built only while tracing is on (`otlp_endpoint`); the
//! trace context of the run (what the task's `traceparent` names) always exists.

use etcron_common::trace::{Kind, Span, TraceContext, Tracer, Value};
use etcron_model::keys::ExecutionId;

use crate::context::Context;
use crate::timing::fire::Fire;

/// The trace of an execution whose run request names none: derived from the execution without
/// its attempt, so that every worker racing for a tick, and every attempt of it, lands in one
/// trace.
#[must_use]
pub fn derived_key(id: &ExecutionId) -> String {
    ExecutionId { attempt: 1, ..id.clone() }.to_string()
}

/// The context of a fire's `tick` span, and its parent (the run request's span) when it has one.
fn tick_context(fire: &Fire) -> (TraceContext, Option<TraceContext>) {
    match fire.traceparent.as_deref().and_then(TraceContext::parse) {
        Some(parent) => (parent.child(), Some(parent)),
        None => (TraceContext::derived(&derived_key(&fire.id)), None),
    }
}

/// The spans of one fire; the `tick` span ends when this is dropped.
pub(crate) struct FireSpans {
    tracer: Tracer,
    tick: Option<Span>,
    /// The execution's attributes (empty when tracing is off).
    attributes: Vec<(&'static str, Value)>,
}

/// One phase's span, and its context when one was needed.
#[derive(Default)]
pub(crate) struct Step {
    pub span: Option<Span>,
    context: Option<TraceContext>,
}

impl FireSpans {
    /// The fire came due: its `tick` span starts (when tracing is on).
    pub(crate) fn begin(ctx: &Context, fire: &Fire) -> Self {
        let tracer = ctx.tracer.clone();
        if !tracer.is_on() {
            return Self { tracer, tick: None, attributes: Vec::new() };
        }
        let attributes = vec![
            ("etcron.job", Value::from(fire.id.job.as_str())),
            ("etcron.execution_id", Value::from(fire.id.to_string())),
            ("etcron.attempt", Value::from(fire.id.attempt)),
            ("etcron.worker_id", Value::from(ctx.config.worker_id.as_str())),
            ("etcron.trigger", Value::from(fire.trigger.as_str())),
        ];
        let (context, parent) = tick_context(fire);
        let kind = if parent.is_some() { Kind::Consumer } else { Kind::Internal };
        let tick = tracer.span("tick", kind, context, parent.as_ref()).map(|s| with(s, &attributes));
        Self { tracer, tick, attributes }
    }

    /// This worker does not race for the fire: its `tick` span is not exported (every worker
    /// sees every tick).
    pub(crate) fn not_raced(mut self) {
        if let Some(tick) = self.tick.take() {
            tick.discard();
        }
    }

    /// A phase's span under the tick (`claim`, `close`): nothing when no tick span is recorded.
    pub(crate) fn step(&self, name: &'static str) -> Step {
        let Some(parent) = self.tick.as_ref().and_then(Span::context) else { return Step::default() };
        let context = parent.child();
        let span = self.tracer.span(name, Kind::Internal, context, Some(&parent)).map(|s| with(s, &self.attributes));
        Step { span, context: Some(context) }
    }

    /// The `run` span, and the context the task continues (its `traceparent`). Without a span
    /// of etcron's (tracing off, or a trace its caller did not sample) the task continues the
    /// run request's context as it came (the caller's span), else the derived trace.
    pub(crate) fn run(&self, fire: &Fire) -> (Step, TraceContext) {
        let Some(parent) = self.tick.as_ref().and_then(Span::context) else {
            let (derived, given) = tick_context(fire);
            return (Step::default(), given.unwrap_or(derived));
        };
        let step = self.step("run");
        let context = step.context.unwrap_or(parent);
        (step, context)
    }
}

impl Step {
    /// Sets an attribute when the span is recorded (`value` is only made then).
    pub(crate) fn set<V: Into<Value>>(&mut self, key: &'static str, value: impl FnOnce() -> V) {
        if let Some(span) = self.span.as_mut() {
            span.set(key, value());
        }
    }

    /// Marks the span failed when it is recorded.
    pub(crate) fn fail(&mut self, message: impl FnOnce() -> String) {
        if let Some(span) = self.span.as_mut() {
            span.fail(&message());
        }
    }

    /// A span under this one (the close's `record`), with the same attributes.
    pub(crate) fn child(&self, tracer: &Tracer, name: &'static str) -> Option<Span> {
        let (parent, span) = (self.context?, self.span.as_ref()?);
        let mut child = tracer.span(name, Kind::Internal, parent.child(), Some(&parent))?;
        for (key, value) in span_attributes(span) {
            child.set(key, value);
        }
        Some(child)
    }
}

/// The execution attributes of a step's span (those every span of the fire carries).
fn span_attributes(span: &Span) -> Vec<(&'static str, Value)> {
    span.attributes().iter().filter(|(k, _)| EXECUTION_ATTRIBUTES.contains(k)).cloned().collect()
}

const EXECUTION_ATTRIBUTES: [&str; 5] =
    ["etcron.job", "etcron.execution_id", "etcron.attempt", "etcron.worker_id", "etcron.trigger"];

fn with(mut span: Span, attributes: &[(&'static str, Value)]) -> Span {
    for (key, value) in attributes {
        span.set(key, value.clone());
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcron_model::keys::Tick;

    #[test]
    fn every_attempt_of_a_tick_derives_one_trace() {
        let first = ExecutionId::new("a", Tick::Scheduled(1_764_547_200_000));
        let third = ExecutionId { attempt: 3, ..first.clone() };
        assert_eq!(derived_key(&third), derived_key(&first));
        assert_eq!(derived_key(&first), first.to_string());
        let other = ExecutionId::new("a", Tick::Scheduled(1_764_547_201_000));
        assert_ne!(derived_key(&other), derived_key(&first));
    }
}
