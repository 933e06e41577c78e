use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, Container, DownwardAPIProjection,
    DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource,
    KeyToPath, ObjectFieldSelector, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, Pod, PodSecurityContext, PodSpec, ProjectedVolumeSource,
    ResourceFieldSelector, Secret, SecretVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use super::objects::fake::Fake;
use super::*;

/// A pod directory that is unmounted and removed however the test ends.
struct PodDir(tempfile::TempDir);

impl PodDir {
    fn new() -> PodDir {
        PodDir(tempfile::tempdir().unwrap())
    }
    fn path(&self) -> PathBuf {
        self.0.path().join("pod")
    }
}

impl Drop for PodDir {
    fn drop(&mut self) {
        let _ = cleanup_dir(&self.path());
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

fn pod(volumes: Vec<Volume>, mounts: Vec<VolumeMount>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("app".into()),
            uid: Some("uid-9".into()),
            labels: Some(BTreeMap::from([
                ("b".to_string(), "2".to_string()),
                ("a".to_string(), "1".to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                volume_mounts: Some(mounts),
                resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        "memory".to_string(),
                        ApiQuantity("64Mi".into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: Some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn vol(name: &str) -> Volume {
    Volume {
        name: name.into(),
        ..Default::default()
    }
}

fn cm_volume(
    name: &str,
    cm: &str,
    items: Option<Vec<KeyToPath>>,
    optional: Option<bool>,
) -> Volume {
    Volume {
        config_map: Some(ConfigMapVolumeSource {
            name: cm.into(),
            items,
            optional,
            default_mode: Some(0o644),
        }),
        ..vol(name)
    }
}

fn fake() -> Fake {
    let f = Fake::default();
    f.put_config_map(
        "app",
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("cfg".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("app.conf".to_string(), "port=80\n".to_string()),
                ("other".to_string(), "x".to_string()),
            ])),
            binary_data: Some(BTreeMap::from([(
                "blob".to_string(),
                ByteString(vec![0, 1, 2]),
            )])),
            ..Default::default()
        },
    );
    f.put_secret(
        "app",
        Secret {
            metadata: ObjectMeta {
                name: Some("creds".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_string(),
                ByteString(b"hunter2".to_vec()),
            )])),
            ..Default::default()
        },
    );
    f
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn config_map_items_and_modes() {
    let cm = ConfigMap {
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        binary_data: Some(BTreeMap::from([("b".to_string(), ByteString(vec![7]))])),
        ..Default::default()
    };
    let all = config_map_payload(None, Some(&cm), 0o640, false).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["k"].mode, 0o640);
    assert_eq!(all["b"].data, vec![7]);

    let items = vec![
        KeyToPath {
            key: "k".into(),
            path: "dir/renamed".into(),
            mode: Some(0o400),
        },
        KeyToPath {
            key: "b".into(),
            path: "bin".into(),
            mode: None,
        },
    ];
    let some = config_map_payload(Some(&items), Some(&cm), 0o644, false).unwrap();
    assert_eq!(some.keys().collect::<Vec<_>>(), vec!["bin", "dir/renamed"]);
    assert_eq!(some["dir/renamed"].mode, 0o400);
    assert_eq!(some["bin"].mode, 0o644);

    let missing = vec![KeyToPath {
        key: "nope".into(),
        path: "p".into(),
        mode: None,
    }];
    assert_eq!(
        config_map_payload(Some(&missing), Some(&cm), 0o644, false).unwrap_err(),
        "configmap references non-existent config key: nope"
    );
    assert!(config_map_payload(Some(&missing), Some(&cm), 0o644, true)
        .unwrap()
        .is_empty());
    assert_eq!(
        secret_payload(Some(&missing), None, 0o644, false).unwrap_err(),
        "references non-existent secret key: nope"
    );
}

#[test]
fn downward_files() {
    let p = pod(vec![], vec![]);
    let node = NodeInfo::default();
    let items = vec![
        DownwardAPIVolumeFile {
            path: "labels".into(),
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: "metadata.labels".into(),
            }),
            ..Default::default()
        },
        DownwardAPIVolumeFile {
            path: "./mem".into(),
            mode: Some(0o400),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("main".into()),
                resource: "limits.memory".into(),
                divisor: Some(ApiQuantity("1Mi".into())),
            }),
            ..Default::default()
        },
    ];
    let payload = downward_payload(&items, &p, &node, 0o644).unwrap();
    assert_eq!(payload["labels"].data, b"a=\"1\"\nb=\"2\"");
    assert_eq!(payload["labels"].mode, 0o644);
    assert_eq!(payload["mem"].data, b"64");
    assert_eq!(payload["mem"].mode, 0o400);

    let bad = vec![
        DownwardAPIVolumeFile {
            path: "x".into(),
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: "spec.nodeName".into(),
            }),
            ..Default::default()
        },
        DownwardAPIVolumeFile {
            path: "y".into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("ghost".into()),
                resource: "limits.cpu".into(),
                divisor: None,
            }),
            ..Default::default()
        },
    ];
    assert_eq!(
        downward_payload(&bad, &p, &node, 0o644).unwrap_err(),
        "[unsupported fieldPath: spec.nodeName, container ghost not found]"
    );
}

#[tokio::test]
async fn config_map_volume_follows_its_source() {
    let dir = PodDir::new();
    let f = fake();
    let p = pod(
        vec![
            cm_volume(
                "cfg",
                "cfg",
                Some(vec![KeyToPath {
                    key: "app.conf".into(),
                    path: "conf/app.conf".into(),
                    mode: Some(0o600),
                }]),
                None,
            ),
            cm_volume("all", "cfg", None, None),
            // Not mounted by any container: never set up (its configMap is missing).
            cm_volume("unused", "ghost", None, None),
        ],
        vec![mount("cfg", "/etc/app"), mount("all", "/etc/all")],
    );
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let cfg = &vols.volumes["cfg"];
    assert_eq!(
        cfg.path,
        dir.path().join("volumes/kubernetes.io~configmap/cfg")
    );
    assert!(cfg.read_only);
    assert!(!vols.volumes.contains_key("unused"));
    assert_eq!(
        fs::read_to_string(cfg.path.join("conf/app.conf")).unwrap(),
        "port=80\n"
    );
    assert_eq!(mode(&cfg.path.join("conf/app.conf")), 0o600);
    assert_eq!(mode(&cfg.path), 0o777);
    let all = &vols.volumes["all"].path;
    assert_eq!(fs::read(all.join("blob")).unwrap(), vec![0, 1, 2]);
    assert_eq!(mode(&all.join("other")), 0o644);

    let before = fs::read_link(all.join("..data")).unwrap();
    prepare_with(&f, &dir.path(), &p).await.unwrap();
    assert_eq!(fs::read_link(all.join("..data")).unwrap(), before);

    // An update (and a removed key) shows up on the next prepare.
    f.put_config_map(
        "app",
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("cfg".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "app.conf".to_string(),
                "port=81\n".to_string(),
            )])),
            ..Default::default()
        },
    );
    prepare_with(&f, &dir.path(), &p).await.unwrap();
    assert_eq!(
        fs::read_to_string(cfg.path.join("conf/app.conf")).unwrap(),
        "port=81\n"
    );
    assert!(!all.join("other").exists());
    assert_ne!(fs::read_link(all.join("..data")).unwrap(), before);

    // Mounts: read-only whatever the volumeMount says.
    let c = &p.spec.as_ref().unwrap().containers[0];
    let mounts = vols.mounts(&p, c).unwrap();
    assert_eq!(mounts.len(), 2);
    assert_eq!(mounts[0].container_path, "/etc/app");
    assert_eq!(mounts[0].host_path, cfg.path.to_string_lossy());
    assert!(mounts[0].readonly);
    assert!(!mounts[0].selinux_relabel);
    assert_eq!(
        mounts[0].propagation,
        MountPropagation::PropagationPrivate as i32
    );
}

#[tokio::test]
async fn missing_sources_fail_the_mount() {
    let dir = PodDir::new();
    let f = fake();
    let p = pod(
        vec![cm_volume("v", "absent", None, None)],
        vec![mount("v", "/v")],
    );
    assert_eq!(
        prepare_with(&f, &dir.path(), &p).await.unwrap_err(),
        "MountVolume.SetUp failed for volume \"v\" : configmap \"absent\" not found"
    );

    let p = pod(
        vec![Volume {
            secret: Some(SecretVolumeSource {
                secret_name: Some("nosecret".into()),
                ..Default::default()
            }),
            ..vol("s")
        }],
        vec![mount("s", "/s")],
    );
    assert_eq!(
        prepare_with(&f, &dir.path(), &p).await.unwrap_err(),
        "MountVolume.SetUp failed for volume \"s\" : secret \"nosecret\" not found"
    );

    // Optional: an empty volume.
    let p = pod(
        vec![cm_volume("v", "absent", None, Some(true))],
        vec![mount("v", "/v")],
    );
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    assert!(vols.volumes["v"].path.join("..data").exists());

    // Unknown volume name in a mount.
    let p = pod(vec![], vec![mount("ghost", "/g")]);
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let c = &p.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        vols.mounts(&p, c).unwrap_err(),
        "cannot find volume \"ghost\" to mount into container \"main\""
    );
}

#[tokio::test]
async fn secret_projected_and_downward_volumes_live_in_memory() {
    let dir = PodDir::new();
    let f = fake();
    let mut p = pod(
        vec![
            Volume {
                secret: Some(SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..vol("sec")
            },
            Volume {
                projected: Some(ProjectedVolumeSource {
                    default_mode: Some(0o644),
                    sources: Some(vec![
                        VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                path: "token".into(),
                                expiration_seconds: Some(3607),
                                audience: None,
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: "cfg".into(),
                                items: Some(vec![KeyToPath {
                                    key: "app.conf".into(),
                                    path: "ca.crt".into(),
                                    mode: None,
                                }]),
                                optional: None,
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            downward_api: Some(DownwardAPIProjection {
                                items: Some(vec![DownwardAPIVolumeFile {
                                    path: "namespace".into(),
                                    field_ref: Some(ObjectFieldSelector {
                                        api_version: Some("v1".into()),
                                        field_path: "metadata.namespace".into(),
                                    }),
                                    ..Default::default()
                                }]),
                            }),
                            ..Default::default()
                        },
                    ]),
                }),
                ..vol("kube-api-access-x")
            },
            Volume {
                downward_api: Some(DownwardAPIVolumeSource {
                    items: Some(vec![DownwardAPIVolumeFile {
                        path: "name".into(),
                        field_ref: Some(ObjectFieldSelector {
                            api_version: Some("v1".into()),
                            field_path: "metadata.name".into(),
                        }),
                        ..Default::default()
                    }]),
                    default_mode: None,
                }),
                ..vol("info")
            },
        ],
        vec![
            mount("sec", "/sec"),
            mount(
                "kube-api-access-x",
                "/var/run/secrets/kubernetes.io/serviceaccount",
            ),
            mount("info", "/info"),
        ],
    );
    p.spec.as_mut().unwrap().service_account_name = Some("robot".into());
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let sec = &vols.volumes["sec"].path;
    assert_eq!(sec, &dir.path().join("volumes/kubernetes.io~secret/sec"));
    assert_eq!(fs::read_to_string(sec.join("password")).unwrap(), "hunter2");
    assert_eq!(mode(&sec.join("password")), 0o400);
    let am_root = unsafe { libc::geteuid() } == 0;
    if am_root {
        assert!(sys::is_mount_point(sec), "secret volumes are a tmpfs");
    }
    let sa = &vols.volumes["kube-api-access-x"].path;
    assert_eq!(
        fs::read_to_string(sa.join("token")).unwrap(),
        "token-for-app/robot/web"
    );
    assert_eq!(fs::read_to_string(sa.join("ca.crt")).unwrap(), "port=80\n");
    assert_eq!(fs::read_to_string(sa.join("namespace")).unwrap(), "app");
    assert_eq!(
        f.token_requests.lock().clone(),
        vec![("app".to_string(), "robot".to_string(), None, 3607)]
    );
    let info = &vols.volumes["info"].path;
    assert_eq!(
        info,
        &dir.path().join("volumes/kubernetes.io~downward-api/info")
    );
    assert_eq!(fs::read_to_string(info.join("name")).unwrap(), "web");

    cleanup_dir(&dir.path()).unwrap();
    assert!(!dir.path().exists());
    assert!(!sys::is_mount_point(sec));
}

#[tokio::test]
async fn fs_group_and_single_user_own_the_token() {
    let dir = PodDir::new();
    let f = fake();
    let mut p = pod(
        vec![
            Volume {
                projected: Some(ProjectedVolumeSource {
                    default_mode: Some(0o644),
                    sources: Some(vec![VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            path: "token".into(),
                            expiration_seconds: None,
                            audience: Some("vault".into()),
                        }),
                        ..Default::default()
                    }]),
                }),
                ..vol("tok")
            },
            Volume {
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..vol("scratch")
            },
        ],
        vec![mount("tok", "/tok"), mount("scratch", "/scratch")],
    );
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        fs_group: Some(1234),
        run_as_user: Some(1000),
        ..Default::default()
    });
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let token = vols.volumes["tok"].path.join("token");
    let meta = fs::metadata(&token).unwrap();
    // 0600 then group read from the fsGroup.
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(meta.gid(), 1234);
    assert_eq!(meta.uid(), 1000);
    assert_eq!(
        f.token_requests.lock()[0].2.as_deref(),
        Some("vault"),
        "audience passed"
    );
    assert_eq!(f.token_requests.lock()[0].3, 3600);
    let scratch = &vols.volumes["scratch"].path;
    assert_eq!(
        scratch,
        &dir.path().join("volumes/kubernetes.io~empty-dir/scratch")
    );
    let m = fs::metadata(scratch).unwrap();
    assert_eq!(m.gid(), 1234);
    assert_eq!(m.mode() & 0o7777, 0o777 | libc::S_ISGID);
}

#[tokio::test]
async fn empty_dir_memory_is_a_sized_tmpfs() {
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = PodDir::new();
    let f = fake();
    let p = pod(
        vec![Volume {
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(ApiQuantity("16Mi".into())),
            }),
            ..vol("shm")
        }],
        vec![mount("shm", "/dev/shm")],
    );
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let path = &vols.volumes["shm"].path;
    assert!(sys::is_mount_point(path));
    let real = fs::canonicalize(path).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(real.to_str().unwrap()))
        .unwrap();
    assert!(line.contains("tmpfs"), "{line}");
    assert!(line.contains("size=16384k"), "{line}");
    // A second prepare does not stack another mount.
    prepare_with(&f, &dir.path(), &p).await.unwrap();
    let count = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(real.to_str().unwrap()))
        .count();
    assert_eq!(count, 1);
    cleanup_dir(&dir.path()).unwrap();
    assert!(!sys::is_mount_point(path));
    assert!(!dir.path().exists());

    // The pod's memory limit (64Mi) caps a volume without sizeLimit.
    let ctx_pod = pod(vec![], vec![]);
    let ctx = Ctx {
        objects: &f,
        pod: &ctx_pod,
        volumes_dir: Path::new("/nonexistent"),
        node: NodeInfo {
            allocatable: BTreeMap::from([("memory".to_string(), ApiQuantity("1Gi".into()))]),
            ..Default::default()
        },
        fs_group: None,
        fs_user: None,
    };
    assert_eq!(ctx.memory_volume_size(None), Some(64 * 1024 * 1024));
    assert_eq!(
        ctx.memory_volume_size(Quantity::parse("1Mi")),
        Some(1024 * 1024)
    );
}

#[test]
fn host_path_types() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    let d = base.join("d");
    let f = base.join("f");
    fs::create_dir(&d).unwrap();
    fs::write(&f, "x").unwrap();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    assert!(check_host_path(&s(&d), "Directory").is_ok());
    assert_eq!(
        check_host_path(&s(&f), "Directory").unwrap_err(),
        format!("hostPath type check failed: {} is not a directory", s(&f))
    );
    assert_eq!(
        check_host_path(&s(&base.join("none")), "Directory").unwrap_err(),
        format!(
            "hostPath type check failed: {} is not a directory",
            s(&base.join("none"))
        )
    );
    assert!(check_host_path(&s(&f), "File").is_ok());
    assert_eq!(
        check_host_path(&s(&d), "File").unwrap_err(),
        format!("hostPath type check failed: {} is not a file", s(&d))
    );
    assert!(check_host_path(&s(&f), "Socket")
        .unwrap_err()
        .ends_with("is not a socket file"));
    assert!(check_host_path(&s(&f), "CharDevice")
        .unwrap_err()
        .ends_with("is not a character device"));
    assert!(check_host_path("/dev/null", "CharDevice").is_ok());
    assert!(check_host_path(&s(&f), "BlockDevice")
        .unwrap_err()
        .ends_with("is not a block device"));
    assert_eq!(
        check_host_path(&s(&f), "Weird").unwrap_err(),
        "Weird is an invalid volume type"
    );
    assert_eq!(
        check_host_path("/a/../b", "").unwrap_err(),
        "invalid HostPath `/a/../b`: must not contain '..'"
    );
    assert!(check_host_path(&s(&base.join("anything")), "").is_ok());

    let created = base.join("new/deep");
    check_host_path(&s(&created), "DirectoryOrCreate").unwrap();
    assert!(created.is_dir());
    assert_eq!(mode(&created), 0o755);
    let file = base.join("new/file");
    check_host_path(&s(&file), "FileOrCreate").unwrap();
    assert!(file.is_file());
    assert_eq!(mode(&file), 0o644);
    assert_eq!(
        check_host_path(&s(&file), "DirectoryOrCreate").unwrap_err(),
        format!(
            "hostPath type check failed: {} is not a directory",
            s(&file)
        )
    );
}

#[tokio::test]
async fn sub_paths() {
    let dir = PodDir::new();
    let f = fake();
    let outside = tempfile::tempdir().unwrap();
    let mut p = pod(
        vec![
            Volume {
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..vol("data")
            },
            cm_volume("cfg", "cfg", None, None),
        ],
        vec![
            VolumeMount {
                sub_path: Some("logs/app".into()),
                mount_propagation: Some("HostToContainer".into()),
                ..mount("data", "/logs")
            },
            VolumeMount {
                sub_path: Some("app.conf".into()),
                read_only: Some(false),
                ..mount("cfg", "/etc/app.conf")
            },
            VolumeMount {
                sub_path_expr: Some("pods/$(POD_NAME)".into()),
                ..mount("data", "relative")
            },
        ],
    );
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    let c = p.spec.as_ref().unwrap().containers[0].clone();
    let env = vec![("POD_NAME".to_string(), "web".to_string())];
    let m = vols.mounts_with_env(&p, &c, &env).unwrap();
    let data = fs::canonicalize(&vols.volumes["data"].path).unwrap();
    assert_eq!(m[0].host_path, data.join("logs/app").to_string_lossy());
    assert!(data.join("logs/app").is_dir());
    assert_eq!(mode(&data.join("logs/app")), 0o777);
    assert_eq!(
        m[0].propagation,
        MountPropagation::PropagationHostToContainer as i32
    );
    // A configMap key through its ..data link: the real file, read-only.
    assert!(m[1].host_path.contains("/..20"), "{}", m[1].host_path);
    assert!(m[1].host_path.ends_with("/app.conf"));
    assert!(m[1].readonly);
    assert_eq!(m[2].container_path, "/relative");
    assert_eq!(m[2].host_path, data.join("pods/web").to_string_lossy());

    // subPathExpr without its variable.
    assert_eq!(
        vols.mounts(&p, &c).unwrap_err(),
        "missing value for POD_NAME"
    );

    // A symlink out of the volume is refused.
    std::os::unix::fs::symlink(outside.path(), data.join("escape")).unwrap();
    let c2 = Container {
        volume_mounts: Some(vec![VolumeMount {
            sub_path: Some("escape".into()),
            ..mount("data", "/x")
        }]),
        ..c.clone()
    };
    assert_eq!(
        vols.mounts(&p, &c2).unwrap_err(),
        "failed to prepare subPath for volumeMount \"data\" of container \"main\""
    );
    let c3 = Container {
        volume_mounts: Some(vec![VolumeMount {
            sub_path: Some("escape/new".into()),
            ..mount("data", "/x")
        }]),
        ..c.clone()
    };
    assert_eq!(
        vols.mounts(&p, &c3).unwrap_err(),
        "failed to create subPath directory for volumeMount \"data\" of container \"main\""
    );
    assert!(!outside.path().join("new").exists());
    let c4 = Container {
        volume_mounts: Some(vec![VolumeMount {
            sub_path: Some("../up".into()),
            ..mount("data", "/x")
        }]),
        ..c.clone()
    };
    assert_eq!(
        vols.mounts(&p, &c4).unwrap_err(),
        "unable to provision SubPath `../up`: must not contain '..'"
    );
    let c5 = Container {
        volume_mounts: Some(vec![VolumeMount {
            mount_propagation: Some("Sideways".into()),
            ..mount("data", "/x")
        }]),
        ..c.clone()
    };
    assert_eq!(
        vols.mounts(&p, &c5).unwrap_err(),
        "invalid MountPropagation mode: \"Sideways\""
    );
    p.spec.as_mut().unwrap().volumes = None;
}

fn claim(name: &str, phase: &str, volume: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("app".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: volume.map(str::to_string),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn claims_resolve_to_their_volume() {
    let dir = PodDir::new();
    let host = tempfile::tempdir().unwrap();
    let f = fake();
    f.claims.lock().insert(
        ("app".into(), "data".into()),
        Arc::new(claim("data", "Bound", Some("pv1"))),
    );
    f.claims.lock().insert(
        ("app".into(), "pending".into()),
        Arc::new(claim("pending", "Pending", None)),
    );
    f.volumes.lock().insert(
        "pv1".into(),
        Arc::new(PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                host_path: Some(HostPathVolumeSource {
                    path: host.path().to_string_lossy().into_owned(),
                    type_: Some("Directory".into()),
                }),
                claim_ref: Some(ObjectReference {
                    uid: Some("uid-data".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }),
    );
    let pvc = |name: &str, claim: &str| Volume {
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: Some(true),
        }),
        ..vol(name)
    };
    let p = pod(vec![pvc("d", "data")], vec![mount("d", "/d")]);
    let vols = prepare_with(&f, &dir.path(), &p).await.unwrap();
    assert_eq!(vols.volumes["d"].path, host.path());
    assert!(vols.volumes["d"].read_only);

    let p = pod(vec![pvc("d", "pending")], vec![mount("d", "/d")]);
    assert_eq!(
        prepare_with(&f, &dir.path(), &p).await.unwrap_err(),
        "Unable to attach or mount volumes: unmounted volumes=[d], unattached volumes=[d], failed to process volumes=[d]: error processing PVC app/pending: PVC is not bound"
    );
    let p = pod(vec![pvc("d", "nope")], vec![mount("d", "/d")]);
    assert!(prepare_with(&f, &dir.path(), &p)
        .await
        .unwrap_err()
        .ends_with(
            "error processing PVC app/nope: failed to fetch PVC from API server: persistentvolumeclaims \"nope\" not found"
        ));

    // An unsupported volume type.
    let p = pod(
        vec![Volume {
            nfs: Some(Default::default()),
            ..vol("n")
        }],
        vec![mount("n", "/n")],
    );
    assert!(prepare_with(&f, &dir.path(), &p)
        .await
        .unwrap_err()
        .ends_with(
            "failed to get Plugin from volumeSpec for volume \"n\" err=no volume plugin matched"
        ));
}
