//! A directory's workflow state, kept by the directory's home and journaled with the
//! namespace (a change is in the journal record of the step that made it): the order in which
//! its files were published ([`publications`]), the consumer groups that take them
//! ([`groups`]) and its retention policy ([`retention`]). See docs/workflow.md.

pub mod groups;
pub mod publications;
pub mod retention;
