//! The checker: every worker's history, the faults' windows and the tree's final state,
//! held against what docs/consistency.md promises:
//!
//! * **no lost acknowledged write**: each own file whose every operation succeeded is at its
//!   last name with its last version; one whose last operation failed or was cut short is in
//!   one of the states that operation could have left (a rename: at one name or the other,
//!   whole; an unlink: gone or whole; a write: present); nothing else of a worker's is left;
//! * **close-to-open**: a read opened after an update's close returned sees that version or a
//!   later one, exactly that version when no other update was under way or failed since;
//! * **atomic rename**: a published name, once published, always opens as one whole version,
//!   never torn, empty or missing, and never older than the last publication acknowledged
//!   before the open;
//! * **O_EXCL**: at most one worker's exclusive create of a name succeeds, and the name holds
//!   the winner's mark;
//! * **locks**: two increments of the counter that held its lock outside any fault's window
//!   never held it at once, and one that follows another with nothing between them reads
//!   what that one wrote (a lock lost to a server's restart or a cut link is not fenced, which
//!   docs/consistency.md says: those increments are not judged);
//! * **no hang**: no operation ran past the bound.

use std::collections::{BTreeMap, HashMap};

use crate::history::{parse_record, Fault, Line, Op, Outcome, Seen, RECORD};

/// A fault's effects on locks last past its window: a connection cut off is found dead, and
/// a restarted server's clients reconnect, seconds later.
const FAULT_MARGIN_US: u64 = 10_000_000;
/// No operation runs longer (a worker records one that does as hung).
const HANG_US: u64 = crate::worker::HANG.as_micros() as u64 + 1_000_000;

/// One operation of one worker, with its end if it had one.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub worker: u64,
    pub seq: u64,
    pub at: u64,
    pub op: Op,
    pub done: Option<(u64, Outcome)>,
}

impl Invocation {
    fn ok(&self) -> bool {
        matches!(self.done, Some((_, ref outcome)) if !matches!(outcome, Outcome::Failed { .. }))
    }

    /// When it ended; an operation cut short ended never.
    fn end(&self) -> u64 {
        self.done.as_ref().map_or(u64::MAX, |(at, _)| *at)
    }
}

/// Pairs invocations with their ends, in each worker's order.
pub fn invocations(lines: Vec<Line>) -> Vec<Invocation> {
    let mut by_key: BTreeMap<(u64, u64), Invocation> = BTreeMap::new();
    for line in lines {
        match line {
            Line::Invoke { worker, seq, at, op } => {
                by_key.insert((worker, seq), Invocation { worker, seq, at, op, done: None });
            }
            Line::Done { worker, seq, at, outcome } => {
                if let Some(invocation) = by_key.get_mut(&(worker, seq)) {
                    invocation.done = Some((at, outcome));
                }
            }
        }
    }
    by_key.into_values().collect()
}

/// The tree after the campaign: every file under the own directories as read whole, and the
/// bytes of every exclusive name.
#[derive(Debug, Default)]
pub struct FinalState {
    pub own: HashMap<String, Seen>,
    pub exclusive: HashMap<String, Vec<u8>>,
    /// The shared log's bytes.
    pub log: Vec<u8>,
    /// Names listed whose inode could not be opened.
    pub dangling: Vec<String>,
}

/// How many of each kind of judgement the checker made: a campaign in which nothing could
/// be judged strictly proves little.
#[derive(Debug, Default)]
pub struct Judged {
    pub files_acknowledged: u64,
    pub files_uncertain: u64,
    pub reads_exact: u64,
    pub reads_during_writes: u64,
    pub exclusive_names: u64,
    pub increments_clean: u64,
    pub increments_in_sequence: u64,
    pub appends_acknowledged: u64,
}

/// Every broken promise, in words.
#[cfg(test)]
pub fn check(history: &[Invocation], faults: &[Fault], end: &FinalState) -> Vec<String> {
    check_counting(history, faults, end, &mut Judged::default())
}

/// Every broken promise, in words, counting what was judged.
pub fn check_counting(history: &[Invocation], faults: &[Fault], end: &FinalState, judged: &mut Judged) -> Vec<String> {
    let mut violations = Vec::new();
    for inv in history {
        if let Some((_, Outcome::Failed { code, .. })) = &inv.done {
            if code == "Hung" {
                violations.push(format!("worker {} op {} hung: {:?}", inv.worker, inv.seq, inv.op));
            }
        }
    }
    violations.extend(end.dangling.iter().map(|name| format!("a name without its file at the end: {name}")));
    violations.extend(own_files(history, end, judged));
    violations.extend(reads(history, judged));
    violations.extend(exclusive(history, end, judged));
    violations.extend(increments(history, faults, judged));
    violations.extend(appends(history, end, judged));
    violations
}

/// The log holds each acknowledged append's record once, whole; one that failed or was cut
/// short at most once, or as a record's worth of zeros or a torn record (its range was set
/// aside, its bytes not all written); nothing else.
fn appends(history: &[Invocation], end: &FinalState, judged: &mut Judged) -> Vec<String> {
    let mut violations = Vec::new();
    if !end.log.len().is_multiple_of(RECORD) {
        violations.push(format!("the log is {} bytes: not a whole number of {RECORD}-byte records", end.log.len()));
    }
    let mut found: HashMap<(u64, u64), u32> = HashMap::new();
    let mut unreadable = 0;
    for unit in end.log.chunks(RECORD) {
        match parse_record(unit) {
            Some(key) => *found.entry(key).or_default() += 1,
            None => unreadable += 1,
        }
    }
    let mut uncertain = 0;
    for inv in history {
        let Op::Append { tag, .. } = &inv.op else { continue };
        let copies = found.remove(&(inv.worker, *tag)).unwrap_or(0);
        if inv.ok() {
            judged.appends_acknowledged += 1;
            if copies != 1 {
                violations.push(format!("acknowledged append {tag} of worker {} is in the log {copies} times", inv.worker));
            }
        } else {
            uncertain += 1;
            if copies > 1 {
                violations.push(format!("append {tag} of worker {} (not acknowledged) is in the log {copies} times", inv.worker));
            }
        }
    }
    if !found.is_empty() {
        violations.push(format!(
            "{} records in the log that no worker appended: {:?}",
            found.len(),
            found.keys().take(5).collect::<Vec<_>>()
        ));
    }
    if unreadable > uncertain {
        violations.push(format!("{unreadable} unreadable records in the log, but only {uncertain} appends failed"));
    }
    violations
}

/// What one own file may be at the end after an operation that was not acknowledged: at
/// some of `names`, each whole at `version` (when known; else anything), at one of them only
/// when `one_name`, at none of them only when `may_be_gone`.
#[derive(Debug)]
struct Expected {
    names: Vec<String>,
    version: Option<u64>,
    one_name: bool,
    may_be_gone: bool,
}

fn own_files(history: &[Invocation], end: &FinalState, judged: &mut Judged) -> Vec<String> {
    let mut violations = Vec::new();
    // Certain files: path -> version.
    let mut certain: HashMap<String, u64> = HashMap::new();
    let mut uncertain: Vec<(String, Expected)> = Vec::new();
    for inv in history {
        let ok = inv.ok();
        match &inv.op {
            Op::Put { path, version } => {
                if ok {
                    certain.insert(path.clone(), *version);
                } else {
                    let e = Expected { names: vec![path.clone()], version: None, one_name: true, may_be_gone: true };
                    uncertain.push((format!("{:?}", inv.op), e));
                }
            }
            Op::Rewrite { path, version } => {
                if ok {
                    certain.insert(path.clone(), *version);
                } else if certain.remove(path).is_some() {
                    let e = Expected { names: vec![path.clone()], version: None, one_name: true, may_be_gone: false };
                    uncertain.push((format!("{:?}", inv.op), e));
                }
            }
            Op::Rename { from, to } | Op::Relink { from, to } => {
                let Some(version) = certain.remove(from) else { continue };
                if ok {
                    certain.insert(to.clone(), version);
                } else {
                    // A rename leaves one name; a link then an unlink one or both.
                    let one_name = matches!(inv.op, Op::Rename { .. });
                    let e = Expected { names: vec![from.clone(), to.clone()], version: Some(version), one_name, may_be_gone: false };
                    uncertain.push((format!("{:?}", inv.op), e));
                }
            }
            Op::Unlink { path } => {
                let Some(version) = certain.remove(path) else { continue };
                if !ok {
                    let e = Expected { names: vec![path.clone()], version: Some(version), one_name: true, may_be_gone: true };
                    uncertain.push((format!("{:?}", inv.op), e));
                }
            }
            _ => {}
        }
    }
    judged.files_acknowledged += certain.len() as u64;
    judged.files_uncertain += uncertain.len() as u64;
    let mut accounted: Vec<&str> = Vec::new();
    for (path, version) in &certain {
        match end.own.get(path) {
            Some(Seen::Whole { version: v }) if v == version => {}
            other => violations.push(format!("acknowledged {path} (version {version}) is {other:?} at the end")),
        }
        accounted.push(path);
    }
    for (what, e) in &uncertain {
        let present: Vec<&String> = e.names.iter().filter(|n| end.own.contains_key(*n)).collect();
        if present.is_empty() && !e.may_be_gone {
            violations.push(format!("after {what} (not acknowledged) none of {:?} is there", e.names));
        }
        if present.len() > 1 && e.one_name {
            violations.push(format!("after {what} (not acknowledged) both names are there"));
        }
        if let Some(version) = e.version {
            for name in &present {
                if end.own.get(*name) != Some(&Seen::Whole { version }) {
                    violations.push(format!("after {what} (not acknowledged) {name} is {:?}, not version {version}", end.own[*name]));
                }
            }
        }
        accounted.extend(e.names.iter().map(String::as_str));
    }
    for path in end.own.keys() {
        if !accounted.contains(&path.as_str()) {
            violations.push(format!("{path} is there at the end, but no operation left it there"));
        }
    }
    violations
}

/// The shared files' and published files' reads against the updates and publications.
/// The writes of one file (its slot's updates, or its publications), indexed for judging
/// reads: a long campaign has a million operations.
struct Writes<'a> {
    by_start: Vec<&'a Invocation>,
    /// Acknowledged ones by end: (end, the largest version and the latest start among those
    /// ended by then).
    acknowledged: Vec<(u64, u64, u64)>,
    /// Starts of the failed or cut-short ones, in order.
    failed: Vec<u64>,
}

impl<'a> Writes<'a> {
    fn new(mut by_start: Vec<&'a Invocation>) -> Writes<'a> {
        by_start.sort_by_key(|w| w.at);
        let mut ok: Vec<&Invocation> = by_start.iter().copied().filter(|w| w.ok()).collect();
        ok.sort_by_key(|w| w.end());
        let (mut version, mut start) = (0, 0);
        let acknowledged = ok
            .iter()
            .map(|w| {
                (version, start) = (version.max(version_of(&w.op)), start.max(w.at));
                (w.end(), version, start)
            })
            .collect();
        let failed = by_start.iter().filter(|w| !w.ok()).map(|w| w.at).collect();
        Writes { by_start, acknowledged, failed }
    }

    /// The last version acknowledged before `t`, and when the latest write so acknowledged began.
    fn acknowledged_before(&self, t: u64) -> Option<(u64, u64)> {
        let i = self.acknowledged.partition_point(|(end, ..)| *end < t);
        i.checked_sub(1).map(|i| (self.acknowledged[i].1, self.acknowledged[i].2))
    }

    /// Whether a read from `open` to `end` may see anything: a write under way then, or one
    /// that failed (or was cut short by its worker's kill, which did nothing after the kill)
    /// and was not written over by a later one acknowledged before the open.
    fn unsettled(&self, open: u64, end: u64) -> bool {
        let begun = self.by_start.partition_point(|w| w.at < end);
        // Every operation ends within the hang bound of its start.
        let under_way = self.by_start[..begun]
            .iter()
            .rev()
            .take_while(|w| w.at.saturating_add(HANG_US) >= open)
            // Ended in the very microsecond the open began (two processes' clock readings):
            // not known to be before it, so under way.
            .any(|w| w.done.is_some() && w.end() >= open);
        let last_failed = self.failed[..self.failed.partition_point(|at| *at < end)].last();
        let repaired_by = self.acknowledged_before(open).map(|(_, start)| start);
        under_way || last_failed.is_some_and(|failed| repaired_by.is_none_or(|start| start < *failed))
    }
}

/// The shared files' and published files' reads against the updates and publications.
fn reads(history: &[Invocation], judged: &mut Judged) -> Vec<String> {
    let mut by_path: HashMap<&str, Vec<&Invocation>> = HashMap::new();
    for inv in history {
        match &inv.op {
            Op::Update { path, .. } | Op::Publish { path, .. } => by_path.entry(path.as_str()).or_default().push(inv),
            _ => {}
        }
    }
    let writes: HashMap<&str, Writes> = by_path.into_iter().map(|(path, list)| (path, Writes::new(list))).collect();
    let none = Writes::new(Vec::new());
    let mut violations = Vec::new();
    for read in history {
        let Op::Read { path } = &read.op else { continue };
        let Some((read_end, outcome)) = &read.done else { continue };
        let published = path.starts_with("/campaign/pub/");
        let writes = writes.get(path.as_str()).unwrap_or(&none);
        // The last version acknowledged before the read's open began.
        let acknowledged = writes.acknowledged_before(read.at).map(|(version, _)| version);
        let unsettled = writes.unsettled(read.at, *read_end);
        let seen = match outcome {
            Outcome::Read { seen } => {
                if unsettled {
                    judged.reads_during_writes += 1;
                } else {
                    judged.reads_exact += 1;
                }
                *seen
            }
            Outcome::Failed { code, .. } if code == "NotFound" && (!published || acknowledged.is_some()) => {
                violations.push(format!("{path} missing for a read opened after version {acknowledged:?} was acknowledged"));
                continue;
            }
            _ => continue,
        };
        let problem = match (published, seen) {
            (true, Seen::Torn | Seen::Empty) => Some("a published name opened as a partial file"),
            (_, Seen::Whole { version }) if acknowledged.is_some_and(|a| version < a) => {
                Some("an older version than one acknowledged before the open")
            }
            (false, Seen::Empty) if acknowledged.is_some() => Some("empty after a version was acknowledged"),
            (false, Seen::Torn) if !unsettled => Some("torn, with no update under way or failed"),
            (false, Seen::Whole { version }) if !unsettled && Some(version) != acknowledged => Some("not the one version acknowledged"),
            _ => None,
        };
        if let Some(problem) = problem {
            violations.push(format!(
                "worker {} read {path} (op {}, {}..{}): {seen:?}: {problem} (acknowledged before: {acknowledged:?})",
                read.worker, read.seq, read.at, read_end
            ));
        }
    }
    violations
}

fn version_of(op: &Op) -> u64 {
    match op {
        Op::Update { version, .. } | Op::Publish { version, .. } | Op::Put { version, .. } | Op::Rewrite { version, .. } => *version,
        _ => 0,
    }
}

fn exclusive(history: &[Invocation], end: &FinalState, judged: &mut Judged) -> Vec<String> {
    let mut winners: HashMap<&str, Vec<u64>> = HashMap::new();
    for inv in history {
        if let Op::Exclusive { path } = &inv.op {
            if inv.ok() {
                winners.entry(path.as_str()).or_default().push(inv.worker);
            }
        }
    }
    judged.exclusive_names += winners.len() as u64;
    let mut violations = Vec::new();
    for (path, won) in &winners {
        if won.len() > 1 {
            violations.push(format!("{path}: O_EXCL create succeeded for {} workers: {won:?}", won.len()));
        } else if end.exclusive.get(*path).map(Vec::as_slice) != Some(&won[0].to_le_bytes()[..]) {
            violations.push(format!("{path}: won by worker {}, holds {:?}", won[0], end.exclusive.get(*path)));
        }
    }
    violations
}

fn increments(history: &[Invocation], faults: &[Fault], judged: &mut Judged) -> Vec<String> {
    let during_fault = |from: u64, to: u64| faults.iter().any(|f| from <= f.to.saturating_add(FAULT_MARGIN_US) && f.from <= to);
    let mut all: Vec<&Invocation> = history.iter().filter(|i| matches!(i.op, Op::Increment { .. })).collect();
    all.sort_by_key(|i| i.at);
    // One cut short by its worker's kill held the lock at most until the hang bound.
    let held_until = |o: &Invocation| o.done.as_ref().map_or(o.at.saturating_add(HANG_US), |(end, _)| *end);
    let mut clean: Vec<(u64, u64, u64, &Invocation)> = all
        .iter()
        .filter_map(|inv| match &inv.done {
            Some((_, Outcome::Incremented { read, locked_at, unlocking_at })) if !during_fault(inv.at, inv.end()) => {
                Some((*locked_at, *unlocking_at, *read, *inv))
            }
            _ => None,
        })
        .collect();
    clean.sort_by_key(|c| c.0);
    judged.increments_clean += clean.len() as u64;
    let mut violations = Vec::new();
    for pair in clean.windows(2) {
        let ((_, a_to, a_read, a), (b_from, _, b_read, b)) = (pair[0], pair[1]);
        if b_from < a_to {
            violations
                .push(format!("the counter's lock held by workers {} (op {}) and {} (op {}) at once", a.worker, a.seq, b.worker, b.seq));
            continue;
        }
        // Nobody else could have held the lock between them: b must read what a wrote.
        let candidates = all.partition_point(|o| o.at < a_to.saturating_sub(HANG_US))..all.partition_point(|o| o.at < b_from);
        let between = all[candidates].iter().any(|o| !std::ptr::eq(*o, a) && !std::ptr::eq(*o, b) && held_until(o) > a_to);
        judged.increments_in_sequence += u64::from(!between);
        if !between && b_read != a_read + 1 {
            violations.push(format!(
                "worker {} (op {}) read the counter as {b_read} right after worker {} (op {}) wrote {}",
                b.worker,
                b.seq,
                a.worker,
                a.seq,
                a_read + 1
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(worker: u64, seq: u64, at: u64, op: Op, done: Option<(u64, Outcome)>) -> Invocation {
        Invocation { worker, seq, at, op, done }
    }

    fn put(path: &str, version: u64) -> Op {
        Op::Put { path: path.into(), version }
    }

    fn failed() -> Outcome {
        Outcome::Failed { code: "TimedOut".into(), maybe_applied: true }
    }

    fn state(own: &[(&str, Seen)]) -> FinalState {
        FinalState { own: own.iter().map(|(p, s)| (p.to_string(), *s)).collect(), ..Default::default() }
    }

    #[test]
    fn an_acknowledged_file_lost_or_changed_is_a_violation() {
        let h = [inv(1, 1, 10, put("/campaign/a/f", 7), Some((20, Outcome::Ok)))];
        assert!(check(&h, &[], &state(&[("/campaign/a/f", Seen::Whole { version: 7 })])).is_empty());
        assert_eq!(check(&h, &[], &state(&[])).len(), 1);
        assert_eq!(check(&h, &[], &state(&[("/campaign/a/f", Seen::Torn)])).len(), 1);
        // A file nothing made is one too.
        assert_eq!(check(&h, &[], &state(&[("/campaign/a/f", Seen::Whole { version: 7 }), ("/campaign/b/g", Seen::Empty)])).len(), 1);
    }

    #[test]
    fn an_unacknowledged_rename_leaves_one_whole_name() {
        let rename = Op::Rename { from: "/campaign/a/f".into(), to: "/campaign/b/g".into() };
        let h = [inv(1, 1, 10, put("/campaign/a/f", 7), Some((20, Outcome::Ok))), inv(1, 2, 30, rename, Some((40, failed())))];
        let whole = Seen::Whole { version: 7 };
        assert!(check(&h, &[], &state(&[("/campaign/a/f", whole)])).is_empty());
        assert!(check(&h, &[], &state(&[("/campaign/b/g", whole)])).is_empty());
        assert_eq!(check(&h, &[], &state(&[])).len(), 1);
        assert_eq!(check(&h, &[], &state(&[("/campaign/a/f", whole), ("/campaign/b/g", whole)])).len(), 1);
    }

    #[test]
    fn a_read_after_a_close_sees_that_version_and_a_published_name_is_never_torn() {
        let update =
            |version, at, end| inv(1, at, at, Op::Update { path: "/campaign/shared/s1".into(), version }, Some((end, Outcome::Ok)));
        let read = |path: &str, at, seen| inv(2, at, at, Op::Read { path: path.into() }, Some((at + 5, Outcome::Read { seen })));
        let shared = "/campaign/shared/s1";
        let h = [update(5, 10, 20), update(6, 30, 40), read(shared, 50, Seen::Whole { version: 6 })];
        assert!(check(&h, &[], &FinalState::default()).is_empty());
        let stale = [update(5, 10, 20), update(6, 30, 40), read(shared, 50, Seen::Whole { version: 5 })];
        assert_eq!(check(&stale, &[], &FinalState::default()).len(), 1);
        // Torn while an update is under way is allowed; after it, not.
        let during = [update(5, 10, 20), update(6, 30, 60), read(shared, 50, Seen::Torn)];
        assert!(check(&during, &[], &FinalState::default()).is_empty());
        let after = [update(5, 10, 20), read(shared, 50, Seen::Torn)];
        assert_eq!(check(&after, &[], &FinalState::default()).len(), 1);
        // Acknowledged in the same microsecond as the open began: either version.
        for seen in [5, 6] {
            let tie = [update(5, 10, 20), update(6, 30, 50), read(shared, 50, Seen::Whole { version: seen })];
            assert!(check(&tie, &[], &FinalState::default()).is_empty(), "version {seen}");
        }
        let publish = inv(1, 1, 10, Op::Publish { path: "/campaign/pub/p1".into(), temp: "t".into(), version: 3 }, Some((20, Outcome::Ok)));
        let torn = [publish.clone(), read("/campaign/pub/p1", 50, Seen::Torn)];
        assert_eq!(check(&torn, &[], &FinalState::default()).len(), 1);
        let missing = inv(
            2,
            9,
            50,
            Op::Read { path: "/campaign/pub/p1".into() },
            Some((55, Outcome::Failed { code: "NotFound".into(), maybe_applied: false })),
        );
        assert_eq!(check(&[publish, missing], &[], &FinalState::default()).len(), 1);
    }

    #[test]
    fn every_acknowledged_append_is_in_the_log_once() {
        use crate::history::record;
        let append = |tag, outcome| inv(1, tag, tag * 10, Op::Append { path: "/campaign/log".into(), tag }, Some((tag * 10 + 5, outcome)));
        let h = [append(1, Outcome::Ok), append(2, failed()), append(3, Outcome::Ok)];
        let log = |records: &[[u8; RECORD]]| FinalState { log: records.concat(), ..Default::default() };
        assert!(check(&h, &[], &log(&[record(1, 1), record(1, 3)])).is_empty());
        assert!(check(&h, &[], &log(&[record(1, 1), [0; RECORD], record(1, 3)])).is_empty(), "the failed one's range");
        assert_eq!(check(&h, &[], &log(&[record(1, 1)])).len(), 1, "an acknowledged one lost");
        assert_eq!(check(&h, &[], &log(&[record(1, 1), record(1, 3), record(1, 3)])).len(), 1, "one twice");
        assert_eq!(check(&h, &[], &log(&[record(1, 1), record(1, 3), [0; RECORD], [0; RECORD]])).len(), 1, "more holes than failures");
        assert_eq!(check(&h, &[], &log(&[record(1, 1), record(1, 3), record(2, 9)])).len(), 1, "a record nobody appended");
    }

    #[test]
    fn two_exclusive_winners_or_two_lock_holders_at_once_are_violations() {
        let excl = |worker| inv(worker, 1, 10, Op::Exclusive { path: "/campaign/excl/e1".into() }, Some((20, Outcome::Ok)));
        let mut end = FinalState::default();
        end.exclusive.insert("/campaign/excl/e1".into(), 1u64.to_le_bytes().to_vec());
        assert!(check(&[excl(1)], &[], &end).is_empty());
        assert_eq!(check(&[excl(1), excl(2)], &[], &end).len(), 1);
        let increment = |worker, from, to, read| {
            let outcome = Outcome::Incremented { read, locked_at: from, unlocking_at: to };
            inv(worker, from, from - 1, Op::Increment { path: "/campaign/counter".into() }, Some((to + 1, outcome)))
        };
        assert!(check(&[increment(1, 10, 20, 0), increment(2, 30, 40, 1)], &[], &end).is_empty());
        assert_eq!(check(&[increment(1, 10, 20, 0), increment(2, 15, 40, 1)], &[], &end).len(), 1, "held at once");
        assert_eq!(check(&[increment(1, 10, 20, 0), increment(2, 30, 40, 0)], &[], &end).len(), 1, "a lost update");
        // Within a fault's window, locks are not judged.
        let fault = Fault { kind: "kill".into(), target: "server 1".into(), from: 12, to: 13 };
        assert!(check(&[increment(1, 10, 20, 0), increment(2, 15, 40, 0)], &[fault], &end).is_empty());
    }
}
