//! (being written)

use crate::Ctx;

pub fn start_binder(_ctx: &Ctx) {}
