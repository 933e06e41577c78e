//! (being written)

use crate::Ctx;

pub fn start_approving(_ctx: &Ctx) {}

pub fn start_signing(_ctx: &Ctx) {}
