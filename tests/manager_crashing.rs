//! `surge-manager-crashing --crash-at STEP --config FILE`: the control plane daemon, built for
//! the tests of recovery only (never installed), that kills itself with SIGKILL, as `kill -9`
//! would, when it reaches the named step (`surge_manager::manager::Step`), so that a restart
//! from exactly there can be checked.

use surge_manager::manager::Step;

fn main() -> anyhow::Result<()> {
    surge_manager::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let usage = "usage: surge-manager-crashing --crash-at STEP --config FILE";
    let wanted = value_of("--crash-at").ok_or_else(|| anyhow::anyhow!("{usage}"))?;
    let config = value_of("--config").ok_or_else(|| anyhow::anyhow!("{usage}"))?;
    let step = *Step::ALL
        .iter()
        .find(|s| s.name() == wanted)
        .ok_or_else(|| anyhow::anyhow!("no step {wanted}: one of {:?}", Step::ALL.map(Step::name)))?;
    let config = surge_manager::config::Config::load(std::path::Path::new(&config))?;
    surge_manager::run(
        config,
        Some(Box::new(move |passed| {
            if passed == step {
                tracing::error!(step = step.name(), "killed here, as asked");
                // SAFETY: kill(2) of this very process.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        })),
    )
}
