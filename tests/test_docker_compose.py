"""Static checks of docker/: there is no Docker engine here, so the compose file and the
Dockerfiles are parsed (yaml.safe_load, plain text) and checked against requirements.lock."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DATA_PATH = "/opt/dbsp/data"

AIRFLOW_SERVICES = ["airflow-init", "airflow-apiserver", "airflow-scheduler",
                    "airflow-dag-processor", "airflow-triggerer"]
SPARK_SERVICES = ["spark-master", "spark-worker-1", "spark-worker-2", "spark-connect"]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(DOCKER / "docker-compose.yml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _from_lines(dockerfile: str) -> list[str]:
    text = (DOCKER / dockerfile).read_text()
    return [line.split()[1] for line in text.splitlines() if line.strip().upper().startswith("FROM ")]


def _arg(dockerfile: str, name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", (DOCKER / dockerfile).read_text(), re.M)
    assert m, f"{dockerfile}: no ARG {name}=..."
    return m.group(1)


def _published(service: dict) -> set[int]:
    """Host ports of `ports:` entries, short ("127.0.0.1:8080:8080", "8080:8080") or long syntax."""
    out = set()
    for p in service.get("ports", []):
        if isinstance(p, dict):
            out.add(int(p["published"]))
        else:
            parts = str(p).split("/")[0].split(":")
            assert len(parts) >= 2, f"port {p!r} is exposed but not published to the host"
            out.add(int(parts[-2]))
    return out


def _volume_targets(service: dict) -> dict[str, str]:
    """target path -> source (named volume or host path) for short and long volume syntax."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            out[v["target"]] = v.get("source", "")
        else:
            parts = str(v).split(":")
            out[parts[1]] = parts[0]
    return out


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_all_services_exist(services):
    expected = {"postgres", *AIRFLOW_SERVICES, *SPARK_SERVICES}
    missing = expected - set(services)
    assert not missing, f"missing services: {sorted(missing)}"


@pytest.mark.parametrize("service, port", [("airflow-apiserver", 8080), ("spark-master", 7077),
                                           ("spark-master", 8081), ("spark-connect", 15002)])
def test_ports_published(services, service, port):
    assert port in _published(services[service])


def test_airflow_ui_port_is_not_taken_by_spark(services):
    for name in SPARK_SERVICES:
        assert 8080 not in _published(services[name]), f"{name} publishes 8080 (Airflow's)"


def test_shared_data_volume_same_path_everywhere(compose, services):
    sources = {}
    for name in AIRFLOW_SERVICES + SPARK_SERVICES:
        targets = _volume_targets(services[name])
        assert DATA_PATH in targets, f"{name} does not mount {DATA_PATH}"
        sources[name] = targets[DATA_PATH]
    assert len(set(sources.values())) == 1, f"different sources for {DATA_PATH}: {sources}"
    volume = next(iter(sources.values()))
    assert volume in (compose.get("volumes") or {}), f"{volume!r} is not a named volume"


def test_dags_and_circuits_mounted_from_the_repo(services):
    for name in AIRFLOW_SERVICES:
        targets = _volume_targets(services[name])
        by_source = {src: tgt for tgt, src in targets.items()}
        assert "../dags" in by_source and "../circuits" in by_source, name
        env = _env(services[name])
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == by_source["../dags"], name


def test_airflow_uses_postgres_and_local_executor(services):
    for name in AIRFLOW_SERVICES:
        env = _env(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        conn = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert conn.startswith("postgresql") and "@postgres:" in conn, f"{name}: {conn}"
    assert services["postgres"]["image"].startswith("postgres:")
    assert re.fullmatch(r"postgres:\d+\.\d+.*", services["postgres"]["image"]), "pin postgres to a minor version"
    pg = _env(services["postgres"])
    conn = _env(services["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert f"{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/{pg['POSTGRES_DB']}" in conn


def test_airflow_points_at_the_docker_profile(services):
    for name in AIRFLOW_SERVICES:
        cfg = _env(services[name])["DBSP_CONFIG"]
        assert cfg.endswith("config/docker.yaml"), name
    profile = yaml.safe_load((ROOT / "config" / "docker.yaml").read_text())
    assert profile["spark"]["mode"] == "connect"
    assert profile["spark"]["remote"] == "sc://spark-connect:15002"
    assert profile["data_root"] == DATA_PATH


def test_images_pin_the_locked_versions(services):
    lock = _lock()
    airflow, pyspark = lock["apache-airflow"], lock["pyspark"]
    assert f"apache/airflow:{airflow}-python3.11" in _from_lines("Dockerfile.airflow")
    assert _arg("Dockerfile.airflow", "AIRFLOW_VERSION") == airflow
    assert f"apache/spark:{pyspark}-python3" in _from_lines("Dockerfile.spark")
    assert _arg("Dockerfile.spark", "SPARK_VERSION") == pyspark
    for line in _from_lines("Dockerfile.airflow") + _from_lines("Dockerfile.spark"):
        assert not line.endswith(":latest") and ":" in line, f"unpinned base image {line}"
    for name in AIRFLOW_SERVICES:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile.airflow"
        assert services[name]["image"].endswith(f":{airflow}")
    for name in SPARK_SERVICES:
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile.spark"
        assert services[name]["image"].endswith(f":{pyspark}")


def test_python_minor_versions_match():
    """PySpark refuses executors whose Python differs from the driver's: both images use 3.11."""
    assert any(f.endswith("-python3.11") for f in _from_lines("Dockerfile.airflow"))
    assert _arg("Dockerfile.spark", "PYTHON_VERSION") == "3.11"


def test_build_contexts_exist(services):
    for name in AIRFLOW_SERVICES + SPARK_SERVICES:
        build = services[name]["build"]
        context = (DOCKER / build["context"]).resolve()
        assert (context / build["dockerfile"]).is_file(), name
    text = (DOCKER / "Dockerfile.spark").read_text() + (DOCKER / "Dockerfile.airflow").read_text()
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for path in src.split():
            if not path.startswith("/"):
                assert (ROOT / path).exists(), f"COPY source {path} does not exist"


def test_startup_order(services):
    for name in AIRFLOW_SERVICES[1:]:
        deps = services[name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
        assert deps["postgres"]["condition"] == "service_healthy", name
    assert services["airflow-scheduler"]["depends_on"]["spark-connect"]["condition"] == "service_healthy"
    for name in ["spark-worker-1", "spark-worker-2", "spark-connect"]:
        assert services[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    for name in ["postgres", "airflow-apiserver", "spark-master", "spark-connect"]:
        assert "healthcheck" in services[name], name


def test_the_ui_theme_is_the_local_airflows(services):
    """The trigger dialog hides the greyed-out Backfill choice in the containers as under `make
    airflow`: the same theme JSON."""
    from spark_jobs.orchestration.airflow_env import UI_THEME

    for name in AIRFLOW_SERVICES:
        assert json.loads(_env(services[name])["AIRFLOW__API__THEME"]) == json.loads(UI_THEME), name
