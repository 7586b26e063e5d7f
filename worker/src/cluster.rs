//! The cluster as this worker sees it: its identity, its registration and the members, the
//! claims written, calendars and departures, each mirrored from an etcd prefix by
//! [`watcher`]. Imports only `metrics`.

pub mod calendars;
pub mod departures;
pub mod identity;
pub mod membership;
pub mod pools;
pub mod taken;
pub mod watcher;
