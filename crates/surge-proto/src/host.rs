//! The node a process runs on, as servers and clients must both see it to recognise a server's
//! data directory as being on the client's own node ([`crate::LocalData`]).

/// The running kernel's boot id: differs between nodes, and between boots of one node.
pub fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string())
}
