//! Core kinds: nodes, services, events, config and storage.

use serde_json::json;

use super::*;

#[test]
fn node_ready_with_roles() {
    let node = json!({
        "metadata": {"name": "cp-1", "creationTimestamp": ago(40 * DAY),
            "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/master": "",
                       "kubernetes.io/role": "etcd", "kubernetes.io/hostname": "cp-1"}},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "cp-1"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13"}}
    });
    assert_eq!(
        cells("", "Node", &node),
        json!([
            "cp-1",
            "Ready,SchedulingDisabled",
            "control-plane,etcd,master",
            "40d",
            "v1.32.0",
            "192.168.1.10",
            "<none>",
            "Debian GNU/Linux 12 (bookworm)",
            "6.1.0-18-amd64",
            "containerd://1.7.13"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let bare = json!({"metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    let c = cells("", "Node", &bare);
    assert_eq!(c[1], json!("NotReady"));
    assert_eq!(c[2], json!("<none>"));
    assert_eq!(c[7], json!("<unknown>"));
    assert_eq!(
        cells("", "Node", &json!({"metadata": {"name": "x"}}))[1],
        json!("Unknown")
    );
}

#[test]
fn services() {
    let np = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(200)},
        "spec": {"type": "NodePort", "clusterIP": "10.96.12.7", "clusterIPs": ["10.96.12.7"],
            "selector": {"app": "web", "tier": "front"},
            "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"},
                      {"name": "https", "port": 443, "nodePort": 30443, "protocol": "TCP"},
                      {"name": "dns", "port": 53, "nodePort": 31053, "protocol": "UDP"}]}
    });
    assert_eq!(
        cells("", "Service", &np),
        json!([
            "web",
            "NodePort",
            "10.96.12.7",
            "<none>",
            "80:30080/TCP,443:30443/TCP,53:31053/UDP",
            "3m20s",
            "app=web,tier=front"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.9"],
        "ports": [{"port": 443, "nodePort": 31000, "protocol": "TCP"}]}, "status": {"loadBalancer": {}}});
    assert_eq!(cells("", "Service", &lb)[3], json!("<pending>"));
    let mut lb2 = lb.clone();
    lb2["status"]["loadBalancer"] =
        json!({"ingress": [{"ip": "203.0.113.9"}, {"hostname": "a.example.com"}]});
    lb2["spec"]["externalIPs"] = json!(["198.51.100.1"]);
    assert_eq!(
        cells("", "Service", &lb2)[3],
        json!("203.0.113.9,a.example.com,198.51.100.1")
    );
    let headless = json!({"metadata": {"name": "db"}, "spec": {"type": "ClusterIP", "clusterIP": "None",
        "clusterIPs": ["None"], "ports": [{"port": 5432, "protocol": "TCP"}]}});
    let c = cells("", "Service", &headless);
    assert_eq!(
        c[1..5],
        json!(["ClusterIP", "None", "<none>", "5432/TCP"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(c[6], json!("<none>"));
    let ext = json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
    let c = cells("", "Service", &ext);
    assert_eq!(
        c[1..5],
        json!(["ExternalName", "<none>", "db.example.com", "<none>"])
            .as_array()
            .unwrap()[..]
    );
}

#[test]
fn events_both_versions() {
    let core = json!({
        "metadata": {"name": "web-0.17c2", "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
        "reason": "BackOff", "message": "Back-off restarting failed container\n", "type": "Warning",
        "source": {"component": "kubelet", "host": "node-a"},
        "firstTimestamp": ago(3600), "lastTimestamp": ago(30), "count": 14
    });
    assert_eq!(
        names("", "Event"),
        [
            "Last Seen",
            "Type",
            "Reason",
            "Object",
            "Subobject",
            "Source",
            "Message",
            "First Seen",
            "Count",
            "Name"
        ]
    );
    assert_eq!(
        cells("", "Event", &core),
        json!([
            "30s",
            "Warning",
            "BackOff",
            "pod/web-0",
            "spec.containers{app}",
            "kubelet, node-a",
            "Back-off restarting failed container",
            "60m",
            14,
            "web-0.17c2"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let v1 = json!({
        "metadata": {"name": "web-0.17c3"},
        "regarding": {"kind": "Pod", "name": "web-0"}, "note": "Successfully assigned shop/web-0 to node-a",
        "reason": "Scheduled", "type": "Normal", "reportingController": "default-scheduler",
        "reportingInstance": "default-scheduler-cp-1", "eventTime": "2024-05-01T11:58:00.000000Z"
    });
    assert_eq!(
        cells("events.k8s.io", "Event", &v1),
        json!([
            "2m",
            "Normal",
            "Scheduled",
            "pod/web-0",
            "",
            "default-scheduler, default-scheduler-cp-1",
            "Successfully assigned shop/web-0 to node-a",
            "2m",
            1,
            "web-0.17c3"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let series = json!({"metadata": {"name": "s"}, "involvedObject": {"kind": "Node"},
        "eventTime": ago(900), "series": {"count": 7, "lastObservedTime": ago(20)}});
    let c = cells("", "Event", &series);
    assert_eq!(
        (c[0].clone(), c[3].clone(), c[7].clone(), c[8].clone()),
        (json!("20s"), json!("node"), json!("15m"), json!(7))
    );
}

#[test]
fn config_and_storage() {
    let cm = json!({"metadata": {"name": "kube-root-ca.crt", "creationTimestamp": ago(7)},
        "data": {"ca.crt": "x"}, "binaryData": {"blob": "eA=="}});
    assert_eq!(
        cells("", "ConfigMap", &cm),
        vec![json!("kube-root-ca.crt"), json!(2), json!("7s")]
    );
    let secret = json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": "", "tls.key": ""}});
    assert_eq!(
        cells("", "Secret", &secret)[..3],
        json!(["tls", "kubernetes.io/tls", 2]).as_array().unwrap()[..]
    );
    let sa = json!({"metadata": {"name": "default"}});
    assert_eq!(cells("", "ServiceAccount", &sa)[1], json!(0));

    let pvc = json!({"metadata": {"name": "data-db-0", "creationTimestamp": ago(DAY)},
        "spec": {"volumeName": "pvc-1f2e", "storageClassName": "standard", "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1024Mi"}}});
    assert_eq!(
        cells("", "PersistentVolumeClaim", &pvc),
        json!([
            "data-db-0",
            "Bound",
            "pvc-1f2e",
            "1Gi",
            "RWO",
            "standard",
            "<unset>",
            "24h",
            "Filesystem"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let pending = json!({"metadata": {"name": "p", "annotations": {"volume.beta.kubernetes.io/storage-class": "fast"}},
        "spec": {"storageClassName": "slow"}, "status": {"phase": "Pending"}});
    assert_eq!(
        cells("", "PersistentVolumeClaim", &pending)[1..6],
        json!(["Pending", "", "", "", "fast"]).as_array().unwrap()[..]
    );

    let pv = json!({"metadata": {"name": "pvc-1f2e", "creationTimestamp": ago(DAY)},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard", "volumeMode": "Filesystem",
                 "claimRef": {"namespace": "shop", "name": "data-db-0"}},
        "status": {"phase": "Bound"}});
    assert_eq!(
        cells("", "PersistentVolume", &pv),
        json!([
            "pvc-1f2e",
            "10Gi",
            "RWO,RWX",
            "Delete",
            "Bound",
            "shop/data-db-0",
            "standard",
            "<unset>",
            "",
            "24h",
            "Filesystem"
        ])
        .as_array()
        .unwrap()
        .clone()
    );

    let quota = json!({"metadata": {"name": "compute"},
        "status": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "2", "pods": "10"},
                   "used": {"requests.cpu": "500m", "requests.memory": "512Mi", "pods": "3"}}});
    assert_eq!(
        cells("", "ResourceQuota", &quota)[..3],
        json!([
            "compute",
            "pods: 3/10, requests.cpu: 500m/1, requests.memory: 512Mi/1Gi",
            "limits.cpu: 0/2"
        ])
        .as_array()
        .unwrap()[..]
    );

    let sc = json!({"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
    assert_eq!(
        cells("storage.k8s.io", "StorageClass", &sc)[..5],
        json!([
            "standard (default)",
            "rancher.io/local-path",
            "Delete",
            "WaitForFirstConsumer",
            false
        ])
        .as_array()
        .unwrap()[..]
    );
}
