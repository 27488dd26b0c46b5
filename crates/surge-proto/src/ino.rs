//! Inode numbers. The top 16 bits name the inode's *home* server (the one that holds its
//! attributes and, for a directory, its entries); the low 48 bits are a counter local to that
//! server. Routing a metadata request therefore needs no lookup service, and two servers can
//! allocate inodes at the same time without talking to each other.

pub type Ino = u64;

const HOME_SHIFT: u32 = 48;
const LOCAL_MASK: u64 = (1 << HOME_SHIFT) - 1;

/// The root directory: server 0, local number 1 (FUSE also calls its root inode 1).
pub const ROOT_INO: Ino = 1;

/// Index of the server that owns `ino`'s attributes.
pub fn home(ino: Ino) -> usize {
    (ino >> HOME_SHIFT) as usize
}

/// Builds the inode number of the `local`-th inode allocated by server `server`.
pub fn make(server: usize, local: u64) -> Ino {
    assert!(server < (1 << 16), "server index {server} does not fit an inode number");
    assert!(local <= LOCAL_MASK && local > 0);
    ((server as u64) << HOME_SHIFT) | local
}

/// Marks an inode whose chunks all live on one server (the node-local layout); that server's
/// index is in the 15 bits above the 32-bit local counter such an inode then has.
const PLACED: u64 = 1 << (HOME_SHIFT - 1);
const PLACED_SHIFT: u32 = 32;
/// Servers a placed inode can name.
pub const MAX_PLACED_SERVERS: usize = 1 << (HOME_SHIFT - 1 - PLACED_SHIFT);

/// Builds the number of an inode homed on `server` whose chunks all live on `data_server`,
/// from the `local`-th number `server` allocated (only its low 32 bits are kept: the
/// allocator skips numbers in use).
pub fn make_placed(server: usize, data_server: usize, local: u64) -> Ino {
    assert!(data_server < MAX_PLACED_SERVERS, "server index {data_server} does not fit a placed inode number");
    let counter = local & ((1 << PLACED_SHIFT) - 1);
    make(server, PLACED | ((data_server as u64) << PLACED_SHIFT) | counter.max(1))
}

/// The server holding every chunk of `ino`, for an inode made with [`make_placed`].
pub fn data_server(ino: Ino) -> Option<usize> {
    (ino & PLACED != 0).then_some(((ino & (PLACED - 1)) >> PLACED_SHIFT) as usize)
}

/// A well-mixed hash of an inode number, used to pick the server of a file's first chunk so
/// that files created by one server do not all start on the same server.
pub fn spread(ino: Ino) -> u64 {
    // splitmix64 finaliser: cheap, and every input bit affects every output bit.
    let mut z = ino.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_round_trips() {
        for server in [0usize, 1, 7, 255, 65535] {
            let ino = make(server, 42);
            assert_eq!(home(ino), server);
        }
        assert_eq!(home(ROOT_INO), 0);
    }

    #[test]
    fn placed_inodes_name_their_data_server_and_home() {
        for (home_server, data) in [(0usize, 0usize), (3, 1), (65535, MAX_PLACED_SERVERS - 1)] {
            let ino = make_placed(home_server, data, (7 << 32) | 42);
            assert_eq!(home(ino), home_server);
            assert_eq!(data_server(ino), Some(data));
            assert_ne!(ino, make_placed(home_server, data, 43));
        }
        assert_eq!(data_server(make(2, 1 << 40)), None, "a striped inode names no data server");
        assert_eq!(data_server(ROOT_INO), None);
    }
}
