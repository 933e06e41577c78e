//! userspace
