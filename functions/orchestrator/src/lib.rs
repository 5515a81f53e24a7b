//! The orchestrator function's options, shared with the other functions (`shopping`, `eval`) so
//! every Baton binary reads the same settings from the same flags and environment variables.

pub mod cli;
