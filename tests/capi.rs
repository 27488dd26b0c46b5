//! The C API from C: `crates/surge-capi/tests/stage_test.c` is compiled against `surge.h` and
//! `libsurge.so` and run against a live instance and its FUSE mount.

use std::process::Command;

use surge_tests::{binary, scratch, text, Instance};

#[test]
fn c_program_stages_through_libsurge() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let lib_dir = binary("libsurge.so").parent().unwrap().to_path_buf();
    let dir = scratch("capi");
    std::fs::create_dir_all(dir.join("pfs")).unwrap();
    let program = dir.join("stage_test");
    let compiled = Command::new("cc")
        .arg(repo.join("crates/surge-capi/tests/stage_test.c"))
        .arg("-I")
        .arg(repo.join("crates/surge-capi/include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lsurge", "-Wall", "-Werror", "-o"])
        .arg(&program)
        .output()
        .expect("run cc");
    assert!(compiled.status.success(), "compiling the C test failed: {}", text(&compiled));

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
