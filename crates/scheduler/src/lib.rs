//! The capstan scheduler: watches pods without a node, filters the nodes that can take each,
//! scores the rest and binds the pod to the best (the seeds; `pkg/scheduler`).

pub mod config;
pub mod core;
pub mod events;
pub mod framework;
pub use capstan_runtime::leader;
pub mod plugins;
pub mod queue;
pub mod run;
pub mod schedule;
pub mod snapshot;
pub mod types;
