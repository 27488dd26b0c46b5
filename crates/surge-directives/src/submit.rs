//! What a job's burst-buffer text becomes at submission, before Slurm's burst_buffer/lua
//! plugin reads it (Surge's job_submit.lua has `surge bb job-submit` do this): the plugin
//! reads only `#DW` lines (`Directive=DW`) and charges `capacity=` only against a named pool,
//! and Slurm 22.05 hands its `#BB` lines to nobody. So, line for line (line numbers stay):
//!
//! * Slurm's own persistent-buffer lines, `#BB create_persistent name=N capacity=C
//!   [access=A] [type=T] [pool=P]` and `#BB destroy_persistent name=N [hurry]`, become the
//!   `#DW` lines Surge takes ([`crate::parse_script`]), with Slurm's defaults (striped,
//!   scratch) written out;
//! * a `--bb` option in DataWarp's short form (`capacity=C [access=A] [type=T] [pool=P]`, as
//!   Slurm's datawarp plugin takes it for salloc and srun) becomes a `#DW jobdw` line;
//!   `swap=` is refused as `#DW swap` is;
//! * a `jobdw` or `create_persistent` line without `pool=` gets the default pool.
//!
//! Under Slurm's burst_buffer/datawarp plugin nothing here applies: that plugin makes and
//! destroys persistent buffers from `#BB` lines itself (through `dw_wlm_cli`), and the
//! `#DW` parser leaves `#BB` lines alone. A `#BB` line that reaches Surge's job_process hook
//! under the lua plugin was not rewritten (job_submit.lua missing): [`untranslated_bb_lines`]
//! finds it, so that it is refused rather than ignored.

use crate::script::{DirectiveError, SWAP_REFUSED};

/// Which text of a job is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// Its batch script.
    Script,
    /// Its `--bb` option (sbatch, salloc, srun): `#DW` lines, or DataWarp's short form.
    BbOption,
}

/// The `#BB` verbs Slurm reads itself (persistent burst buffers).
const BB_VERBS: [&str; 2] = ["create_persistent", "destroy_persistent"];

/// What a job without nodes (`sbatch -N0`) that asks for a burst buffer is told: the
/// burst_buffer/lua plugin refuses every zero-node job with burst-buffer directives (it has no
/// persistent buffers of its own), before Surge is asked.
pub const ZERO_NODES_REFUSED: &str = "a job without nodes (-N0) cannot make or destroy a persistent reservation under Slurm's \
burst_buffer/lua plugin, which refuses zero-node jobs that ask for a burst buffer. An administrator makes one without a job: \
`surge reservation create NAME --capacity SIZE --owner USER` (and `surge reservation destroy NAME`); or submit a job with \
nodes (-N1) holding `#DW create_persistent name=NAME capacity=SIZE access_mode=striped type=scratch` \
(or `#DW destroy_persistent name=NAME`)";

/// A line's directive prefix (`#DW`, `#BB`) and the rest, if it is a directive line.
fn directive<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = line.trim_end_matches('\0').trim().strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then_some(rest.trim())
}

/// The verb of a `#BB` line Slurm reads itself, and its arguments.
fn bb_line(line: &str) -> Option<(&str, &str)> {
    let rest = directive(line, "#BB")?;
    let (verb, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    BB_VERBS.contains(&verb).then_some((verb, args.trim()))
}

fn has_key(args: &str, key: &str) -> bool {
    args.split_whitespace().any(|word| word.split_once('=').is_some_and(|(k, _)| k == key))
}

/// A line of DataWarp's `--bb` short form: `key=value` words, no `#`.
fn is_short_form(line: &str) -> bool {
    let text = line.trim_end_matches('\0').trim();
    !text.is_empty() && !text.starts_with('#') && text.split_whitespace().all(|word| word.contains('='))
}

/// Whether a job's text asks anything of the burst buffer: a `#DW` line, a `#BB` line Slurm
/// reads itself, or (in a `--bb` option) DataWarp's short form.
pub fn has_directives(text: &str, form: Text) -> bool {
    text.lines().any(|line| directive(line, "#DW").is_some() || bb_line(line).is_some() || (form == Text::BbOption && is_short_form(line)))
}

/// The `#BB create_persistent` and `#BB destroy_persistent` lines of a script, each as a
/// problem saying what to write instead: what Surge's job_process hook refuses under the lua
/// plugin (there, such a line reaching it means job_submit.lua did not rewrite it).
pub fn untranslated_bb_lines(script: &str) -> Vec<DirectiveError> {
    script
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let (verb, _) = bb_line(line)?;
            Some(DirectiveError {
                line: index + 1,
                message: format!(
                    "'#BB {verb}' is read by Slurm's burst_buffer/datawarp plugin, not by burst_buffer/lua: write '#DW {verb} ...' \
                     (same words), or install Surge's job_submit.lua (JobSubmitPlugins=lua), which does"
                ),
            })
        })
        .collect()
}

/// Whether the rewritten text would need the default pool: a `jobdw` or `create_persistent`
/// line (or what becomes one) without `pool=`.
pub fn needs_pool(text: &str, form: Text) -> bool {
    rewrite(text, form, None).is_ok_and(|(rewritten, _)| rewritten.lines().any(lacks_pool))
}

/// A `#DW jobdw` or `#DW create_persistent` line without `pool=`.
fn lacks_pool(line: &str) -> bool {
    let Some(rest) = directive(line, "#DW") else { return false };
    let (verb, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    matches!(verb, "jobdw" | "create_persistent") && !has_key(args, "pool")
}

/// `text` rewritten for the lua plugin (see the module notes), with `default_pool` given to
/// the lines that name none (none given: left without), and whether anything changed. Lines
/// keep their numbers; a line that cannot be rewritten is a problem with its line.
pub fn rewrite(text: &str, form: Text, default_pool: Option<&str>) -> Result<(String, bool), Vec<DirectiveError>> {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    let mut changed = false;
    for (index, raw) in text.split('\n').enumerate() {
        let mut line = if let Some((verb, args)) = bb_line(raw) {
            let mut words = vec![format!("#DW {verb}"), args.to_string()];
            if verb == "create_persistent" {
                // Slurm's defaults, which Surge's own line asks to be written.
                if !has_key(args, "access") && !has_key(args, "access_mode") {
                    words.push("access=striped".into());
                }
                if !has_key(args, "type") {
                    words.push("type=scratch".into());
                }
            }
            words.retain(|w| !w.is_empty());
            words.join(" ")
        } else if form == Text::BbOption && is_short_form(raw) {
            match short_form(raw) {
                Ok(line) => line,
                Err(message) => {
                    problems.push(DirectiveError { line: index + 1, message });
                    raw.to_string()
                }
            }
        } else {
            raw.to_string()
        };
        if let Some(pool) = default_pool.filter(|_| lacks_pool(&line)) {
            line = format!("{} pool={pool}", line.trim_end_matches('\0').trim_end());
        }
        changed |= line != raw;
        lines.push(line);
    }
    if problems.is_empty() {
        Ok((lines.join("\n"), changed))
    } else {
        Err(problems)
    }
}

/// DataWarp's `--bb` short form as a `#DW jobdw` line: `capacity=` needed, `access=` and
/// `type=` (striped, scratch by default), `pool=`; `swap=` refused as `#DW swap` is.
fn short_form(line: &str) -> Result<String, String> {
    let mut capacity = None;
    let (mut access, mut kind, mut pool) = ("striped", "scratch", None);
    for word in line.trim_end_matches('\0').split_whitespace() {
        let (key, value) = word.split_once('=').unwrap_or((word, ""));
        match key {
            "capacity" => capacity = Some(value),
            "access" | "access_mode" => access = value,
            "type" => kind = value,
            "pool" => pool = Some(value),
            "swap" => return Err(format!("--bb swap={value} is not offered: {SWAP_REFUSED}")),
            other => {
                return Err(format!(
                    "--bb {other}=: DataWarp's short form takes capacity=, access=, type= and pool= (or write '#DW' lines)"
                ))
            }
        }
    }
    let capacity = capacity.ok_or("--bb without capacity=: say how much (capacity=SIZE), or write '#DW' lines")?;
    let pool = pool.map(|p| format!(" pool={p}")).unwrap_or_default();
    Ok(format!("#DW jobdw capacity={capacity} access_mode={access} type={kind}{pool}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(text: &str, form: Text) -> String {
        rewrite(text, form, Some("bb")).unwrap().0
    }

    #[test]
    fn slurms_bb_lines_become_surges_dw_lines_in_place() {
        let script = "#!/bin/bash\n#SBATCH -N 1\n#BB create_persistent name=ckpt capacity=1TiB access=striped type=scratch\n\
            #BB  destroy_persistent name=old hurry\n#BB create_persistent name=short capacity=10GB\n#BBX keep\nhostname\n";
        let out = rewritten(script, Text::Script);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "#!/bin/bash",
                "#SBATCH -N 1",
                "#DW create_persistent name=ckpt capacity=1TiB access=striped type=scratch pool=bb",
                "#DW destroy_persistent name=old hurry",
                "#DW create_persistent name=short capacity=10GB access=striped type=scratch pool=bb",
                "#BBX keep",
                "hostname"
            ]
        );
        // What they became is what Surge's parser takes, on the same lines.
        let request = crate::parse_script(&out).unwrap();
        assert_eq!(request.create_persistent.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["ckpt", "short"]);
        assert_eq!(request.create_persistent[1].capacity, 10_000_000_000);
        assert_eq!(request.destroy_persistent, [("old".to_string(), true)]);
        assert!(out.ends_with('\n'), "the script's last newline is kept");
        // Untouched, the parser alone leaves them to Slurm (the datawarp plugin's lines).
        assert_eq!(crate::parse_script(script).unwrap(), crate::JobRequest::default());
    }

    #[test]
    fn the_default_pool_goes_where_none_is_named() {
        let script = "#DW jobdw capacity=1GiB access_mode=striped type=scratch\n\
            #DW jobdw capacity=1GiB access_mode=striped type=scratch pool=ssd\n#DW persistentdw name=p\n\
            #DW create_persistent name=q capacity=1G access=striped type=scratch\0";
        assert!(needs_pool(script, Text::Script));
        let (out, changed) = rewrite(script, Text::Script, Some("bb")).unwrap();
        assert!(changed);
        assert_eq!(
            out,
            "#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=bb\n\
             #DW jobdw capacity=1GiB access_mode=striped type=scratch pool=ssd\n#DW persistentdw name=p\n\
             #DW create_persistent name=q capacity=1G access=striped type=scratch pool=bb"
        );
        let named = "#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=ssd\n";
        assert!(!needs_pool(named, Text::Script));
        assert_eq!(rewrite(named, Text::Script, Some("bb")).unwrap(), (named.to_string(), false));
        // `pool=` as a key, not anywhere in the line.
        assert!(needs_pool("#DW jobdw capacity=1G access_mode=striped type=scratch spool=x\n", Text::Script));
    }

    #[test]
    fn a_bb_option_takes_dw_lines_or_datawarps_short_form() {
        assert_eq!(
            rewritten("#DW jobdw capacity=64MiB access_mode=striped type=scratch", Text::BbOption),
            "#DW jobdw capacity=64MiB access_mode=striped type=scratch pool=bb"
        );
        assert_eq!(
            rewritten("capacity=1GiB access=private", Text::BbOption),
            "#DW jobdw capacity=1GiB access_mode=private type=scratch pool=bb"
        );
        assert_eq!(
            rewritten("capacity=1GiB pool=ssd", Text::BbOption),
            "#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=ssd"
        );
        assert!(has_directives("capacity=1G", Text::BbOption) && !has_directives("capacity=1G", Text::Script));
        let swap = rewrite("capacity=1GiB swap=2GiB", Text::BbOption, None).unwrap_err();
        assert_eq!(swap[0].line, 1);
        assert!(swap[0].message.starts_with("--bb swap=2GiB is not offered: Surge gives a job no swap"), "{swap:?}");
        assert!(rewrite("access=striped", Text::BbOption, None).unwrap_err()[0].message.contains("without capacity="));
        assert!(rewrite("capacity=1G colour=blue", Text::BbOption, None).unwrap_err()[0].message.contains("--bb colour="));
        // In a script a line of words is a command, not a directive.
        assert_eq!(rewritten("X=1 ./run", Text::Script), "X=1 ./run");
    }

    #[test]
    fn what_asks_for_a_burst_buffer() {
        assert!(has_directives("#!/bin/sh\n#BB create_persistent name=a capacity=1G\n", Text::Script));
        assert!(has_directives("#!/bin/sh\n#DW persistentdw name=a\n", Text::Script));
        assert!(!has_directives("#!/bin/sh\n#BB_LUA x\n# DW no\necho #DW\n", Text::Script));
    }

    #[test]
    fn bb_lines_left_for_job_process_are_named_with_what_to_write() {
        let found =
            untranslated_bb_lines("#!/bin/sh\n#DW jobdw capacity=1G access_mode=striped type=scratch\n#BB destroy_persistent name=a\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 3);
        assert!(
            found[0].message.contains("write '#DW destroy_persistent ...'") && found[0].message.contains("job_submit.lua"),
            "{found:?}"
        );
        assert!(ZERO_NODES_REFUSED.contains("surge reservation create NAME --capacity SIZE"));
    }
}
