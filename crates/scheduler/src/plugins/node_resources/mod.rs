//! NodeResourcesFit and NodeResourcesBalancedAllocation (being written).
pub mod balanced_allocation;
pub mod fit;
