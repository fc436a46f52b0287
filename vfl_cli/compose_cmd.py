"""`vfl compose`: the docker compose files of a federation of K parties, and the host user's ids.

    vfl compose --clients 6            # docker-compose.yml, docker-compose.gpu.yml and .env here

The checked-in docker-compose.yml is this command's output for four parties (a test keeps them
equal), so K parties need no hand-editing: each client service differs only in its number.
docker-compose.gpu.yml is an override that builds the clients' image from a CUDA base with a CUDA
torch and reserves the GPUs for them (`docker compose -f docker-compose.yml -f
docker-compose.gpu.yml up --build`). `.env` holds the host user's uid and gid: compose reads it, the
image is built with that user and every service runs as it, so ./data, ./certs and ./runs stay the
host user's and every key is readable inside (with another uid than the image's, a party could
not read its own key, mode 0600).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from vfl_core.errors import ConfigError

Opt = typer.Option

COMPOSE_FILE = "docker-compose.yml"
GPU_FILE = "docker-compose.gpu.yml"
ENV_FILE = ".env"
MAX_CLIENTS = 64
# the compose file's `prepare` cuts digits' 8-pixel-wide images into K vertical strips (4:
# quadrants); `vfl prepare` refuses more strips than columns, so compose refuses them first
MAX_DIGITS_CLIENTS = 8

HEADER = """\
# A LASER-VFL federation on one Docker host: a coordinator and {k} parties, each party seeing
# only its own part of each digit image (a quadrant for 4 parties, else a vertical strip).
# Written by `vfl compose --clients {k}` (edit that, not this: a test keeps the checked-in file
# equal to its output). See docs/deployment.md.
#
#   vfl compose --clients {k}          # this file, docker-compose.gpu.yml and .env (your uid/gid)
#   mkdir -p data certs && docker compose run --rm prepare   # ./data/quadrant0..{last}
#   docker compose up                  # makes ./certs once, trains over mutual TLS, then serves
#
# Your user: the image is built with the VFL_UID/VFL_GID of .env (default 1000) and every service
# runs as that user, so what the containers write in ./data and ./certs is yours and each
# party can read its own key (mode 0600). Without .env and with a uid other than 1000, run
# `export VFL_UID=$(id -u) VFL_GID=$(id -g)` before `docker compose build` and `up`.
#
# Security: every channel is mutual TLS with the certificates the one-shot `certs` service writes
# to ./certs (a federation CA, a key + certificate per party, the coordinator and an operator, and
# the parties' tokens; `vfl certs`, docs/security.md). Each service mounts only its own part,
# read-only; the CA key stays in ./certs on the host. Nothing runs --insecure.
#
# Portability: no top-level `version:` key (Compose v2 warns that it is obsolete; Debian's
# docker-compose 1.29 reads a file without it as the Compose Specification), and only features
# both accept. `condition: service_completed_successfully` needs docker-compose >= 1.29 or v2;
# with an older v1, run `prepare` by hand first and drop that condition.
# `docker-compose config -q` (v1) and `docker compose config -q` (v2) both check this file.

x-image: &image
  image: ${{VFL_IMAGE:-laser-vfl:latest}}
  build:
    context: .
    dockerfile: deploy/Dockerfile
    args:
      VFL_UID: ${{VFL_UID:-1000}}
      VFL_GID: ${{VFL_GID:-1000}}
  user: "${{VFL_UID:-1000}}:${{VFL_GID:-1000}}"
  init: true
  networks: [vfl]
  # every connection is a file: Docker's default soft limit (1024) would let ~1000 idle
  # connections from anyone on the network keep the parties out (the servers also lift the soft
  # limit to this hard one at start; vfl_wire/channels.py)
  ulimits:
    nofile: {{soft: 65536, hard: 65536}}

# Docker's health check: `vfl health` asks the gRPC health service that every vfl server runs at
# VFL_HEALTH_ADDR (set per service: the coordinator's or the client's listening port), over mutual
# TLS with the service's own certificate (VFL_TLS_DIR).
x-health: &health
  test: [CMD, vfl, health]
  interval: 10s
  timeout: 5s
  retries: 3
  start_period: 30s

x-client: &client
  <<: *image
  environment:
    VFL_SECRET: ${{VFL_SECRET:-vfl-demo-secret}}
    VFL_HEALTH_ADDR: localhost:50061
    VFL_TLS_DIR: /certs
  depends_on:
    prepare:
      condition: service_completed_successfully
    certs:
      condition: service_completed_successfully
    coordinator:
      condition: service_started
  healthcheck: *health

services:
  # One-shot: cut scikit-learn's digits into ./data/quadrant0..{last} (deterministic in --seed, so
  # a rerun by `docker compose up` rewrites the same files). It is a plain service with
  # restart "no", not a profile: a service that others depend on may not sit in an inactive
  # profile (both docker-compose 1.29 and Compose v2 refuse).
  prepare:
    <<: *image
    restart: "no"
    volumes:
      - ./data:/data
    command:
      - vfl
      - prepare
      - --dataset
      - digits
      - --out
      - /data
      - --prefix
      - quadrant
      - --clients
      - "{k}"
      - --p-miss
      - "0.1"
      - --seed
      - "0"

  # One-shot: the federation's CA, certificates and tokens in ./certs (docs/security.md). A rerun
  # keeps what exists and adds only missing identities, so `docker compose up` never replaces the
  # keys the parties hold.
  certs:
    <<: *image
    restart: "no"
    volumes:
      - ./certs:/certs
    command:
      - vfl
      - certs
      - --out
      - /certs
      - --parties
      - {parties}

  # Holds no data: no ./data mount. Results go to the `runs` volume; published on the host's
  # loopback only, for `vfl evaluate --coordinator localhost:50051 --tls-dir certs` (as the
  # operator, ./certs/operator). It admits the parties that `certs` gave a token, each bound to
  # its certificate, and aligns samples by PSI.
  coordinator:
    <<: *image
    ports:
      - "127.0.0.1:50051:50051"
    depends_on:
      certs:
        condition: service_completed_successfully
    volumes:
      - runs:/runs
      - ./certs/coordinator:/certs:ro
    command:
      - vfl-coordinator
      - --clients
      - "{k}"
      - --listen
      - 0.0.0.0:50051
      - --serve
      - --out
      - /runs
      - --epochs
      - "20"
      - --deadline
      - "5"
      - --no-progress
      - --tls-dir
      - /certs
    environment:
      VFL_HEALTH_ADDR: localhost:50051
      VFL_TLS_DIR: /certs
    healthcheck: *health

  # Each party mounts only its own quadrant and its own certificate, key and token, read-only, and
  # advertises its service name so the coordinator calls it back over the compose network (the
  # coordinator checks that the certificate there is partyN's, whatever the address).
"""

CLIENT = """\
  client{b}:
    <<: *client
    volumes:
      - ./data/quadrant{b}:/data:ro
      - ./certs/party{b}:/certs:ro
    command: [vfl-client, --block, "{b}", --data, /data, --coordinator, "coordinator:50051",
              --listen, "0.0.0.0:50061", --advertise, "client{b}:50061", --tls-dir, /certs]
"""

FOOTER = """
networks:
  vfl: {}

volumes:
  runs: {}
"""

GPU_HEADER = """\
# The clients of docker-compose.yml on NVIDIA GPUs: an override (written by `vfl compose
# --clients {k}`) that builds their image from a CUDA base with a CUDA torch, tags it apart from
# the CPU image, and reserves the host's GPUs for them (NVIDIA Container Toolkit needed):
#
#   docker compose -f docker-compose.yml -f docker-compose.gpu.yml up --build
#
# `vfl-client --device auto` (the default) then trains and predicts on `cuda`. The coordinator
# holds no model and stays on the CPU image. torch's Linux wheels on PyPI are CUDA builds that
# bring their own CUDA libraries, so the base's CUDA version only has to be one the driver runs.

x-gpu: &gpu
  image: ${{VFL_IMAGE_CUDA:-laser-vfl:cuda}}
  build:
    context: .
    dockerfile: deploy/Dockerfile
    args:
      BASE: nvidia/cuda:12.4.1-runtime-ubuntu22.04
      TORCH_INDEX: https://pypi.org/simple
      TORCH_SPEC: torch==2.13.0
      VFL_UID: ${{VFL_UID:-1000}}
      VFL_GID: ${{VFL_GID:-1000}}
  deploy:
    resources:
      reservations:
        devices: [{{driver: nvidia, count: all, capabilities: [gpu]}}]

services:
"""


def compose_text(clients: int) -> str:
    """docker-compose.yml for `clients` parties (block k: client{k}, party{k}, quadrant{k})."""
    _check(clients)
    parties = ",".join(f"party{b}" for b in range(clients))
    head = HEADER.format(k=clients, last=clients - 1, parties=parties)
    body = "\n".join(CLIENT.format(b=b) for b in range(clients))
    return head + body + FOOTER


def gpu_override_text(clients: int) -> str:
    """docker-compose.gpu.yml: the clients' services on the CUDA image, with the GPUs."""
    _check(clients)
    services = "".join(f"  client{b}: *gpu\n" for b in range(clients))
    return GPU_HEADER.format(k=clients) + services


def env_text(uid: int, gid: int) -> str:
    note = "# the host user that builds and runs the containers (written by vfl compose)"
    return f"{note}\nVFL_UID={uid}\nVFL_GID={gid}\n"


def _check(clients: int) -> None:
    if not 1 <= clients <= MAX_CLIENTS:
        raise ConfigError(f"--clients must be between 1 and {MAX_CLIENTS}, not {clients}")
    if clients > MAX_DIGITS_CLIENTS:
        raise ConfigError(
            f"--clients {clients}: the compose file's prepare service cuts digits' 8-pixel-wide "
            f"images into one strip per party, so at most {MAX_DIGITS_CLIENTS} parties"
        )


def compose(
    clients: Annotated[int, Opt(help="number of parties K (client0 .. client{K-1})")] = 4,
    out: Annotated[Path, Opt(help="directory to write the three files to")] = Path("."),
    force: Annotated[
        bool, Opt(help="replace an existing .env (the compose files always are)")
    ] = False,
) -> None:
    """Write docker-compose.yml and docker-compose.gpu.yml for K parties, and .env with your
    uid/gid (kept if it exists, unless --force)."""
    _check(clients)
    out.mkdir(parents=True, exist_ok=True)
    (out / COMPOSE_FILE).write_text(compose_text(clients))
    (out / GPU_FILE).write_text(gpu_override_text(clients))
    written = [COMPOSE_FILE, GPU_FILE]
    env = out / ENV_FILE
    if force or not env.exists():
        env.write_text(env_text(os.getuid(), os.getgid()))
        written.append(ENV_FILE)
    typer.echo(f"wrote {', '.join(written)} in {out} for {clients} parties")
    typer.echo("next: mkdir -p data certs && docker compose run --rm prepare && docker compose up")
    typer.echo("      (with Compose v1: docker-compose for docker compose)")
