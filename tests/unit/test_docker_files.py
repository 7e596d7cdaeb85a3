"""docker/compose.yaml and docker/Dockerfile as files: Docker is not on the machines that run
these tests, so nothing here starts a container. The compose file is parsed as YAML and its
structure checked (who runs what, as which role, in which order); the Dockerfile's default
command and the extra it installs are read from its text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML: installed with transformers (sentence-transformers)

DOCKER = Path(__file__).resolve().parents[2] / "docker"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return loaded


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return command if isinstance(command, list) else command.split()


def _dsn_user(service: dict[str, Any]) -> str:
    dsn = service["environment"]["PGRAG_DSN"]
    match = re.match(r"postgresql://([^:@]+)", dsn)
    assert match, dsn
    return match.group(1)


def test_the_services_and_their_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"db", "migrate", "service-role", "serve", "worker", "pgrag"}
    assert services["db"]["image"].startswith("pgvector/pgvector:")
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    done = {"condition": "service_completed_successfully"}
    assert services["service-role"]["depends_on"] == {"migrate": done}
    assert services["serve"]["depends_on"] == {"service-role": done}
    assert services["worker"]["depends_on"] == {"service-role": done}
    for one_shot in ("migrate", "service-role"):
        assert services[one_shot]["restart"] == "no"


def test_the_pgrag_services_share_one_image_built_from_the_dockerfile(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in ("migrate", "serve", "worker", "pgrag"):
        assert services[name]["image"] == "pgrag:local"  # the merge key (<<: *pgrag) applied
        build = services[name]["build"]
        assert build["dockerfile"] == "docker/Dockerfile"
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve().is_file()


def test_migrate_serve_and_worker_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert _command(services["migrate"]) == ["db", "upgrade"]
    serve = _command(services["serve"])
    assert serve[0] == "serve" and "--no-auth" not in serve
    assert serve[serve.index("--host") + 1] == "0.0.0.0"  # noqa: S104 - in a container
    assert _command(services["worker"]) == ["worker"]
    drain = float(serve[serve.index("--drain") + 1])
    grace = services["serve"]["stop_grace_period"]
    assert float(grace.removesuffix("s")) > drain  # Docker's SIGKILL comes after the drain


def test_the_service_runs_as_its_own_role_and_the_owner_only_migrates(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    owner = services["db"]["environment"]["POSTGRES_USER"]
    assert _dsn_user(services["migrate"]) == owner
    assert _dsn_user(services["pgrag"]) == owner  # administration: keys, ingest
    assert _dsn_user(services["serve"]) == _dsn_user(services["worker"]) == "pgrag_service"
    role = services["service-role"]
    assert role["environment"]["PGUSER"] == owner
    mounted = {v.split(":")[0]: v.split(":")[1] for v in role["volumes"]}
    assert (DOCKER / "service-role.sql").is_file() and "./service-role.sql" in mounted
    assert mounted["./service-role.sql"] in _command(role)
    sql = (DOCKER / "service-role.sql").read_text()
    # (what it does when run is tests/integration/test_service_role.py's)
    assert "ARRAY['pgrag_app', 'pgrag_writer']" in sql and "GRANT %I TO pgrag_service" in sql


def test_probes_and_ports(compose: dict[str, Any]) -> None:
    services = compose["services"]
    probe = " ".join(services["serve"]["healthcheck"]["test"])
    assert "/readyz" in probe
    assert services["worker"]["healthcheck"] == {"disable": True}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_the_dockerfile_serves_by_default_with_the_serve_extra() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert 'pip install --no-cache-dir ".[serve]"' in text
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, re.MULTILINE)
    (entrypoint,) = re.findall(r"^ENTRYPOINT (\[.*\])$", text, re.MULTILINE)
    assert json.loads(entrypoint) == ["pgrag"]
    command = json.loads(cmd)
    assert command[0] == "serve" and command[command.index("--host") + 1] == "0.0.0.0"  # noqa: S104
    assert re.search(r"^EXPOSE 8000$", text, re.MULTILINE)
