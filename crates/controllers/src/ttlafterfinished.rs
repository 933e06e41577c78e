//! (being written)

use crate::Ctx;

pub fn start(_ctx: &Ctx) {}
