//! What every front end (the `surge` command, libsurge and through it Python) does alike with
//! the paths a user gives: find the instance a burst-buffer path is in, and make a PFS path
//! absolute before it goes to servers that resolve it on their own nodes.

use std::path::{Path, PathBuf};

use surge_proto::ErrorCode;

use crate::descriptor;
use crate::error::{Error, Result};

/// A burst-buffer path as the instance knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BbPath {
    /// The instance it is in.
    pub instance: String,
    /// The path inside the instance (`/run/out.h5`).
    pub inner: String,
}

/// Which instance a path off every mount is taken to be in, when none is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unnamed {
    /// The only instance this machine knows (a person at the command line).
    OnlyInstance,
    /// None: the path is refused (a program, whose path off every mount is more likely a
    /// mistake than a path inside an instance).
    Refuse,
}

/// Resolves a burst-buffer path as a user gives it: a path on a recorded Surge mount
/// (`/mnt/bb/run/out.h5`: the mounted instance), or an absolute path inside `instance` (when
/// none is named, see [`Unnamed`]).
pub fn resolve_bb_path(path: &str, instance: Option<&str>, unnamed: Unnamed) -> Result<BbPath> {
    if let Some((mounted, inner)) = descriptor::resolve_mount_path(Path::new(path)) {
        if let Some(named) = instance.filter(|named| *named != mounted) {
            return Err(Error::new(ErrorCode::Invalid, format!("{path} is on a mount of instance '{mounted}', not '{named}'")));
        }
        return Ok(BbPath { instance: mounted, inner });
    }
    if !path.starts_with('/') {
        let detail = format!("burst-buffer path '{path}' is neither on a Surge mount nor absolute within an instance");
        return Err(Error::new(ErrorCode::Invalid, detail));
    }
    let instance = match (instance, unnamed) {
        (None, Unnamed::Refuse) => {
            let detail = format!("{path} is not on a Surge mount, and no instance is named (SURGE_INSTANCE) that it could be in");
            return Err(Error::new(ErrorCode::Invalid, detail));
        }
        (named, _) => default_instance(named)?,
    };
    Ok(BbPath { instance, inner: path.to_string() })
}

/// `instance` when one is named, else the only instance this machine knows.
pub fn default_instance(instance: Option<&str>) -> Result<String> {
    if let Some(name) = instance {
        return Ok(name.to_string());
    }
    let names = descriptor::known_instances();
    match &names[..] {
        [one] => Ok(one.clone()),
        [] => Err(Error::new(ErrorCode::NotFound, "no Surge instance found (start one with `surge up`)")),
        _ => Err(Error::new(
            ErrorCode::Invalid,
            format!("several instances ({}): name one (--instance or SURGE_INSTANCE)", names.join(", ")),
        )),
    }
}

/// A PFS path made absolute against this process's working directory, without a trailing
/// slash: the servers resolve it on their nodes, where this directory means nothing.
pub fn absolute_pfs_path(path: &str) -> Result<String> {
    let path = PathBuf::from(path);
    let absolute = if path.is_absolute() {
        path
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::new(ErrorCode::Invalid, format!("relative PFS path '{}' and no working directory: {e}", path.display())))?;
        cwd.join(path)
    };
    let text = absolute.to_string_lossy().trim_end_matches('/').to_string();
    Ok(if text.is_empty() { "/".into() } else { text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfs_paths_become_absolute_without_a_trailing_slash() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute_pfs_path("run/out").unwrap(), cwd.join("run/out").to_string_lossy());
        assert_eq!(absolute_pfs_path("/pfs/run/").unwrap(), "/pfs/run");
        assert_eq!(absolute_pfs_path("/").unwrap(), "/");
    }

    #[test]
    fn a_relative_burst_buffer_path_off_any_mount_is_refused() {
        let e = resolve_bb_path("relative/out.h5", Some("job"), Unnamed::OnlyInstance).unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid);
        let resolved = resolve_bb_path("/out.h5", Some("job"), Unnamed::Refuse).unwrap();
        assert_eq!(resolved, BbPath { instance: "job".into(), inner: "/out.h5".into() });
        assert_eq!(resolve_bb_path("/definitely/not/on/a/mount", None, Unnamed::Refuse).unwrap_err().code, ErrorCode::Invalid);
    }
}
