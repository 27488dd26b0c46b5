//! The coordinator as a service: its configuration (where the instance's servers are, its
//! chunk size and secret) and its answers to the staging service's requests.
//!
//! Opening a coordinator loads its journal first and fails the stages a stop interrupted, so
//! no request is answered from a table that still calls them running. The servers' addresses
//! may be read from the instance's descriptor when a stage starts; one that lists another
//! number of servers than the instance has is refused rather than used.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use surge_proto::auth::Secret;
use surge_proto::stage::{Answer, StageFile, StagePage, StageService, StageSpec};
use surge_proto::{Error, ErrorCode};

use crate::stages::Stages;

/// Where the instance's servers listen, in index order.
#[derive(Clone, Debug)]
pub enum Peers {
    /// Known when the coordinator starts (a one-server instance: the server beside it).
    Fixed(Vec<SocketAddr>),
    /// Read from the instance's descriptor when a stage starts: the servers' addresses are
    /// known only once all of them are up, after the coordinators started.
    Descriptor { path: PathBuf, count: usize },
}

impl Peers {
    pub(crate) fn resolve(&self) -> Result<Vec<SocketAddr>, Error> {
        match self {
            Peers::Fixed(addrs) => Ok(addrs.clone()),
            Peers::Descriptor { path, count } => {
                let desc = surge_client::InstanceDescriptor::load_from(path)?;
                let mut servers = desc.servers;
                servers.sort_by_key(|s| s.index);
                if servers.len() != *count {
                    let detail = format!("{} lists {} servers; this instance has {count}", path.display(), servers.len());
                    return Err(Error::new(ErrorCode::Invalid, detail));
                }
                Ok(servers.into_iter().map(|s| s.addr).collect())
            }
        }
    }
}

/// What a coordinator needs to know of its instance.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub peers: Peers,
    pub chunk_size: u64,
    pub secret: Secret,
    /// This node's address: connections to the servers start from it.
    pub node: IpAddr,
}

impl CoordinatorConfig {
    /// A client of the instance for a keeper beside a server, or None while the peers cannot
    /// be read whole (until every server is up, and after a restart moved one: the keeper
    /// tries again at its next round).
    pub(crate) fn keeper_client(&self) -> Option<surge_client::Client> {
        let opts = surge_client::ClientOptions { node: Some(self.node), ..surge_client::ClientOptions::default() };
        self.peers.resolve().and_then(|peers| surge_client::Client::from_parts(peers, self.chunk_size, self.secret, opts)).ok()
    }
}

/// The stages one coordinator runs.
pub struct Coordinator {
    stages: Arc<Stages>,
}

impl Coordinator {
    /// Loads the journal kept in `dir`, failing the stages a stop interrupted, and starts
    /// journaling progress (call inside a tokio runtime).
    pub fn open(dir: &Path, config: CoordinatorConfig) -> std::io::Result<Coordinator> {
        let stages = Stages::open(dir, config)?;
        stages.start_journal();
        Ok(Coordinator { stages })
    }
}

impl StageService for Coordinator {
    fn submit(&self, spec: StageSpec) -> Answer<u64> {
        let stages = self.stages.clone();
        Box::pin(async move { stages.submit(spec).await })
    }

    fn list(&self, bb_path: Option<&str>, after: Option<u64>) -> StagePage {
        self.stages.list(bb_path, after)
    }

    fn files(&self, id: u64, offset: u32, limit: u32) -> Result<(Vec<StageFile>, u64), Error> {
        self.stages.files(id, offset, limit)
    }

    fn cancel(&self, id: u64) -> Result<(), Error> {
        self.stages.cancel(id)
    }

    fn revoke(&self, bb_path: &str) -> Result<(), Error> {
        self.stages.revoke(bb_path)
    }

    fn job_end(&self) {
        self.stages.job_end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_client::{Client, ClientOptions};
    use surge_proto::stage::StageKind;
    use surge_proto::stage::{StageDirection, StageState, StageWhen};
    use surge_server::in_process::InProcessInstance;

    /// A coordinator beside in-process servers stages a PFS tree in (every server copying its
    /// chunks), reports it done with every byte, and after a restart on its journal still
    /// knows the stage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stage_in_runs_to_done_and_its_record_survives_a_restart() {
        let scratch = std::env::temp_dir().join(format!("surge-coordinator-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let (pfs, journal) = (scratch.join("pfs"), scratch.join("stages"));
        std::fs::create_dir_all(pfs.join("sub")).unwrap();
        let big: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i * 7 % 256) as u8).collect();
        std::fs::write(pfs.join("big.dat"), &big).unwrap();
        std::fs::write(pfs.join("sub/small.dat"), b"small").unwrap();

        let config = |addrs: &[SocketAddr], secret: &Secret| CoordinatorConfig {
            peers: Peers::Fixed(addrs.to_vec()),
            chunk_size: 1 << 20,
            secret: *secret,
            node: "127.0.0.1".parse().unwrap(),
        };
        let instance = InProcessInstance::start_with(&scratch.join("servers"), 3, 1 << 30, move |index, addrs, secret| {
            (index == 0).then(|| Arc::new(Coordinator::open(&journal, config(addrs, secret)).unwrap()) as Arc<dyn StageService>)
        })
        .await
        .unwrap();
        let opts = ClientOptions { local_io: false, ..Default::default() };
        let client = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap();
        let spec = client.stage_spec(StageDirection::In, StageKind::Directory, StageWhen::Immediate, "/in", pfs.to_str().unwrap(), true);
        let stage = client.stage_submit_checked(spec).await.unwrap();
        let done = client.wait_stages(None, |s| s.id == stage.id, |_| {}).await.unwrap();
        assert_eq!(done[0].state, StageState::Done, "{:?}", done[0].error);
        assert_eq!((done[0].files_done, done[0].bytes_done), (2, big.len() as u64 + 5));
        let f = client.open("/in/big.dat", false).await.unwrap();
        assert_eq!(f.pread(0, big.len()).await.unwrap(), big);
        f.close().await.unwrap();

        instance.stop().await;
        let reopened = Coordinator::open(&scratch.join("stages"), config(&[], &[0; 32])).unwrap();
        let listed = reopened.list(Some("/in"), None).stages;
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].id, listed[0].state), (stage.id, StageState::Done));
        let _ = std::fs::remove_dir_all(&scratch);
    }

    /// Many stages with long paths are listed in pages that each fit a frame, and in full.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_stage_list_is_paged() {
        let scratch = std::env::temp_dir().join(format!("surge-coordinator-pages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let journal = scratch.join("stages");
        let instance = InProcessInstance::start_with(&scratch.join("servers"), 1, 1 << 30, move |_, addrs, secret| {
            let config = CoordinatorConfig {
                peers: Peers::Fixed(addrs.to_vec()),
                chunk_size: 1 << 20,
                secret: *secret,
                node: "127.0.0.1".parse().unwrap(),
            };
            Some(Arc::new(Coordinator::open(&journal, config).unwrap()) as Arc<dyn StageService>)
        })
        .await
        .unwrap();
        let opts = ClientOptions { local_io: false, ..Default::default() };
        let client = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap();
        let deep = format!("/{}", vec!["d".repeat(200); 5].join("/"));
        for i in 0..800 {
            let spec = client.stage_spec(
                StageDirection::Out,
                StageKind::File,
                StageWhen::JobEnd,
                &format!("{deep}/f{i}"),
                &format!("{deep}/out{i}"),
                false,
            );
            client.stage_submit(spec).await.unwrap();
        }
        let page = client.call(0, surge_proto::stage::StageList { bb_path: None, after: None }).await.unwrap();
        assert!(page.more && page.stages.len() < 800, "one frame cannot hold 800 such stages");
        let all = client.stage_list(None).await.unwrap();
        assert_eq!(all.len(), 800);
        assert!(all.windows(2).all(|w| w[0].id < w[1].id), "oldest first, each once");
        instance.stop().await;
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
