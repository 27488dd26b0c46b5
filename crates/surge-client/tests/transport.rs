//! Which way a client reaches a server (`surge_proto::transport`): over the server's Unix
//! socket when both are on one node, by TCP otherwise (a test "node" dialing from an address
//! of its own, or a client told not to), and the same bytes either way. The servers run in
//! this process, on 127.0.0.1.

use surge_client::{Client, ClientOptions};
use surge_server::in_process::InProcessInstance;

fn client(instance: &InProcessInstance, opts: ClientOptions) -> Client {
    // No local data files: every byte goes over the connection under test.
    let opts = ClientOptions { local_io: false, ..opts };
    Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reaches_a_server_on_its_node_over_the_local_socket_and_others_by_tcp() {
    let root = std::env::temp_dir().join(format!("surge-transport-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let instance = InProcessInstance::start(&root, 2, 1 << 30).await.expect("start the servers");
    let server_ip = instance.addrs[0].ip();
    let ways = [
        ("no node address", ClientOptions { node: None, ..Default::default() }, true),
        ("the servers' own address", ClientOptions { node: Some(server_ip), ..Default::default() }, true),
        ("another node's address", ClientOptions { node: Some("127.0.0.2".parse().unwrap()), ..Default::default() }, false),
        ("the local socket turned off", ClientOptions { node: None, local_socket: false, ..Default::default() }, false),
    ];
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    for (n, (way, opts, local)) in ways.into_iter().enumerate() {
        let client = client(&instance, opts);
        for server in 0..2 {
            assert_eq!(client.over_local_socket(server).await.unwrap(), local, "{way}: server {server}");
        }
        // Chunks on both servers, written and read back over this client's connections.
        let path = format!("/f{n}");
        let file = client.create(&path, 0o644).await.unwrap();
        file.pwrite(0, &data).await.unwrap();
        file.close().await.unwrap();
        let file = client.open(&path, false).await.unwrap();
        assert!(file.pread(0, data.len()).await.unwrap() == data, "{way}: the bytes read back differ");
        file.close().await.unwrap();
        assert_eq!(client.stat(&path).await.unwrap().size, data.len() as u64, "{way}");
    }
    instance.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}
