"""The cluster files, checked statically (nothing here can pull an image or reach a cloud):
cluster/ray-up.yaml against the JSON schema that ships inside the ray package, the KubeRay manifests
against tests/kuberay_schema.json (written from the KubeRay CRD reference; no package ships it),
and what a first try needs: images of the pinned Ray on Python 3.11, the project installed with its
pins, a CUDA torch only on GPU nodes, no virtualenv or results shipped, and the auth token.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO

CLUSTER = REPO / "cluster"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


RAY_VERSION = _pins()["ray"]


def _ray_schema() -> dict[str, Any]:
    spec = importlib.util.find_spec("ray")
    assert spec is not None and spec.submodule_search_locations
    path = Path(list(spec.submodule_search_locations)[0]) / "autoscaler" / "ray-schema.json"
    return json.loads(path.read_text())


def _yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((CLUSTER / name).read_text())


def _pip_installs(commands: list[str]) -> list[str]:
    return [c for c in commands if "pip install" in c]


def test_ray_up_validates_against_rays_own_schema() -> None:
    config, schema = _yaml("ray-up.yaml"), _ray_schema()
    jsonschema.validate(config, schema)
    typo = copy.deepcopy(config)
    typo["rsync_exlude"] = typo.pop("rsync_exclude")
    with pytest.raises(jsonschema.ValidationError):  # the schema really checks keys: a typo fails
        jsonschema.validate(typo, schema)


def test_ray_up_passes_the_checks_ray_up_runs() -> None:
    """What `ray up` does before anything else: fill defaults, then the schema plus its own checks
    (head type among the node types, workers' bounds). Private API: the launcher exposes no other."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(_yaml("ray-up.yaml")))


def test_ray_up_would_work_on_first_try() -> None:
    config = _yaml("ray-up.yaml")
    image = config["docker"]["image"]
    assert image == f"rayproject/ray:{RAY_VERSION}-py311-cpu"  # the pinned Ray, Python 3.11, CPU head
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    gpu = types["gpu_worker"]
    assert gpu["docker"]["worker_image"] == f"rayproject/ray:{RAY_VERSION}-py311-gpu"
    # Every install uses the pins; CPU nodes take torch from the CPU index, the GPU type from PyPI (CUDA).
    common, on_gpu = _pip_installs(config["setup_commands"]), _pip_installs(gpu["worker_setup_commands"])
    assert common and on_gpu and all("-c constraints.txt" in c for c in common + on_gpu)
    assert any("torch" in c and "download.pytorch.org/whl/cpu" in c for c in common)
    assert any(c.endswith("-c constraints.txt torch") for c in on_gpu)
    assert not any("whl/cpu" in c for c in on_gpu)
    assert any('-e ".[cluster,postgres]"' in c for c in common) and any('".[cluster,postgres]"' in c for c in on_gpu)
    # The repository is mounted without the virtualenv, results and git history.
    assert config["file_mounts"]["~/convgrid"] == "."
    assert {".venv", "results", ".git"} <= set(config["rsync_exclude"])
    # The token: one file on every node, token mode for every `ray start` and for drivers on the head.
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token ray start" in c for c in starts if "ray start" in c)
    assert any("RAY_AUTH_MODE=token" in c for c in config["setup_commands"])
    assert any("RAY_AUTH_MODE=token" in c for c in gpu["worker_setup_commands"])


KUBE = ["kuberay.yaml", "rayjob.yaml"]


def _kuberay_schema() -> dict[str, Any]:
    return json.loads((REPO / "tests" / "kuberay_schema.json").read_text())


def _cluster_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    return spec["rayClusterSpec"] if manifest["kind"] == "RayJob" else spec


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


@pytest.mark.parametrize("name", KUBE)
def test_kuberay_manifests_validate_against_the_crd_fields(name: str) -> None:
    manifest, schema = _yaml(name), _kuberay_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(manifest, schema, cls=jsonschema.Draft202012Validator)
    typo = copy.deepcopy(manifest)
    spec = _cluster_spec(typo)
    spec["enableInTreeAutoScaling"] = spec.pop("enableInTreeAutoscaling")  # kubectl would drop it silently
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(typo, schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("name", KUBE)
def test_kuberay_manifests_would_work_on_first_try(name: str) -> None:
    manifest = _yaml(name)
    spec = _cluster_spec(manifest)
    assert spec["rayVersion"] == RAY_VERSION
    assert spec["enableInTreeAutoscaling"] is True  # min/maxReplicas do nothing without it
    assert spec["authOptions"] == {"mode": "token"}  # the operator hands every container the token
    workdir = _dockerfile_workdir()
    for container in _containers(spec):
        assert container["workingDir"] == workdir  # where grids/ and studies/ are in the image
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_kuberay_cluster_has_a_gpu_worker_group() -> None:
    spec = _cluster_spec(_yaml("kuberay.yaml"))
    (gpu,) = [g for g in spec["workerGroupSpecs"] if g["groupName"] == "gpu"]
    (container,) = gpu["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "gpu" in container["image"]  # built with the CUDA torch (cluster/Dockerfile's GPU build)
    assert gpu["minReplicas"] == 0 and gpu["maxReplicas"] > 0


def test_rayjob_runs_a_grid_of_this_repository() -> None:
    entry = _yaml("rayjob.yaml")["spec"]["entrypoint"]
    assert entry.startswith(f"cd {_dockerfile_workdir()} && convgrid run ")
    grid = re.search(r"convgrid run (\S+)", entry)
    assert grid is not None and (REPO / grid.group(1)).is_file()
    assert "--address auto" in entry and "--results s3://" in entry  # results must outlive the pods


def _dockerfile_workdir() -> str:
    lines = (CLUSTER / "Dockerfile").read_text().splitlines()
    (workdir,) = [line.split(None, 1)[1] for line in lines if line.startswith("WORKDIR ")]
    return workdir


def test_dockerfile_and_dockerignore() -> None:
    text = (CLUSTER / "Dockerfile").read_text()
    assert f"ARG BASE=rayproject/ray:{RAY_VERSION}-py311-cpu" in text
    assert _dockerfile_workdir() == "/home/ray/convgrid"
    runs = [line for line in text.splitlines() if line.startswith("RUN ")]
    assert runs and all("-c constraints.txt" in r for r in runs if "pip install" in r)
    assert any('-e ".[cluster,postgres]"' in r for r in runs)
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".venv", "results", ".git"} <= ignored


def test_extras_match_what_users_install() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["postgres"] == ["psycopg[binary]"]
    assert extras["cluster"] == ["ray[default]"]
    assert "jsonschema" in extras["dev"] and "psycopg[binary]" in extras["dev"]
    assert _pins()["jsonschema"]  # the validator of these tests is pinned like everything else
