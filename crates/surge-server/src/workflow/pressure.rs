//! Back-pressure on this share's writers ([`surge_proto::workflow::Watermarks`]): past the
//! high-water mark a write that needs more room waits, in a task of its own, until what is
//! used falls back to the low-water mark, and fails with NoSpace (logged with the reason)
//! after the configured wait. Room set aside for a client's local writes is refused past the
//! mark, and a reservation never makes its own holder wait: only what is written counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use surge_meta::error::{Result, ServerError};
use surge_proto::{ErrorCode, Ino};

use crate::data::DataStore;
use crate::handle::Answer;
use crate::session::Session;

/// How often a write held at the high-water mark looks whether there is room again.
const ROOM_CHECK: Duration = Duration::from_millis(20);

/// [`surge_proto::workflow::Watermarks`] in bytes of this share.
#[derive(Debug, Clone, Copy)]
pub struct Watermarks {
    pub high: u64,
    pub low: u64,
    pub wait: Duration,
}

/// The back-pressure of one share with watermarks.
pub(crate) struct BackPressure {
    marks: Watermarks,
    /// Filled past the high-water mark and not yet back down to the low one.
    held: AtomicBool,
}

impl BackPressure {
    /// Writers wait at `marks` (fractions of `capacity`) instead of failing.
    pub fn new(marks: surge_proto::workflow::Watermarks, capacity: u64) -> BackPressure {
        let marks = Watermarks {
            high: (capacity as f64 * marks.high) as u64,
            low: (capacity as f64 * marks.low) as u64,
            wait: Duration::from_secs_f64(marks.wait_secs),
        };
        BackPressure { marks, held: AtomicBool::new(false) }
    }

    /// Whether a write that needs `growth` more bytes of `data` must wait: the share is past
    /// its high-water mark, or this write would take it past, and it has not come back down
    /// to the low one since.
    pub fn must_wait(&self, data: &DataStore, growth: u64) -> bool {
        let marks = &self.marks;
        // What is written, not the room set aside for local writers: a writer holding a
        // reservation must not wait on its own reservation (it goes into `used` when the
        // writes are reported; new reservations are refused past the mark).
        let filled = data.used();
        if self.held.load(Ordering::Relaxed) {
            if filled > marks.low {
                return growth > 0;
            }
            self.held.store(false, Ordering::Relaxed);
            tracing::info!(filled, low = marks.low, "back under the low-water mark: writers go on");
        }
        if growth > 0 && filled.saturating_add(growth) > marks.high {
            if !self.held.swap(true, Ordering::Relaxed) {
                tracing::info!(filled, high = marks.high, "past the high-water mark: writers wait for room");
            }
            return true;
        }
        false
    }

    /// Whether writes needing room here wait now: the share went past its high-water mark and
    /// is not back at the low one.
    pub fn holding_writers(&self, data: &DataStore) -> bool {
        self.held.load(Ordering::Relaxed) && data.used() > self.marks.low
    }

    /// Whether `growth` more bytes would take the share past its high-water mark (or it is
    /// held there): room a client asks to set aside is then refused, without holding writers
    /// back for the asking.
    pub fn past_high_water(&self, data: &DataStore, growth: u64) -> bool {
        self.held.load(Ordering::Relaxed) || data.filled().saturating_add(growth) > self.marks.high
    }
}

impl super::Workflow {
    /// Whether this share holds writers back past a high-water mark (else they fail with
    /// NoSpace when it is full).
    pub fn holds_writers(&self) -> bool {
        self.pressure.is_some()
    }

    /// See [`BackPressure::must_wait`]; never without watermarks.
    pub fn must_wait(&self, data: &DataStore, growth: u64) -> bool {
        self.pressure.as_ref().is_some_and(|pressure| pressure.must_wait(data, growth))
    }

    /// The room a write of `len` bytes at `offset` of `ino` needs, if it must wait for it
    /// ([`BackPressure::must_wait`]); None, without looking at the file, on a share without
    /// watermarks.
    pub fn write_must_wait(&self, data: &DataStore, ino: Ino, offset: u64, len: u64) -> Option<u64> {
        let pressure = self.pressure.as_ref()?;
        let growth = data.write_growth(ino, offset, len);
        pressure.must_wait(data, growth).then_some(growth)
    }

    /// See [`BackPressure::holding_writers`]; never without watermarks.
    pub fn holding_writers(&self, data: &DataStore) -> bool {
        self.pressure.as_ref().is_some_and(|pressure| pressure.holding_writers(data))
    }

    /// See [`BackPressure::past_high_water`]; never without watermarks.
    pub fn past_high_water(&self, data: &DataStore, growth: u64) -> bool {
        self.pressure.as_ref().is_some_and(|pressure| pressure.past_high_water(data, growth))
    }
}

impl Session {
    /// Runs `op` (a write needing `growth` bytes) once the share has come back down to its
    /// low-water mark, in a task of its own; after the back-pressure's wait it fails with
    /// NoSpace instead, and the reason is logged.
    pub(crate) fn when_room<C: surge_proto::Call>(
        &self,
        growth: u64,
        op: impl FnOnce(&DataStore) -> Result<C::Reply> + Send + 'static,
    ) -> Answer {
        let server = self.server.clone();
        Answer::later::<C>(async move {
            let data = &server.data;
            let marks = server.workflow.pressure.as_ref().expect("only held with watermarks").marks;
            let start = std::time::Instant::now();
            while server.workflow.must_wait(data, growth) {
                if start.elapsed() >= marks.wait {
                    let detail = format!(
                        "server share past its high-water mark ({} of {} bytes used or set aside) for {:.0} s: nothing \
                         freed room (no retention policy let files go, no consumer removed any)",
                        data.filled(),
                        data.capacity(),
                        marks.wait.as_secs_f64()
                    );
                    tracing::warn!("write of {growth} bytes refused: {detail}");
                    return Err(ServerError::new(ErrorCode::NoSpace, detail));
                }
                tokio::time::sleep(ROOM_CHECK).await;
            }
            let done = op(data)?;
            if let Some(seq) = server.replication.feed.barrier() {
                server.replication.feed.reached(seq).await;
            }
            Ok(done)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the high-water mark writes wait until the share is back at the low one; room set
    /// aside for a local writer is refused there, and never makes its holder wait.
    #[test]
    fn writes_wait_between_the_watermarks() {
        let dir = std::env::temp_dir().join(format!("surge-data-marks-{}", std::process::id()));
        let marks = surge_proto::workflow::Watermarks { high: 0.5, low: 0.25, wait_secs: 1.0 };
        let store = DataStore::open(&dir, 1 << 20).unwrap();
        let pressure = BackPressure::new(marks, store.capacity());
        store.reserve_local(9, 400 << 10).unwrap();
        assert!(!pressure.must_wait(&store, 64 << 10), "a reservation is not written room");
        assert!(pressure.past_high_water(&store, 200 << 10), "but no more is set aside past the mark");
        store.write(1, 0, &vec![1u8; 400 << 10]).unwrap();
        assert!(pressure.must_wait(&store, 200 << 10), "past the high-water mark");
        assert!(!pressure.must_wait(&store, 0), "nothing to write, nothing to wait for");
        store.truncate(1, 300 << 10).unwrap();
        assert!(pressure.must_wait(&store, 4096), "held until back at the low-water mark");
        store.truncate(1, 100 << 10).unwrap();
        assert!(!pressure.must_wait(&store, 4096), "back at the low-water mark");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
