//! DataWarp's own C API (`datawarp.h`, `libdatawarp.so`, crates/surge-datawarp) from C and
//! C++, against a live instance and its FUSE mount: the DataWarp code of a real application
//! (Chombo-Crunch's plot-file stage-out, as seed 001 shows it) compiled unmodified, and a C
//! program going through every call (`crates/surge-datawarp/tests/dw_test.c`).

use std::path::{Path, PathBuf};
use std::process::Command;

use surge_tests::{binary, scratch, text, Instance};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `source` compiled with `compiler` against `datawarp.h` and `libdatawarp.so` into `program`.
fn compile(compiler: &str, source: &Path, program: &Path, extra: &[&str]) {
    let lib_dir = binary("libdatawarp.so").parent().unwrap().to_path_buf();
    let compiled = Command::new(compiler)
        .arg(source)
        .arg("-I")
        .arg(repo().join("crates/surge-datawarp/include"))
        .args(extra)
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-ldatawarp", "-Wall", "-o"])
        .arg(program)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(compiled.status.success(), "compiling {} failed: {}", source.display(), text(&compiled));
}

/// Seed 001 of the project's papers: `001_*.txt` in the folder `SURGE_SHARED_SEEDS` names, by
/// default `../shared/seeds` beside the repository (as the shared data, `../shared/data`).
fn seed_001() -> (PathBuf, String) {
    let seeds = std::env::var_os("SURGE_SHARED_SEEDS").map_or_else(|| repo().parent().unwrap().join("shared").join("seeds"), PathBuf::from);
    let found: Vec<PathBuf> = std::fs::read_dir(&seeds)
        .unwrap_or_else(|e| {
            panic!(
                "seed 001 is needed for this test, and {} cannot be read: {e} (SURGE_SHARED_SEEDS names the seeds' folder)",
                seeds.display()
            )
        })
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("001_"))
        .collect();
    let [path] = &found[..] else { panic!("seed 001 is needed for this test: {} has {} files named 001_*", seeds.display(), found.len()) };
    let seed = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("seed 001 ({}) cannot be read: {e}", path.display()));
    (path.clone(), seed)
}

/// The seed's `#ifdef CH_DATAWARP` block, from that line to its `#endif`, as printed.
fn datawarp_block(seed: &str) -> &str {
    let start = seed.find("#ifdef CH_DATAWARP").expect("seed 001 has no `#ifdef CH_DATAWARP` block");
    let end = start + seed[start..].find("#endif").expect("seed 001's `#ifdef CH_DATAWARP` block has no `#endif`") + "#endif".len();
    &seed[start..end]
}

#[test]
fn chombo_crunch_stages_its_plot_file_out_unmodified() {
    let (seed_path, seed) = seed_001();
    let block = datawarp_block(&seed);
    assert!(
        block.contains("dw_stage_file_out(bb_file_path, lustre_file_path, DW_STAGE_IMMEDIATE);"),
        "not the expected block of {}: {block}",
        seed_path.display()
    );

    let dir = scratch("datawarp-chombo");
    std::fs::create_dir_all(dir.join("lustre")).unwrap();
    std::fs::write(dir.join("chombo_datawarp_block.inc"), block).unwrap();
    let program = dir.join("chombo_stage_out");
    let include = format!("-I{}", dir.display());
    compile("c++", &repo().join("crates/surge-datawarp/tests/chombo_stage_out.cpp"), &program, &[&include, "-DCH_DATAWARP"]);

    let inst = Instance::up_on("dwchombo", "127.0.6", 11, 4, &["--capacity", "256M"]);
    let mount = inst.mount("bb", "127.0.6.19");
    // A plot file as Chombo-Crunch names them: PREFIX.nx<ncells>.step<step>.<dim>d.hdf5.
    let (step, interval, ncells) = (10, 5, 64);
    let name = format!("plt.nx{ncells}.step{step:07}.3d.hdf5");
    let plot = surge_tests::pattern(1, (2 << 20) + 12345);
    // The block prints its paths into char[200] buffers.
    for path in [mount.path(&name), dir.join("lustre").join(&name)] {
        assert!(path.as_os_str().len() < 200, "{} does not fit the block's buffers", path.display());
    }
    std::fs::write(mount.path(&name), &plot).unwrap();
    let out = Command::new(&program)
        .arg(mount.path("plt"))
        .arg(dir.join("lustre/plt"))
        .args([step, interval, ncells].map(|n| n.to_string()))
        .env("SURGE_HOME", &inst.home)
        .env_remove("SURGE_INSTANCE")
        .output()
        .unwrap();
    drop(mount);
    drop(inst);
    assert!(out.status.success(), "the Chombo-Crunch block failed: {}", text(&out));
    let staged = std::fs::read(dir.join("lustre").join(&name)).unwrap_or_else(|e| panic!("{name} is not on the PFS: {e}; {}", text(&out)));
    assert!(staged == plot, "the plot file on the PFS differs from the one written ({} bytes, {} staged)", plot.len(), staged.len());
}

#[test]
fn c_program_goes_through_every_datawarp_call() {
    let dir = scratch("datawarp-calls");
    std::fs::create_dir_all(dir.join("pfs")).unwrap();
    let program = dir.join("dw_test");
    compile("cc", &repo().join("crates/surge-datawarp/tests/dw_test.c"), &program, &["-Werror"]);

    // Not the default chunk size: the stripe size must be the instance's own.
    let inst = Instance::up_on("dwcalls", "127.0.6", 31, 4, &["--capacity", "256M", "--chunk-size", "256K"]);
    let mount = inst.mount("bb", "127.0.6.39");
    let job_end = format!("SURGE_INSTANCE={} {} stage job-end --wait", inst.name, binary("surge").display());
    let out = Command::new(&program)
        .arg(&mount.dir)
        .arg(dir.join("pfs"))
        .arg(&job_end)
        .env("SURGE_HOME", &inst.home)
        .env_remove("SURGE_INSTANCE")
        .output()
        .unwrap();
    let report = text(&out);
    assert!(out.status.success(), "C test failed: {report}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("all libdatawarp checks passed"), "{report}");

    // The stripe it was told: the instance's chunk size and servers, and the server that does
    // hold the file's first chunk (its data file there starts with the file's first bytes).
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix("stripe ")).unwrap_or_else(|| panic!("no stripe line: {report}"));
    let [size, width, index, ino]: [u64; 4] = line.split(' ').map(|n| n.parse().unwrap()).collect::<Vec<_>>().try_into().unwrap();
    let desc = inst.descriptor();
    let servers = desc["servers"].as_array().unwrap();
    assert_eq!(size, desc["chunk_size"].as_u64().unwrap());
    assert_eq!(size, 256 << 10);
    assert_eq!(width as usize, servers.len());
    let first = std::fs::read(mount.path("striped.dat")).unwrap()[..4096].to_vec();
    assert!(first.iter().any(|&b| b != 0));
    for (i, server) in servers.iter().enumerate() {
        let data_file = Path::new(server["root"].as_str().unwrap()).join("data").join(format!("{ino:016x}"));
        let held = std::fs::read(&data_file).map(|d| d.get(..4096).map(<[u8]>::to_vec)).unwrap_or(None);
        if i as u64 == index {
            assert_eq!(held.as_deref(), Some(&first[..]), "server {i}, the starting index, does not hold the first chunk");
        } else {
            assert!(held.is_none_or(|h| h.iter().all(|&b| b == 0)), "server {i} holds the first chunk, not server {index}");
        }
    }
    drop(mount);
    drop(inst);
}
