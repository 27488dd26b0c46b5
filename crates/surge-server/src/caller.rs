//! Who a connection's requests come from, when the server checks identities: the uid and gid
//! a MUNGE credential proved at the handshake (see [`surge_proto::identity`]), with that
//! user's groups as this node knows them. The checks made against it are
//! [`surge_meta::access`]'s.

use surge_meta::access::Caller;

/// The caller a MUNGE credential made for `challenge` proves, with its groups.
pub async fn prove(credential: String, challenge: &[u8]) -> std::result::Result<Caller, String> {
    let payload = surge_proto::identity::payload_of(challenge);
    let proven = tokio::task::spawn_blocking(move || surge_proto::identity::verify(&credential, &payload))
        .await
        .map_err(|e| format!("credential check: {e}"))??;
    Ok(Caller { uid: proven.uid, gid: proven.gid, groups: groups_of(proven.uid, proven.gid) })
}

/// The groups `uid` is in on this node (its primary `gid` at least).
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    // SAFETY: getpwuid_r writes into the buffers given, of the sizes given; the name it points
    // at lives in `buf`, which outlives its use by getgrouplist.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) != 0 || found.is_null() {
            return groups;
        }
        let mut list = vec![0 as libc::gid_t; 256];
        let mut count = list.len() as libc::c_int;
        if libc::getgrouplist(pwd.pw_name, gid, list.as_mut_ptr(), &mut count) >= 0 {
            list.truncate(count.max(0) as usize);
            groups = list;
        }
    }
    groups
}
