//! How control messages travel: one JSON document per line, at most [`MAX_LINE`] bytes.
//!
//! * The manager listens on a local socket, where it knows its callers by their kernel
//!   credentials (`SO_PEERCRED`), and may listen on TCP for the other nodes, where each request
//!   travels inside a MUNGE credential ([`crate::munge`]) and the caller is who munged says
//!   made it: nothing in a request can claim to be root.
//! * Agents listen on TCP. A connection starts with the agent's random challenge, which the
//!   manager answers with a keyed hash of the cluster key (`surge_proto::auth`, as instances
//!   authenticate clients); the key never crosses the network and an answer is good once.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use surge_proto::auth::{self, Challenge, Secret};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

use crate::agent::{AgentReply, AgentRequest};
use crate::manager::{Reply, Request};

/// Longest line accepted: a status of thousands of instances and stages fits, a runaway
/// sender does not make the reader allocate without bound.
pub const MAX_LINE: u64 = 16 << 20;

/// Reads one message; `None` at a clean end of stream.
pub async fn read_message<T: DeserializeOwned, R: AsyncBufRead + Unpin>(reader: &mut R) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    let read = (&mut *reader).take(MAX_LINE + 1).read_until(b'\n', &mut line).await?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        let why = if line.len() as u64 > MAX_LINE { "message longer than the limit" } else { "stream ended inside a message" };
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad message: {e}")))
}

pub async fn write_message<T: Serialize, W: AsyncWrite + Unpin>(writer: &mut W, message: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

/// Where the manager answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagerAddress {
    /// Its local socket (on the manager's node).
    Socket(PathBuf),
    /// `host:port`, from any node, with MUNGE credentials.
    Tcp(String),
}

/// Where a cluster's nodes read the manager's address (`host:port`), as they read slurm.conf:
/// one file, the same on every node, so that users' commands on a login node need no setting.
pub const MANAGER_ADDRESS_FILE: &str = "/etc/surge/manager";

impl ManagerAddress {
    /// `SURGE_MANAGER` (`host:port`, or a socket's path), else `SURGE_MANAGER_SOCKET`, else
    /// the first line of [`MANAGER_ADDRESS_FILE`] that is not a comment, else `default_socket`.
    pub fn from_env(default_socket: &Path) -> ManagerAddress {
        if let Some(address) = std::env::var("SURGE_MANAGER").ok().filter(|a| !a.is_empty()) {
            return ManagerAddress::parse(&address);
        }
        if let Some(socket) = std::env::var_os("SURGE_MANAGER_SOCKET") {
            return ManagerAddress::Socket(PathBuf::from(socket));
        }
        let configured = std::fs::read_to_string(MANAGER_ADDRESS_FILE)
            .ok()
            .and_then(|text| text.lines().map(str::trim).find(|line| !line.is_empty() && !line.starts_with('#')).map(str::to_string));
        match configured {
            Some(address) => ManagerAddress::parse(&address),
            None => ManagerAddress::Socket(default_socket.to_path_buf()),
        }
    }

    /// A path (it has a `/`) is a socket; anything else is `host:port`.
    pub fn parse(address: &str) -> ManagerAddress {
        if address.contains('/') {
            ManagerAddress::Socket(PathBuf::from(address))
        } else {
            ManagerAddress::Tcp(address.to_string())
        }
    }
}

impl std::fmt::Display for ManagerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManagerAddress::Socket(path) => write!(f, "{}", path.display()),
            ManagerAddress::Tcp(address) => write!(f, "{address}"),
        }
    }
}

/// A request as it travels over TCP: inside a MUNGE credential, whose payload it is.
#[derive(Serialize, Deserialize, Debug)]
pub struct Credentialed {
    pub munge: String,
}

/// One request to the manager, and its reply.
pub async fn call_manager(address: &ManagerAddress, request: &Request, timeout: Duration) -> io::Result<Reply> {
    let exchange = async {
        match address {
            ManagerAddress::Socket(socket) => {
                let stream = UnixStream::connect(socket).await?;
                let (read, mut write) = stream.into_split();
                write_message(&mut write, request).await?;
                read_reply(read).await
            }
            ManagerAddress::Tcp(address) => {
                let payload = serde_json::to_vec(request).map_err(io::Error::other)?;
                let munge = tokio::task::spawn_blocking(move || crate::munge::encode(&payload)).await.map_err(io::Error::other)??;
                let stream = TcpStream::connect(address).await?;
                stream.set_nodelay(true)?;
                let (read, mut write) = stream.into_split();
                write_message(&mut write, &Credentialed { munge }).await?;
                read_reply(read).await
            }
        }
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the manager"))?
}

async fn read_reply<R: AsyncRead + Unpin>(read: R) -> io::Result<Reply> {
    read_message(&mut BufReader::new(read))
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the manager closed the connection"))
}

/// The request a credential carries and who made it, as this node's munged vouches.
pub async fn open_credential(credentialed: Credentialed) -> io::Result<(Request, crate::munge::Vouched)> {
    let vouched = tokio::task::spawn_blocking(move || crate::munge::decode(&credentialed.munge)).await.map_err(io::Error::other)??;
    let request = serde_json::from_slice(&vouched.payload)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad request in the credential: {e}")))?;
    Ok((request, vouched))
}

/// Reads the cluster key: 64 hex digits in a file only its owner may read.
pub fn read_key(path: &Path) -> io::Result<Secret> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    if meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("key file {} has mode {:o}: it must be 0600", path.display(), meta.mode() & 0o777),
        ));
    }
    let text = std::fs::read_to_string(path)?;
    auth::parse_secret(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("key file {} does not hold 64 hex digits", path.display())))
}

#[derive(Serialize, Deserialize)]
struct ChallengeMessage {
    challenge: String,
}

#[derive(Serialize, Deserialize)]
struct ProofMessage {
    proof: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(text: &str) -> Option<[u8; 32]> {
    auth::parse_secret(text)
}

/// The agent's side of a new connection: challenge, check the answer. An error closes it.
pub async fn accept_manager<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut R,
    writer: &mut W,
    key: &Secret,
) -> io::Result<()> {
    let mut challenge: Challenge = [0; auth::CHALLENGE_LEN];
    getrandom::getrandom(&mut challenge).map_err(|e| io::Error::other(format!("no randomness: {e}")))?;
    write_message(writer, &ChallengeMessage { challenge: hex(&challenge) }).await?;
    let proof: ProofMessage =
        read_message(reader).await?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "no answer to the challenge"))?;
    match unhex32(&proof.proof) {
        Some(proof) if auth::verify(key, &challenge, &proof) => Ok(()),
        _ => Err(io::Error::new(io::ErrorKind::PermissionDenied, "wrong answer to the challenge: not the cluster key")),
    }
}

/// A connection to a node agent, authenticated.
pub struct AgentConnection {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl AgentConnection {
    pub async fn connect(addr: &str, key: &Secret, timeout: Duration) -> io::Result<AgentConnection> {
        let open = async {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (read, writer) = stream.into_split();
            let mut connection = AgentConnection { reader: BufReader::new(read), writer };
            let challenge: ChallengeMessage = read_message(&mut connection.reader)
                .await?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the agent closed the connection"))?;
            let challenge = unhex32(&challenge.challenge).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad challenge"))?;
            write_message(&mut connection.writer, &ProofMessage { proof: hex(&auth::answer(key, &challenge)) }).await?;
            Ok(connection)
        };
        tokio::time::timeout(timeout, open)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("agent {addr} did not answer")))?
    }

    pub async fn call(&mut self, request: &AgentRequest) -> io::Result<AgentReply> {
        write_message(&mut self.writer, request).await?;
        read_message(&mut self.reader).await?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the agent closed the connection"))
    }
}

/// Serves one connection's requests in order with `handle` until the peer closes it.
pub async fn serve_lines<Q, A, R, W, F, Fut>(reader: R, mut writer: W, mut handle: F) -> io::Result<()>
where
    Q: DeserializeOwned,
    A: Serialize,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: FnMut(Q) -> Fut,
    Fut: std::future::Future<Output = A>,
{
    let mut reader = BufReader::new(reader);
    while let Some(request) = read_message::<Q, _>(&mut reader).await? {
        let reply = handle(request).await;
        write_message(&mut writer, &reply).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_round_trip_and_oversized_or_torn_ones_are_refused() {
        let mut buffer = Vec::new();
        write_message(&mut buffer, &Request::Teardown { job: 7, hurry: true }).await.unwrap();
        let mut reader = BufReader::new(&buffer[..]);
        let back: Request = read_message(&mut reader).await.unwrap().unwrap();
        assert_eq!(back, Request::Teardown { job: 7, hurry: true });
        assert!(read_message::<Request, _>(&mut reader).await.unwrap().is_none());

        let torn = br#"{"teardown":{"job":7"#;
        assert!(read_message::<Request, _>(&mut BufReader::new(&torn[..])).await.is_err());
        let huge = vec![b'x'; MAX_LINE as usize + 10];
        assert!(read_message::<Request, _>(&mut BufReader::new(&huge[..])).await.is_err());
        assert!(read_message::<Request, _>(&mut BufReader::new(&b"{\"nonsense\":1}\n"[..])).await.is_err());
    }

    #[tokio::test]
    async fn an_agent_accepts_the_cluster_key_and_refuses_another() {
        for (manager_key, accepted) in [([5u8; 32], true), ([6u8; 32], false)] {
            let agent_key = [5u8; 32];
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let agent = tokio::spawn(async move {
                let (stream, _) = listener.accept().await.unwrap();
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let verdict = accept_manager(&mut read, &mut write, &agent_key).await;
                if verdict.is_ok() {
                    let request: AgentRequest = read_message(&mut read).await.unwrap().unwrap();
                    assert_eq!(request, AgentRequest::List);
                    write_message(&mut write, &AgentReply::Servers(vec![])).await.unwrap();
                }
                verdict.is_ok()
            });
            let mut connection = AgentConnection::connect(&addr, &manager_key, Duration::from_secs(5)).await.unwrap();
            let reply = connection.call(&AgentRequest::List).await;
            assert_eq!(agent.await.unwrap(), accepted);
            assert_eq!(reply.is_ok(), accepted, "{reply:?}");
        }
    }
}
