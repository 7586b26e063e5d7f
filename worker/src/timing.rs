//! Timing: the hierarchical timing wheel and the fire it hands the fire path. Pure: no etcd, no
//! clock of its own; imports no other folder of the worker.

pub mod fire;
pub mod wheel;
