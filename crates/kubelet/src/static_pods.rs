//! Static pods from a manifest directory, published as mirror pods.
