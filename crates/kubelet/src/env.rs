//! Container environment: env, envFrom and the service variables.
