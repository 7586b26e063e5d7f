//! Notifications of final outcomes (webhooks, their silence windows) and the job health they
//! are judged by. Deliveries go through the tasks' HTTP client; nothing here claims or records.

pub mod health;
pub mod notifier;
pub mod silence;
