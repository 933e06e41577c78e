"""The official Python `kubernetes` client against capstan: list, create, watch, patch, delete.

Run by crates/capstan/tests/clients.rs with the kubeconfig path as the only argument; exits
non-zero (with a message) on the first behaviour that differs from Kubernetes.
"""
import sys
import threading

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
apps = client.AppsV1Api()

names = {ns.metadata.name for ns in core.list_namespace().items}
assert {"default", "kube-system"} <= names, names
assert client.VersionApi().get_code().git_version == "v1.32.0"

start_rv = core.list_namespaced_config_map("default").metadata.resource_version
seen = []


def watcher():
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_config_map, "default",
                       resource_version=start_rv, timeout_seconds=10):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()


t = threading.Thread(target=watcher)
t.start()

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py", labels={"from": "python"}),
                        data={"k": "v"})
created = core.create_namespaced_config_map("default", cm)
assert created.metadata.uid, created
core.patch_namespaced_config_map("py", "default", {"data": {"k": "v2"}})
assert core.read_namespaced_config_map("py", "default").data["k"] == "v2"
try:
    core.create_namespaced_config_map("default", cm)
    raise SystemExit("a duplicate create succeeded")
except ApiException as e:
    assert e.status == 409 and "already exists" in e.body, e

dep = client.V1Deployment(
    metadata=client.V1ObjectMeta(name="pyweb"),
    spec=client.V1DeploymentSpec(
        replicas=2,
        selector=client.V1LabelSelector(match_labels={"app": "pyweb"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "pyweb"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))))
apps.create_namespaced_deployment("default", dep)
scale = apps.read_namespaced_deployment_scale("pyweb", "default")
assert scale.spec.replicas == 2, scale
apps.patch_namespaced_deployment_scale("pyweb", "default", {"spec": {"replicas": 4}})
assert apps.read_namespaced_deployment("pyweb", "default").spec.replicas == 4

core.delete_namespaced_config_map("py", "default")
t.join(timeout=15)
assert seen == [("ADDED", "py"), ("MODIFIED", "py"), ("DELETED", "py")], seen
print("python client OK")
