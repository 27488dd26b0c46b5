//! Where the manager takes requests: its local socket, and TCP for the other nodes. One task
//! per connection, requests answered in order. A caller's uid comes from the kernel
//! (`SO_PEERCRED`) on the socket and from munged on TCP (each request inside a MUNGE
//! credential), never from the request: only root and the trusted uids (slurmctld's hooks, the
//! nodes' prolog) may change anything; anyone may read pools and status.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use surge_control::manager::Request;
use surge_control::wire;
use tokio::net::{TcpListener, UnixListener};

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

/// Serves the local socket, and TCP when given, until `stop` completes.
pub async fn serve(
    manager: Arc<Manager>,
    listener: UnixListener,
    tcp: Option<TcpListener>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = accept_tcp(tcp.as_ref()) => {
                match accepted {
                    Ok((stream, peer)) => serve_credentialed(manager.clone(), stream, peer),
                    Err(e) => tracing::warn!("accept on TCP: {e}"),
                }
            }
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

/// One TCP connection: each request inside a MUNGE credential, answered as from the uid
/// munged vouches for. A credential munged refuses (forged, made with another key, expired,
/// replayed) is answered with the refusal and nothing is done.
fn serve_credentialed(manager: Arc<Manager>, stream: tokio::net::TcpStream, peer: std::net::SocketAddr) {
    let _ = stream.set_nodelay(true);
    tokio::spawn(async move {
        let (read, write) = stream.into_split();
        let served = wire::serve_lines(read, write, |credentialed: wire::Credentialed| {
            let manager = manager.clone();
            async move {
                match wire::open_credential(credentialed).await {
                    Ok((request, vouched)) => {
                        tracing::debug!(uid = vouched.uid, %peer, ?request, "request");
                        manager.handle(request, vouched.uid).await
                    }
                    Err(e) => {
                        tracing::warn!(%peer, "request refused: {e}");
                        surge_control::manager::Reply::Failed(format!("refused: {e}"))
                    }
                }
            }
        })
        .await;
        if let Err(e) = served {
            tracing::debug!(%peer, "connection: {e}");
        }
    });
}

/// The next TCP connection; never, without a TCP listener. (Cancel-safe, as `accept` is.)
async fn accept_tcp(tcp: Option<&TcpListener>) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match tcp {
        Some(tcp) => tcp.accept().await,
        None => std::future::pending().await,
    }
}
