//! `capstan dns`: the cluster DNS add-on (CoreDNS's job in Kubernetes).
