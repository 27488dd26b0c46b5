//! `surge reservation ...`: persistent reservations made, destroyed and listed without a job,
//! as thin clients of the manager ([`Request::CreatePersistent`],
//! [`Request::DestroyPersistent`], [`Request::Status`]). Users and groups are named as this
//! node knows them (or by number); the manager decides who may do what: root and its trusted
//! uids anything, a user their own reservations where its configuration allows it
//! (`user_reservations`).

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use surge_control::host;
use surge_control::manager::{InstanceView, Reply, Request};

use crate::bb::ask;
use crate::output::outln;
use crate::table::{human_bytes, Table};

#[derive(Subcommand)]
pub enum ReservationCommand {
    /// Make a persistent reservation: a striped buffer that outlives jobs, used by jobs with
    /// `#DW persistentdw name=NAME` (`$DW_PERSISTENT_STRIPED_NAME`).
    Create {
        /// Its name: a letter, then letters, digits, '-' and '_'.
        name: String,
        /// Its size (rounded up to the pool's unit), e.g. 1TiB.
        #[arg(long, value_parser = surge_units::parse_size)]
        capacity: u64,
        /// The pool (default: the manager's default pool).
        #[arg(long)]
        pool: Option<String>,
        /// Whose it is: a user name or uid (default: you). Its servers run as that user, and
        /// only that user (and root) may destroy it.
        #[arg(long)]
        owner: Option<String>,
        /// Share it with this group (name or gid): its members' jobs may use it, and its root
        /// lets them in (mode 0770, the group's, with a default ACL so what each makes stays
        /// the others' to read and write).
        #[arg(long)]
        group: Option<String>,
        /// Share it with these users (names or uids, comma-separated), by ACL.
        #[arg(long, value_delimiter = ',')]
        users: Vec<String>,
    },
    /// Destroy a persistent reservation and its data (refused while jobs use it, unless
    /// --hurry).
    Destroy {
        /// Its name.
        name: String,
        /// Even while jobs use it (their mounts of it fail).
        #[arg(long)]
        hurry: bool,
    },
    /// The persistent reservations: pool, size, owner, whom each is shared with, state.
    List {
        /// One JSON document (the manager's view of each) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// A user named by name or uid, with their primary group: as this node knows them, or for a
/// uid it does not know, that uid as the group too.
fn user(word: &str) -> Result<(u32, u32)> {
    if let Ok(uid) = word.parse::<u32>() {
        return Ok(host::user_by_uid(uid).map_or((uid, uid), |u| (u.uid, u.gid)));
    }
    let found = host::user_by_name(word).with_context(|| format!("no user '{word}' on this node (a uid will do)"))?;
    Ok((found.uid, found.gid))
}

fn group(word: &str) -> Result<u32> {
    match word.parse::<u32>() {
        Ok(gid) => Ok(gid),
        Err(_) => host::group_by_name(word).with_context(|| format!("no group '{word}' on this node (a gid will do)")),
    }
}

/// `uid` as `name(uid)` where this node knows the name.
fn user_label(uid: u32) -> String {
    host::user_by_uid(uid).map_or(uid.to_string(), |u| format!("{}({uid})", u.name))
}

fn group_label(gid: u32) -> String {
    host::group_name(gid).map_or(gid.to_string(), |name| format!("{name}({gid})"))
}

pub async fn run(command: ReservationCommand) -> Result<()> {
    match command {
        ReservationCommand::Create { name, capacity, pool, owner, group: shared_group, users } => {
            let (uid, gid) = match &owner {
                Some(word) => user(word)?,
                // SAFETY: getuid/getgid take no arguments and cannot fail.
                None => unsafe { (libc::getuid(), libc::getgid()) },
            };
            let group = shared_group.as_deref().map(group).transpose()?;
            let users = users.iter().map(|word| user(word).map(|(uid, _)| uid)).collect::<Result<Vec<u32>>>()?;
            let request = Request::CreatePersistent { name: name.clone(), uid, gid, pool, capacity, group, users };
            ask(&request).await?;
            outln!("reservation '{name}' created, {} for {}", human_bytes(capacity), user_label(uid));
        }
        ReservationCommand::Destroy { name, hurry } => {
            ask(&Request::DestroyPersistent { name: name.clone(), hurry }).await?;
            outln!("reservation '{name}' destroyed");
        }
        ReservationCommand::List { json } => {
            let Reply::Status(status) = ask(&Request::Status).await? else { bail!("unexpected answer") };
            let reservations: Vec<&InstanceView> = status.instances.iter().filter(|i| i.persistent.is_some()).collect();
            if json {
                outln!("{}", serde_json::to_string_pretty(&reservations)?);
                return Ok(());
            }
            let mut table = Table::new(&["name", "pool", "capacity", "owner", "group", "users", "state", "nodes"]);
            for r in reservations {
                table.row(vec![
                    r.persistent.clone().unwrap_or_default(),
                    r.pool.clone(),
                    human_bytes(r.capacity),
                    user_label(r.owner_uid),
                    r.group.map_or("-".into(), group_label),
                    if r.users.is_empty() { "-".into() } else { r.users.iter().map(|u| user_label(*u)).collect::<Vec<_>>().join(",") },
                    r.state.clone(),
                    r.servers.iter().map(|s| s.node.as_str()).collect::<Vec<_>>().join(","),
                ]);
            }
            outln!("{}", table.render());
        }
    }
    Ok(())
}
