//! `surge-test-client`: a client process for the cross-component tests. Each invocation is a
//! separate process (a separate "node" when SURGE_NODE gives it its own address) that does one
//! access pattern through the native client library and exits non-zero on any error.
//!
//!   write-blocks PATH RANK RANKS BLOCK COUNT   N-1 pattern: blocks RANK, RANK+RANKS, ... of one shared file
//!   publish PATH ITERATIONS                      write PATH.tmp (versioned content), close, rename over PATH
//!   watch PATH ITERATIONS                        open+read PATH repeatedly; fail on any partial/mixed file
//!   chunk-server PATH                            print the server index holding chunk 0 of PATH

use std::process::ExitCode;

use surge_client::{Client, ClientOptions};
use surge_tests::pattern;

fn client() -> Client {
    let name = std::env::var("SURGE_INSTANCE").expect("SURGE_INSTANCE");
    Client::for_instance(&name, ClientOptions::default()).expect("client")
}

/// A published version: 16-byte header (version, length) then a body derived from the version.
fn version_bytes(version: u64) -> Vec<u8> {
    let len = 200_000 + (version as usize * 7919) % 3_000_000;
    let mut out = Vec::with_capacity(len + 16);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend(pattern(version, len));
    out
}

async fn run(args: &[String]) -> Result<String, String> {
    let c = client();
    let e = |e: surge_client::Error| e.to_string();
    match args.first().map(String::as_str) {
        Some("write-blocks") => {
            let path = &args[1];
            let [rank, ranks, block, count]: [u64; 4] = core::array::from_fn(|i| args[2 + i].parse().unwrap());
            let f = c.create_or_open(path).await.map_err(e)?;
            let mut b = rank;
            while b < count {
                f.pwrite(b * block, &pattern(b, block as usize)).await.map_err(e)?;
                b += ranks;
            }
            f.close().await.map_err(e)?;
            Ok(String::new())
        }
        Some("publish") => {
            let path = &args[1];
            let n: u64 = args[2].parse().unwrap();
            for v in 1..=n {
                let tmp = format!("{path}.tmp");
                let f = c.create_or_truncate(&tmp, 0o644).await.map_err(e)?;
                f.pwrite(0, &version_bytes(v)).await.map_err(e)?;
                f.close().await.map_err(e)?;
                c.rename(&tmp, path).await.map_err(e)?;
            }
            Ok(String::new())
        }
        Some("watch") => {
            let path = &args[1];
            let n: u64 = args[2].parse().unwrap();
            let (mut seen, mut versions) = (0u64, std::collections::BTreeSet::new());
            while seen < n {
                let f = match c.open(path, false).await {
                    Ok(f) => f,
                    Err(err) if err.code == surge_client::surge_proto::ErrorCode::NotFound => continue,
                    Err(err) => return Err(err.to_string()),
                };
                let data = f.pread(0, 64 << 20).await.map_err(e)?;
                f.close().await.map_err(e)?;
                if data.len() < 16 {
                    return Err(format!("read {} bytes: partial file under the final name", data.len()));
                }
                let version = u64::from_le_bytes(data[0..8].try_into().unwrap());
                if data != version_bytes(version) {
                    return Err(format!("version {version}: content or size wrong ({} bytes)", data.len()));
                }
                versions.insert(version);
                seen += 1;
            }
            Ok(format!("{}", versions.len()))
        }
        Some("chunk-server") => {
            let attr = c.stat(&args[1]).await.map_err(e)?;
            let layout = surge_client::Layout::new(c.chunk_size(), c.server_count());
            Ok(layout.chunk_server(attr.ino, 0).to_string())
        }
        _ => Err("usage: surge-test-client write-blocks|publish|watch|chunk-server ...".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    match rt.block_on(run(&args)) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("surge-test-client: {err}");
            ExitCode::FAILURE
        }
    }
}
