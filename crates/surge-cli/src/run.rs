//! `surge run -- CMD ARGS...`: runs an unmodified program with the interception library
//! (`libsurge_preload.so`) loaded, so its file calls on Surge mounts are served in the
//! process instead of through the kernel's FUSE mount (docs/preload.md). The library is found
//! beside this binary (a build tree) or in `../lib` (an install); the program replaces this
//! process, so its exit status is the command's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub const LIBRARY: &str = "libsurge_preload.so";

/// Where the interception library is, beside `exe` or in the lib directory of its prefix.
pub fn library_beside(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [dir.join(LIBRARY), dir.join("../lib").join(LIBRARY)].into_iter().find(|p| p.exists())
}

/// `LD_PRELOAD` with `library` first, keeping what the environment preloads already.
pub fn preload_value(library: &Path, existing: Option<OsString>) -> OsString {
    let mut value = library.as_os_str().to_owned();
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        value.push(" ");
        value.push(existing);
    }
    value
}

/// Replaces this process with `command` under the library; returns only on failure.
pub fn run(command: &[OsString], report: Option<&Path>) -> Result<()> {
    let Some((program, args)) = command.split_first() else { bail!("no command to run") };
    let exe = std::env::current_exe().context("this program's path")?;
    let Some(library) = library_beside(&exe) else {
        bail!("{LIBRARY} is neither beside {} nor in its ../lib: build it (make build) or install it (make install)", exe.display())
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload_value(&library, std::env::var_os("LD_PRELOAD")));
    if let Some(report) = report {
        cmd.env("SURGE_PRELOAD_REPORT", report);
    }
    let error = cmd.exec();
    Err(error).with_context(|| format!("run {}", program.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_goes_first_and_keeps_what_was_preloaded() {
        let lib = Path::new("/opt/surge/lib/libsurge_preload.so");
        assert_eq!(preload_value(lib, None), "/opt/surge/lib/libsurge_preload.so");
        assert_eq!(preload_value(lib, Some("".into())), "/opt/surge/lib/libsurge_preload.so");
        assert_eq!(preload_value(lib, Some("libdarshan.so".into())), "/opt/surge/lib/libsurge_preload.so libdarshan.so");
    }

    #[test]
    fn the_library_is_found_in_a_build_tree_or_an_install() {
        let dir = std::env::temp_dir().join(format!("surge-run-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        assert_eq!(library_beside(&dir.join("bin/surge")), None);
        std::fs::write(dir.join("lib").join(LIBRARY), b"").unwrap();
        assert_eq!(library_beside(&dir.join("bin/surge")), Some(dir.join("bin/../lib").join(LIBRARY)));
        std::fs::write(dir.join("bin").join(LIBRARY), b"").unwrap();
        assert_eq!(library_beside(&dir.join("bin/surge")), Some(dir.join("bin").join(LIBRARY)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
