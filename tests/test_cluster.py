"""The cluster: its one definition against docker/compose.yaml (fast), and a real CeleryExecutor run (slow).

The slow test brings up PostgreSQL, Redis, the api-server, scheduler, dag-processor, triggerer and two
Celery workers (``neusym.interfaces.cluster.Node``, what ``make cluster-up`` runs) with two different worker
homes and one shared storage URL, triggers ``corpus_refresh`` over the sample PDFs through the REST
API, kills the worker running a parse/encode task mid-run (its whole process group, as a lost host),
and checks that the run still succeeds after Airflow's retry, that the ``neusym://corpus`` asset
started ``corpus_enrich`` (summaries through the LLM pool, applied on the writer queue), and that
the corpus equals a ``neusym ingest`` of the same PDFs. The cluster is brought down in any case.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from neusym.interfaces.cluster import WORKERS, Api, Node, compose_target, definition, free_port_base
from neusym.settings import Settings
from neusym.store.versions import current_version, open_version

from .conftest import REPO, SAMPLES
from .openai_loopback import LoopbackOpenAI, completion
from .test_pipeline import TABLES, db_fingerprint

COMPOSE = REPO / "docker" / "compose.yaml"
DOCKERFILE = REPO / "docker" / "Dockerfile"


# ----------------------------------------------------------------------------- compose vs definition
def _defaults() -> Settings:
    return Settings(writer_queue="writer", llm_pool="neusym_llm", llm_pool_slots=1)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def test_compose_runs_the_defined_airflow_services_with_the_same_commands_and_environment(compose):
    cluster = definition(compose_target(), _defaults())
    services = compose["services"]
    for svc in cluster.services:
        assert svc.name in services, f"{svc.name} missing from {COMPOSE}"
        if svc.kind != "airflow":
            continue  # postgres / redis: the official images (their addresses are checked through the env below)
        got = services[svc.name]
        assert tuple(got["command"]) == svc.command, svc.name
        assert got["environment"] == {**cluster.env, **svc.env}, svc.name
        assert got["image"] == "neusym:latest"
    assert cluster.env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    # no Airflow service in compose that the definition does not have (besides the one-shot init)
    defined = {s.name for s in cluster.services}
    extra = {n for n, s in services.items() if str(s.get("image", "")).startswith("neusym") and n not in defined}
    assert extra == {"airflow-init"}
    # the init service runs exactly the definition's one-shot commands, in order
    init = services["airflow-init"]
    assert init["environment"] == cluster.env
    script = init["command"][2]
    steps = [s.strip() for s in script.split("&&")]
    assert [s.split()[:3] for s in steps] == [list(a[:3]) for a in cluster.init]
    assert steps[1] == " ".join(cluster.init[1][:5]) + f" '{cluster.init[1][5]}'"


def test_compose_queues_storage_and_vector_store_match_the_definition(compose):
    cluster = definition(compose_target(), _defaults())
    services = compose["services"]
    # exactly one worker serves the writer queue; every worker serves the default queue
    writers = [w.name for w in cluster.workers if "writer" in w.queues]
    assert writers == ["worker1"] and all("default" in w.queues for w in cluster.workers)
    assert sorted(w.name for w in cluster.workers) == sorted(WORKERS)
    for w in cluster.workers:
        mounts = dict(v.split(":") for v in services[w.name]["volumes"])
        assert mounts.get("shared") == "/shared" and cluster.env["NEUSYM_STORAGE_URL"] == "file:///shared"
        assert mounts[f"{w.name}-home"] == w.env["NEUSYM_HOME"]  # each worker its own local home
        assert services[w.name].get("deploy", {}).get("replicas", 1) == 1
    # the addresses in the env are the compose services
    env = cluster.env
    assert "@postgres:5432/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] and "postgres" in services
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0" and "redis" in services
    assert env["NEUSYM_QDRANT_URL"] == "http://qdrant:6333" and "qdrant" in services
    assert services["api-server"]["ports"] == [f"{env['AIRFLOW__API__PORT']}:{env['AIRFLOW__API__PORT']}"]
    # the image puts the DAGs and the home where the definition says
    docker = DOCKERFILE.read_text(encoding="utf-8")
    assert f"AIRFLOW__CORE__DAGS_FOLDER={env['AIRFLOW__CORE__DAGS_FOLDER']}" in docker
    assert f"NEUSYM_HOME={env['NEUSYM_HOME']}" in docker and "COPY dags ./dags" in docker


def test_the_local_cluster_is_the_same_definition_on_loopback(tmp_path):
    node = Node(Settings(home=tmp_path / "home"), port_base=41000)
    env = node.cluster.env
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "@127.0.0.1:41000/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://127.0.0.1:41001/0"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1" and node.api_url == "http://127.0.0.1:41002"
    assert env["NEUSYM_STORAGE_URL"] == (tmp_path / "home" / "cluster" / "storage").as_uri()
    homes = {w.env["NEUSYM_HOME"] for w in node.cluster.workers}
    assert len(homes) == 2 and all(h.startswith(str(tmp_path / "home" / "cluster" / "hosts")) for h in homes)
    compose = definition(compose_target(), node.settings)
    assert [s.command for s in compose.services if s.kind == "airflow"] == \
        [s.command for s in node.cluster.services if s.kind == "airflow"]
    assert set(compose.env) - {"NEUSYM_QDRANT_URL"} == set(env)  # the vector store: a server in compose only
    assert oct((tmp_path / "home" / "cluster" / "secrets.json").stat().st_mode & 0o777) == "0o600"


# ------------------------------------------------------------------------------------- the real run
def _counts(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        con.close()


@pytest.fixture
def cluster(monkeypatch):
    # postgres runs as the postgres user: the state must be reachable by it (pytest's tmp dirs are 0700)
    root = Path(tempfile.mkdtemp(prefix="neusym-cluster-", dir="/tmp"))
    os.chmod(root, 0o755)
    canned = json.dumps({"tldr": "A canned summary.", "tags": ["Canned tag"]})
    llm = LoopbackOpenAI(lambda body: (200, completion(canned, "canned", prompt_tokens=100, completion_tokens=20)))
    llm.__enter__()
    for key, value in {
        "NEUSYM_HOME": str(root / "home"),
        "NEUSYM_CLUSTER_PORT_BASE": str(free_port_base()),
        "NEUSYM_REFRESH_CRON": "",  # triggered runs only
        "NEUSYM_LLM_BASE_URL": llm.base_url, "NEUSYM_LLM_MODEL": "canned",
        "NEUSYM_ENRICH_KINDS": '["paper_tldr_tags"]', "NEUSYM_ENRICH_BUDGET_TOKENS": "3000",
        "NEUSYM_TASK_RETRY_DELAY_S": "5",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NEUSYM_STORAGE_URL", raising=False)
    node = Node()
    try:
        yield node
    finally:
        node.down(echo=lambda *_: None)
        llm.__exit__(None, None, None)
        left = [s.name for s in node.cluster.services if node.pid(s.name) is not None]
        assert left == [], f"still running after down: {left}"
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_corpus_refresh_on_the_celery_cluster_survives_a_lost_worker(cluster, ingested):
    cli_settings, _ = ingested
    node = cluster
    t0 = time.monotonic()
    node.up(echo=lambda *_: None)
    up_s = time.monotonic() - t0
    api = Api(node.api_url)
    for dag_id in ("corpus_refresh", "corpus_enrich"):
        assert api.wait_for_dag(dag_id)["is_paused"] is False
    assert {p["name"]: p["slots"] for p in api.get("/pools")["pools"]}["neusym_llm"] == 1

    run_id = api.trigger("corpus_refresh", {"paths": [str(SAMPLES)]})
    victim = node.pid("worker2")
    killed: dict = {}

    def kill_worker2_mid_task(_run: dict) -> None:
        if killed:
            return
        for ti in api.task_instances("corpus_refresh", run_id):
            if ti["task_id"] in ("parse", "encode") and ti["state"] == "running" and ti.get("pid"):
                try:
                    in_worker2 = os.getsid(ti["pid"]) == victim  # the task process runs in the worker's session
                except ProcessLookupError:
                    continue
                if in_worker2:
                    node.kill("worker2")  # every process of it: worker, pool child, task supervisor and task
                    killed.update(task_id=ti["task_id"], map_index=ti["map_index"], try_number=ti["try_number"])
                    node.start("worker2")  # a replacement host comes up (with the same empty local home)
                    return

    run = api.wait_run("corpus_refresh", run_id, timeout_s=600, poll_s=1, on_poll=kill_worker2_mid_task)
    tis = api.task_instances("corpus_refresh", run_id)
    assert run["state"] == "success", [(t["task_id"], t["map_index"], t["state"]) for t in tis]
    run_s = time.monotonic() - t0 - up_s
    assert killed, "worker2 never ran a parse/encode task"
    lost = next(t for t in tis if t["task_id"] == killed["task_id"] and t["map_index"] == killed["map_index"])
    assert lost["state"] == "success" and lost["try_number"] > killed["try_number"]  # Airflow's retry finished it
    by_task = {}
    for t in tis:
        by_task.setdefault(t["task_id"], []).append(t)
    assert len(by_task["parse"]) == len(by_task["encode"]) == 5
    assert {t["queue"] for n in ("load_metadata", "materialize", "publish") for t in by_task[n]} == {"writer"}
    assert {t["queue"] for n in ("parse", "encode") for t in by_task[n]} == {"default"}

    # the asset event of publish started corpus_enrich; summaries ran through the LLM pool, applied by the writer
    events = [e for e in api.get("/assets/events")["asset_events"] if e["source_run_id"] == run_id]
    assert [e["uri"].rstrip("/") for e in events] == ["neusym://corpus"]
    started = [r["run_id"] for e in events for r in e["created_dagruns"] if r["dag_id"] == "corpus_enrich"]
    assert len(started) == 1
    enrich = api.wait_run("corpus_enrich", started[0], timeout_s=300)
    etis = api.task_instances("corpus_enrich", started[0])
    assert enrich["state"] == "success", [(t["task_id"], t["state"]) for t in etis]
    summarized = [t for t in etis if t["task_id"] == "summarize" and t["state"] == "success"]
    assert summarized and {t["pool"] for t in summarized} == {"neusym_llm"}
    assert {t["queue"] for t in etis if t["task_id"].startswith("apply_")} == {"writer"}

    # the corpus: the refresh's version equals a `neusym ingest` of the same PDFs, table by table and point by point
    homes = {w.name: Settings(home=Path(w.env["NEUSYM_HOME"])) for w in node.cluster.workers}
    writer = homes["worker1"]
    assert not (homes["worker2"].home / "corpus.duckdb").exists()  # only the writer worker writes the database
    with open_version(writer, 1) as v1, open_version(cli_settings) as ref:
        assert db_fingerprint(v1.db_path) == db_fingerprint(ref.db_path)
        for name in ("cells", "papers"):
            assert {r.id for r in v1.backend(name).scroll(payload=False)} == \
                {r.id for r in ref.backend(name).scroll(payload=False)}
    # a reader host with its own home gets the current (enriched) version through the shared storage
    reader = Settings(home=Path(os.environ["NEUSYM_HOME"]) / "reader", storage_url=node.target.storage_url,
                      storage_poll_s=0)
    current = current_version(reader)
    assert current.number == 2 and current.number == current_version(writer).number
    assert _counts(current.db_path) == _counts(cli_settings.db_path)
    con = duckdb.connect(str(current.db_path), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM metadata WHERE tldr = 'A canned summary.'").fetchone()[0] >= 1
    finally:
        con.close()
    with open_version(reader) as cur, open_version(cli_settings) as ref:
        assert cur.cells.count() > ref.cells.count()  # plus the tldr cells
    print(f"\ncluster up {up_s:.0f} s, corpus_refresh {run_s:.0f} s (worker2 killed during "
          f"{killed['task_id']}[{killed['map_index']}])")
