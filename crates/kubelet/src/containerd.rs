//! containerd as a child process of capstan, with capstan's own configuration.
