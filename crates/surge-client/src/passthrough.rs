//! Kernel passthrough for a file whose chunks all live on a server of this node: the FUSE
//! mount hands the server's data file to the kernel, which then reads and writes it without
//! calling the mount (FUSE passthrough). The data file holds the file's bytes at their own
//! offsets, so it *is* the file.
//!
//! The kernel's writes bypass every request, so this handle keeps the server's books the way
//! local writes do (the `local` module): capacity is set aside in steps as the data file grows
//! ([`File::keep_passthrough_room`], called by the mount every few milliseconds while the
//! handle is open), and once the handle flushes or closes, the server is told (`LocalWritten`)
//! and takes the file's new length and allocation, and size and mtime are published as for any
//! write. Whether the kernel wrote is read from the data file itself (its length and mtime),
//! against what the server was last told of it by *any* handle of the file on this node (or
//! made of it by a truncate through one): the kernel sends a close's release after the close
//! returns, so a handle released late must not take another handle's writes, or the server's
//! truncation, for its own and publish a size or time over what came since. Handles opened
//! read-only never report: the kernel does not write through them.
//!
//! Opening costs no request: the first step is set aside once the file has started to grow,
//! so a file created and closed, or only read, costs the server nothing more than on the
//! request path (mdtest's creates, a reader of a large file). Once a server has refused a
//! step (its share is full), new handles of its files stay on the request path for a while,
//! where every write is checked against the share.

use std::collections::HashMap;
use std::fs::File as StdFile;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use surge_proto::data::{LocalWritten, ReserveLocal};
use surge_proto::{data_file_name, Ino};

use crate::error::Result;
use crate::file::File;

/// Capacity set aside at a time for a passthrough handle's growth. The kernel writes without
/// asking, so the mount tops it up while the handle is open: between two checks a writer can
/// outgrow it by what it writes in that time (it is never refused: see docs/consistency.md).
pub const PASSTHROUGH_STEP: u64 = 256 << 20;

/// How long the files of a server that refused a step stay off passthrough.
const AFTER_REFUSAL: Duration = Duration::from_secs(2);

/// A data file's length and mtime.
type DataFileState = (u64, (i64, i64));

/// A data file's state as the server last took it, shared by the passthrough handles of one
/// file on this node.
type Reported = Arc<Mutex<DataFileState>>;

/// A handle's data file under kernel passthrough, and what the server has been told of it.
pub(crate) struct Passthrough {
    server: usize,
    file: Arc<StdFile>,
    /// Whether the kernel may write through the handle (opened for writing).
    writes: bool,
    reported: Reported,
    /// Set aside for growth beyond what was reported and not given back yet.
    reserved: u64,
}

/// A data file's length and mtime now.
fn state(file: &StdFile) -> std::io::Result<DataFileState> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.len(), (m.mtime(), m.mtime_nsec())))
}

/// The reported state of each file with passthrough handles open on this node (held by the
/// handles: an entry lives as long as one of them).
#[derive(Default)]
pub(crate) struct ReportedStates {
    by_ino: Mutex<HashMap<Ino, Weak<Mutex<DataFileState>>>>,
}

impl ReportedStates {
    /// The state shared by `ino`'s passthrough handles; `now` starts it when none is open.
    fn shared(&self, ino: Ino, now: DataFileState) -> Reported {
        let mut by_ino = self.by_ino.lock().unwrap();
        if let Some(live) = by_ino.get(&ino).and_then(Weak::upgrade) {
            return live;
        }
        if by_ino.len() >= 64 && by_ino.len().is_power_of_two() {
            by_ino.retain(|_, state| state.strong_count() > 0);
        }
        let fresh = Arc::new(Mutex::new(now));
        by_ino.insert(ino, Arc::downgrade(&fresh));
        fresh
    }
}

impl File {
    /// Starts kernel passthrough for this handle when every chunk of the file is held by a
    /// server whose data directory is on this node and this process may write its data file:
    /// answers the data file to hand to the kernel. None otherwise (the handle stays on the
    /// request path). `writes`: the handle was opened for writing.
    pub async fn begin_passthrough(&self, writes: bool) -> Option<Arc<StdFile>> {
        let server = self.passthrough_server()?;
        let conn = self.client().connection(server).await.ok()?;
        self.begin_passthrough_on(server, &conn, writes)
    }

    /// [`File::begin_passthrough`] without waiting: None also when the connection to the
    /// data file's server is not open yet.
    pub fn begin_passthrough_now(&self, writes: bool) -> Option<Arc<StdFile>> {
        let server = self.passthrough_server()?;
        let conn = self.client().connection_now(server)?;
        self.begin_passthrough_on(server, &conn, writes)
    }

    /// The server whose data file could be passed through: the one holding every chunk.
    fn passthrough_server(&self) -> Option<usize> {
        let client = self.client();
        if !client.options().local_io {
            return None;
        }
        let server = client.layout().sole_server(self.ino())?;
        (!client.refused_lately(server, AFTER_REFUSAL)).then_some(server)
    }

    fn begin_passthrough_on(&self, server: usize, conn: &crate::conn::Connection, writes: bool) -> Option<Arc<StdFile>> {
        if !conn.local_writes() {
            return None; // The kernel's writes would not reach the share's mirror.
        }
        let dir = conn.local_dir()?.to_path_buf();
        // A new file's data file may not exist yet: the server takes one made here as its own
        // (as it does a local write's), at the handle's first report.
        let opened = StdFile::options().read(true).write(true).create(true).truncate(false).open(dir.join(data_file_name(self.ino())));
        match opened.and_then(|file| Ok((state(&file)?, file))) {
            Ok((now, file)) => {
                let file = Arc::new(file);
                let reported = self.client().passthrough_reports().shared(self.ino(), now);
                *self.passthrough.lock().unwrap() = Some(Passthrough { server, file: file.clone(), writes, reported, reserved: 0 });
                Some(file)
            }
            Err(e) => {
                tracing::debug!("no passthrough for inode {:#x}: {e}", self.ino());
                None
            }
        }
    }

    /// Whether the kernel passes this handle's I/O through.
    pub fn is_passthrough(&self) -> bool {
        self.passthrough.lock().unwrap().is_some()
    }

    /// For a passthrough handle: sets more capacity aside once the data file has started to
    /// grow, and again when it has grown into most of what is set aside. Called by the mount
    /// every few milliseconds while the handle is open. A server out of room refuses (the
    /// error comes back, and the server's files stay off passthrough for a while); the
    /// kernel's writes go on regardless, and are counted when the handle reports.
    pub async fn keep_passthrough_room(&self) -> Result<()> {
        let (server, grown, reserved) = {
            let guard = self.passthrough.lock().unwrap();
            let Some(p) = guard.as_ref().filter(|p| p.writes) else { return Ok(()) };
            let reported = p.reported.lock().unwrap().0;
            let len = state(&p.file).map(|(len, _)| len).unwrap_or(reported);
            (p.server, len.saturating_sub(reported), p.reserved)
        };
        let idle = grown == 0 && reserved == 0;
        if idle || reserved >= grown + PASSTHROUGH_STEP / 2 {
            return Ok(());
        }
        let reserve = ReserveLocal { ino: self.ino(), bytes: PASSTHROUGH_STEP, ticket: self.ticket() };
        if let Err(e) = self.client().call(server, reserve).await {
            if e.code == surge_proto::ErrorCode::NoSpace {
                self.client().note_refusal(server);
            }
            return Err(e);
        }
        if let Some(p) = self.passthrough.lock().unwrap().as_mut() {
            p.reserved += PASSTHROUGH_STEP;
        }
        Ok(())
    }

    /// The data file's length, for a passthrough handle (what the kernel wrote is there).
    pub(crate) fn passthrough_len(&self) -> Option<u64> {
        let guard = self.passthrough.lock().unwrap();
        let p = guard.as_ref()?;
        state(&p.file).ok().map(|(len, _)| len)
    }

    /// The data file's length, when the kernel may have written it through this handle since
    /// the server last took it.
    pub(crate) fn passthrough_unreported_len(&self) -> Option<u64> {
        let guard = self.passthrough.lock().unwrap();
        let p = guard.as_ref().filter(|p| p.writes)?;
        let now = state(&p.file).ok()?;
        let changed = now != *p.reported.lock().unwrap();
        changed.then_some(now.0)
    }

    /// The data file changed since the server last took it.
    pub(crate) fn passthrough_unreported(&self) -> bool {
        let reserved = self.passthrough.lock().unwrap().as_ref().is_some_and(|p| p.reserved > 0);
        reserved || self.passthrough_unreported_len().is_some()
    }

    /// Tells the server what the kernel wrote (it takes the data file's length and gives back
    /// what was set aside) and notes it for the publication that follows. Returns the
    /// request to send, if any.
    pub(crate) fn take_passthrough_report(&self) -> Option<(usize, LocalWritten, Option<u64>)> {
        let mut guard = self.passthrough.lock().unwrap();
        let p = guard.as_mut().filter(|p| p.writes)?;
        let now = state(&p.file).ok()?;
        let written = {
            let mut reported = p.reported.lock().unwrap();
            let written = (now != *reported).then_some(now.0);
            *reported = now;
            written
        };
        if written.is_none() && p.reserved == 0 {
            return None;
        }
        let report = LocalWritten { ino: self.ino(), reserved: p.reserved, ticket: self.ticket() };
        p.reserved = 0;
        Some((p.server, report, written))
    }

    /// The server changed the data file's length (a truncate through this handle): no
    /// handle of the file here is to take that for a write of its own.
    pub(crate) fn passthrough_resized(&self) {
        if let Some(p) = self.passthrough.lock().unwrap().as_ref() {
            if let Ok(now) = state(&p.file) {
                *p.reported.lock().unwrap() = now;
            }
        }
    }
}
