//! `surge-sim` command line (also reached as `surge sim ...`): `run`, `validate`, `calibrate`
//! and `cost`, each a thin front over the library's modules; a file that cannot be read or
//! does not parse is reported with its path.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use surge_sim::calibrate::{self, Measurement};
use surge_sim::cost::{Inventory, PriceList};
use surge_sim::report::{render, render_cost, summarize, write_outputs};
use surge_sim::system::{Placement, SystemConfig};
use surge_sim::workload::WorkloadConfig;
use surge_sim::{simulate, validate};

#[derive(Parser)]
#[command(name = "surge-sim", about = "Flow-level burst-buffer provisioning simulator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a workload on a system and report I/O phases, hops, utilisation and cost.
    Run {
        /// System description (TOML).
        system: PathBuf,
        /// Workload description (TOML).
        workload: PathBuf,
        /// Directory for CSV/JSON outputs (one subdirectory per placement with --placement all).
        #[arg(long)]
        out: Option<PathBuf>,
        /// node_local, grouped, global, or all (default: the system file's placement).
        #[arg(long)]
        placement: Option<String>,
    },
    /// Simulate the shipped examples and compare with the seed study's figures and
    /// observations; exits non-zero if a case is out of tolerance.
    Validate {
        /// Only these cases (default: all).
        #[arg(long = "case")]
        cases: Vec<String>,
        /// List the cases and exit.
        #[arg(long)]
        list: bool,
        /// Directory of the example files (default: examples/sim above the binary or the
        /// current directory).
        #[arg(long)]
        examples: Option<PathBuf>,
    },
    /// Turn measurements of a Surge instance (bench/sim/calibrate.sh) into the calibration a
    /// system file's `[calibration] from` points to; with --predict, simulate other measured
    /// configurations of the instance with it and compare (exit status 1 beyond 15%).
    Calibrate {
        /// Measurement file of the configuration to calibrate from (JSON).
        measurements: PathBuf,
        /// Write the calibration here (default: print it).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// Measurement file of another configuration to predict and compare (repeatable).
        #[arg(long)]
        predict: Vec<PathBuf>,
        /// Also write the measured instance as a system file whose `[calibration]` points at
        /// the -o file, for `surge sim run`.
        #[arg(long, requires = "output")]
        system: Option<PathBuf>,
    },
    /// CAPEX/OPEX of every placement configured in a system file.
    Cost {
        system: PathBuf,
        /// Price list (default: the system file's `prices`).
        #[arg(long)]
        prices: Option<PathBuf>,
    },
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("surge-sim: error: {e:#}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().command {
        Command::Run { system, workload, out, placement } => {
            let sys = SystemConfig::load(&system)?;
            let work = WorkloadConfig::load(&workload)?;
            let placements = match placement.as_deref() {
                None => vec![sys.burst_buffer.placement],
                Some("all") => sys.placements(),
                Some(p) => vec![Placement::parse(p)?],
            };
            let many = placements.len() > 1;
            for p in placements {
                let outcome = simulate(&sys, p, &work).with_context(|| format!("simulating placement {}", p.name()))?;
                let summary = summarize(&outcome)?;
                println!("{}", render(&summary));
                if let Some(dir) = &out {
                    let dir = if many { dir.join(p.name()) } else { dir.clone() };
                    write_outputs(&outcome, &summary, &dir)?;
                    println!("outputs written to {}\n", dir.display());
                }
            }
        }
        Command::Validate { cases, list, examples } => {
            if list {
                for c in validate::CASE_NAMES {
                    println!("{c}");
                }
                return Ok(());
            }
            let dir = validate::find_examples(examples.as_deref())?;
            println!("example files: {}\n", dir.display());
            let results = validate::run(&dir, &cases)?;
            print!("{}", validate::render(&results));
            if cases.is_empty() {
                println!("\n{}", validate::cost_arithmetic(&dir)?);
            }
            let failed = results.iter().filter(|r| r.failed()).count();
            let compared = results.iter().filter(|r| r.status != validate::Status::NoReference).count();
            if failed > 0 {
                println!("\n{failed} of {compared} compared cases FAILING (reasons above)");
                std::process::exit(1);
            }
            println!("\nall {compared} compared cases within tolerance");
        }
        Command::Calibrate { measurements, output, predict, system } => {
            let base = Measurement::load(&measurements)?;
            let cal = calibrate::calibrate(&base)?;
            let json = calibrate::calibration_json(&cal);
            match &output {
                Some(path) => {
                    std::fs::write(path, &json).with_context(|| format!("cannot write {}", path.display()))?;
                    println!("calibration written to {}:\n{json}", path.display());
                }
                None => print!("{json}"),
            }
            if let (Some(sys_path), Some(cal_path)) = (&system, &output) {
                let from = calibrate::relative_to(cal_path, sys_path);
                std::fs::write(sys_path, base.system_toml(Some(&from))).with_context(|| format!("cannot write {}", sys_path.display()))?;
                SystemConfig::load(sys_path).with_context(|| format!("checking the system file written to {}", sys_path.display()))?;
                println!("system file written to {} (calibration from {from})", sys_path.display());
            }
            if predict.is_empty() {
                return Ok(());
            }
            let others = predict.iter().map(|p| Measurement::load(p)).collect::<Result<Vec<_>>>()?;
            let mut rows = calibrate::compare(&base, &cal, true)?;
            for m in &others {
                rows.extend(calibrate::compare(m, &cal, false)?);
            }
            let described: Vec<&Measurement> = std::iter::once(&base).chain(&others).collect();
            print!("{}", calibrate::render(&rows, &described));
            let predicted: Vec<_> = rows.iter().filter(|r| !r.calibrated_on).collect();
            let failed = predicted.iter().filter(|r| !r.passes()).count();
            if failed > 0 {
                println!("\n{failed} of {} predictions off by more than 15%", predicted.len());
                std::process::exit(1);
            }
            println!("\nall {} predictions within 15%", predicted.len());
        }
        Command::Cost { system, prices } => {
            let sys = SystemConfig::load(&system)?;
            let path = prices.or(sys.prices.clone()).context("no price list: pass --prices or set `prices` in the system file")?;
            let list = PriceList::load(&path)?;
            for p in sys.placements() {
                println!("{} - {}\n{}", sys.name, p.name(), render_cost(&list.cost(Inventory::of(&sys, p))));
            }
        }
    }
    Ok(())
}
