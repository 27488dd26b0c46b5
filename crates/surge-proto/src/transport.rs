//! The byte streams clients and servers talk over (feature `io`): TCP between nodes, and a
//! Unix socket between a client and a server on one node.
//!
//! A server that listens on a TCP address also listens on a Unix socket in the abstract
//! namespace named after that address ([`local_name`]). Abstract names belong to a network
//! namespace, so a client that reaches the name is on the server's node (a test "node" in a
//! namespace of its own never sees another's), and a loopback round trip skips the TCP/IP
//! stack: half the kernel's time per request on the machines measured (bench/NOTEBOOK.md).
//! Nothing else changes: the same frames, the same challenge and answer, the same limits.
//!
//! An abstract name has no owner and no permission bits: any process of the namespace could
//! bind it first. So a client only talks to a socket whose peer runs as root or as the
//! client's own user ([`connect_local`]); otherwise it goes by TCP, as it would to another
//! node. Whether a stream is Unix or TCP changes nothing a server decides: its peer address
//! serves for logs only.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{tcp, unix, TcpStream, UnixListener, UnixStream};

/// The abstract Unix socket name of the server listening on `addr`, or None when `addr` is
/// no one address a client would dial (unspecified, or port 0).
pub fn local_name(addr: SocketAddr) -> Option<String> {
    (!addr.ip().is_unspecified() && addr.port() != 0).then(|| format!("surge-server@{addr}"))
}

/// Listens on the abstract socket of the server listening on `addr` (see [`local_name`]).
/// None when there is none to make.
pub fn bind_local(addr: SocketAddr) -> io::Result<Option<UnixListener>> {
    use std::os::linux::net::SocketAddrExt;
    let Some(name) = local_name(addr) else { return Ok(None) };
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener).map(Some)
}

/// A stream to the server listening on `addr` over its abstract socket, when that server is
/// on this node (in this network namespace) and runs as root or as this process's user.
/// None: no such socket here, its backlog is full, or someone else holds the name; the
/// caller goes by TCP.
pub fn connect_local(addr: SocketAddr) -> Option<UnixStream> {
    let name = local_name(addr)?;
    // SAFETY: a zeroed sockaddr_un is valid; the name fits (checked), after the leading NUL
    // that makes it abstract.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() >= sun.sun_path.len() {
        return None;
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, byte) in sun.sun_path[1..].iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor owned here; a connect that fails closes it.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        // A Unix connect completes at once or fails (EAGAIN: the backlog is full).
        if libc::connect(fd, (&raw const sun).cast(), len) != 0 {
            libc::close(fd);
            return None;
        }
        std::os::unix::net::UnixStream::from_raw_fd(fd)
    };
    let stream = UnixStream::from_std(stream).ok()?;
    let peer = stream.peer_cred().ok()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    (peer.uid() == 0 || peer.uid() == me).then_some(stream)
}

/// The reading half of a connection.
pub enum ReadHalf {
    Tcp(tcp::OwnedReadHalf),
    Unix(unix::OwnedReadHalf),
}

/// The writing half of a connection.
pub enum WriteHalf {
    Tcp(tcp::OwnedWriteHalf),
    Unix(unix::OwnedWriteHalf),
}

/// A TCP stream's halves (with Nagle's delay off: every frame is written whole, at once).
pub fn split_tcp(stream: TcpStream) -> io::Result<(ReadHalf, WriteHalf)> {
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    Ok((ReadHalf::Tcp(read), WriteHalf::Tcp(write)))
}

/// A Unix stream's halves.
pub fn split_unix(stream: UnixStream) -> (ReadHalf, WriteHalf) {
    let (read, write) = stream.into_split();
    (ReadHalf::Unix(read), WriteHalf::Unix(write))
}

impl WriteHalf {
    /// Writes what the socket takes now, without waiting (`WouldBlock` when it takes nothing).
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(half) => half.try_write_vectored(bufs),
            WriteHalf::Unix(half) => half.try_write_vectored(bufs),
        }
    }

    /// Waits until the socket may take more.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(half) => half.writable().await,
            WriteHalf::Unix(half) => half.writable().await,
        }
    }

    /// Runs `f`, a write on the socket's descriptor (a `sendfile`), when the socket is
    /// writable; `WouldBlock` when it was not after all (wait with [`WriteHalf::writable`]).
    pub fn try_io<R>(&self, interest: tokio::io::Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            WriteHalf::Tcp(half) => half.as_ref().try_io(interest, f),
            WriteHalf::Unix(half) => half.as_ref().try_io(interest, f),
        }
    }

    /// Whether the stream is a Unix socket (the peer is on this node).
    pub fn is_local(&self) -> bool {
        matches!(self, WriteHalf::Unix(_))
    }
}

impl AsRawFd for WriteHalf {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            WriteHalf::Tcp(half) => half.as_ref().as_raw_fd(),
            WriteHalf::Unix(half) => half.as_ref().as_raw_fd(),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(half) => Pin::new(half).poll_read(cx, buf),
            ReadHalf::Unix(half) => Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_write(cx, buf),
            WriteHalf::Unix(half) => Pin::new(half).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_write_vectored(cx, bufs),
            WriteHalf::Unix(half) => Pin::new(half).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_flush(cx),
            WriteHalf::Unix(half) => Pin::new(half).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(half) => Pin::new(half).poll_shutdown(cx),
            WriteHalf::Unix(half) => Pin::new(half).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_an_address_a_client_dials_has_a_local_name() {
        assert_eq!(local_name("127.0.0.5:7000".parse().unwrap()).as_deref(), Some("surge-server@127.0.0.5:7000"));
        assert_eq!(local_name("0.0.0.0:7000".parse().unwrap()), None);
        assert_eq!(local_name("127.0.0.5:0".parse().unwrap()), None);
    }

    #[tokio::test]
    async fn a_server_listening_here_is_reached_over_its_local_socket_and_nothing_else_is() {
        // A port no TCP server holds: the name is this test's alone.
        let addr: SocketAddr = format!("127.0.0.1:{}", 40000 + std::process::id() % 20000).parse().unwrap();
        assert!(connect_local(addr).is_none(), "nobody listens yet");
        let listener = bind_local(addr).unwrap().unwrap();
        assert!(bind_local(addr).is_err(), "a name is held by one listener at a time");
        let client = connect_local(addr).expect("reached over the local socket");
        let (mut server, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = split_unix(client);
        assert!(write.is_local());
        write.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        server.write_all(b"pong").await.unwrap();
        read.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        drop(listener);
        let other: SocketAddr = "127.0.0.2:1".parse().unwrap();
        assert!(connect_local(other).is_none(), "another address's name is not this one's");
    }
}
