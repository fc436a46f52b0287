"""deploy/serving (docs/serving.md, "Deploying"): the serving parties' and the gateway's
Kubernetes manifests against the API schemas (kubernetes-validate, offline, strict) and the
compose file against `docker-compose config`; both against the real `vfl-client` command line
(every argument parses, into serving mode), and the wiring no schema sees: Services select
their pods and name declared ports, the gateway's --peer names the feature parties' Services,
readiness probes ask readiness, the gateway has replicas."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_compose import parse
from test_k8s_manifests import schemas, validate  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parent.parent
K8S_DIR = ROOT / "deploy" / "serving" / "k8s"
COMPOSE_FILE = ROOT / "deploy" / "serving" / "docker-compose.yml"
PARTIES = ("party1", "party2")
Doc = dict[str, Any]


def k8s_docs() -> list[Doc]:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S_DIR / name).read_text()) if d]
    return docs


def of_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def serving_args(argv: list[str]) -> dict[str, Any]:
    path, params = parse(argv)
    assert path == "vfl-client" and params["serve_bundle"] is not None, argv
    return params


def test_every_k8s_object_is_valid_against_the_api_schemas(schemas) -> None:  # noqa: F811
    docs = k8s_docs()
    assert {d["kind"] for d in docs} == {"Service", "Deployment"}
    for doc in docs:
        validate(schemas, doc)


def test_k8s_services_select_their_pods_and_the_gateway_asks_them() -> None:
    docs = k8s_docs()
    services, deployments = of_kind(docs, "Service"), of_kind(docs, "Deployment")
    assert set(deployments) == {"serving-gateway", "serving-party1", "serving-party2"}
    ports: dict[str, int] = {}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["replicas"] >= 2, name  # stateless: replicas
        selected = [
            s for s in services.values()
            if s["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        ]  # fmt: skip
        assert len(selected) == 1, name
        (container,) = pod["spec"]["containers"]
        declared = {p["name"]: p["containerPort"] for p in container["ports"]}
        for port in selected[0]["spec"]["ports"]:
            assert port["targetPort"] in declared, (name, port)
        params = serving_args([*container["command"], *container["args"]])
        assert int(params["listen"].rpartition(":")[2]) == declared["grpc"]
        ports[selected[0]["metadata"]["name"]] = declared["grpc"]
        probe = container["readinessProbe"]
        if "httpGet" in probe:
            assert probe["httpGet"]["path"] == "/health/ready"
        else:
            assert probe["exec"]["command"] == ["python", "-m", "vfl_cli.health_cmd"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["VFL_HEALTH_ADDR"] == f"localhost:{declared['grpc']}"
    gateway = deployments["serving-gateway"]["spec"]["template"]["spec"]["containers"][0]
    params = serving_args([*gateway["command"], *gateway["args"]])
    peers = {p.partition("=")[0]: p.partition("=")[2] for p in params["peer"]}
    assert peers == {"1": f"serving-party1:{ports['serving-party1']}",
                     "2": f"serving-party2:{ports['serving-party2']}"}  # fmt: skip
    assert params["http"] == "0.0.0.0:8443" and params["http_auth"] == "auto"  # mTLS beyond lo


def test_compose_services_parse_and_wire_the_gateway() -> None:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert set(services) == {"gateway", *PARTIES}
    listen = {}
    for name, service in services.items():
        params = serving_args(service["command"])
        listen[name] = params["listen"].rpartition(":")[2]
        assert params["tls_dir"] == Path("/certs") and not params["insecure"]
        assert all(v.endswith(":ro") for v in service["volumes"]), name
    params = serving_args(services["gateway"]["command"])
    assert sorted(params["peer"]) == [f"{k}=party{k}:{listen[f'party{k}']}" for k in (1, 2)]


@pytest.mark.parametrize("binary", [["docker-compose"], ["docker", "compose"]])
def test_compose_config_accepts_the_file(binary: list[str]) -> None:
    if shutil.which(binary[0]) is None:
        pytest.skip(f"`{binary[0]}` is not on PATH (Debian's docker-compose; .ci/compose-check)")
    if subprocess.run([*binary, "version"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(f"`{' '.join(binary)}` does not run here")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "VFL_"))}
    result = subprocess.run(
        [*binary, "-f", str(COMPOSE_FILE), "--project-directory", str(ROOT), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr or result.stdout
