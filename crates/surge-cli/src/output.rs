//! Standard output, for people and for scripts. A reader that stopped reading (`surge up |
//! head -1`, any closed pipe) is no failure: the command has done its work (an instance is up),
//! and a job script under `set -o pipefail` must neither see it fail nor leave the instance
//! behind. Every line a command prints goes through [`outln!`] or [`out!`].

use std::io::Write;

pub fn write(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("surge: cannot write the output: {e}");
        }
    }
}

/// `println!` that survives a closed stdout.
macro_rules! outln {
    () => { $crate::output::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that survives a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};
