//! Target `directives`: any text as a batch script through the `#DW` parser. Whatever the
//! text, the parser answers a request or problems and never panics; the same text always gets
//! the same answer; every problem and warning names a line of the script; an accepted request
//! holds only what the rules allow (capacities above zero, names starting with a letter, stage
//! paths without `..`, absolute on the parallel-file-system side).

use surge_directives::{parse_script, JobRequest, StageKind};

pub fn run(data: &[u8]) {
    let script = String::from_utf8_lossy(data);
    let outcome = parse_script(&script);
    assert_eq!(outcome, parse_script(&script), "the same script, another answer");
    let lines = script.lines().count().max(1);
    match outcome {
        Err(problems) => {
            assert!(!problems.is_empty());
            for p in problems {
                assert!((1..=lines).contains(&p.line), "problem on line {} of {lines}", p.line);
                assert!(!p.message.is_empty());
            }
        }
        Ok(request) => {
            for w in &request.warnings {
                assert!((1..=lines).contains(&w.line), "warning on line {} of {lines}", w.line);
            }
            check(&request)
        }
    }
}

fn check(request: &JobRequest) {
    let names = request
        .persistent
        .iter()
        .chain(request.create_persistent.iter().map(|p| &p.name))
        .chain(request.destroy_persistent.iter().map(|(n, _)| n));
    for name in names {
        assert!(name.starts_with(|c: char| c.is_ascii_alphabetic()), "name {name:?}");
    }
    assert!(request.jobdw.iter().all(|j| j.capacity > 0));
    assert!(request.create_persistent.iter().all(|p| p.capacity > 0));
    for stage in request.stage_in.iter().chain(&request.stage_out) {
        for path in [&stage.source, &stage.destination] {
            assert!(!path.split('/').any(|c| c == ".."), "'..' in {path:?}");
        }
    }
    for stage in request.stage_in.iter().chain(&request.stage_out) {
        if stage.kind == StageKind::List {
            assert!(stage.source.starts_with('/') && stage.destination.is_empty(), "list stage {stage:?}");
        }
    }
    for stage in &request.stage_in {
        assert!(stage.source.starts_with('/'), "stage-in source {:?}", stage.source);
    }
    for stage in request.stage_out.iter().filter(|s| s.kind != StageKind::List) {
        assert!(stage.destination.starts_with('/'), "stage-out destination {:?}", stage.destination);
    }
}
