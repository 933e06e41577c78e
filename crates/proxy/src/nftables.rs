//! nftables
