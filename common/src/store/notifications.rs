//! The notification deliveries: collection `notifications`, `_id` = delivery id, one document
//! per delivery with all its attempts, written whole by the workers and searched by the API.

use futures::TryStreamExt;
use mongodb::bson::{self, doc, Bson, Document};
use mongodb::options::FindOptions;

use etcron_model::notify::{Attempt, Delivery, DeliveryState};
use etcron_model::spec::notify::{NotifyEvent, NotifyFormat};

use super::bson::{date, int, rfc};
use super::search::{team_filter, MAX_LIMIT};
use super::{MongoStore, StoreError, NOTIFICATIONS};

/// A search of `GET /api/notifications`, newest first.
#[derive(Debug, Clone, Default)]
pub struct NotificationSearch {
    pub job: Option<String>,
    pub execution_id: Option<String>,
    pub event: Option<NotifyEvent>,
    /// Only deliveries whose `team` is one of these (`None`: any), as [`Search::teams`].
    pub teams: Option<Vec<String>>,
    pub limit: i64,
}

/// The stored document of a delivery.
#[must_use]
fn notification_document(n: &Delivery) -> Document {
    let attempts: Vec<Document> = n
        .attempts
        .iter()
        .map(|a| {
            doc! {
                "at": date(Some(&a.at)),
                "duration_ms": i64::try_from(a.duration_ms).unwrap_or(i64::MAX),
                "http_status": a.http_status.map(i32::from),
                "error": a.error.as_deref(),
            }
        })
        .collect();
    doc! {
        "_id": &n.id,
        "job": &n.job,
        "team": n.team.as_deref(),
        "execution_id": &n.execution_id,
        "event": n.event.as_str(),
        "target": &n.target,
        "target_name": n.target_name.as_deref(),
        "default_target": n.default_target,
        "format": n.format.as_str(),
        "worker_id": &n.worker_id,
        "state": n.state.as_str(),
        "attempts": attempts,
        "created_at": date(Some(&n.created_at)),
        "finished_at": date(n.finished_at.as_deref()),
    }
}

/// A stored delivery document back as a delivery.
fn notification_from_document(d: &Document) -> Result<Delivery, StoreError> {
    let bad = |what: &str| StoreError::Failed(format!("stored notification has no valid {what}"));
    let str_of = |k: &str| d.get_str(k).ok().map(str::to_owned);
    let parse = |k: &str| -> Result<Bson, StoreError> { d.get(k).cloned().ok_or_else(|| bad(k)) };
    let event: NotifyEvent = bson::from_bson(parse("event")?).map_err(|_| bad("event"))?;
    let state: DeliveryState = bson::from_bson(parse("state")?).map_err(|_| bad("state"))?;
    let format: NotifyFormat = bson::from_bson(parse("format")?).unwrap_or_default();
    let attempts = d
        .get_array("attempts")
        .map(|list| {
            list.iter()
                .filter_map(Bson::as_document)
                .map(|a| Attempt {
                    at: rfc(a.get("at")).unwrap_or_default(),
                    duration_ms: int(a.get("duration_ms")).and_then(|v| u64::try_from(v).ok()).unwrap_or(0),
                    http_status: int(a.get("http_status")).and_then(|v| u16::try_from(v).ok()),
                    error: a.get_str("error").ok().map(str::to_owned),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Delivery {
        id: str_of("_id").ok_or_else(|| bad("_id"))?,
        job: str_of("job").unwrap_or_default(),
        team: str_of("team"),
        execution_id: str_of("execution_id").unwrap_or_default(),
        event,
        target: str_of("target").unwrap_or_default(),
        target_name: str_of("target_name"),
        default_target: d.get_bool("default_target").unwrap_or(false),
        format,
        worker_id: str_of("worker_id").unwrap_or_default(),
        state,
        attempts,
        created_at: rfc(d.get("created_at")).unwrap_or_default(),
        finished_at: rfc(d.get("finished_at")),
    })
}

impl MongoStore {
    /// Writes the latest state of each delivery in one round trip: whole-document upserts by
    /// delivery id, so a replay is harmless and the newest write wins.
    pub async fn write_notifications(&self, batch: &[Delivery]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let updates: Vec<Document> =
            batch.iter().map(|n| doc! {"q": {"_id": &n.id}, "u": notification_document(n), "upsert": true}).collect();
        let reply = self.db.run_command(doc! {"update": NOTIFICATIONS, "updates": updates, "ordered": false}).await?;
        if let Ok(errors) = reply.get_array("writeErrors") {
            if let Some(first) = errors.iter().filter_map(|e| e.as_document()).next() {
                // Including 11000 (two upserts of a new id raced): the caller writes again.
                return Err(StoreError::Failed(format!(
                    "{} notification write errors, first: {}",
                    errors.len(),
                    first.get_str("errmsg").unwrap_or("?")
                )));
            }
        }
        Ok(())
    }

    /// Deliveries matching `s`, newest first (by creation, then id).
    pub async fn notifications(&self, s: &NotificationSearch) -> Result<Vec<Delivery>, StoreError> {
        let mut filter = Document::new();
        if let Some(job) = &s.job {
            filter.insert("job", job);
        }
        if let Some(id) = &s.execution_id {
            filter.insert("execution_id", id);
        }
        if let Some(event) = s.event {
            filter.insert("event", event.as_str());
        }
        if let Some(teams) = &s.teams {
            filter.insert("team", team_filter(teams));
        }
        let options =
            FindOptions::builder().sort(doc! {"created_at": -1, "_id": -1}).limit(s.limit.clamp(1, MAX_LIMIT)).build();
        let docs: Vec<Document> = self.notifications.find(filter).with_options(options).await?.try_collect().await?;
        docs.iter().map(notification_from_document).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notification_documents_round_trip() {
        let n = Delivery {
            id: "a@1700000000000#1/failure/0".into(),
            job: "a".into(),
            team: Some("payments".into()),
            execution_id: "a@1700000000000#1".into(),
            event: NotifyEvent::Failure,
            target: "https://hooks.slack.com/…".into(),
            target_name: Some("ops".into()),
            default_target: false,
            format: NotifyFormat::Slack,
            worker_id: "w1".into(),
            state: DeliveryState::Delivered,
            attempts: vec![
                Attempt {
                    at: etcron_model::rfc3339_ms(1_700_000_000_100),
                    duration_ms: 12,
                    http_status: Some(500),
                    error: Some("HTTP 500".into()),
                },
                Attempt {
                    at: etcron_model::rfc3339_ms(1_700_000_001_200),
                    duration_ms: 3,
                    http_status: Some(200),
                    error: None,
                },
            ],
            created_at: etcron_model::rfc3339_ms(1_700_000_000_050),
            finished_at: Some(etcron_model::rfc3339_ms(1_700_000_001_203)),
        };
        let d = notification_document(&n);
        assert!(matches!(d.get("created_at"), Some(Bson::DateTime(_))));
        assert_eq!(notification_from_document(&d).unwrap(), n);
        let pending = Delivery { state: DeliveryState::Pending, finished_at: None, attempts: Vec::new(), ..n };
        assert_eq!(notification_from_document(&notification_document(&pending)).unwrap(), pending);
    }
}
