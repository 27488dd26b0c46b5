//! The campaign's tree: three directories of the workers' own files (homed on different
//! servers as the instance places them), the shared and published files by slot, the names
//! raced for with O_EXCL, and the counter the lock guards.

use surge_client::Client;

pub const ROOT: &str = "/campaign";
pub const OWN_DIRS: [&str; 3] = ["/campaign/a", "/campaign/b", "/campaign/c"];
pub const EXCLUSIVE_DIR: &str = "/campaign/excl";
pub const COUNTER: &str = "/campaign/counter";
pub const LOG: &str = "/campaign/log";

/// The file slot `slot` alone writes and every worker reads.
pub fn shared(slot: u64) -> String {
    format!("/campaign/shared/s{slot}")
}

/// The file slot `slot` publishes by rename and every worker reads.
pub fn published(slot: u64) -> String {
    format!("/campaign/pub/p{slot}")
}

/// Where slot `slot` writes version `version` before renaming it over [`published`].
pub fn publish_temp(slot: u64, version: u64) -> String {
    format!("/campaign/pub/.p{slot}-{version}")
}

/// The `n`th name the workers race for (one every 0.4 s).
pub fn exclusive(n: u64) -> String {
    format!("{EXCLUSIVE_DIR}/e{n}")
}

/// Makes the tree for `workers` slots: the directories, the shared files (empty) and the
/// counter (zero), the log (empty). The published files do not exist until first published.
pub async fn make(client: &Client, workers: u64) -> surge_client::Result<()> {
    client.mkdir(ROOT, 0o755).await?;
    for dir in OWN_DIRS.iter().copied().chain([EXCLUSIVE_DIR, "/campaign/shared", "/campaign/pub"]) {
        client.mkdir(dir, 0o755).await?;
    }
    for slot in 0..workers {
        client.create(&shared(slot), 0o644).await?.close().await?;
    }
    client.create(LOG, 0o644).await?.close().await?;
    let counter = client.create(COUNTER, 0o644).await?;
    counter.pwrite(0, &0u64.to_le_bytes()).await?;
    counter.close().await
}
