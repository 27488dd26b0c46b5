//! Workflow coupling (see [`surge_proto::workflow`]): following a directory's publications —
//! the files closed after writing, or renamed or linked into it, in the order its home server
//! logged them — and taking them as a consumer of a group. A [`Publications`] reader holds
//! only its cursor: a consumer that restarts resumes from the last cursor it handled; groups,
//! their claims and leases are with the instance, not with any consumer.

use std::collections::VecDeque;
use std::time::Duration;

use surge_proto::workflow::{self, Claimed, GroupStatus, Publication};
use surge_proto::{ErrorCode, FileKind, Ino};

use crate::error::{Error, Result};
use crate::Client;

/// A reader of one directory's publication log.
pub struct Publications {
    client: Client,
    dir: Ino,
    pattern: Option<String>,
    cursor: u64,
    ready: VecDeque<Publication>,
    missed: u64,
}

impl Client {
    /// Reads the publications of the directory at `path` (an instance path) after cursor
    /// `from` (0: from the oldest the log holds) whose names match the glob `pattern`.
    pub async fn publications(&self, path: &str, pattern: Option<&str>, from: u64) -> Result<Publications> {
        Ok(self.publications_of(self.directory(path).await?, pattern, from))
    }

    /// [`Client::publications`] of the directory `dir`.
    pub fn publications_of(&self, dir: Ino, pattern: Option<&str>, from: u64) -> Publications {
        Publications { client: self.clone(), dir, pattern: pattern.map(str::to_string), cursor: from, ready: VecDeque::new(), missed: 0 }
    }
}

/// A caller's wait (None: for ever), spent in requests that wait on the server: each at most
/// half the request timeout (then the client asks again), and no longer than what is left.
struct Wait {
    until: Option<tokio::time::Instant>,
}

impl Wait {
    fn new(wait: Option<Duration>) -> Wait {
        Wait { until: wait.map(|wait| tokio::time::Instant::now() + wait) }
    }

    /// How long the next request may wait on the server, in ms.
    fn on_server_ms(&self, client: &Client) -> u32 {
        let mut ms = (client.timeout() / 2).as_millis().min(workflow::MAX_WAIT_MS as u128) as u32;
        if let Some(until) = self.until {
            ms = ms.min(until.saturating_duration_since(tokio::time::Instant::now()).as_millis() as u32);
        }
        ms
    }

    fn is_over(&self) -> bool {
        self.until.is_some_and(|until| tokio::time::Instant::now() >= until)
    }
}

impl Publications {
    /// The next publication; waits for one as long as `wait` (None: for ever), then answers
    /// None. The wait is on the server: nothing polls.
    pub async fn next(&mut self, wait: Option<Duration>) -> Result<Option<Publication>> {
        let wait = Wait::new(wait);
        loop {
            if let Some(publication) = self.ready.pop_front() {
                self.cursor = publication.cursor;
                return Ok(Some(publication));
            }
            let wait_ms = wait.on_server_ms(&self.client);
            let read = workflow::Publications {
                dir: self.dir,
                after: self.cursor,
                limit: workflow::MAX_PUBLICATIONS_PAGE,
                pattern: self.pattern.clone(),
                wait_ms,
            };
            let page = self.client.call_home(self.dir, read).await?;
            if page.oldest > self.cursor.saturating_add(1) && self.cursor > 0 {
                self.missed += page.oldest - self.cursor - 1;
            }
            self.cursor = self.cursor.max(page.next);
            self.ready.extend(page.publications);
            if self.ready.is_empty() && wait.is_over() {
                return Ok(None);
            }
        }
    }

    /// The cursor to resume from: past every publication handed out (and every one the log
    /// holds that did not match).
    pub fn cursor(&self) -> u64 {
        match self.ready.front() {
            Some(next) => next.cursor - 1,
            None => self.cursor,
        }
    }

    /// Publications this reader never saw because its directory's log had dropped them (it
    /// keeps the newest 100,000).
    pub fn missed(&self) -> u64 {
        self.missed
    }
}

impl Client {
    /// The directory `path` (an instance path) as a directory's inode.
    async fn directory(&self, path: &str) -> Result<Ino> {
        let attr = self.stat(path).await?;
        if attr.kind != FileKind::Dir {
            return Err(Error::new(ErrorCode::NotDir, format!("{path}: not a directory")));
        }
        Ok(attr.ino)
    }

    /// Takes the next file of directory `dir` for consumer group `group` (made with
    /// `pattern` by its first claim), as `consumer`, for `lease`; waits for one as long as
    /// `wait` (None: for ever), then answers None.
    pub async fn claim(
        &self,
        dir: &str,
        group: &str,
        pattern: Option<&str>,
        consumer: &str,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<Claimed>> {
        let dir = self.directory(dir).await?;
        let wait = Wait::new(wait);
        loop {
            let wait_ms = wait.on_server_ms(self);
            let claim = workflow::Claim {
                dir,
                group: group.to_string(),
                pattern: pattern.map(str::to_string),
                consumer: consumer.to_string(),
                lease_ms: lease.as_millis().clamp(1, workflow::MAX_LEASE_MS as u128) as u64,
                wait_ms,
            };
            if let Some(claimed) = self.call_home(dir, claim).await? {
                return Ok(Some(claimed));
            }
            if wait.is_over() {
                return Ok(None);
            }
        }
    }

    /// The consumer is done with the file at `path`, claimed in `group` (None: the one group
    /// holding it); with `token`, only that hand-out. Answers the group.
    pub async fn claim_done(&self, path: &str, group: Option<&str>, token: Option<u64>) -> Result<String> {
        let (dir, name) = self.resolve_parent(path).await?;
        let done = workflow::Done { dir, group: group.map(str::to_string), name: name.to_string(), token };
        self.call_home(dir, done).await
    }

    /// Every consumer group of directory `dir`.
    pub async fn queue_status(&self, dir: &str) -> Result<Vec<GroupStatus>> {
        let dir = self.directory(dir).await?;
        self.call_home(dir, workflow::QueueStatus { dir }).await
    }
}

impl Client {
    /// Sets (None: drops) the retention policy of directory `dir` (an instance path).
    pub async fn set_retention(&self, dir: &str, policy: Option<workflow::RetentionPolicy>) -> Result<()> {
        let ino = self.directory(dir).await?;
        self.call_home(ino, workflow::SetRetention { dir: ino, path: dir.to_string(), policy }).await
    }

    /// Directory `dir`'s retention policy and what it did so far (None: it has none).
    pub async fn retention(&self, dir: &str) -> Result<Option<workflow::RetentionStatus>> {
        let ino = self.directory(dir).await?;
        self.call_home(ino, workflow::GetRetention { dir: ino }).await
    }
}
