//! The workflow feature on this server (docs/workflow.md): the publication logs of the
//! directories homed here, their consumer groups and retention policies (kept with the
//! namespace, [`surge_meta::workflow`]), the service that reads them ([`handlers`]), and the
//! back-pressure that holds writers past a high-water mark ([`pressure`]).
//!
//! Guarantees: a reader waiting on a log is woken by every publication journaled here
//! (watched through [`Workflow`]'s counter, which the journal path bumps after each record);
//! claims and acknowledgements are durable before they are answered.

mod handlers;
pub(crate) mod pressure;

use surge_meta::MetaStore;

use crate::server::ChangeHook;
use pressure::BackPressure;

/// The workflow's state on this server.
pub(crate) struct Workflow {
    /// How many publications the namespace share has made: readers of publication logs wait
    /// for it to change ([`surge_meta::workflow::publications`]).
    published: tokio::sync::watch::Sender<u64>,
    /// Back-pressure on writers (None: they fail with NoSpace when the share is full).
    pressure: Option<BackPressure>,
}

impl Workflow {
    /// The workflow of a share of `capacity` bytes, holding writers at `marks` if any.
    pub fn new(marks: Option<surge_proto::workflow::Watermarks>, capacity: u64) -> Workflow {
        Workflow { published: tokio::sync::watch::Sender::new(0), pressure: marks.map(|marks| BackPressure::new(marks, capacity)) }
    }
}

/// Readers of logs learn of the publications a record holds once it is journaled.
impl ChangeHook for Workflow {
    fn after_journaling(&self, meta: &MetaStore) {
        if meta.publications_made() != *self.published.borrow() {
            self.published.send_replace(meta.publications_made());
        }
    }
}
