//! POSIX ACLs in the form Linux hands them over as extended attributes
//! (`system.posix_acl_access`, `system.posix_acl_default`, see [`crate::xattr`]): a
//! little-endian u32 version (2), then one 8-byte entry after another — u16 tag, u16
//! permissions (read 4, write 2, execute 1), u32 id (the uid or gid of a named entry,
//! `u32::MAX` for the others).
//!
//! An [`Acl`] is always a valid one: its entries in their canonical order (the owner, named
//! users by uid, the owning group, named groups by gid, the mask, the others), each once,
//! the three base entries there, a mask wherever a named entry is. What the server does with
//! one (permission checks, the mode it shows, chmod, inheritance) is the server's.

use crate::error::{Error, ErrorCode};

const VERSION: u32 = 2;
const HEADER_LEN: usize = 4;
const ENTRY_LEN: usize = 8;
/// The id of an entry that names nobody (the base entries and the mask).
const UNDEFINED_ID: u32 = u32::MAX;

/// Which of an inode's two ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AclKind {
    /// What permission checks read.
    Access,
    /// A directory's: what is made in it inherits (files as their access ACL, directories as
    /// both).
    Default,
}

impl AclKind {
    pub const ALL: [AclKind; 2] = [AclKind::Access, AclKind::Default];

    /// The extended attribute it is read and written through.
    pub fn xattr_name(self) -> &'static str {
        match self {
            AclKind::Access => "system.posix_acl_access",
            AclKind::Default => "system.posix_acl_default",
        }
    }
}

/// Who an entry is for. Declared in the canonical order, so that sorting entries by tag puts
/// them in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tag {
    /// The file's owner.
    UserObj,
    /// The user of this uid.
    User(u32),
    /// The file's group.
    GroupObj,
    /// The group of this gid.
    Group(u32),
    /// The most any named entry and the owning group are granted.
    Mask,
    /// Everybody else.
    Other,
}

impl Tag {
    fn from_wire(tag: u16, id: u32) -> Option<Tag> {
        Some(match tag {
            0x01 => Tag::UserObj,
            0x02 => Tag::User(id),
            0x04 => Tag::GroupObj,
            0x08 => Tag::Group(id),
            0x10 => Tag::Mask,
            0x20 => Tag::Other,
            _ => return None,
        })
    }

    fn to_wire(self) -> (u16, u32) {
        match self {
            Tag::UserObj => (0x01, UNDEFINED_ID),
            Tag::User(uid) => (0x02, uid),
            Tag::GroupObj => (0x04, UNDEFINED_ID),
            Tag::Group(gid) => (0x08, gid),
            Tag::Mask => (0x10, UNDEFINED_ID),
            Tag::Other => (0x20, UNDEFINED_ID),
        }
    }

    /// A named user or group.
    pub fn is_named(self) -> bool {
        matches!(self, Tag::User(_) | Tag::Group(_))
    }
}

/// One entry: whom it is for and what it grants (rwx bits as in a mode's triplet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: Tag,
    pub perm: u32,
}

/// A valid ACL (see the module notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

fn invalid(what: &str) -> Error {
    Error::new(ErrorCode::Invalid, format!("malformed ACL: {what}"))
}

/// The entries of an ACL's xattr form, as Linux reads them before it judges the ACL: a
/// header too short or entries cut short are invalid, another version is not supported,
/// an unknown tag is invalid. `None`: the header alone, which Linux takes for no ACL at all.
pub fn decode_entries(bytes: &[u8]) -> Result<Option<Vec<Entry>>, Error> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(invalid("shorter than its header"));
    };
    let version = u32::from_le_bytes(*header);
    if version != VERSION {
        return Err(Error::new(ErrorCode::NotSupported, format!("ACL version {version} (Linux's is {VERSION})")));
    }
    if body.len() % ENTRY_LEN != 0 {
        return Err(invalid("an entry cut short"));
    }
    if body.is_empty() {
        return Ok(None);
    }
    body.chunks_exact(ENTRY_LEN)
        .map(|raw| {
            let tag = u16::from_le_bytes([raw[0], raw[1]]);
            let perm = u16::from_le_bytes([raw[2], raw[3]]) as u32;
            let id = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
            let tag = Tag::from_wire(tag, id).ok_or_else(|| invalid(&format!("unknown tag {tag:#x}")))?;
            Ok(Entry { tag, perm })
        })
        .collect::<Result<Vec<Entry>, Error>>()
        .map(Some)
}

impl Acl {
    /// An ACL of `entries`, if they make a valid one: permissions within rwx, in canonical
    /// order with none twice, the owner, the owning group and the others there, and a mask
    /// if any user or group is named. Invalid otherwise (EINVAL).
    pub fn new(entries: Vec<Entry>) -> Result<Acl, Error> {
        if let Some(entry) = entries.iter().find(|e| e.perm & !7 != 0) {
            return Err(invalid(&format!("permissions {:#o} of {:?}", entry.perm, entry.tag)));
        }
        if !entries.windows(2).all(|pair| pair[0].tag < pair[1].tag) {
            return Err(invalid("entries out of order or repeated"));
        }
        let has = |tag: Tag| entries.iter().any(|e| e.tag == tag);
        if !has(Tag::UserObj) || !has(Tag::GroupObj) || !has(Tag::Other) {
            return Err(invalid("an owner, owning group or other entry missing"));
        }
        if entries.iter().any(|e| e.tag.is_named()) && !has(Tag::Mask) {
            return Err(invalid("named entries without a mask"));
        }
        Ok(Acl { entries })
    }

    /// The ACL an xattr value holds (`None`: a header alone, no ACL), decoded and judged.
    pub fn decode(bytes: &[u8]) -> Result<Option<Acl>, Error> {
        decode_entries(bytes)?.map(Acl::new).transpose()
    }

    /// The three entries a mode's permission bits make.
    pub fn from_mode(mode: u32) -> Acl {
        let entry = |tag, perm| Entry { tag, perm: perm & 7 };
        Acl { entries: vec![entry(Tag::UserObj, mode >> 6), entry(Tag::GroupObj, mode >> 3), entry(Tag::Other, mode)] }
    }

    /// The xattr form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for entry in &self.entries {
            let (tag, id) = entry.tag.to_wire();
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&(entry.perm as u16).to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + ENTRY_LEN * self.entries.len()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// What the entry `tag` grants, if there is one.
    pub fn perm(&self, tag: Tag) -> Option<u32> {
        self.entries.iter().find(|e| e.tag == tag).map(|e| e.perm)
    }

    /// The same entries with the permissions `f` gives each (kept within rwx): still valid.
    pub fn with_perms(&self, mut f: impl FnMut(Tag, u32) -> u32) -> Acl {
        Acl { entries: self.entries.iter().map(|e| Entry { tag: e.tag, perm: f(e.tag, e.perm) & 7 }).collect() }
    }

    /// Only the three base entries: the mode's permission bits say all of it.
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: Tag, perm: u32) -> Entry {
        Entry { tag, perm }
    }

    fn wire(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut out = 2u32.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// What `setfacl -m u:1002:r,m::r` writes for a 0640 file reads, and encodes to the
    /// same bytes.
    #[test]
    fn the_kernels_form_reads_and_writes_back_alike() {
        let bytes = wire(&[(0x01, 6, u32::MAX), (0x02, 4, 1002), (0x04, 4, u32::MAX), (0x10, 4, u32::MAX), (0x20, 0, u32::MAX)]);
        let acl = Acl::decode(&bytes).unwrap().unwrap();
        assert_eq!(acl.perm(Tag::User(1002)), Some(4));
        assert_eq!(acl.perm(Tag::Group(1002)), None);
        assert_eq!(acl.encode(), bytes);
        assert_eq!(acl.encoded_len(), bytes.len());
        assert!(!acl.is_minimal());
        assert_eq!(Acl::decode(&wire(&[])).unwrap(), None, "a header alone is no ACL");
        let base = Acl::from_mode(0o751);
        assert_eq!(Acl::decode(&base.encode()).unwrap(), Some(base.clone()));
        assert!(base.is_minimal());
    }

    /// The ids of unnamed entries mean nothing: whatever a writer put there reads the same.
    #[test]
    fn unnamed_entries_ids_are_ignored() {
        let acl = Acl::decode(&wire(&[(0x01, 7, 5), (0x04, 5, 6), (0x20, 0, 7)])).unwrap().unwrap();
        assert_eq!(acl, Acl::from_mode(0o750));
    }

    #[test]
    fn malformed_acls_are_refused_as_linux_refuses_them() {
        let code = |bytes: &[u8]| Acl::decode(bytes).unwrap_err().code;
        let (uo, go, o) = ((0x01, 6, 0), (0x04, 4, 0), (0x20, 4, 0));
        assert_eq!(code(&[2, 0]), ErrorCode::Invalid, "no whole header");
        assert_eq!(code(&1u32.to_le_bytes()), ErrorCode::NotSupported, "another version");
        let mut cut = wire(&[uo, go, o]);
        cut.pop();
        assert_eq!(code(&cut), ErrorCode::Invalid, "an entry cut short");
        assert_eq!(code(&wire(&[uo, (0x40, 4, 0), go, o])), ErrorCode::Invalid, "an unknown tag");
        assert_eq!(code(&wire(&[uo, go])), ErrorCode::Invalid, "no other entry");
        assert_eq!(code(&wire(&[go, o])), ErrorCode::Invalid, "no owner entry");
        assert_eq!(code(&wire(&[uo, (0x02, 4, 7), go, o])), ErrorCode::Invalid, "a named user without a mask");
        assert_eq!(code(&wire(&[uo, go, (0x08, 4, 7), o])), ErrorCode::Invalid, "a named group without a mask");
        assert_eq!(code(&wire(&[uo, go, o, (0x10, 4, 0)])), ErrorCode::Invalid, "the mask after the others");
        assert_eq!(code(&wire(&[uo, (0x02, 4, 9), (0x02, 4, 7), go, (0x10, 4, 0), o])), ErrorCode::Invalid, "users unsorted");
        assert_eq!(code(&wire(&[uo, (0x02, 4, 7), (0x02, 6, 7), go, (0x10, 4, 0), o])), ErrorCode::Invalid, "a user twice");
        assert_eq!(code(&wire(&[uo, uo, go, o])), ErrorCode::Invalid, "the owner twice");
        assert_eq!(code(&wire(&[(0x01, 8, 0), go, o])), ErrorCode::Invalid, "permissions beyond rwx");
        assert!(Acl::decode(&wire(&[uo, go, (0x10, 4, 0), o])).unwrap().is_some(), "a mask with no named entry is valid");
    }

    #[test]
    fn new_judges_entries_as_decode_does() {
        let misordered =
            vec![entry(Tag::UserObj, 7), entry(Tag::Group(50), 5), entry(Tag::GroupObj, 5), entry(Tag::Mask, 5), entry(Tag::Other, 0)];
        assert_eq!(Acl::new(misordered).unwrap_err().code, ErrorCode::Invalid, "a named group before the owning group");
        let acl = Acl::new(vec![
            entry(Tag::UserObj, 7),
            entry(Tag::GroupObj, 5),
            entry(Tag::Group(50), 5),
            entry(Tag::Mask, 5),
            entry(Tag::Other, 0),
        ])
        .unwrap();
        let narrowed = acl.with_perms(|tag, perm| if tag == Tag::Mask { 1 } else { perm | 8 });
        assert_eq!(narrowed.perm(Tag::Mask), Some(1));
        assert_eq!(narrowed.perm(Tag::UserObj), Some(7), "kept within rwx");
    }
}
