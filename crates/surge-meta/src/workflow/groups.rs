//! Consumer groups of a directory (see [`surge_proto::workflow`]): each publication that
//! matches a group's pattern is handed to one consumer of the group at a time, under a lease;
//! a lease that runs out before the consumer says it is done puts the file back for the
//! others. The state is the directory's home's, journaled with the namespace — and a claim
//! or an acknowledgement is durable before it is answered —, so neither a consumer's death
//! nor the server's loses or repeats a hand-out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use surge_proto::workflow::{Claimed, GroupStatus, Publication};
use surge_proto::{ErrorCode, Ino, Timestamp};

use super::publications::{names_in, Entries, NamePattern};
use crate::error::{Result, ServerError};
use crate::model::{Inodes, MetaStore};

/// The window production and consumption rates are measured over.
const RATE_WINDOW_SECS: f64 = 60.0;
/// Groups one directory may have, and consumers' names' length: bounds what a client makes
/// a server keep.
const MAX_GROUPS_PER_DIRECTORY: usize = 256;
const MAX_NAME_LEN: usize = 255;

/// What the journal keeps of a group.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupState {
    pub pattern: String,
    pub created: Timestamp,
    /// Every publication up to this cursor is done, or not the group's (another name,
    /// removed before it was claimed).
    pub floor: u64,
    /// Done above the floor.
    pub done: BTreeSet<u64>,
    /// Claims held, by cursor.
    pub claims: BTreeMap<u64, Claim>,
    pub done_total: u64,
    /// Claims handed out (numbering them: a claim's token), and those that ran out.
    pub handed_out: u64,
    pub expired: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Claim {
    pub name: String,
    pub ino: Ino,
    pub consumer: String,
    pub token: u64,
    pub until: Timestamp,
}

/// A group as the store keeps it: its state, its pattern compiled, and, for its rates, when
/// its last acknowledgements came (not journaled).
pub(crate) struct Group {
    pub(crate) state: GroupState,
    matcher: NamePattern,
    recent_done: VecDeque<Timestamp>,
}

/// A group's state after a step, or its removal (None), for the journal.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupChange {
    pub dir: Ino,
    pub name: String,
    pub state: Option<GroupState>,
}

fn invalid<T>(detail: impl Into<String>) -> Result<T> {
    Err(ServerError::new(ErrorCode::Invalid, detail))
}

fn seconds(t: Timestamp) -> f64 {
    t.secs as f64 + t.nanos as f64 / 1e9
}

fn later(t: Timestamp, ms: u64) -> Timestamp {
    let nanos = t.nanos as u64 + (ms % 1000) * 1_000_000;
    Timestamp { secs: t.secs + (ms / 1000) as i64 + (nanos / 1_000_000_000) as i64, nanos: (nanos % 1_000_000_000) as u32 }
}

impl Group {
    fn new(matcher: NamePattern, pattern: String, now: Timestamp) -> Group {
        let state = GroupState {
            pattern,
            created: now,
            floor: 0,
            done: BTreeSet::new(),
            claims: BTreeMap::new(),
            done_total: 0,
            handed_out: 0,
            expired: 0,
        };
        Group { state, matcher, recent_done: VecDeque::new() }
    }

    /// Whether `p` (published in `dir`) is one this group takes: its name matches the group's
    /// pattern and is still its file's.
    pub(crate) fn takes(&self, inodes: &Inodes, dir: Ino, p: &Publication) -> bool {
        self.matcher.matches(&p.name) && names_in(inodes, dir, &p.name, p.ino)
    }

    /// Whether `p` is the group's and waits for a consumer: neither done nor held.
    fn waiting(&self, inodes: &Inodes, dir: Ino, p: &Publication) -> bool {
        !self.state.done.contains(&p.cursor) && !self.state.claims.contains_key(&p.cursor) && self.takes(inodes, dir, p)
    }

    /// Whether the group is done with `p` (acknowledged it, or passed it by).
    pub(crate) fn finished(&self, p: &Publication) -> bool {
        self.state.done.contains(&p.cursor) || (p.cursor <= self.state.floor && !self.state.claims.contains_key(&p.cursor))
    }

    /// Whether `name` matches the group's pattern.
    pub(crate) fn matches(&self, name: &str) -> bool {
        self.matcher.matches(name)
    }

    /// Claims whose lease ran out go back to the group.
    fn expire(&mut self, now: Timestamp) -> bool {
        let before = self.state.claims.len();
        self.state.claims.retain(|_, claim| claim.until > now);
        let expired = (before - self.state.claims.len()) as u64;
        self.state.expired += expired;
        expired > 0
    }

    /// Raises the floor over what is done or not the group's; whether it moved (the group's
    /// state changed, and must be journaled like any change, or a restart would find the
    /// older floor).
    fn settle(&mut self, log: &Entries, inodes: &Inodes, dir: Ino) -> bool {
        let floor = self.state.floor;
        loop {
            let next = self.state.floor + 1;
            if self.state.done.remove(&next) {
                self.state.floor = next;
                continue;
            }
            match log.get(next) {
                Some(p) if !self.state.claims.contains_key(&next) && !self.takes(inodes, dir, p) => self.state.floor = next,
                // Trimmed from the log before the group got to it: nothing to hand out.
                None if next < log.oldest() => self.state.floor = next,
                _ => break,
            }
        }
        self.state.floor != floor
    }

    /// The earliest time a claim runs out.
    fn next_expiry(&self) -> Option<Timestamp> {
        self.state.claims.values().map(|c| c.until).min()
    }
}

/// The result of a claim attempt: a file, or when to look again without a new publication.
pub enum ClaimOutcome {
    Claimed(Claimed),
    /// Nothing to hand out now; a lease runs out then (None: none is held).
    Nothing {
        next_expiry: Option<Timestamp>,
    },
}

impl MetaStore {
    fn group_changed(&mut self, dir: Ino, name: &str) {
        if let Some(changes) = self.changes.as_mut() {
            changes.groups.insert((dir, name.to_string()));
        }
    }

    /// Hands the next of `dir`'s publications the group `group` has not had to `consumer`,
    /// until `lease_ms` from `now`. The group is made at its first claim, with `pattern`
    /// (None: `*`); later claims must name the same pattern or none.
    pub fn claim(
        &mut self,
        dir: Ino,
        group: &str,
        pattern: Option<&str>,
        consumer: &str,
        lease_ms: u64,
        now: Timestamp,
    ) -> Result<ClaimOutcome> {
        self.dir(dir)?;
        if group.is_empty() || group.len() > MAX_NAME_LEN || consumer.len() > MAX_NAME_LEN {
            return invalid(format!("group and consumer names are 1 to {MAX_NAME_LEN} bytes"));
        }
        let log = self.publications.entry(dir).or_default();
        if !log.groups.contains_key(group) {
            if log.groups.len() >= MAX_GROUPS_PER_DIRECTORY {
                return invalid(format!("a directory has at most {MAX_GROUPS_PER_DIRECTORY} consumer groups"));
            }
            let pattern = pattern.unwrap_or("*");
            let matcher = NamePattern::new(pattern)?;
            log.groups.insert(group.to_string(), Group::new(matcher, pattern.to_string(), now));
            self.group_changed(dir, group);
        }
        let log = self.publications.get_mut(&dir).expect("made above");
        let g = log.groups.get_mut(group).expect("made above");
        if let Some(pattern) = pattern.filter(|p| *p != g.state.pattern) {
            return invalid(format!("group '{group}' takes '{}', not '{pattern}'", g.state.pattern));
        }
        let inodes = &self.inodes;
        let mut changed = g.expire(now);
        changed |= g.settle(&log.entries, inodes, dir);
        let start = g.state.floor + 1;
        let found = log.entries.from(start).find(|p| g.waiting(inodes, dir, p)).cloned();
        let outcome = match found {
            Some(p) => {
                g.state.handed_out += 1;
                let claim = Claim {
                    name: p.name.clone(),
                    ino: p.ino,
                    consumer: consumer.to_string(),
                    token: g.state.handed_out,
                    until: later(now, lease_ms),
                };
                g.state.claims.insert(p.cursor, claim);
                changed = true;
                ClaimOutcome::Claimed(Claimed { cursor: p.cursor, name: p.name, ino: p.ino, size: p.size, token: g.state.handed_out })
            }
            None => ClaimOutcome::Nothing { next_expiry: g.next_expiry() },
        };
        if changed {
            self.group_changed(dir, group);
        }
        Ok(outcome)
    }

    /// A consumer is done with `name`, which group `group` (None: the one group holding a
    /// claim on it) handed out; with `token`, only the claim so numbered (a consumer whose
    /// lease ran out and whose file went to another is told). Answers the group's name.
    pub fn done(&mut self, dir: Ino, group: Option<&str>, name: &str, token: Option<u64>, now: Timestamp) -> Result<String> {
        self.dir(dir)?;
        let log = self.publications.entry(dir).or_default();
        let holds = |g: &Group| g.state.claims.iter().any(|(_, c)| c.name == name && token.is_none_or(|t| t == c.token));
        let holders: Vec<String> =
            log.groups.iter().filter(|(n, g)| group.is_none_or(|want| want == *n) && holds(g)).map(|(n, _)| n.clone()).collect();
        let group = match holders.as_slice() {
            [one] => one.clone(),
            [] => {
                let what = match group {
                    Some(group) if !log.groups.contains_key(group) => format!("no consumer group '{group}'"),
                    Some(group) => format!("'{name}' is not claimed in group '{group}'"),
                    None => format!("'{name}' is not claimed in any group"),
                };
                let detail = if token.is_some() { format!("{what} under that claim (its lease ran out?)") } else { what };
                return Err(ServerError::new(ErrorCode::NotFound, detail));
            }
            many => return invalid(format!("'{name}' is claimed in groups {}: name one", many.join(", "))),
        };
        let g = log.groups.get_mut(&group).expect("found above");
        let cursor =
            g.state.claims.iter().find(|(_, c)| c.name == name && token.is_none_or(|t| t == c.token)).map(|(&k, _)| k).expect("holds");
        g.state.claims.remove(&cursor);
        g.state.done.insert(cursor);
        g.state.done_total += 1;
        g.recent_done.push_back(now);
        while g.recent_done.front().is_some_and(|t| seconds(now) - seconds(*t) > RATE_WINDOW_SECS) {
            g.recent_done.pop_front();
        }
        g.settle(&log.entries, &self.inodes, dir);
        self.group_changed(dir, &group); // Changed anyway: the claim is done.
        Ok(group)
    }

    /// Every group of `dir`: what it was handed, what it finished, what waits, and rates.
    pub fn group_status(&mut self, dir: Ino, now: Timestamp) -> Result<Vec<GroupStatus>> {
        self.dir(dir)?;
        let Some(log) = self.publications.get_mut(&dir) else { return Ok(Vec::new()) };
        let inodes = &self.inodes;
        let mut out = Vec::new();
        for (name, g) in log.groups.iter_mut() {
            if g.expire(now) {
                if let Some(changes) = self.changes.as_mut() {
                    changes.groups.insert((dir, name.clone()));
                }
            }
            let backlog = log.entries.from(g.state.floor + 1).filter(|p| g.waiting(inodes, dir, p)).count() as u64;
            // Rates over the last minute, or since production (consumption) began if later.
            let now_s = seconds(now);
            let recent: Vec<f64> = log
                .entries
                .from(1)
                .filter(|p| g.matches(&p.name))
                .map(|p| seconds(p.at))
                .filter(|at| now_s - at <= RATE_WINDOW_SECS)
                .collect();
            let since = |start: f64| (now_s - start).clamp(1.0, RATE_WINDOW_SECS);
            let production_per_s = recent.first().map_or(0.0, |&first| recent.len() as f64 / since(first));
            let done_lately = g.recent_done.iter().filter(|t| now_s - seconds(**t) <= RATE_WINDOW_SECS).count() as f64;
            let consumption_per_s = done_lately / since(seconds(g.state.created));
            let claimed = g.state.claims.len() as u64;
            out.push(GroupStatus {
                group: name.clone(),
                pattern: g.state.pattern.clone(),
                produced: g.state.done_total + claimed + backlog,
                claimed,
                done: g.state.done_total,
                backlog,
                expired: g.state.expired,
                production_per_s,
                consumption_per_s,
                consumers: g.state.claims.values().map(|c| c.consumer.clone()).collect::<BTreeSet<_>>().into_iter().collect(),
            });
        }
        Ok(out)
    }

    /// Replays a journaled group state.
    pub(crate) fn restore_group(&mut self, change: GroupChange) {
        if !self.holds_dir(change.dir) {
            return;
        }
        let log = self.publications.entry(change.dir).or_default();
        match change.state {
            Some(state) => match NamePattern::new(&state.pattern) {
                Ok(matcher) => drop(log.groups.insert(change.name, Group { state, matcher, recent_done: VecDeque::new() })),
                // Only checked patterns are journaled: a record that says otherwise is not replayed.
                Err(e) => tracing::warn!(group = change.name, "consumer group not restored: {e}"),
            },
            None => drop(log.groups.remove(&change.name)),
        }
    }

    /// A group's state now, for the journal.
    pub(crate) fn group_change(&self, dir: Ino, name: String) -> GroupChange {
        let state = self.publications.get(&dir).and_then(|log| log.groups.get(&name)).map(|g| g.state.clone());
        GroupChange { dir, name, state }
    }

    /// Every group, for a snapshot.
    pub(crate) fn all_groups(&self) -> impl Iterator<Item = GroupChange> + '_ {
        self.publications.iter().flat_map(|(&dir, log)| {
            log.groups.iter().map(move |(name, g)| GroupChange { dir, name: name.clone(), state: Some(g.state.clone()) })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::ROOT_INO;

    fn at(secs: i64) -> Timestamp {
        Timestamp { secs, nanos: 0 }
    }

    fn publish(s: &mut MetaStore, name: &str) {
        let ino = s.create(ROOT_INO, name, 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(ino, Some(1), None, true, true).unwrap();
    }

    fn claimed(outcome: ClaimOutcome) -> Option<String> {
        match outcome {
            ClaimOutcome::Claimed(c) => Some(c.name),
            ClaimOutcome::Nothing { .. } => None,
        }
    }

    /// Files go out in publication order, each to one consumer at a time; an expired lease
    /// puts its file back; acknowledgements raise the floor; the state survives a snapshot.
    #[test]
    fn claims_go_out_in_order_once_and_come_back_when_their_lease_runs_out() {
        let mut s = MetaStore::new(0, 0, 0);
        for name in ["p1", "c1", "p2", "p3"] {
            publish(&mut s, name);
        }
        let claim =
            |s: &mut MetaStore, consumer: &str, now: i64| claimed(s.claim(ROOT_INO, "vis", Some("p*"), consumer, 10_000, at(now)).unwrap());
        assert_eq!(claim(&mut s, "a", 100).as_deref(), Some("p1"));
        assert_eq!(claim(&mut s, "b", 100).as_deref(), Some("p2"));
        assert_eq!(claim(&mut s, "b", 101).as_deref(), Some("p3"));
        assert_eq!(claim(&mut s, "c", 102), None);
        assert_eq!(s.done(ROOT_INO, None, "p2", None, at(103)).unwrap(), "vis");
        assert_eq!(s.done(ROOT_INO, None, "p2", None, at(103)).unwrap_err().code, ErrorCode::NotFound, "done once");
        // p1's consumer vanished: ten seconds on, p1 goes to another; the old token no
        // longer holds it.
        let next = s.claim(ROOT_INO, "vis", None, "c", 10_000, at(111)).unwrap();
        let ClaimOutcome::Claimed(again) = next else { panic!("p1 came back") };
        assert_eq!(again.name, "p1");
        assert_eq!(s.done(ROOT_INO, Some("vis"), "p1", Some(1), at(112)).unwrap_err().code, ErrorCode::NotFound);
        s.done(ROOT_INO, Some("vis"), "p1", Some(again.token), at(112)).unwrap();
        let status = s.group_status(ROOT_INO, at(112)).unwrap();
        // p3's lease ran out too (at 111): back in the backlog.
        assert_eq!((status[0].done, status[0].claimed, status[0].backlog, status[0].expired), (2, 0, 1, 2));
        // Another pattern for the group is refused; another group starts from the beginning.
        assert_eq!(s.claim(ROOT_INO, "vis", Some("c*"), "d", 1000, at(112)).err().unwrap().code, ErrorCode::Invalid);
        assert_eq!(claimed(s.claim(ROOT_INO, "drain", Some("c*"), "d", 1000, at(112)).unwrap()).as_deref(), Some("c1"));

        let mut replayed = MetaStore::new(0, 0, 0);
        for record in s.snapshot().split() {
            replayed.apply(record).unwrap();
        }
        publish(&mut replayed, "p4");
        assert_eq!(claimed(replayed.claim(ROOT_INO, "vis", None, "e", 1000, at(113)).unwrap()).as_deref(), Some("p3"));
        assert_eq!(claimed(replayed.claim(ROOT_INO, "vis", None, "e", 1000, at(113)).unwrap()).as_deref(), Some("p4"));
        assert_eq!(replayed.done(ROOT_INO, None, "c1", None, at(113)).unwrap(), "drain", "the claim held across the replay");
    }

    #[test]
    fn bad_claims_are_refused() {
        let mut s = MetaStore::new(0, 0, 0);
        assert_eq!(s.claim(ROOT_INO, "", None, "a", 1, at(1)).err().unwrap().code, ErrorCode::Invalid);
        assert_eq!(s.claim(ROOT_INO, "g", Some("["), "a", 1, at(1)).err().unwrap().code, ErrorCode::Invalid);
        assert_eq!(s.claim(ROOT_INO + 77, "g", None, "a", 1, at(1)).err().unwrap().code, ErrorCode::NotFound);
        for i in 0..MAX_GROUPS_PER_DIRECTORY {
            s.claim(ROOT_INO, &format!("g{i}"), None, "a", 1, at(1)).unwrap();
        }
        assert_eq!(s.claim(ROOT_INO, "one-too-many", None, "a", 1, at(1)).err().unwrap().code, ErrorCode::Invalid);
    }
}
