//! DataWarp's striping and instance calls: `dw_get_stripe_configuration`,
//! `dw_set_stripe_configuration`, `dw_get_mds_path`, `dw_get_accounting_data_json`.
//!
//! A Surge instance stripes every file the same way, fixed when it is started: chunks of the
//! instance's chunk size, chunk `c` of inode `i` on server `(spread(i) + c) mod N`
//! (`surge_proto::placement`). The stripe of an open file is that: its size is the chunk
//! size, its width the number of servers, its starting index the server of chunk 0,
//! computed from the inode number the mount reports for the descriptor (the mount's inode
//! numbers are the instance's).

use std::ffi::{c_char, c_int, CString};
use std::mem::MaybeUninit;
use std::path::Path;

use surge::call::{call, client, resolve, text, CallResult, Failure};
use surge_client::descriptor::resolve_mount_path;
use surge_client::surge_proto::ino;
use surge_client::Client;

/// What the kernel reports as the file system type of a FUSE mount (`statfs.f_type`).
const FUSE_SUPER_MAGIC: libc::c_long = 0x6573_5546;

/// An open file of a Surge mount.
struct SurgeFd {
    client: Client,
    ino: u64,
    dir: bool,
}

/// The Surge file `fd` is open on: a FUSE file under a recorded Surge mount.
fn surge_fd(fd: c_int) -> CallResult<SurgeFd> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `struct stat` into the buffer it is given.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(Failure::new(libc::EBADF, format!("descriptor {fd} is not open")));
    }
    // SAFETY: fstat succeeded, so it filled it.
    let st = unsafe { st.assume_init() };
    let mut fs = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes a whole `struct statfs` into the buffer it is given.
    let on_fuse = unsafe { libc::fstatfs(fd, fs.as_mut_ptr()) } == 0
        // SAFETY: fstatfs succeeded (the left side), so it filled it.
        && unsafe { fs.assume_init() }.f_type as libc::c_long == FUSE_SUPER_MAGIC;
    let not_surge = || Failure::new(libc::EINVAL, format!("descriptor {fd} is not a file of a Surge mount"));
    if !on_fuse {
        return Err(not_surge());
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|_| not_surge())?;
    let link = link.to_str().ok_or_else(not_surge)?;
    let path = link.strip_suffix(" (deleted)").unwrap_or(link);
    let (instance, _) = resolve_mount_path(Path::new(path)).ok_or_else(not_surge)?;
    Ok(SurgeFd { client: client(&instance)?, ino: st.st_ino, dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR })
}

fn set(out: *mut c_int, value: c_int) {
    // SAFETY: checked by the caller: a pointer to an int.
    unsafe { *out = value };
}

/// # Safety
/// The three pointers point to ints.
#[no_mangle]
pub unsafe extern "C" fn dw_get_stripe_configuration(
    fd: c_int,
    stripe_size: *mut c_int,
    stripe_width: *mut c_int,
    starting_index: *mut c_int,
) -> c_int {
    call(|| {
        if stripe_size.is_null() || stripe_width.is_null() || starting_index.is_null() {
            return Err(Failure::new(libc::EINVAL, "a result pointer is NULL"));
        }
        let file = surge_fd(fd)?;
        let layout = file.client.layout();
        // A directory has no chunks: the server its entries (and its files' metadata) live on.
        let index = if file.dir { ino::home(file.ino) } else { layout.chunk_server(file.ino, 0) };
        // Chunk sizes are 4 KiB to 64 MiB, servers at most 2^16: all fit an int.
        set(stripe_size, layout.chunk_size() as c_int);
        set(stripe_width, file.client.server_count() as c_int);
        set(starting_index, index as c_int);
        Ok(())
    })
}

/// # Safety
/// No pointers: any values may be passed.
#[no_mangle]
pub unsafe extern "C" fn dw_set_stripe_configuration(fd: c_int, stripe_size: c_int, stripe_width: c_int) -> c_int {
    call(|| {
        let file = surge_fd(fd)?;
        if stripe_size <= 0 || stripe_size % 4096 != 0 {
            return Err(Failure::new(libc::EINVAL, format!("stripe size {stripe_size}: not a positive multiple of 4096")));
        }
        let servers = file.client.server_count();
        if stripe_width <= 0 || stripe_width as usize > servers {
            return Err(Failure::new(libc::EINVAL, format!("stripe width {stripe_width}: the instance has {servers} servers")));
        }
        // The instance's striping is fixed: nothing to change.
        Ok(())
    })
}

/// # Safety
/// `dw_root` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_get_mds_path(dw_root: *const c_char, key: u64) -> *mut c_char {
    let _ = key;
    let mut root = None;
    let code = call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (datawarp.h); NULL is refused.
        let path = unsafe { text(dw_root, "DataWarp root") }?;
        resolve(&path)?;
        root = Some(CString::new(path).map_err(|_| Failure::new(libc::EINVAL, "DataWarp root holds a NUL"))?);
        Ok(())
    });
    match root {
        // SAFETY: a valid C string; strdup's copy is the caller's to free().
        Some(root) if code == 0 => unsafe { libc::strdup(root.as_ptr()) },
        _ => std::ptr::null_mut(),
    }
}

/// # Safety
/// `ecode` is NULL or points to an int.
#[no_mangle]
pub unsafe extern "C" fn dw_get_accounting_data_json(path: *const c_char, ecode: *mut c_int) -> *mut c_char {
    let _ = path;
    let code = call(|| Err(Failure::new(libc::EOPNOTSUPP, "Surge keeps no DataWarp accounting data")));
    if !ecode.is_null() {
        set(ecode, code);
    }
    std::ptr::null_mut()
}
