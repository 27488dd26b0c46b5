//! The journal's earlier formats, frozen. A server must come back with its namespace share on
//! a directory an earlier release wrote: the journal reads such a directory's records through
//! the types of its format, converts them to this build's [`crate::Record`], and rewrites the
//! directory in the current format at once (see [`crate::journal`]). So these types never
//! change: a field changed here would misread bytes already on disk. A new format adds a module
//! here with the previous format's types, and leaves the others as they are.
//!
//! * [`format1`] (`surge-meta 1`): before extended attributes;
//! * [`format2`] (`surge-meta 2`): before directory layouts;
//! * [`format3`] (`surge-meta 3`): before publication logs;
//! * [`format4`] (`surge-meta 4`): before files' data reach.
//!
//! Each converts through the next (format 1 through format 2, format 2 through format 3, and
//! so on), so a conversion is written once. The types of entries and attributes they share with this
//! build's records must read the older bytes alike (their enums' variants only appended).

pub mod format1;
pub mod format2;
pub mod format3;
pub mod format4;
