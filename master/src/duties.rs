//! What masters do besides answering requests, each on its own loop: compacting etcd when it
//! does not ([`compactor`], one master at a time), watching etcd's size and alarms
//! ([`etcd_storage`]), ending pauses whose `until` has passed ([`pause_expiry`]) and checking the
//! stored job specs against this version's rules ([`spec_check`]). A duty
//! imports no route and no layer.

pub mod compactor;
pub mod etcd_storage;
pub mod pause_expiry;
pub mod spec_check;
