//! The predecessor's share mirrored here, in `<root>/mirror`: a share directory as the
//! predecessor keeps its own (`meta/` and `data/`), plus `complete` once it was filled. Only
//! one connection mirrors at a time (the predecessor's latest); once the share is taken over
//! (served from here as the lost server's, which `taken-over` records so that a restart of
//! this server serves it again) nothing more is accepted.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use surge_meta::error::{Result, ServerError};
use surge_proto::call::Handle;
use surge_proto::mirror::*;
use surge_proto::{ErrorCode, Ino};

/// Data files held open at most (then all are closed and reopened on demand).
const OPEN_FILES: usize = 1024;
/// Written in the mirror's directory when its share is taken over.
const TAKEN_OVER: &str = "taken-over";

pub struct Replica {
    dir: PathBuf,
    /// The server whose share this is.
    from: usize,
    /// The connection mirroring now (its lock-holder number), if any.
    mirroring: Option<u64>,
    /// Served from here since its server was lost: no more mirroring.
    taken_over: bool,
    /// When the mirroring connection last sent anything (it pings every second).
    heard: std::time::Instant,
    journal: Option<File>,
    snapshot: Option<File>,
    files: HashMap<Ino, File>,
}

fn store(what: &str, e: io::Error) -> ServerError {
    ServerError::store(what, e)
}

impl Replica {
    /// The mirror kept under `root` for server `from`.
    pub fn new(root: &Path, from: usize) -> Replica {
        let dir = root.join("mirror");
        Replica {
            taken_over: dir.join(TAKEN_OVER).exists(),
            heard: std::time::Instant::now(),
            dir,
            from,
            mirroring: None,
            journal: None,
            snapshot: None,
            files: HashMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn from(&self) -> usize {
        self.from
    }

    /// Whether connection `connection` is the one mirroring (its requests are taken).
    fn check(&self, connection: u64) -> Result<()> {
        if self.taken_over {
            return Err(ServerError::new(
                ErrorCode::Stale,
                format!("server {}'s share was taken over here: it mirrors no more", self.from),
            ));
        }
        if self.mirroring != Some(connection) {
            return Err(ServerError::new(ErrorCode::Invalid, "a mirror change before mirror-open on this connection"));
        }
        Ok(())
    }

    /// Applies one mirror request from connection `connection` (its payload: bytes). Only
    /// `MirrorOpen` is taken from a connection that is not the one mirroring.
    pub fn apply(&mut self, connection: u64, request: MirrorRequest, payload: &[u8]) -> Result<()> {
        self.heard = std::time::Instant::now();
        if !matches!(request, MirrorRequest::MirrorOpen(_)) {
            self.check(connection)?;
        }
        request.dispatch(&mut Applying { replica: self, connection, payload })
    }

    /// Starts over: what was held goes, a fresh share directory is made.
    fn open(&mut self, connection: u64, from: usize) -> Result<()> {
        if from != self.from {
            return Err(ServerError::new(ErrorCode::Invalid, format!("server {from} is not this server's predecessor ({})", self.from)));
        }
        if self.taken_over {
            return Err(ServerError::new(ErrorCode::Stale, format!("server {from}'s share was taken over here: it mirrors no more")));
        }
        self.journal = None;
        self.snapshot = None;
        self.files.clear();
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(store("empty the mirror", e)),
            _ => {}
        }
        for sub in ["meta", "data"] {
            std::fs::create_dir_all(self.dir.join(sub)).map_err(|e| store("make the mirror's directories", e))?;
        }
        std::fs::write(self.dir.join("meta/format"), format!("{}\n", surge_meta::journal::FORMAT))
            .map_err(|e| store("mark the mirror's format", e))?;
        self.mirroring = Some(connection);
        tracing::info!(from, "mirroring server {from}'s share (emptied; filled from now)");
        Ok(())
    }

    /// The mirroring connection `connection` ended.
    pub fn connection_ended(&mut self, connection: u64) {
        if self.mirroring == Some(connection) {
            self.mirroring = None;
            self.journal = None;
            self.snapshot = None;
            self.files.clear();
        }
    }

    fn journal(&mut self) -> Result<&File> {
        if self.journal.is_none() {
            let path = self.dir.join("meta/journal");
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .map_err(|e| store("open the mirror's journal", e))?;
            self.journal = Some(file);
        }
        Ok(self.journal.as_ref().expect("just opened"))
    }

    fn data_path(&self, ino: Ino) -> PathBuf {
        self.dir.join("data").join(surge_proto::data_file_name(ino))
    }

    fn data(&mut self, d: MirrorData, payload: &[u8]) -> Result<()> {
        let past = |a: u64, b: u64| a.checked_add(b).is_none_or(|end| end > i64::MAX as u64);
        if past(d.offset, payload.len() as u64) || past(d.offset, d.hole) || d.file_len > i64::MAX as u64 {
            return Err(ServerError::new(ErrorCode::Invalid, "mirrored data past the largest file offset"));
        }
        if !self.files.contains_key(&d.ino) {
            if self.files.len() >= OPEN_FILES {
                self.files.clear();
            }
            let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(self.data_path(d.ino));
            self.files.insert(d.ino, file.map_err(|e| store("open a mirrored data file", e))?);
        }
        let file = &self.files[&d.ino];
        if !payload.is_empty() {
            file.write_all_at(payload, d.offset).map_err(|e| store("write a mirrored data file", e))?;
        }
        if d.hole > 0 {
            let flags = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            crate::data::fallocate(file, flags, d.offset + payload.len() as u64, d.hole)
                .map_err(|e| store("punch a mirrored data file", e))?;
        }
        if file.metadata().map_err(|e| store("stat a mirrored data file", e))?.len() != d.file_len {
            file.set_len(d.file_len).map_err(|e| store("size a mirrored data file", e))?;
        }
        if d.sync {
            file.sync_data().map_err(|e| store("sync a mirrored data file", e))?;
        }
        Ok(())
    }

    /// A majority found the predecessor lost: its mirror connection, if it still looks up, is
    /// a dead node's (its further requests are refused).
    pub fn forget_mirroring(&mut self) {
        self.mirroring = None;
        self.journal = None;
        self.snapshot = None;
        self.files.clear();
    }

    /// Whether the share can be taken over: complete, and nobody mirrors it now.
    pub fn can_take_over(&self) -> Result<()> {
        if self.taken_over {
            return Err(ServerError::new(ErrorCode::Exists, format!("server {}'s share is already served here", self.from)));
        }
        if self.mirroring.is_some() {
            let detail = format!(
                "server {} still mirrors its share here (its connection is up): it is not lost, or its node died \
                 less than about 25 s ago (the connection ends by TCP keepalive); try again",
                self.from
            );
            return Err(ServerError::new(ErrorCode::Busy, detail));
        }
        if !self.complete() {
            let detail = format!("the mirror of server {}'s share was never filled: it cannot be served", self.from);
            return Err(ServerError::new(ErrorCode::NotFound, detail));
        }
        Ok(())
    }

    /// Whether the predecessor mirrors here now and was heard from within `within`.
    pub fn heard_within(&self, within: std::time::Duration) -> bool {
        self.mirroring.is_some() && self.heard.elapsed() < within
    }

    /// Whether the mirror was filled (and can be served).
    pub fn complete(&self) -> bool {
        self.dir.join("complete").exists()
    }

    /// Whether the share was taken over here (by this run or an earlier one).
    pub fn taken_over(&self) -> bool {
        self.taken_over
    }

    /// From now on the share is served here, and again after a restart of this server.
    pub fn mark_taken_over(&mut self) -> Result<()> {
        File::create(self.dir.join(TAKEN_OVER)).and_then(|f| f.sync_all()).map_err(|e| store("mark the mirror taken over", e))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| store("sync the mirror directory", e))?;
        self.taken_over = true;
        self.files.clear();
        self.journal = None;
        Ok(())
    }
}

/// A mirror request being applied: the mirror, the connection that sent it and the frame's
/// payload.
struct Applying<'a> {
    replica: &'a mut Replica,
    connection: u64,
    payload: &'a [u8],
}

impl Handle<MirrorOpen, Result<()>> for Applying<'_> {
    fn handle(&mut self, open: MirrorOpen) -> Result<()> {
        self.replica.open(self.connection, open.from as usize)
    }
}

impl Handle<MirrorSnapshot, Result<()>> for Applying<'_> {
    fn handle(&mut self, part: MirrorSnapshot) -> Result<()> {
        let replica = &mut *self.replica;
        let meta = replica.dir.join("meta");
        if replica.snapshot.is_none() {
            replica.snapshot = Some(File::create(meta.join("snapshot.tmp")).map_err(|e| store("create the mirror's snapshot", e))?);
        }
        let snapshot = replica.snapshot.as_mut().expect("just made");
        io::Write::write_all(snapshot, self.payload).map_err(|e| store("write the mirror's snapshot", e))?;
        if part.last {
            let snapshot = replica.snapshot.take().expect("just made");
            snapshot.sync_all().map_err(|e| store("sync the mirror's snapshot", e))?;
            std::fs::rename(meta.join("snapshot.tmp"), meta.join("snapshot")).map_err(|e| store("place the mirror's snapshot", e))?;
            let journal = replica.journal()?;
            journal.set_len(0).map_err(|e| store("empty the mirror's journal", e))?;
            journal.sync_all().map_err(|e| store("sync the mirror's journal", e))?;
            File::open(&meta).and_then(|d| d.sync_all()).map_err(|e| store("sync the mirror's metadata directory", e))?;
        }
        Ok(())
    }
}

impl Handle<MirrorJournal, Result<()>> for Applying<'_> {
    fn handle(&mut self, j: MirrorJournal) -> Result<()> {
        let payload = self.payload;
        let end = j.at.checked_add(payload.len() as u64).filter(|&end| end <= i64::MAX as u64);
        let end = end.ok_or_else(|| ServerError::new(ErrorCode::Invalid, "journal bytes past the largest file offset"))?;
        let journal = self.replica.journal()?;
        journal.write_all_at(payload, j.at).map_err(|e| store("write the mirror's journal", e))?;
        journal.set_len(end).map_err(|e| store("write the mirror's journal", e))?;
        journal.sync_data().map_err(|e| store("sync the mirror's journal", e))
    }
}

impl Handle<MirrorData, Result<()>> for Applying<'_> {
    fn handle(&mut self, d: MirrorData) -> Result<()> {
        self.replica.data(d, self.payload)
    }
}

impl Handle<MirrorPurge, Result<()>> for Applying<'_> {
    fn handle(&mut self, p: MirrorPurge) -> Result<()> {
        self.replica.files.remove(&p.ino);
        match std::fs::remove_file(self.replica.data_path(p.ino)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(store("remove a mirrored data file", e)),
            _ => Ok(()),
        }
    }
}

impl Handle<MirrorPing, Result<()>> for Applying<'_> {
    fn handle(&mut self, _: MirrorPing) -> Result<()> {
        Ok(())
    }
}

impl Handle<MirrorSynced, Result<()>> for Applying<'_> {
    fn handle(&mut self, _: MirrorSynced) -> Result<()> {
        let replica = &*self.replica;
        let marker = replica.dir.join("complete");
        File::create(&marker).and_then(|f| f.sync_all()).map_err(|e| store("mark the mirror complete", e))?;
        File::open(&replica.dir).and_then(|d| d.sync_all()).map_err(|e| store("sync the mirror directory", e))?;
        tracing::info!(from = replica.from, "the mirror of server {}'s share is complete", replica.from);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("surge-replica-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    /// What a mirror is sent ends up as a share directory: data with its holes and length,
    /// the journal at its offsets, the snapshot in parts; changes out of turn, from another
    /// connection or server, or past the largest offset are refused and change nothing.
    #[test]
    fn a_mirror_holds_what_it_is_sent_and_refuses_the_rest() {
        let root = scratch("apply");
        let mut replica = Replica::new(&root, 3);
        let data = |ino, offset, hole, file_len| MirrorRequest::MirrorData(MirrorData { ino, offset, hole, file_len, sync: false });
        assert!(replica.apply(1, data(5, 0, 0, 4), b"abcd").is_err(), "a change before mirror-open");
        assert!(replica.apply(1, MirrorRequest::MirrorOpen(MirrorOpen { from: 2 }), &[]).is_err(), "not the predecessor");
        replica.apply(1, MirrorRequest::MirrorOpen(MirrorOpen { from: 3 }), &[]).unwrap();
        assert!(replica.apply(2, data(5, 0, 0, 4), b"abcd").is_err(), "another connection");

        replica.apply(1, data(5, 0, 0, 8192), &[7u8; 8192]).unwrap();
        replica.apply(1, data(5, 0, 4096, 12288), &[]).unwrap();
        let file = std::fs::read(replica.dir().join("data").join(surge_proto::data_file_name(5))).unwrap();
        assert_eq!(file.len(), 12288, "the length sent");
        assert!(file[..4096].iter().all(|&b| b == 0) && file[4096..8192].iter().all(|&b| b == 7), "the hole punched, the rest kept");
        assert!(replica.apply(1, data(5, u64::MAX - 1, 0, 1), b"xy").is_err(), "past the largest offset");

        replica.apply(1, MirrorRequest::MirrorJournal(MirrorJournal { at: 0 }), b"0123456789").unwrap();
        replica.apply(1, MirrorRequest::MirrorJournal(MirrorJournal { at: 4 }), b"ab").unwrap();
        assert_eq!(std::fs::read(replica.dir().join("meta/journal")).unwrap(), b"0123ab", "the journal ends after the bytes sent");
        replica.apply(1, MirrorRequest::MirrorSnapshot(MirrorSnapshot { last: false }), b"snap").unwrap();
        replica.apply(1, MirrorRequest::MirrorSnapshot(MirrorSnapshot { last: true }), b"shot").unwrap();
        assert_eq!(std::fs::read(replica.dir().join("meta/snapshot")).unwrap(), b"snapshot");
        assert_eq!(std::fs::read(replica.dir().join("meta/journal")).unwrap(), b"", "a new snapshot empties the journal");

        assert!(replica.can_take_over().is_err(), "incomplete, and mirrored now");
        replica.apply(1, MirrorRequest::MirrorSynced(MirrorSynced), &[]).unwrap();
        replica.apply(1, MirrorRequest::MirrorPurge(MirrorPurge { ino: 5 }), &[]).unwrap();
        assert!(!replica.dir().join("data").join(surge_proto::data_file_name(5)).exists());
        assert!(replica.can_take_over().is_err(), "still mirrored by a live connection");
        replica.connection_ended(1);
        replica.can_take_over().unwrap();
        replica.mark_taken_over().unwrap();
        assert!(replica.apply(1, MirrorRequest::MirrorOpen(MirrorOpen { from: 3 }), &[]).is_err(), "taken over: no more mirroring");
        assert!(Replica::new(&root, 3).taken_over(), "the take-over survives a restart");
        let _ = std::fs::remove_dir_all(&root);
    }
}
