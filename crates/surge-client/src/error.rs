//! The client's error type is the protocol's: a code (which maps onto an errno) and a message
//! saying which server and which operation failed. A server's failure reaches the caller as
//! the server sent it; failures found here (a lost connection, a timeout, a local write) take
//! the same shape.

pub use surge_proto::error::{Error, Result};
