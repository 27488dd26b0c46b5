//! The retention keeper: applies directories' retention policies (see
//! [`surge_proto::workflow::RetentionPolicy`]) as a client of the instance. Every directory's
//! home decides what is due (it alone knows its log, its groups' acknowledgements and which
//! files are open); the keeper asks every server, stages out what is to be staged (through
//! the stage coordinator, one stage per file, as `surge stage out` would) and removes what
//! the policies let go, reporting each back. It keeps no state of its own: after its
//! restart (its server's), what was not reported done is due again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use surge_client::Client;
use surge_proto::stage::{StageDirection, StageKind, StageState, StageWhen};
use surge_proto::workflow::{Due, DueAction, Retained, RetentionDue};
use surge_proto::Ino;

use crate::CoordinatorConfig;

/// How often the keeper asks the servers what is due: a writer held at a high-water mark
/// waits at most about this long for the space a policy frees.
const ROUND: Duration = Duration::from_millis(250);
/// A stage-out that failed is tried again after this long (a PFS that is full or gone).
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Actions in flight (stage-outs, removals) and failed stage-outs resting, by (directory,
/// cursor).
#[derive(Default)]
struct InFlight {
    busy: HashSet<(Ino, u64)>,
    failed: HashMap<(Ino, u64), Instant>,
}

/// Runs the keeper until the process ends (spawn it on the daemon's runtime).
pub async fn keep(config: CoordinatorConfig) {
    let flight = Arc::new(Mutex::new(InFlight::default()));
    let mut client: Option<Client> = None;
    loop {
        tokio::time::sleep(ROUND).await;
        if client.is_none() {
            client = config.keeper_client();
        }
        let Some(c) = &client else { continue };
        for server in 0..c.server_count() {
            match c.call(server, RetentionDue {}).await {
                Ok(due) => due.into_iter().for_each(|action| act(c, &flight, action)),
                Err(e) => {
                    tracing::debug!(server, "retention: cannot ask server: {e}");
                    if e.code == surge_proto::ErrorCode::ServerDown {
                        client = None; // Its address may have changed: read the peers again.
                        break;
                    }
                }
            }
        }
    }
}

fn act(client: &Client, flight: &Arc<Mutex<InFlight>>, action: DueAction) {
    let key = (action.dir, action.cursor);
    match action.action {
        Due::Remove => {
            if !flight.lock().unwrap().busy.insert(key) {
                return; // Being removed.
            }
            let (client, flight) = (client.clone(), flight.clone());
            tokio::spawn(async move {
                // Only the file the policy judged: the name may have been given to another.
                let still = client.lookup(action.dir, &action.name).await.is_ok_and(|attr| attr.ino == action.ino);
                if still {
                    match client.unlink_at(action.dir, &action.name).await {
                        Ok(()) => tracing::info!(name = action.name, "retention: removed"),
                        Err(e) => tracing::warn!(name = action.name, "retention: could not remove: {e}"),
                    }
                }
                // Gone (by the keeper or anyone): counted once, as the policy's doing.
                if !client.lookup(action.dir, &action.name).await.is_ok_and(|attr| attr.ino == action.ino) {
                    report(&client, action.dir, action.cursor, false).await;
                }
                flight.lock().unwrap().busy.remove(&key);
            });
        }
        Due::StageOut { from, to } => {
            {
                let mut flight = flight.lock().unwrap();
                if flight.busy.contains(&key) || flight.failed.get(&key).is_some_and(|at| at.elapsed() < RETRY_AFTER) {
                    return;
                }
                flight.failed.remove(&key);
                flight.busy.insert(key);
            }
            let (client, flight) = (client.clone(), flight.clone());
            tokio::spawn(async move {
                let outcome = stage_out(&client, &from, &to).await;
                if outcome.is_ok() {
                    tracing::info!(from, to, "retention: staged out");
                    report(&client, key.0, key.1, true).await;
                }
                let mut resting = flight.lock().unwrap();
                resting.busy.remove(&key);
                if let Err(e) = outcome {
                    tracing::warn!(from, to, "retention: stage-out failed (tried again in {} s): {e}", RETRY_AFTER.as_secs());
                    resting.failed.insert(key, Instant::now());
                }
            });
        }
    }
}

async fn stage_out(client: &Client, from: &str, to: &str) -> Result<(), String> {
    let spec = client.stage_spec(StageDirection::Out, StageKind::File, StageWhen::Immediate, from, to, false);
    let stage = client.stage_submit_checked(spec).await.map_err(|e| e.to_string())?;
    let done = client.wait_stages(None, |s| s.id == stage.id, |_| {}).await.map_err(|e| e.to_string())?;
    match done.first() {
        Some(s) if s.state == StageState::Done => Ok(()),
        Some(s) => Err(format!("stage {} {}: {}", s.id, s.state.label(), s.error.clone().unwrap_or_default())),
        None => Err(format!("stage {} vanished", stage.id)),
    }
}

async fn report(client: &Client, dir: Ino, cursor: u64, staged: bool) {
    if let Err(e) = client.call(surge_proto::ino::home(dir), Retained { dir, cursor, staged }).await {
        tracing::warn!("retention: could not report to the directory's home: {e}");
    }
}
