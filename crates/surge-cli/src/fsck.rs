//! `surge fsck`: checks an instance's consistency across its servers and repairs it (the work
//! is the client library's `fsck` module; this prints it).
//!
//! A private-mode instance is one namespace per server, each checked on its own. The command
//! fails (exit status 1) while any inconsistency is left unrepaired, so a script can tell a
//! clean or repaired instance from one that is not.

use anyhow::{bail, Result};
use surge_client::fsck::{Finding, FsckReport};
use surge_client::{Client, ClientOptions, InstanceDescriptor, Mode};

use crate::instance::single_server_client;
use crate::output::{out, outln};
use crate::table::{human_bytes, Table};

/// Findings listed one by one below the summary table, at most.
const LISTED: usize = 20;

pub async fn fsck(desc: &InstanceDescriptor, repair: bool, json: bool) -> Result<()> {
    let opts = ClientOptions::default();
    // A private-mode instance is one namespace per server: each is checked on its own.
    let namespaces: Vec<(String, Client)> = match desc.mode {
        Mode::Striped => vec![(desc.name.clone(), Client::new(desc, opts)?)],
        Mode::Private => desc
            .servers
            .iter()
            .map(|s| Ok((format!("{} server {}", desc.name, s.index), single_server_client(desc, s, &opts)?)))
            .collect::<surge_client::Result<_>>()?,
    };
    let mut reports = Vec::new();
    for (label, client) in &namespaces {
        reports.push((label, client.fsck(repair).await?));
    }
    if json {
        let doc: Vec<serde_json::Value> = reports.iter().map(|(label, r)| serde_json::json!({"namespace": label, "report": r})).collect();
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for (label, report) in &reports {
            print_report(label, report, repair);
        }
    }
    let found: usize = reports.iter().map(|(_, r)| r.findings.len()).sum();
    let left: usize = reports.iter().map(|(_, r)| r.unrepaired()).sum();
    if left > 0 && repair {
        bail!("{left} of {found} inconsistencies could not be repaired");
    }
    if left > 0 {
        bail!("{found} inconsistencies found; `surge fsck {} --repair` repairs them", desc.name);
    }
    Ok(())
}

fn print_report(label: &str, report: &FsckReport, repair: bool) {
    outln!(
        "'{label}': {} inodes, {} names, {} data files checked{}",
        report.inodes,
        report.entries,
        report.data_files,
        if report.transient > 0 { format!(" ({} in-progress steps seen once, not judged)", report.transient) } else { String::new() }
    );
    if report.findings.is_empty() {
        outln!("clean: no inconsistency");
        return;
    }
    let mut table = Table::new(if repair { &["finding", "found", "repaired"] } else { &["finding", "found"] });
    for class in Finding::CLASSES {
        let of_class: Vec<usize> = (0..report.findings.len()).filter(|&i| report.findings[i].class() == class).collect();
        if of_class.is_empty() {
            continue;
        }
        let mut row = vec![class.to_string(), of_class.len().to_string()];
        if repair {
            row.push(of_class.iter().filter(|&&i| report.repairs.get(i).is_some_and(Option::is_none)).count().to_string());
        }
        table.row(row);
    }
    out!("{}", table.render());
    for (i, finding) in report.findings.iter().enumerate().take(LISTED) {
        let outcome = match report.repairs.get(i) {
            Some(None) => " -> repaired".to_string(),
            Some(Some(why)) => format!(" -> not repaired: {why}"),
            None => String::new(),
        };
        outln!("  {}{outcome}", describe(finding));
    }
    if report.findings.len() > LISTED {
        outln!("  ... and {} more (--json lists all)", report.findings.len() - LISTED);
    }
}

fn describe(finding: &Finding) -> String {
    match finding {
        Finding::DanglingEntry { dir, name, ino } => format!("name '{name}' in directory {dir:#x} refers to missing inode {ino:#x}"),
        Finding::ExtraDirName { dir, name, ino } => format!("directory {ino:#x} is also named '{name}' in {dir:#x}"),
        Finding::WrongParent { ino, recorded, actual } => format!("directory {ino:#x} has '..' {recorded:#x}, is named in {actual:#x}"),
        Finding::LinkCount { ino, recorded, names } => format!("inode {ino:#x} has {names} names, link count {recorded}"),
        Finding::RetiredNamed { ino } => format!("directory {ino:#x} is half-removed but still named"),
        Finding::OrphanEmptyDir { ino } => format!("empty directory {ino:#x} has no name"),
        Finding::OrphanInode { ino, kind, size, .. } => {
            format!("{kind:?} {ino:#x} ({}) has no name: goes to /lost+found/#{ino:x}", human_bytes(*size))
        }
        Finding::OrphanData { server, ino, allocated } => {
            format!("server {server} holds {} of data for missing inode {ino:#x}", human_bytes(*allocated))
        }
        Finding::DataPastSize { server, ino, len, size } => {
            format!("server {server} holds data of inode {ino:#x} up to {len}, past its size {size}")
        }
    }
}
