//! End to end: CustomResourceDefinitions with the real kubectl.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

const CRONTAB_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.labelSelector
    selectableFields:
    - jsonPath: .spec.image
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cronSpec]
            properties:
              cronSpec:
                type: string
                description: When the tab runs, in cron's five fields.
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                type: string
              replicas:
                type: integer
                minimum: 1
                maximum: 10
                default: 1
              mode:
                type: string
                enum: [fast, slow]
          status:
            type: object
            properties:
              replicas: {type: integer}
              labelSelector: {type: string}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// Wait until kubectl can use the resource (the definition is established and served).
fn wait_served(s: &Server, resource: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = s.kubectl(&["get", resource, "-A"]);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{resource} never served: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_custom_resource_is_served_like_a_built_in_one() {
    let s = Server::start();
    s.ok_stdin(&["apply", "-f", "-"], CRONTAB_CRD);
    s.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/crontabs.stable.example.com",
        "--timeout=20s",
    ]);
    let crd = json(&s.ok(&["get", "crd", "crontabs.stable.example.com", "-o", "json"]));
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "CronTab");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    let names: Vec<&str> = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "True")
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"NamesAccepted") && names.contains(&"Established"),
        "{crd}"
    );
    wait_served(&s, "crontabs");

    // Discovery: kubectl api-resources lists it with its short name.
    let resources = s.ok(&["api-resources", "--api-group=stable.example.com"]);
    assert!(
        resources.contains("crontabs") && resources.contains("ct") && resources.contains("CronTab"),
        "{resources}"
    );

    // OpenAPI v3: kubectl explain reads the definition's schema.
    let explained = s.ok(&["explain", "crontabs.spec.cronSpec"]);
    assert!(
        explained.contains("CronTab")
            && explained.contains("When the tab runs, in cron's five fields."),
        "{explained}"
    );
    let explained = s.ok(&["explain", "crontabs"]);
    assert!(
        explained.contains("metadata") && explained.contains("ObjectMeta"),
        "{explained}"
    );

    // Create with defaults applied and unknown fields pruned.
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: c1\nspec:\n  cronSpec: '* * * * */5'\n  image: img\n",
    );
    let c1 = json(&s.ok(&["get", "ct", "c1", "-o", "json"]));
    assert_eq!(c1["spec"]["replicas"], 1, "{c1}");
    assert_eq!(c1["metadata"]["generation"], 1);
    assert_eq!(c1["apiVersion"], "stable.example.com/v1");

    // Unknown fields: rejected with strict validation (kubectl's default), pruned otherwise.
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: c2\nspec:\n  cronSpec: '* * * * *'\n  bogus: 1\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("unknown field \"spec.bogus\""), "{stderr}");
    s.ok_stdin(
        &["create", "--validate=false", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: c2\nspec:\n  cronSpec: '* * * * *'\n  bogus: 1\n",
    );
    let c2 = json(&s.ok(&["get", "ct", "c2", "-o", "json"]));
    assert!(c2["spec"].get("bogus").is_none(), "{c2}");

    // Schema violations, with Kubernetes' messages.
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  cronSpec: nope\n  replicas: 50\n  mode: medium\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for needle in [
        "The CronTab \"bad\" is invalid",
        "spec.replicas: Invalid value: 50: spec.replicas in body should be less than or equal to 10",
        "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
        "spec.cronSpec: Invalid value: \"nope\": spec.cronSpec in body should match",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in {stderr}");
    }
    let out = s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  image: x\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.cronSpec: Required value"), "{stderr}");

    // Selectable fields in field selectors.
    assert_eq!(
        s.ok(&[
            "get",
            "ct",
            "--field-selector",
            "spec.image=img",
            "-o",
            "name"
        ])
        .trim(),
        "crontab.stable.example.com/c1"
    );
    let out = s.kubectl(&["get", "ct", "--field-selector", "spec.mode=fast"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("field label not supported: spec.mode"),
        "{stderr}"
    );

    // Printer columns.
    let table = s.ok(&["get", "crontabs"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("NAME")
            && header.contains("SPEC")
            && header.contains("REPLICAS")
            && header.contains("AGE"),
        "{table}"
    );
    assert!(table.contains("* * * * */5"), "{table}");

    // Patch (merge, kubectl's choice for custom resources), generation follows the spec.
    s.ok(&[
        "patch",
        "ct",
        "c1",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    let c1 = json(&s.ok(&["get", "ct", "c1", "-o", "json"]));
    assert_eq!(c1["spec"]["replicas"], 3);
    assert_eq!(c1["metadata"]["generation"], 2);

    // The status subresource: the main resource ignores status, status ignores the rest.
    s.ok(&[
        "patch",
        "ct",
        "c1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":3,"labelSelector":"app=c1"},"spec":{"replicas":9}}"#,
    ]);
    let c1 = json(&s.ok(&["get", "ct", "c1", "-o", "json"]));
    assert_eq!(c1["status"]["replicas"], 3);
    assert_eq!(c1["spec"]["replicas"], 3);
    assert_eq!(c1["metadata"]["generation"], 2);

    // The scale subresource.
    s.ok(&["scale", "ct", "c1", "--replicas=5"]);
    let c1 = json(&s.ok(&["get", "ct", "c1", "-o", "json"]));
    assert_eq!(c1["spec"]["replicas"], 5);
    let scale = json(&s.ok(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/c1/scale",
    ]));
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=c1");

    // The other served version reads the same objects.
    let beta = json(&s.ok(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1beta1/namespaces/default/crontabs/c1",
    ]));
    assert_eq!(beta["apiVersion"], "stable.example.com/v1beta1");
    assert_eq!(beta["spec"]["replicas"], 5);

    // Watch sees changes.
    let mut watch = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            s.kubeconfig().to_str().unwrap(),
            "get",
            "ct",
            "--watch-only",
            "-o",
            "name",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    s.ok(&["label", "ct", "c2", "seen=yes"]);
    std::thread::sleep(Duration::from_millis(800));
    watch.kill().unwrap();
    let out = watch.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("crontab.stable.example.com/c2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Deleting the definition deletes its objects, then it is no longer served.
    s.ok(&[
        "delete",
        "crd",
        "crontabs.stable.example.com",
        "--timeout=30s",
    ]);
    let out = s.kubectl(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/crontabs",
    ]);
    assert!(!out.status.success());
    // Re-created, it starts empty.
    s.ok_stdin(&["apply", "-f", "-"], CRONTAB_CRD);
    s.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/crontabs.stable.example.com",
        "--timeout=20s",
    ]);
    wait_served(&s, "crontabs");
    let list = json(&s.ok(&["get", "--raw", "/apis/stable.example.com/v1/crontabs"]));
    assert_eq!(list["items"].as_array().unwrap().len(), 0, "{list}");
}

#[test]
fn invalid_definitions_are_rejected_with_kubernetes_messages() {
    let s = Server::start();
    // Name not plural.group, missing schema.
    let out = s.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: wrong.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: foos, kind: Foo}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("metadata.name: Invalid value: \"wrong.example.com\": must be spec.names.plural+\".\"+spec.group"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
        ),
        "{stderr}"
    );
    // Nothing was stored.
    let out = s.kubectl(&["get", "crd", "wrong.example.com"]);
    assert!(!out.status.success());
}
