//! (being written)

use crate::Ctx;

pub fn start_replicaset(_ctx: &Ctx) {}

pub fn start_replicationcontroller(_ctx: &Ctx) {}
