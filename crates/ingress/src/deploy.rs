//! The controller as Kubernetes objects: `deploy/ingress.yaml` (ServiceAccount, RBAC, the
//! default IngressClass, a host-network DaemonSet). `capstan up` applies the same identity and
//! permissions to the controller it runs in its own process, so the manifest's RBAC is the one
//! exercised by `capstan up`'s tests.

use serde_json::Value;

/// The manifest, as shipped.
pub const MANIFEST: &str = include_str!("../deploy/ingress.yaml");
/// The namespace and name of the controller's ServiceAccount.
pub const SERVICE_ACCOUNT: (&str, &str) = ("kube-system", "capstan-ingress");

/// The manifest's objects, in order.
pub fn objects() -> Vec<Value> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(MANIFEST) {
        let value: Value =
            serde::Deserialize::deserialize(doc).expect("deploy/ingress.yaml parses");
        if !value.is_null() {
            out.push(value);
        }
    }
    out
}

/// The manifest's objects of `kind`.
pub fn of_kind(kind: &str) -> Vec<Value> {
    objects()
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_holds_every_piece_and_names_one_account() {
        let kinds: Vec<String> = objects()
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "IngressClass",
                "DaemonSet"
            ]
        );
        let sa = &of_kind("ServiceAccount")[0];
        assert_eq!(sa["metadata"]["namespace"], SERVICE_ACCOUNT.0);
        assert_eq!(sa["metadata"]["name"], SERVICE_ACCOUNT.1);
        let binding = &of_kind("ClusterRoleBinding")[0];
        assert_eq!(binding["subjects"][0]["name"], SERVICE_ACCOUNT.1);
        let ds = &of_kind("DaemonSet")[0];
        assert_eq!(
            ds["spec"]["template"]["spec"]["serviceAccountName"],
            SERVICE_ACCOUNT.1
        );
        let class = &of_kind("IngressClass")[0];
        assert_eq!(class["spec"]["controller"], crate::CONTROLLER);
        assert_eq!(
            class["metadata"]["annotations"][crate::class::DEFAULT_CLASS_ANNOTATION],
            "true"
        );
        // Every typed object the API would accept.
        serde_json::from_value::<k8s_openapi::api::apps::v1::DaemonSet>(ds.clone()).unwrap();
        serde_json::from_value::<k8s_openapi::api::rbac::v1::ClusterRole>(
            of_kind("ClusterRole")[0].clone(),
        )
        .unwrap();
    }
}
