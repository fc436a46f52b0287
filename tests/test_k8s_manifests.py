"""deploy/k8s against the Kubernetes API schemas and against our own CLIs.

The schemas (`kubernetes-validate`, bundled JSON schemas, strict: unknown fields are errors) check
each object on its own, offline. The rest checks what no schema sees: Services select the pods
they should and name ports those pods declare, every argument parses with the real `vfl`,
`vfl-client` and `vfl-coordinator` commands (as tests/test_compose.py does for the compose
file), each client names the coordinator's Service and its own, volumes are declared, the image
is the compose file's, the Secrets hold what `vfl certs` writes, the four clients differ only in
their number, and the documented GPU variant is valid too. The slow test runs the manifests'
commands as local processes and their probes against them.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import typer
import typer.main
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_compose import parse

from vfl_cli.certs_cmd import create_federation
from vfl_cli.health_cmd import health

ROOT = Path(__file__).resolve().parent.parent
K8S_DIR = ROOT / "deploy" / "k8s"
KUSTOMIZATION = K8S_DIR / "kustomization.yaml"
K8S_VERSION = "1.32.0"  # the oldest Kubernetes the example is checked against
NAMESPACE = "vfl"
K = 4
PROBE = ["python", "-m", "vfl_cli.health_cmd"]  # `vfl health` without importing torch
PARTIES = [f"party{k}" for k in range(K)]
WORKLOAD_KINDS = ("StatefulSet", "Deployment")
Doc = dict[str, Any]


# ---------------------------------------------------------------------------------- loading
def manifest_files() -> list[Path]:
    return sorted(p for p in K8S_DIR.glob("*.yaml") if p != KUSTOMIZATION)


def load(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return [d for path in manifest_files() for d in load(path.read_text())]


@pytest.fixture(scope="module")
def kustomization() -> Doc:
    return yaml.safe_load(KUSTOMIZATION.read_text())


def of_kind(docs: list[Doc], *kinds: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in kinds}


def pod(workload: Doc) -> Doc:
    return workload["spec"]["template"]["spec"]


def main_container(workload: Doc) -> Doc:
    [container] = pod(workload)["containers"]
    return container


def all_containers(workload: Doc) -> list[Doc]:
    spec = pod(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def argv(container: Doc) -> list[str]:
    words = [*container.get("command", []), *container.get("args", [])]
    assert all(isinstance(w, str) for w in words), f"non-string argument in {words}"
    return words


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def mount(container: Doc, path: str) -> Doc:
    """The volumeMount at `path` (or the one holding it)."""
    found = [
        m
        for m in container.get("volumeMounts", [])
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert found, f"{container['name']}: nothing mounted at {path}"
    return max(found, key=lambda m: len(m["mountPath"]))


def volume(workload: Doc, name: str) -> Doc:
    """The pod volume or volumeClaimTemplate called `name`."""
    declared = {v["name"]: v for v in pod(workload).get("volumes", [])}
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        claim_name = claim["metadata"]["name"]
        declared[claim_name] = {"name": claim_name, "persistentVolumeClaim": claim}
    assert name in declared, f"{workload['metadata']['name']}: volume {name!r} is not declared"
    return declared[name]


def clients(docs: list[Doc]) -> dict[int, Doc]:
    """Block -> the client workload, from each vfl-client's --block."""
    result = {}
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():
        path, params = parse(argv(main_container(workload)))
        if path == "vfl-client":
            result[params["block"]] = workload
    return result


def coordinator(docs: list[Doc]) -> Doc:
    [found] = [
        w
        for w in of_kind(docs, *WORKLOAD_KINDS).values()
        if parse(argv(main_container(w)))[0] == "vfl-coordinator"
    ]
    return found


def service_for(docs: list[Doc], host: str) -> Doc:
    services = of_kind(docs, "Service")
    assert host in services, f"no Service {host!r} (Services: {sorted(services)})"
    return services[host]


def selected(docs: list[Doc], service: Doc) -> list[Doc]:
    """The workloads whose pods the Service's selector matches."""
    selector = service["spec"]["selector"].items()
    return [
        w
        for w in of_kind(docs, *WORKLOAD_KINDS).values()
        if selector <= w["spec"]["template"]["metadata"]["labels"].items()
    ]


def container_port(container: Doc, target: int | str) -> int:
    for p in container.get("ports", []):
        if target in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    raise AssertionError(f"container {container['name']} declares no port {target!r}")


def reaches(docs: list[Doc], address: str) -> tuple[str, int]:
    """(workload, container port) that `host:port` reaches through the Service called host."""
    host, _, number = address.rpartition(":")
    service = service_for(docs, host)
    [workload] = selected(docs, service)
    ports = [p for p in service["spec"]["ports"] if p["port"] == int(number)]
    assert ports, f"Service {host} has no port {number}"
    target = ports[0].get("targetPort", ports[0]["port"])
    return workload["metadata"]["name"], container_port(main_container(workload), target)


# ---------------------------------------------------------------------------------- schemas
@pytest.fixture(scope="module")
def schemas() -> Any:
    """The kubernetes_validate module, with its schemas for K8S_VERSION; skipped (with the
    reason) where the package or those schemas are missing."""
    try:
        import kubernetes_validate
    except ImportError:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[dev]')")
    try:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Namespace"}, K8S_VERSION)
    except kubernetes_validate.VersionNotSupportedError:
        pytest.skip(f"kubernetes-validate has no schemas for Kubernetes {K8S_VERSION}")
    return kubernetes_validate


def validate(schemas: Any, doc: Doc) -> None:
    """Strict: a field the API does not know is an error too."""
    schemas.validate(doc, K8S_VERSION, strict=True)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection (or resolve a name) fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access during an offline check: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_offline_guard_refuses_connections(offline: None) -> None:
    with pytest.raises(AssertionError, match="network access"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_every_manifest_passes_the_kubernetes_schemas(
    docs: list[Doc], schemas: Any, offline: None
) -> None:
    assert len(docs) == 1 + 2 + 2 * K  # namespace, coordinator and each client: Service + set
    for doc in docs:
        validate(schemas, doc)


def test_schema_check_is_real(docs: list[Doc], schemas: Any, offline: None) -> None:
    """A misspelt field, a wrong type and a missing required field are each refused."""
    workload = coordinator(docs)
    typo = copy.deepcopy(workload)
    typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    wrong_type = copy.deepcopy(workload)
    main_container(wrong_type)["ports"][0]["containerPort"] = "fifty"
    missing = copy.deepcopy(workload)
    del missing["spec"]["selector"]
    for broken in (typo, wrong_type, missing):
        with pytest.raises(schemas.ValidationError):
            validate(schemas, broken)


# ---------------------------------------------------------------------------------- kustomize
def test_kustomization_lists_every_manifest_in_one_namespace(
    docs: list[Doc], kustomization: Doc
) -> None:
    assert sorted(kustomization["resources"]) == [p.name for p in manifest_files()]
    assert kustomization["namespace"] == NAMESPACE
    [namespace] = of_kind(docs, "Namespace").values()
    assert namespace["metadata"]["name"] == NAMESPACE
    for doc in docs:  # also right with `kubectl apply -f`, without kustomize
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


def identity_of(workload: Doc) -> str:
    """The TLS identity a workload's process runs as (vfl-client: party<block>)."""
    path, params = parse(argv(main_container(workload)))
    if path == "vfl-coordinator":
        return "coordinator"
    return params["party_id"] or f"party{params['block']}"


def tls_secret(workload: Doc) -> str:
    _, params = parse(argv(main_container(workload)))
    tls = volume(workload, mount(main_container(workload), str(params["tls_dir"]))["name"])
    return tls["secret"]["secretName"]


def test_secrets_hold_exactly_what_vfl_certs_writes(
    docs: list[Doc], kustomization: Doc, tmp_path: Path
) -> None:
    """One Secret per process identity with that identity's files; no CA key, no operator."""
    create_federation(tmp_path, PARTIES)
    generated = {s["name"]: s["files"] for s in kustomization["secretGenerator"]}
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    identities = ["coordinator", *PARTIES]
    assert sorted(generated) == sorted(f"vfl-tls-{i}" for i in identities)
    for identity in identities:
        written = sorted(p.name for p in (tmp_path / identity).iterdir())
        files = generated[f"vfl-tls-{identity}"]
        assert files == [f"certs/{identity}/{name}" for name in written]
    every_file = [f for files in generated.values() for f in files]
    assert not [f for f in every_file if f.endswith("ca.key") or "/operator/" in f]
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():  # each pod its own identity
        assert tls_secret(workload) == f"vfl-tls-{identity_of(workload)}"


def test_kustomize_build_renders_valid_objects(
    docs: list[Doc], schemas: Any, tmp_path: Path
) -> None:
    """`kubectl kustomize` (offline) over the example with fresh certificates."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH (its built-in kustomize renders the example)")
    tree = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, tree, ignore=shutil.ignore_patterns("certs"))
    create_federation(tree / "certs", PARTIES)
    result = subprocess.run(
        [kubectl, "kustomize", str(tree)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    rendered = load(result.stdout)
    secrets = of_kind(rendered, "Secret")
    assert sorted(d["metadata"]["name"] for d in rendered if d["kind"] != "Secret") == sorted(
        d["metadata"]["name"] for d in docs
    )
    for doc in rendered:
        validate(schemas, doc)
        assert doc["kind"] == "Namespace" or doc["metadata"]["namespace"] == NAMESPACE
    for workload in of_kind(rendered, *WORKLOAD_KINDS).values():
        secret = secrets[tls_secret(workload)]
        directory = tree / "certs" / identity_of(workload)
        assert sorted(secret["data"]) == sorted(p.name for p in directory.iterdir())


# ---------------------------------------------------------------------------------- wiring
def test_service_selectors_match_exactly_one_workload(docs: list[Doc]) -> None:
    for name, service in of_kind(docs, "Service").items():
        assert [w["metadata"]["name"] for w in selected(docs, service)] == [name], name


def test_workload_selectors_and_service_names(docs: list[Doc]) -> None:
    services = of_kind(docs, "Service")
    for name, workload in of_kind(docs, *WORKLOAD_KINDS).items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        assert workload["spec"]["replicas"] == 1, f"{name}: one process per party"
        if workload["kind"] == "StatefulSet":
            assert workload["spec"]["serviceName"] in services, name


def test_service_ports_exist_on_the_pods_and_are_the_listening_ports(docs: list[Doc]) -> None:
    for name, service in of_kind(docs, "Service").items():
        for p in service["spec"]["ports"]:
            workload, number = reaches(docs, f"{name}:{p['port']}")
            _, params = parse(argv(main_container(of_kind(docs, *WORKLOAD_KINDS)[workload])))
            assert number == port_of(params["listen"]), f"Service {name} port {p['port']}"


def test_coordinator_command(docs: list[Doc]) -> None:
    workload = coordinator(docs)
    container = main_container(workload)
    path, params = parse(argv(container))
    assert path == "vfl-coordinator"
    assert params["clients"] == len(clients(docs)) == K
    assert params["serve"] is True and params["insecure"] is False
    assert params["alignment"] == "psi" and params["parties"] is None
    for directory in (params["out"], params["checkpoint_dir"]):  # on the persistent volume
        used = mount(container, str(directory))
        assert not used.get("readOnly")
        assert "persistentVolumeClaim" in volume(workload, used["name"])
    assert params["checkpoint_every"] > 0


@pytest.mark.parametrize("k", range(K))
def test_client_names_the_coordinator_service_and_its_own(docs: list[Doc], k: int) -> None:
    workload = clients(docs)[k]
    _, params = parse(argv(main_container(workload)))
    coord = coordinator(docs)
    _, coord_params = parse(argv(main_container(coord)))
    name = workload["metadata"]["name"]
    assert name == f"client{k}"
    assert reaches(docs, params["coordinator"]) == (
        coord["metadata"]["name"],
        port_of(coord_params["listen"]),
    )
    assert reaches(docs, params["advertise"]) == (name, port_of(params["listen"]))
    # it registers, and is called back, before its readiness probe has passed
    assert service_for(docs, name)["spec"].get("publishNotReadyAddresses") is True
    assert params["insecure"] is False and params["alignment"] == "psi"


@pytest.mark.parametrize("k", range(K))
def test_client_volumes(docs: list[Doc], k: int) -> None:
    """Data read-only and persistent, checkpoints writable and persistent, its TLS Secret."""
    workload = clients(docs)[k]
    container = main_container(workload)
    _, params = parse(argv(container))
    data = mount(container, str(params["data"]))
    assert data["readOnly"] is True and data["mountPath"] == str(params["data"])
    assert "persistentVolumeClaim" in volume(workload, data["name"])
    checkpoints = mount(container, str(params["checkpoint_dir"]))
    assert not checkpoints.get("readOnly")
    assert "persistentVolumeClaim" in volume(workload, checkpoints["name"])
    tls = mount(container, str(params["tls_dir"]))
    assert tls["readOnly"] is True and "secret" in volume(workload, tls["name"])


def test_every_volume_mounted_is_declared_and_every_declared_one_used(docs: list[Doc]) -> None:
    for name, workload in of_kind(docs, *WORKLOAD_KINDS).items():
        used = {m["name"] for c in all_containers(workload) for m in c.get("volumeMounts", [])}
        for volume_name in used:
            volume(workload, volume_name)
        declared = {v["name"] for v in pod(workload).get("volumes", [])}
        declared |= {
            c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])
        }
        assert declared == used, f"{name}: declared but unused {sorted(declared - used)}"


def test_image_is_the_compose_files(docs: list[Doc], kustomization: Doc) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    reference = compose["x-image"]["image"]
    default = re.fullmatch(r"\$\{VFL_IMAGE:-(.+)\}", reference)
    image = default.group(1) if default else reference
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():
        for container in all_containers(workload):
            assert container["image"] == image, container["name"]
    name, _, tag = image.partition(":")
    assert {"name": name, "newTag": tag} in kustomization["images"]


def test_demo_data_is_prepared_as_compose_does_and_each_party_keeps_its_own(
    docs: list[Doc],
) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    _, expected = parse(compose["services"]["prepare"]["command"])
    for k, workload in clients(docs).items():
        prepare, copy_step = pod(workload)["initContainers"]
        path, params = parse(argv(prepare))
        assert path == "vfl prepare"
        assert {**params, "out": None} == {**expected, "out": None}  # same data, same seed
        program, flag, source, target = argv(copy_step)
        assert (program, flag) == ("cp", "-R")
        assert source == f"{params['out']}/{params['prefix']}{k}/."  # its own quadrant only
        assert mount(prepare, str(params["out"]))["name"] == mount(copy_step, source)["name"]
        _, client = parse(argv(main_container(workload)))
        assert target.rstrip("/") == str(client["data"])
        assert mount(copy_step, target)["name"] == mount(main_container(workload), target)["name"]


def normalised(doc: Any, k: int) -> Any:
    """`doc` with the party number k replaced by N (names, labels, --block, quadrant)."""
    if isinstance(doc, dict):
        return {normalised(key, k): normalised(value, k) for key, value in doc.items()}
    if isinstance(doc, list):
        words = [normalised(item, k) for item in doc]
        return [
            "N" if i and doc[i - 1] == "--block" and word == str(k) else word
            for i, word in enumerate(words)
        ]
    if isinstance(doc, str):
        return re.sub(rf"\b(client|party|quadrant){k}\b", r"\1N", doc)
    return doc


def test_clients_differ_only_in_their_number(docs: list[Doc]) -> None:
    by_block = clients(docs)
    assert sorted(by_block) == list(range(K))
    services = of_kind(docs, "Service")
    reference = [normalised(services["client0"], 0), normalised(by_block[0], 0)]
    for k, workload in by_block.items():
        name = workload["metadata"]["name"]
        assert [normalised(services[name], k), normalised(workload, k)] == reference, name


# ---------------------------------------------------------------------------------- containers
QUANTITY = re.compile(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi)?")
SCALE = {None: 1.0, "m": 1e-3, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30}


def quantity(text: str | int) -> float:
    match = QUANTITY.fullmatch(str(text))
    assert match, f"unexpected quantity {text!r}"
    return float(match.group(1)) * SCALE[match.group(2)]


def test_every_container_has_requests_within_limits(docs: list[Doc]) -> None:
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():
        for container in all_containers(workload):
            resources = container["resources"]
            for key in ("cpu", "memory"):
                request, limit = resources["requests"][key], resources["limits"][key]
                assert quantity(request) <= quantity(limit), (container["name"], key)


def test_containers_run_unprivileged(docs: list[Doc]) -> None:
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():
        assert pod(workload)["securityContext"]["runAsNonRoot"] is True
        for container in all_containers(workload):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]


def health_params(container: Doc, command: list[str], monkeypatch: pytest.MonkeyPatch) -> Doc:
    """What the probe asks, parsed by the real health command with the container's env."""
    assert command == PROBE, f"probe {command}: expected {PROBE}"
    for variable in container.get("env", []):
        monkeypatch.setenv(variable["name"], variable["value"])
    app = typer.Typer()  # what health_cmd.main runs: typer.run(health)
    app.command()(health)
    return typer.main.get_command(app).make_context("health", []).params


def test_probes_ask_the_grpc_health_service_of_the_container_itself(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    for workload in of_kind(docs, *WORKLOAD_KINDS).values():
        container = main_container(workload)
        _, params = parse(argv(container))
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[kind]
            asked = health_params(container, probe["exec"]["command"], monkeypatch)
            assert asked["address"] == f"localhost:{port_of(params['listen'])}", kind
            assert asked["tls_dir"] == params["tls_dir"] and asked["insecure"] is False
            assert probe["timeoutSeconds"] > asked["timeout"], "the check's own timeout first"
        assert container["livenessProbe"]["failureThreshold"] >= 3  # never kill on one miss


def test_probe_command_is_light_and_fails_in_one_line(tmp_path: Path) -> None:
    """The probe runs every few seconds inside the container's memory limit: it must not import
    torch, and a failure is the usual one `error:` line with exit code 2."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *PROBE[1:], "--tls-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "grpc" in imported and "torch" not in imported
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert errors[0].startswith("error: no TLS material") and str(tmp_path) in errors[0]


# ---------------------------------------------------------------------------------- GPU variant
GPU_NOTE = re.compile(r"^(\s*)# GPU variant\b.*:\s*$")
INLINE_GPU = re.compile(r"^(\s*(?:- )?(?:[\w.-]+: )?)(\S+)\s+# GPU variant: (\S+)\s*$")


def gpu_variant(text: str) -> str:
    """The manifest as its comments describe the GPU variant: the commented lines after a
    `# GPU variant ...:` line uncommented, and `value # GPU variant: other` lines set to other."""
    out, uncommenting = [], False
    for line in text.splitlines():
        if uncommenting and re.match(r"^\s*# ", line):
            out.append(re.sub(r"^(\s*)# ", r"\1", line))
            continue
        uncommenting = False
        if GPU_NOTE.match(line):
            uncommenting = True
        elif (inline := INLINE_GPU.match(line)) is not None:
            line = f"{inline.group(1)}{inline.group(3)}"
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("k", range(K))
def test_gpu_variant_is_valid_and_runs_on_cuda(k: int, schemas: Any, offline: None) -> None:
    variant = load(gpu_variant((K8S_DIR / f"client{k}.yaml").read_text()))
    for doc in variant:
        validate(schemas, doc)
    [workload] = of_kind(variant, *WORKLOAD_KINDS).values()
    container = main_container(workload)
    assert container["image"] == "laser-vfl:cuda"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    _, params = parse(argv(container))
    assert params["device"] == "cuda" and params["block"] == k
    assert pod(workload)["tolerations"][0]["key"] == "nvidia.com/gpu"


# ---------------------------------------------------------------------------------- processes
class Node:
    """One pod of the manifests as local processes: its volumes are directories (a Secret: the
    identity's `vfl certs` directory) and `addresses` maps its host:port words to 127.0.0.1."""

    def __init__(self, workload: Doc, root: Path, certs: Path, addresses: dict[str, str]):
        self.workload, self.addresses = workload, addresses
        self.paths: dict[str, Path] = {}
        for container in all_containers(workload):
            for m in container.get("volumeMounts", []):
                if "secret" in volume(workload, m["name"]):
                    local = certs / identity_of(workload)
                else:
                    local = root / workload["metadata"]["name"] / m["name"]
                local.mkdir(parents=True, exist_ok=True)
                assert self.paths.setdefault(m["mountPath"], local) == local
        self.container = main_container(workload)

    def local(self, word: str) -> str:
        if word in self.addresses:
            return self.addresses[word]
        for path, local in sorted(self.paths.items(), key=lambda p: -len(p[0])):
            if word == path or word.startswith(path + "/"):
                return str(local) + word[len(path) :]
        return word

    def command(self, container: Doc) -> list[str]:
        words = [self.local(w) for w in argv(container)]
        if words[0] in ("vfl", "vfl-client", "vfl-coordinator", "python"):
            words[0] = str(Path(sys.executable).parent / words[0])  # this venv's
        return words

    def env(self) -> dict[str, str]:
        return {v["name"]: self.local(v["value"]) for v in self.container.get("env", [])}

    def probe(self) -> subprocess.CompletedProcess[str]:
        command = [self.local(w) for w in self.container["readinessProbe"]["exec"]["command"]]
        command[0] = str(Path(sys.executable).parent / command[0])
        env = {"PATH": str(Path(sys.executable).parent), **self.env()}
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def pod_addresses(docs: list[Doc], workload: Doc, ports: dict[str, int]) -> dict[str, str]:
    """host:port of every Service, and this pod's --listen and localhost, on local ports."""
    addresses = {}
    for name, service in of_kind(docs, "Service").items():
        if name in ports:
            for p in service["spec"]["ports"]:
                addresses[f"{name}:{p['port']}"] = f"127.0.0.1:{ports[name]}"
    _, params = parse(argv(main_container(workload)))
    own = f"127.0.0.1:{ports[workload['metadata']['name']]}"
    addresses[params["listen"]] = addresses[f"localhost:{port_of(params['listen'])}"] = own
    return addresses


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.slow  # no fault and no bound but a 120 s wait for the probes: runs on a worker
def test_manifest_commands_run_and_their_probes_pass(
    docs: list[Doc], tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The coordinator and client0 as the manifests run them (init containers first), on local
    ports: both exec probes report SERVING, the client registers with the data its init
    containers wrote, and a plaintext health check, which is what Kubernetes' own `grpc:` probe
    sends, is refused (hence the exec probes)."""
    certs = tmp_path / "certs"
    create_federation(certs, PARTIES)
    workloads = {"coordinator": coordinator(docs), "client0": clients(docs)[0]}
    ports = {name: free_port() for name in workloads}
    nodes = {
        name: Node(w, tmp_path, certs, pod_addresses(docs, w, ports))
        for name, w in workloads.items()
    }
    for name, node in nodes.items():
        for init in pod(node.workload).get("initContainers", []):
            subprocess.run(node.command(init), check=True, capture_output=True, timeout=300)
        with (tmp_path / f"{name}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    node.command(node.container),
                    env={**os.environ, **node.env()},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=tmp_path,
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + 120
    for name, node in nodes.items():
        while (result := node.probe()).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert result.stdout.strip() == "SERVING"
        plaintext = grpc.insecure_channel(f"127.0.0.1:{ports[name]}")  # as the kubelet would
        with plaintext, pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(plaintext).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # "registered", "registered (resynchronising)", "synchronised"
    registered = re.compile(rf"party party0 \w+.* for block 0 at 127\.0\.0\.1:{ports['client0']}")
    while not registered.search((tmp_path / "coordinator.log").read_text()):
        logs = "".join((tmp_path / f"{n}.log").read_text()[-2000:] for n in nodes)
        assert time.monotonic() < deadline, logs
        assert all(p.poll() is None for p in processes), logs
        time.sleep(0.5)
