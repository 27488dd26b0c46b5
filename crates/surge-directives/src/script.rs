//! A batch script's `#DW` directives, as DataWarp defines them, into a [`JobRequest`].
//!
//! A directive is a line starting `#DW` followed by a verb and `key=value` words:
//! * `jobdw capacity=<size> access_mode=striped|private|striped,private type=scratch [pool=<p>]`
//! * `persistentdw name=<n>`
//! * `create_persistent name=<n> capacity=<size> access_mode=... type=scratch [pool=<p>]`
//! * `destroy_persistent name=<n> [hurry]`
//! * `stage_in|stage_out type=file|directory source=<path> destination=<path>`, or
//!   `type=list source=<list file>` (the list's lines name both sides of each file)
//!
//! Unlike Slurm's own reader, which stops at the first command, every line is read: scripts
//! put `#DW stage_out` after the commands that make the output. Every problem is reported, not
//! only the first, each with its line.
//!
//! What DataWarp offers and Surge does not is said in words, never passed over in silence:
//! `#DW swap` is refused with the reason, and DataWarp's tuning keys on `jobdw` and
//! `create_persistent` ([`DATAWARP_TUNING`]) are accepted with a warning each
//! ([`JobRequest::warnings`]) saying that they change nothing here. A key nobody knows stays a
//! problem: a mistyped `capacty=` must not pass for tuning.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// What a job asks of the burst buffer.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct JobRequest {
    /// A buffer for this job only (`jobdw`).
    pub jobdw: Option<JobDw>,
    /// Persistent reservations the job uses (`persistentdw`), by name.
    pub persistent: Vec<String>,
    pub create_persistent: Vec<Persistent>,
    /// Names to destroy, and whether with `hurry` (without staging out).
    pub destroy_persistent: Vec<(String, bool)>,
    pub stage_in: Vec<Stage>,
    pub stage_out: Vec<Stage>,
    /// What was accepted but does nothing here (DataWarp's tuning keys), each with its line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<DirectiveError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobDw {
    pub capacity: u64,
    pub access: AccessMode,
    pub pool: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Persistent {
    pub name: String,
    pub capacity: u64,
    pub access: AccessMode,
    pub pool: Option<String>,
}

/// DataWarp's access modes: one namespace striped over every server, one per compute node, or
/// both at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    Striped,
    Private,
    StripedAndPrivate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageKind {
    File,
    Directory,
    /// `source` names a file of `source destination` lines.
    List,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    pub kind: StageKind,
    /// For a list: the list file, on the parallel file system.
    pub source: String,
    /// Empty for a list.
    pub destination: String,
    /// Line of the script the directive is on.
    pub line: usize,
}

/// One problem with a script's directives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirectiveError {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for DirectiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The variables a burst-buffer path starts with; `DW_PERSISTENT_STRIPED_` takes a name.
const JOB_VARIABLES: [&str; 2] = ["DW_JOB_STRIPED", "DW_JOB_PRIVATE"];
const PERSISTENT_PREFIX: &str = "DW_PERSISTENT_STRIPED_";
const MAX_NAME_LEN: usize = 64;

/// DataWarp's optional tuning keys of `jobdw` (and of a reservation's creation): how its
/// servers lay out metadata, cache and flush. Surge has no such knobs: a key among these is
/// accepted with a warning and does nothing.
pub const DATAWARP_TUNING: [&str; 8] = [
    "max_mds",
    "modified_threshold",
    "optimization_strategy",
    "read_ahead",
    "sync_on_close",
    "sync_to_pfs",
    "write_window_length",
    "write_window_multiplier",
];

/// Why `#DW swap` is refused (DataWarp gives each compute node swap space on the burst buffer).
pub const SWAP_REFUSED: &str = "Surge gives a job no swap space on its burst buffer (swap is set up by root on each compute node, \
     which Surge does not do); remove the line";

/// Reads every `#DW` line of `script` (Slurm hands the script over with a trailing NUL).
pub fn parse_script(script: &str) -> Result<JobRequest, Vec<DirectiveError>> {
    let mut request = JobRequest::default();
    let mut errors = Vec::new();
    for (index, raw) in script.lines().enumerate() {
        let line = index + 1;
        let text = raw.trim_end_matches('\0').trim();
        let Some(rest) = text.strip_prefix("#DW") else { continue };
        if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
            continue; // `#DWfoo` is a comment, not a directive.
        }
        let mut warnings = Vec::new();
        if let Err(message) = directive(rest, line, &mut request, &mut warnings) {
            errors.push(DirectiveError { line, message });
        }
        request.warnings.extend(warnings.into_iter().map(|message| DirectiveError { line, message }));
    }
    errors.extend(check_references(&request));
    if errors.is_empty() {
        Ok(request)
    } else {
        Err(errors)
    }
}

/// The `key=value` words of a directive, each key once and known; flags (words without `=`)
/// only where allowed.
fn words<'a>(rest: &'a str, keys: &[&str], flags: &[&str]) -> Result<BTreeMap<&'a str, &'a str>, String> {
    let mut map = BTreeMap::new();
    for word in rest.split_whitespace() {
        let (key, value) = word.split_once('=').unwrap_or((word, ""));
        let known = if word.contains('=') { keys.contains(&key) } else { flags.contains(&key) };
        if !known && CACHE_KEYS.contains(&key) {
            return Err(format!("'{key}=' goes with type=cache, which Surge does not offer: use type=scratch with stage_in/stage_out"));
        }
        if !known {
            let mut allowed: Vec<&str> = keys.iter().chain(flags).copied().filter(|k| !DATAWARP_TUNING.contains(k)).collect();
            allowed.sort_unstable();
            let tuning = if keys.iter().any(|k| DATAWARP_TUNING.contains(k)) { ", and DataWarp's tuning keys (ignored)" } else { "" };
            return Err(format!("unknown key '{key}' (this directive takes {}{tuning})", allowed.join(", ")));
        }
        if word.contains('=') && value.is_empty() {
            return Err(format!("'{key}=' has no value"));
        }
        if map.insert(key, value).is_some() {
            return Err(format!("'{key}' given twice"));
        }
    }
    Ok(map)
}

/// Keys of DataWarp's cache mode (a buffer in front of a PFS directory), which Surge lacks.
const CACHE_KEYS: [&str; 1] = ["pfs"];

/// `keys` and DataWarp's tuning keys: what `jobdw` and `create_persistent` take.
fn with_tuning(keys: &[&'static str]) -> Vec<&'static str> {
    keys.iter().chain(DATAWARP_TUNING.iter()).copied().collect()
}

/// A warning for each of DataWarp's tuning keys given: accepted, and without effect.
fn tuning_warnings(map: &BTreeMap<&str, &str>, warnings: &mut Vec<String>) {
    for (key, value) in map.iter().filter(|(key, _)| DATAWARP_TUNING.contains(key)) {
        warnings.push(format!("{key}={value} is DataWarp tuning Surge does not have: ignored"));
    }
}

fn required<'a>(map: &BTreeMap<&str, &'a str>, key: &str) -> Result<&'a str, String> {
    map.get(key).copied().ok_or_else(|| format!("missing '{key}='"))
}

fn directive(rest: &str, line: usize, request: &mut JobRequest, warnings: &mut Vec<String>) -> Result<(), String> {
    let rest = rest.trim();
    let (verb, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    match verb {
        "" => Err("'#DW' without a directive (jobdw, persistentdw, stage_in ...)".into()),
        "jobdw" => {
            let map = words(args, &with_tuning(&["capacity", "access_mode", "type", "pool"]), &[])?;
            tuning_warnings(&map, warnings);
            if request.jobdw.is_some() {
                return Err("a second 'jobdw': a job has one buffer of its own".into());
            }
            request.jobdw = Some(JobDw { capacity: capacity(&map)?, access: access(&map, "access_mode")?, pool: pool(&map)? });
            buffer_type(&map)
        }
        "persistentdw" => {
            let map = words(args, &["name"], &[])?;
            request.persistent.push(name(required(&map, "name")?)?);
            Ok(())
        }
        "create_persistent" => {
            // DataWarp's #BB form says `access=`; both are taken.
            let map = words(args, &with_tuning(&["name", "capacity", "access_mode", "access", "type", "pool"]), &[])?;
            tuning_warnings(&map, warnings);
            let key = if map.contains_key("access") { "access" } else { "access_mode" };
            let persistent = Persistent {
                name: name(required(&map, "name")?)?,
                capacity: capacity(&map)?,
                access: access(&map, key)?,
                pool: pool(&map)?,
            };
            request.create_persistent.push(persistent);
            buffer_type(&map)
        }
        "destroy_persistent" => {
            let map = words(args, &["name"], &["hurry"])?;
            request.destroy_persistent.push((name(required(&map, "name")?)?, map.contains_key("hurry")));
            Ok(())
        }
        "stage_in" | "stage_out" => {
            let map = words(args, &["type", "source", "destination"], &[])?;
            let kind = match required(&map, "type")? {
                "file" => StageKind::File,
                "directory" => StageKind::Directory,
                "list" => StageKind::List,
                other => return Err(format!("type={other}: a stage is type=file, directory or list")),
            };
            let incoming = verb == "stage_in";
            let source = required(&map, "source")?;
            let destination = if kind == StageKind::List {
                // The list file (on the parallel file system) names both sides of each pair.
                if map.contains_key("destination") {
                    return Err("type=list takes each file's destination from the list: no 'destination='".into());
                }
                pfs_path(source, "source")?;
                ""
            } else {
                let destination = required(&map, "destination")?;
                let (pfs, bb) = if incoming { (source, destination) } else { (destination, source) };
                pfs_path(pfs, if incoming { "source" } else { "destination" })?;
                bb_path(bb, if incoming { "destination" } else { "source" })?;
                destination
            };
            let stage = Stage { kind, source: source.into(), destination: destination.into(), line };
            if incoming {
                request.stage_in.push(stage);
            } else {
                request.stage_out.push(stage);
            }
            Ok(())
        }
        "swap" => Err(format!("'#DW {}' is not offered: {SWAP_REFUSED}", rest.split_whitespace().collect::<Vec<_>>().join(" "))),
        other => Err(format!(
            "unknown directive '{other}' (Surge takes jobdw, persistentdw, create_persistent, destroy_persistent, stage_in, stage_out)"
        )),
    }
}

fn capacity(map: &BTreeMap<&str, &str>) -> Result<u64, String> {
    let bytes = surge_units::parse_size(required(map, "capacity")?).map_err(|e| format!("capacity: {e}"))?;
    if bytes == 0 {
        return Err("capacity=0: ask for some room".into());
    }
    Ok(bytes)
}

fn access(map: &BTreeMap<&str, &str>, key: &str) -> Result<AccessMode, String> {
    match required(map, key)? {
        "striped" => Ok(AccessMode::Striped),
        "private" => Ok(AccessMode::Private),
        "striped,private" | "private,striped" => Ok(AccessMode::StripedAndPrivate),
        "ldbalance" => Err(format!("{key}=ldbalance (read-only load-balanced copies) is not offered by Surge")),
        other => Err(format!("{key}={other}: expected striped, private or striped,private")),
    }
}

fn buffer_type(map: &BTreeMap<&str, &str>) -> Result<(), String> {
    match required(map, "type")? {
        "scratch" => Ok(()),
        "cache" => Err("type=cache (a cache of a PFS directory) is not offered by Surge: use type=scratch with stage_in/stage_out".into()),
        other => Err(format!("type={other}: expected type=scratch")),
    }
}

fn pool(map: &BTreeMap<&str, &str>) -> Result<Option<String>, String> {
    map.get("pool").map(|p| name(p).map_err(|e| format!("pool: {e}"))).transpose()
}

/// Names of reservations and pools: a letter first (DataWarp's rule), then letters, digits,
/// `-` and `_`, so that `DW_PERSISTENT_STRIPED_<name>` is a valid variable name.
fn name(text: &str) -> Result<String, String> {
    let first_ok = text.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok {
        return Err(format!("name '{text}' must start with a letter"));
    }
    if let Some(bad) = text.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("name '{text}' has '{bad}': letters, digits, '-' and '_' only"));
    }
    if text.len() > MAX_NAME_LEN {
        return Err(format!("name '{}...' is longer than {MAX_NAME_LEN} characters", &text[..16]));
    }
    Ok(text.to_string())
}

/// A path on the parallel file system: absolute, without `..`.
fn pfs_path(path: &str, role: &str) -> Result<(), String> {
    if path.starts_with('$') {
        return Err(format!("{role}={path}: this side of the stage is the parallel file system, not the burst buffer"));
    }
    if !path.starts_with('/') {
        return Err(format!("{role}={path}: a parallel-file-system path must be absolute"));
    }
    no_dot_dot(path, role)
}

/// A burst-buffer path: `$DW_JOB_STRIPED`, `$DW_JOB_PRIVATE` or `$DW_PERSISTENT_STRIPED_<name>`
/// (also as `${...}`), then a path inside it, without `..`.
fn bb_path(path: &str, role: &str) -> Result<(), String> {
    let Some((variable, _)) = bb_variable(path) else {
        return Err(format!(
            "{role}={path}: a burst-buffer path starts with $DW_JOB_STRIPED, $DW_JOB_PRIVATE or $DW_PERSISTENT_STRIPED_<name>"
        ));
    };
    if let Some(name_part) = variable.strip_prefix(PERSISTENT_PREFIX) {
        name(name_part).map_err(|e| format!("{role}={path}: {e}"))?;
    }
    no_dot_dot(path, role)
}

/// Which buffer a burst-buffer path of a stage directive names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Buffer {
    /// `$DW_JOB_STRIPED`: the job's namespace shared by all its nodes.
    JobStriped,
    /// `$DW_JOB_PRIVATE`: each compute node's own namespace.
    JobPrivate,
    /// `$DW_PERSISTENT_STRIPED_<name>`.
    Persistent(String),
}

/// Splits a checked burst-buffer path (`$DW_JOB_STRIPED/in/a.h5`, `${DW_JOB_STRIPED}/x`) into
/// the buffer it names and the absolute path inside it (`/in/a.h5`; `/` for the buffer's root).
pub fn resolve_bb_path(path: &str) -> Option<(Buffer, String)> {
    let (variable, rest) = bb_variable(path)?;
    let buffer = match variable {
        "DW_JOB_STRIPED" => Buffer::JobStriped,
        "DW_JOB_PRIVATE" => Buffer::JobPrivate,
        other => Buffer::Persistent(other.strip_prefix(PERSISTENT_PREFIX)?.to_string()),
    };
    let inner = if rest.is_empty() { "/".to_string() } else { rest.to_string() };
    Some((buffer, inner))
}

/// The variable a burst-buffer path starts with, and the rest.
fn bb_variable(path: &str) -> Option<(&str, &str)> {
    let body = path.strip_prefix('$')?;
    let (variable, rest) = match body.strip_prefix('{') {
        Some(braced) => braced.split_once('}')?,
        None => body.split_at(body.find('/').unwrap_or(body.len())),
    };
    let known = JOB_VARIABLES.contains(&variable) || variable.starts_with(PERSISTENT_PREFIX);
    (known && (rest.is_empty() || rest.starts_with('/'))).then_some((variable, rest))
}

fn no_dot_dot(path: &str, role: &str) -> Result<(), String> {
    if path.split('/').any(|c| c == "..") {
        return Err(format!("{role}={path}: '..' is not allowed in stage paths"));
    }
    Ok(())
}

/// Stage paths must name buffers the job has.
fn check_references(request: &JobRequest) -> Vec<DirectiveError> {
    let mut errors = Vec::new();
    let stages = request.stage_in.iter().map(|s| (s, &s.destination)).chain(request.stage_out.iter().map(|s| (s, &s.source)));
    for (stage, bb) in stages {
        let Some((variable, _)) = bb_variable(bb) else { continue };
        let problem = if JOB_VARIABLES.contains(&variable) {
            if request.jobdw.is_none() {
                Some(format!("{bb}: ${variable} needs a '#DW jobdw' line"))
            } else {
                None
            }
        } else {
            let name = &variable[PERSISTENT_PREFIX.len()..];
            let known = request.persistent.iter().any(|p| p == name) || request.create_persistent.iter().any(|p| p.name == name);
            (!known).then(|| format!("{bb}: ${variable} needs a '#DW persistentdw name={name}' line"))
        };
        if let Some(message) = problem {
            errors.push(DirectiveError { line: stage.line, message });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_paths_resolve_to_a_buffer_and_an_inner_path() {
        assert_eq!(resolve_bb_path("$DW_JOB_STRIPED/in/a.h5"), Some((Buffer::JobStriped, "/in/a.h5".into())));
        assert_eq!(resolve_bb_path("${DW_JOB_PRIVATE}"), Some((Buffer::JobPrivate, "/".into())));
        assert_eq!(resolve_bb_path("$DW_PERSISTENT_STRIPED_ckpt/x"), Some((Buffer::Persistent("ckpt".into()), "/x".into())));
        assert_eq!(resolve_bb_path("$DW_JOB_STRIPEDX/x"), None);
        assert_eq!(resolve_bb_path("/pfs/x"), None);
    }

    /// Seed 000's batch script, in shape: a buffer, a restart file in, commands, the movie out.
    const SEED_SCRIPT: &str = "#!/bin/bash\n#SBATCH -N 4\n\
        #DW jobdw capacity=200GiB access_mode=striped type=scratch\n\
        #DW stage_in type=file source=/pfs/run/restart.h5 destination=$DW_JOB_STRIPED/restart.h5\n\
        srun ./sim --out $DW_JOB_STRIPED &\nsrun ./vis &\nwait\n\
        #DW stage_out type=file source=${DW_JOB_STRIPED}/movie.mp4 destination=/pfs/run/movie.mp4\n\0";

    #[test]
    fn the_seed_script_parses_with_its_stage_out_after_the_commands() {
        let request = parse_script(SEED_SCRIPT).unwrap();
        let jobdw = request.jobdw.unwrap();
        assert_eq!((jobdw.capacity, jobdw.access, jobdw.pool), (200 << 30, AccessMode::Striped, None));
        assert_eq!(request.stage_in.len(), 1);
        assert_eq!(request.stage_out[0].destination, "/pfs/run/movie.mp4");
        assert_eq!(request.stage_out[0].line, 8);
    }

    #[test]
    fn persistent_reservations() {
        let script = "#DW create_persistent name=climate capacity=1TiB access=striped type=scratch pool=ssd\n\
            #DW persistentdw name=shared\n\
            #DW stage_in type=directory source=/pfs/in destination=$DW_PERSISTENT_STRIPED_shared/in\n\
            #DW destroy_persistent name=old hurry\n";
        let request = parse_script(script).unwrap();
        assert_eq!(request.create_persistent[0].capacity, 1 << 40);
        assert_eq!(request.create_persistent[0].pool.as_deref(), Some("ssd"));
        assert_eq!(request.persistent, ["shared"]);
        assert_eq!(request.destroy_persistent, [("old".to_string(), true)]);
    }

    fn errors(script: &str) -> Vec<String> {
        parse_script(script).unwrap_err().into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let found = errors(
            "#DW jobdw capacity=10Gb access_mode=striped type=scratch\n\
             #DW jobdw capacity=1G access_mode=stripy type=scratch\n\
             #DW stage_in type=file source=in.dat destination=$DW_JOB_STRIPED/in\n\
             #DW stage_out type=file source=$DW_JOB_STRIPED/../../etc destination=/pfs/x\n\
             #DW persistentdw name=9lives\n\
             #DW stage_in type=file source=/pfs/a destination=$DW_PERSISTENT_STRIPED_other/a\n\
             #DW swap 10G\n\
             #DW jobdw capacity=1G access_mode=striped type=scratch colour=blue\n",
        );
        let expect = [
            "line 1: capacity: '10Gb' is in bits",
            "line 2: access_mode=stripy",
            "line 3: source=in.dat: a parallel-file-system path must be absolute",
            "line 4: source=$DW_JOB_STRIPED/../../etc: '..' is not allowed",
            "line 5: name '9lives' must start with a letter",
            "line 7: '#DW swap 10G' is not offered: Surge gives a job no swap space",
            "line 8: unknown key 'colour'",
            "line 6: $DW_PERSISTENT_STRIPED_other/a: $DW_PERSISTENT_STRIPED_other needs a '#DW persistentdw name=other' line",
        ];
        assert_eq!(found.len(), expect.len(), "{found:#?}");
        for (found, expected) in found.iter().zip(expect) {
            assert!(found.starts_with(expected), "{found:?} does not start with {expected:?}");
        }
    }

    #[test]
    fn sides_of_a_stage_and_missing_buffers() {
        assert!(errors("#DW stage_in type=file source=$DW_JOB_STRIPED/a destination=/pfs/b\n")[0]
            .contains("this side of the stage is the parallel file system"));
        assert!(errors("#DW stage_out type=file source=/tmp/a destination=/pfs/b\n")[0].contains("a burst-buffer path starts with"));
        assert!(errors("#DW stage_in type=file source=/pfs/a destination=$DW_JOB_STRIPED/a\n")[0].contains("needs a '#DW jobdw' line"));
        assert!(errors("#DW jobdw capacity=1G access_mode=striped\n")[0].contains("missing 'type='"));
        assert!(errors("#DW jobdw capacity=1G capacity=2G access_mode=striped type=scratch\n")[0].contains("given twice"));
        assert!(errors("#DW jobdw capacity=0 access_mode=striped type=scratch\n")[0].contains("capacity=0"));
        assert!(errors("#DW jobdw capacity=1G access_mode=striped type=cache\n")[0].contains("not offered"));
        assert!(errors("#DW\n")[0].contains("without a directive"));
        // `${DW_JOB_STRIPED}x` is not the variable followed by a path.
        assert!(errors(
            "#DW jobdw capacity=1G access_mode=striped type=scratch\n#DW stage_in type=file source=/p destination=${DW_JOB_STRIPED}x\n"
        )[0]
        .contains("starts with $DW_JOB_STRIPED"));
    }

    /// Found by fuzzing: a list stage skipped the path checks of its destination.
    #[test]
    fn a_list_stage_names_only_its_list_file() {
        let request = parse_script("#DW stage_in type=list source=/pfs/run/files.list\n").unwrap();
        assert_eq!((request.stage_in[0].kind, request.stage_in[0].destination.as_str()), (StageKind::List, ""));
        assert!(errors("#DW stage_in type=list source=/pfs/l destination=$s/pfs/..//x\n")[0].contains("no 'destination='"));
        assert!(errors("#DW stage_out type=list source=list.txt\n")[0].contains("must be absolute"));
        assert!(errors("#DW stage_in type=list source=/pfs/../etc/l\n")[0].contains("'..'"));
    }

    /// DataWarp's `#DW swap` is refused saying why; its tuning keys pass with a warning each,
    /// on their line, and change nothing; a key of its cache mode, or of nobody's, is refused.
    #[test]
    fn what_datawarp_offers_and_surge_does_not_is_said() {
        let swap = errors("#DW jobdw capacity=1G access_mode=striped type=scratch\n#DW  swap   10GiB\n");
        assert_eq!(swap.len(), 1, "{swap:?}");
        assert!(swap[0].starts_with("line 2: '#DW swap 10GiB' is not offered") && swap[0].contains("remove the line"), "{swap:?}");

        let request = parse_script(
            "#DW jobdw capacity=1G access_mode=striped type=scratch optimization_strategy=bandwidth max_mds=yes\n\
             #DW create_persistent name=p capacity=1G access=striped type=scratch sync_on_close=yes\n",
        )
        .unwrap();
        assert_eq!(request.jobdw.as_ref().unwrap().capacity, 1 << 30);
        let warnings: Vec<String> = request.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            warnings,
            [
                "line 1: max_mds=yes is DataWarp tuning Surge does not have: ignored",
                "line 1: optimization_strategy=bandwidth is DataWarp tuning Surge does not have: ignored",
                "line 2: sync_on_close=yes is DataWarp tuning Surge does not have: ignored",
            ]
        );
        // Without tuning, a request has no warnings (and its JSON no such field).
        let plain = parse_script("#DW jobdw capacity=1G access_mode=striped type=scratch\n").unwrap();
        assert!(plain.warnings.is_empty());
        assert!(serde_json::to_value(&plain).unwrap().get("warnings").is_none());

        let cache = errors("#DW jobdw capacity=1G access_mode=striped type=cache pfs=/lus/scratch/me\n");
        assert!(cache[0].contains("'pfs=' goes with type=cache, which Surge does not offer"), "{cache:?}");
        let typo = errors("#DW jobdw capacty=1G access_mode=striped type=scratch\n");
        assert!(typo[0].contains("unknown key 'capacty'") && typo[0].contains("and DataWarp's tuning keys (ignored)"), "{typo:?}");
        assert!(!typo[0].contains("max_mds"), "the tuning keys are not listed one by one: {typo:?}");
        // Tuning on a directive that has none is no tuning.
        assert!(errors("#DW persistentdw name=p max_mds=yes\n")[0].contains("unknown key 'max_mds' (this directive takes name)"));
    }

    #[test]
    fn comments_that_look_alike_are_not_directives() {
        let request = parse_script("#DWX not one\n# DW neither\n#SBATCH -N 1\n").unwrap();
        assert_eq!(request, JobRequest::default());
    }
}
