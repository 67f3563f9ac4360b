"""The KubeRay manifest (docker/kubernetes/overtime-raycluster.yaml) is valid and holds together: every object and
every pod template against the Kubernetes schemas (kubernetes-validate, offline), the RayCluster's own fields as
KubeRay documents them, and the links between the objects (the API joins the head's service, every pod mounts the
shared volume where the checkpoints go, Ray's version is the one the service pins)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "docker" / "kubernetes" / "overtime-raycluster.yaml"
K8S = "1.30.0"  # a Kubernetes version KubeRay supports; schemas of it ship with kubernetes-validate
GCS_PORT = 6379  # Ray's head listens here; KubeRay's head service is <cluster name>-head-svc


@pytest.fixture(scope="module")
def objects() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return {d["kind"]: d for d in docs}


def pod_templates(objects: dict[str, dict]) -> dict[str, dict]:
    ray = objects["RayCluster"]["spec"]
    templates = {"head": ray["headGroupSpec"]["template"], "api": objects["Deployment"]["spec"]["template"]}
    templates |= {f"worker {g['groupName']}": g["template"] for g in ray["workerGroupSpecs"]}
    return templates


def test_every_kubernetes_object_and_pod_template_is_valid(objects):
    for kind, obj in objects.items():
        if kind != "RayCluster":
            kubernetes_validate.validate(obj, K8S, strict=True)
    for name, template in pod_templates(objects).items():
        as_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(as_template, K8S, strict=True), name


def test_the_ray_cluster_is_a_kuberay_ray_cluster_of_the_pinned_ray(objects):
    ray = objects["RayCluster"]
    assert ray["apiVersion"] == "ray.io/v1" and ray["metadata"]["name"]
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cluster"]
    assert pinned == [f"ray=={ray['spec']['rayVersion']}"]
    groups = [ray["spec"]["headGroupSpec"], *ray["spec"]["workerGroupSpecs"]]
    for group in groups:
        assert all(isinstance(v, str) for v in group["rayStartParams"].values()), "KubeRay takes strings only"
    for group in ray["spec"]["workerGroupSpecs"]:
        assert group["groupName"] and group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert float(group["rayStartParams"]["num-cpus"]) >= 2, "a node holds at least one stream (2 CPUs each)"
        mounts = {m["mountPath"] for c in group["template"]["spec"]["containers"] for m in c["volumeMounts"]}
        assert "/dev/shm" in mounts, "the frame rings need shared memory"


def test_the_api_joins_the_head_and_every_pod_shares_the_checkpoints(objects):
    cluster = objects["RayCluster"]["metadata"]["name"]
    (api,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    command = api["command"]
    assert command[:2] == ["overtime", "serve"]
    assert command[command.index("--ray-address") + 1] == f"{cluster}-head-svc:{GCS_PORT}"
    env = {e["name"]: e["value"] for e in api["env"]}
    claim = objects["PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    images = set()
    for name, template in pod_templates(objects).items():
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        for container in template["spec"]["containers"]:
            images.add(container["image"])
            data = [m for m in container["volumeMounts"] if volumes[m["name"]].get("persistentVolumeClaim")]
            assert [volumes[m["name"]]["persistentVolumeClaim"]["claimName"] for m in data] == [
                claim["metadata"]["name"]
            ], name
            assert env["OVERTIME_CHECKPOINT_DIR"].startswith(data[0]["mountPath"] + "/"), name
            assert env["OVERTIME_MEDIA_DIR"].startswith(data[0]["mountPath"] + "/"), name
    assert len(images) == 1, f"one image everywhere: {images}"
    assert objects["Service"]["spec"]["selector"] == objects["Deployment"]["spec"]["selector"]["matchLabels"]
