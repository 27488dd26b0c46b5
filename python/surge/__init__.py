"""Surge's Python side: Darshan import for the provisioning simulator, the walltime and
node-allocation predictor, and plotting helpers. The data plane itself is in Rust (crates/)."""
