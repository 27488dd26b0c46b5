//! The C API from C: `crates/surge-capi/tests/stage_test.c` is compiled against `surge.h` and
//! `libsurge.so` and run against a live instance and its FUSE mount.

use std::process::Command;

use surge_tests::{binary, scratch, text, Instance};

/// `crates/surge-capi/tests/NAME.c` compiled against `surge.h` and `libsurge.so` into `dir`.
fn compile(name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let lib_dir = binary("libsurge.so").parent().unwrap().to_path_buf();
    let program = dir.join(name);
    let compiled = Command::new("cc")
        .arg(repo.join(format!("crates/surge-capi/tests/{name}.c")))
        .arg("-I")
        .arg(repo.join("crates/surge-capi/include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lsurge", "-Wall", "-Werror", "-o"])
        .arg(&program)
        .output()
        .expect("run cc");
    assert!(compiled.status.success(), "compiling {name}.c failed: {}", text(&compiled));
    program
}

#[test]
fn c_program_stages_through_libsurge() {
    let dir = scratch("capi");
    std::fs::create_dir_all(dir.join("pfs")).unwrap();
    let program = compile("stage_test", &dir);

    let inst = Instance::up_on("capi", "127.0.2", 101, 4, &["--capacity", "1G"]);
    let mount = inst.mount("capi", "127.0.2.109");
    let out = Command::new(&program)
        .arg(&mount.dir)
        .arg(dir.join("pfs"))
        .env("SURGE_HOME", &inst.home)
        .env_remove("SURGE_INSTANCE")
        .output()
        .unwrap();
    drop(mount);
    drop(inst);
    assert!(out.status.success(), "C test failed: {}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("all libsurge checks passed"), "{}", text(&out));
}

#[test]
fn c_program_watches_and_consumes_through_libsurge() {
    let dir = scratch("capi-workflow");
    std::fs::create_dir_all(&dir).unwrap();
    let program = compile("workflow_test", &dir);
    let inst = Instance::up_on("capiflow", "127.0.2", 121, 4, &["--capacity", "1G"]);
    let mount = inst.mount("flow", "127.0.2.129");
    let out = Command::new(&program).arg(&mount.dir).env("SURGE_HOME", &inst.home).env_remove("SURGE_INSTANCE").output().unwrap();
    drop(mount);
    drop(inst);
    assert!(out.status.success(), "C test failed: {}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("all workflow checks passed"), "{}", text(&out));
}
