//! `surge watch`, `surge queue`, `surge retention` and `surge drain`: a directory's published
//! files as they come, handed to the consumers of a group one by one, and let go of by the
//! instance as the directory's policy says (see `surge_client::workflow`).

use std::time::Duration;

use anyhow::Result;
use surge_client::surge_proto::workflow::{Publication, RetentionStatus};
use surge_client::Client;

use crate::output::{out, outln};
use crate::table::Table;

/// What `surge watch` was asked.
pub struct WatchArgs<'a> {
    /// The directory as the user named it (printed paths start with it).
    pub shown: &'a str,
    /// The directory inside the instance.
    pub inner: &'a str,
    pub pattern: Option<&'a str>,
    pub from: u64,
    pub json: bool,
    pub count: Option<u64>,
    pub timeout: Option<Duration>,
}

/// Prints publications until `count` were printed or none came for `timeout` (without
/// either: until interrupted).
pub async fn watch(client: &Client, args: WatchArgs<'_>) -> Result<()> {
    let mut reader = client.publications(args.inner, args.pattern, args.from).await?;
    let mut printed = 0;
    let mut missed = 0;
    while args.count.is_none_or(|count| printed < count) {
        let Some(publication) = reader.next(args.timeout).await? else { break };
        if reader.missed() > missed {
            eprintln!("surge watch: {} publications were dropped from the log before they were read", reader.missed() - missed);
            missed = reader.missed();
        }
        print_publication(args.shown, &publication, args.json);
        printed += 1;
    }
    Ok(())
}

fn print_publication(dir: &str, publication: &Publication, json: bool) {
    let path = format!("{}/{}", dir.trim_end_matches('/'), publication.name);
    if json {
        let value = serde_json::json!({
            "path": path,
            "name": publication.name,
            "size": publication.size,
            "mtime": publication.mtime.map(|t| t.secs as f64 + t.nanos as f64 / 1e9),
            "cursor": publication.cursor,
        });
        outln!("{value}");
    } else {
        outln!("{path}");
    }
}

/// `surge queue claim`: blocks until the group has a file for this consumer, prints its path.
pub struct ClaimArgs<'a> {
    pub shown: &'a str,
    pub inner: &'a str,
    pub group: &'a str,
    pub pattern: Option<&'a str>,
    pub consumer: String,
    pub lease: Duration,
    pub timeout: Option<Duration>,
    pub json: bool,
}

/// Prints the claimed file's path (or JSON with its token); false when the timeout passed
/// with nothing to claim (nothing printed).
pub async fn claim(client: &Client, args: ClaimArgs<'_>) -> Result<bool> {
    let claimed = client.claim(args.inner, args.group, args.pattern, &args.consumer, args.lease, args.timeout).await?;
    let Some(claimed) = claimed else { return Ok(false) };
    let path = format!("{}/{}", args.shown.trim_end_matches('/'), claimed.name);
    if args.json {
        let value = serde_json::json!({
            "path": path, "name": claimed.name, "size": claimed.size, "cursor": claimed.cursor,
            "token": claimed.token, "group": args.group,
        });
        outln!("{value}");
    } else {
        outln!("{path}");
    }
    Ok(true)
}

/// A consumer's name when it gives none: its node and the process that ran `surge` (a
/// consumer script's shell), which `surge queue status` shows beside its claims.
pub fn default_consumer() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::os::unix::process::parent_id())
}

/// `surge queue status`: one row per group of the directory.
pub async fn queue_status(client: &Client, dir: &str, json: bool) -> Result<()> {
    let groups = client.queue_status(dir).await?;
    if json {
        let rows: Vec<serde_json::Value> = groups
            .iter()
            .map(|g| {
                serde_json::json!({
                    "group": g.group, "pattern": g.pattern, "produced": g.produced, "claimed": g.claimed,
                    "done": g.done, "backlog": g.backlog, "expired": g.expired,
                    "production_per_s": g.production_per_s, "consumption_per_s": g.consumption_per_s,
                    "kappa": g.kappa(), "consumers": g.consumers,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if groups.is_empty() {
        outln!("{dir}: no consumer group yet (a group is made by its first `surge queue claim`)");
        return Ok(());
    }
    let mut table = Table::new(&["group", "pattern", "produced", "claimed", "done", "backlog", "expired", "in/s", "out/s", "kappa"]);
    for g in &groups {
        table.row(vec![
            g.group.clone(),
            g.pattern.clone(),
            g.produced.to_string(),
            g.claimed.to_string(),
            g.done.to_string(),
            g.backlog.to_string(),
            g.expired.to_string(),
            format!("{:.2}", g.production_per_s),
            format!("{:.2}", g.consumption_per_s),
            g.kappa().map_or("-".to_string(), |k| format!("{k:.2}")),
        ]);
    }
    out!("{}", table.render());
    Ok(())
}

/// A directory's retention policy and its counts, as a line for people or JSON.
pub fn print_retention(dir: &str, status: Option<&RetentionStatus>, json: bool) -> Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&retention_json(status))?);
        return Ok(());
    }
    let Some(s) = status else {
        outln!("{dir}: no retention policy (every file stays until removed)");
        return Ok(());
    };
    let p = &s.policy;
    let mut rules = Vec::new();
    if let Some(n) = p.keep_last {
        rules.push(format!("keep the last {n}"));
    }
    if p.after_groups {
        rules.push("remove once every group acknowledged".to_string());
    }
    if let Some(to) = &p.stage_out {
        let which = if p.stage_every == 1 { "every file".to_string() } else { format!("1 file in {}", p.stage_every) };
        rules.push(format!("stage {which} out to {to} first"));
    }
    outln!("{dir}: files matching '{}': {}", p.pattern, rules.join("; "));
    outln!("  published {}, staged out {}, removed {}, waiting to be staged {}", s.published, s.staged, s.removed, s.to_stage);
    Ok(())
}

fn retention_json(status: Option<&RetentionStatus>) -> serde_json::Value {
    match status {
        None => serde_json::Value::Null,
        Some(s) => serde_json::json!({
            "pattern": s.policy.pattern, "keep_last": s.policy.keep_last, "after_groups": s.policy.after_groups,
            "stage_out": s.policy.stage_out, "stage_every": s.policy.stage_every, "path": s.path,
            "published": s.published, "staged": s.staged, "removed": s.removed, "to_stage": s.to_stage,
        }),
    }
}

/// Waits until directory `dir`'s policy has staged out every file it is to stage (a drain
/// caught up), up to `timeout`; prints the counts as they change.
pub async fn wait_drained(client: &Client, dir: &str, timeout: Option<Duration>) -> Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut last = None;
    loop {
        let Some(status) = client.retention(dir).await? else { anyhow::bail!("{dir} has no drain or retention policy") };
        let counts = (status.published, status.staged, status.removed, status.to_stage);
        if last != Some(counts) {
            outln!("published {}, staged out {}, removed {}, waiting to be staged {}", counts.0, counts.1, counts.2, counts.3);
            last = Some(counts);
        }
        if status.to_stage == 0 {
            return Ok(());
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            anyhow::bail!("{} files still to stage out after the timeout", status.to_stage);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
