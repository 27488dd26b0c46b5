//! Directory layouts ([`DirLayout`]): read and set per directory, by inode and by path.
//!
//! Each call is one request to the directory's home server. A layout set applies to the files
//! made in the directory from then on (and directories made in it inherit it); files already
//! there keep where their chunks are.

use surge_proto::ino::Ino;
use surge_proto::namespace::LayoutOf;
use surge_proto::placement::DirLayout;

use crate::error::Result;
use crate::Client;

impl Client {
    /// Where the files made in directory `dir` are put.
    pub async fn layout_of(&self, dir: Ino) -> Result<DirLayout> {
        self.call_home(dir, LayoutOf { dir, set: None }).await
    }

    /// Puts the files made in directory `dir` from now on `layout` (the directories made in it
    /// inherit it); the files there keep theirs. For the directory's owner or root.
    pub async fn set_layout(&self, dir: Ino, layout: DirLayout) -> Result<DirLayout> {
        self.call_home(dir, LayoutOf { dir, set: Some(layout) }).await
    }

    /// [`Client::layout_of`] the directory at `path`.
    pub async fn dir_layout(&self, path: &str) -> Result<DirLayout> {
        let ino = self.stat(path).await?.ino;
        self.layout_of(ino).await.map_err(|e| e.context(path))
    }

    /// [`Client::set_layout`] of the directory at `path`.
    pub async fn set_dir_layout(&self, path: &str, layout: DirLayout) -> Result<DirLayout> {
        let ino = self.stat(path).await?.ino;
        self.set_layout(ino, layout).await.map_err(|e| e.context(path))
    }
}
