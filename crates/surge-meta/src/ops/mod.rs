//! The protocol's namespace steps, by family. Each public method of
//! [`MetaStore`](crate::MetaStore) in these modules is one atomic step on this share, run
//! under the server's metadata lock (steps that span servers are sequenced by the client from
//! several of them); a step refused is answered with the error code the client sees.
//!
//! * [`entries`]: names and what they name: lookup, create, mknod, symlink, hard links, unlink;
//! * [`directories`]: mkdir (in one step or two), rmdir, readdir, layouts, `..`, retiring a
//!   directory another server is about to unname;
//! * [`rename`]: rename and exchange on this server, and the steps of a rename between servers;
//! * [`attributes`]: getattr, setattr, open and close, appends, allocation notes;
//! * [`xattrs`]: extended attributes and ACLs;
//! * [`scan`]: what `surge fsck` reads, a page at a time, and its one repair of its own.

pub mod attributes;
pub mod directories;
pub mod entries;
pub mod rename;
pub mod scan;
pub mod xattrs;

/// A new file `parent/name`, for tests.
#[cfg(test)]
pub(crate) fn file(store: &mut crate::MetaStore, parent: surge_proto::Ino, name: &str) -> surge_proto::Ino {
    store.create(parent, name, 0o644, 0, 0, 0, true, false, None).unwrap().ino
}
