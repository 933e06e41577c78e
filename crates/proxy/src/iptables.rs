//! iptables
