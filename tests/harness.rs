//! Test harness for Surge's cross-component tests: starts real `surge-server` processes on
//! several loopback addresses through the `surge` command and runs client processes against them.
