//! The manager's local socket: one task per connection, requests answered in order. A
//! caller's uid comes from the kernel (`SO_PEERCRED`), so only root's processes (slurmctld's
//! hooks, the nodes' prolog) may change anything; anyone may read pools and status.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use surge_control::manager::Request;
use surge_control::wire;
use tokio::net::UnixListener;

use crate::manager::Manager;

/// Binds the socket (replacing a stale one) readable and writable by everyone: who may do
/// what is decided per request from the caller's credentials.
pub fn bind(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("a manager already answers on {}", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("remove stale socket {}", path.display()))?;
    }
    let listener = UnixListener::bind(path).with_context(|| format!("listen on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Serves until `stop` completes.
pub async fn serve(manager: Arc<Manager>, listener: UnixListener, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let uid = match stream.peer_cred() {
                    Ok(cred) => cred.uid(),
                    Err(e) => {
                        tracing::warn!("caller without credentials refused: {e}");
                        continue;
                    }
                };
                let manager = manager.clone();
                tokio::spawn(async move {
                    let (read, write) = stream.into_split();
                    let served = wire::serve_lines(read, write, |request: Request| {
                        let manager = manager.clone();
                        async move {
                            tracing::debug!(uid, ?request, "request");
                            manager.handle(request, uid).await
                        }
                    })
                    .await;
                    if let Err(e) = served {
                        tracing::debug!(uid, "connection: {e}");
                    }
                });
            }
            _ = &mut stop => return Ok(()),
        }
    }
}
