//! Tickets: what lets a client use a file's data on servers that do not know its permissions.
//!
//! A file's chunks live on every server, its attributes only on its home. Where servers check
//! identities (see [`crate::identity`]), the home checks the caller's permissions when it
//! opens the file (or truncates it, or when a removal leaves its data to purge) and answers a
//! ticket: the inode, the caller's uid and the rights granted, under a keyed BLAKE3 MAC whose
//! key only the servers hold (a file clients cannot read). Every data request carries it; a
//! data server checks the MAC, the inode, that the connection's caller is the ticket's uid,
//! and the right the request needs. Like an open file description, a ticket keeps the access
//! it was granted with; it is good only for the user it names.

use serde::{Deserialize, Serialize};

use crate::Ino;

/// Read the file's data.
pub const READ: u32 = 4;
/// Write, truncate, reserve room for local writes.
pub const WRITE: u32 = 2;
/// Delete the data of a file that is gone (granted by the step that left it without names
/// or handles).
pub const PURGE: u32 = 8;
/// Drop a link of an inode whose name lived on another server (granted by the server that
/// removed the name, after checking the remover's permissions there).
pub const UNLINK: u32 = 16;

pub const KEY_LEN: usize = 32;
pub type TicketKey = [u8; KEY_LEN];

/// Domain separation from the instance token's uses.
const CONTEXT: &[u8] = b"surge-ticket-v1";

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub ino: Ino,
    pub uid: u32,
    pub rights: u32,
    pub mac: [u8; 32],
}

fn mac(key: &TicketKey, ino: Ino, uid: u32, rights: u32) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new_keyed(key);
    hasher.update(CONTEXT);
    hasher.update(&ino.to_le_bytes());
    hasher.update(&uid.to_le_bytes());
    hasher.update(&rights.to_le_bytes());
    hasher.finalize()
}

impl Ticket {
    pub fn issue(key: &TicketKey, ino: Ino, uid: u32, rights: u32) -> Ticket {
        Ticket { ino, uid, rights, mac: *mac(key, ino, uid, rights).as_bytes() }
    }

    /// Whether this ticket, made with `key`, lets `uid` do what needs `right` to `ino`
    /// (constant-time MAC comparison: BLAKE3's `Hash` equality).
    pub fn allows(&self, key: &TicketKey, ino: Ino, uid: u32, right: u32) -> bool {
        self.ino == ino
            && self.uid == uid
            && self.rights & right != 0
            && mac(key, self.ino, self.uid, self.rights) == blake3::Hash::from(self.mac)
    }
}

/// Parses a ticket key file's contents: 64 hex digits, as a token file.
pub fn parse_key(text: &str) -> Option<TicketKey> {
    crate::auth::parse_secret(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_good_for_its_inode_user_and_rights_only() {
        let key = [7u8; KEY_LEN];
        let t = Ticket::issue(&key, 42, 1001, READ);
        assert!(t.allows(&key, 42, 1001, READ));
        assert!(!t.allows(&key, 42, 1001, WRITE), "a right not granted");
        assert!(!t.allows(&key, 43, 1001, READ), "another inode");
        assert!(!t.allows(&key, 42, 1002, READ), "another user");
        assert!(!t.allows(&[8u8; KEY_LEN], 42, 1001, READ), "another key");
        let forged = Ticket { rights: READ | WRITE, ..t };
        assert!(!forged.allows(&key, 42, 1001, WRITE), "rights changed after issue");
    }
}
