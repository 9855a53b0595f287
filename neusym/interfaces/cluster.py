"""A real Airflow cluster on one box: PostgreSQL, Redis, CeleryExecutor with two workers, all on loopback.

``make cluster-up`` / ``make cluster-down`` / ``make cluster-status`` run ``python -m neusym.interfaces.cluster
up|down|status`` (also ``env``: the shell exports that point the ``airflow`` CLI at the cluster, and
``restore-writer``: give a new writer host the shared current version's database).

The cluster is defined once, declaratively, by :func:`definition`: the services, their commands,
the executor, the Celery queues and every environment variable, rendered for a :class:`Target` —
:func:`local_target` (this box: loopback ports, state under ``$NEUSYM_HOME/cluster/``) or
:func:`compose_target` (``docker/compose.yaml``: service names as hosts, volumes as paths).
``tests/test_cluster.py`` checks the compose file against ``definition(compose_target())`` so the
two cannot drift.

State under ``$NEUSYM_HOME/cluster/``::

    postgres/data      PostgreSQL data directory (owned by the ``postgres`` user when run as root)
    redis/             Redis working directory (no persistence: the broker is disposable)
    airflow/           AIRFLOW_HOME of every Airflow process (airflow.cfg, task logs)
    hosts/<worker>/    each Celery worker's own NEUSYM_HOME (what a separate host would have)
    storage/           the shared storage (NEUSYM_STORAGE_URL, default file://…/storage)
    logs/<service>.log stdout+stderr of each service
    run/<service>.pid  "pid starttime" of each service's process group (what ``down`` stops)
    secrets.json       the JWT and API secrets shared by all Airflow components (mode 600)

Every service runs in its own session (process group); ``down`` signals exactly the groups whose
pid *and* kernel start time match its pid file, so it never touches a process it did not start.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neusym.settings import Settings

DEFAULT_QUEUE = "default"
PORT_BASE_ENV = "NEUSYM_CLUSTER_PORT_BASE"
DEFAULT_PORT_BASE = 58000
PG_USER = "airflow"
PG_DB = "airflow"


def free_port_base(n: int = 8) -> int:
    """A base port B in 20000-39999 with B .. B+n-1 all free on 127.0.0.1 now (for a cluster started
    beside another one, e.g. in tests and benchmarks). Raises RuntimeError after 50 tries."""
    for _ in range(50):
        base = random.randrange(20000, 40000)
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free loopback ports")


class ClusterError(Exception):
    """A cluster step failed (the message says which and where its log is)."""


# ------------------------------------------------------------------------------------ definition
@dataclass(frozen=True)
class Target:
    """Where the cluster runs: addresses, paths and secrets that differ between this box and compose.

    ``worker_homes``: NEUSYM_HOME of each worker; ``qdrant_url``: the vector-store choice (None =
    embedded qdrant-edge shards inside each version, a URL = a Qdrant server shared by all hosts).
    """

    pg_host: str
    pg_port: int
    pg_password: str
    redis_host: str
    redis_port: int
    api_host: str
    api_bind: str
    api_port: int
    airflow_home: str
    dags_folder: str
    neusym_home: str
    worker_homes: dict[str, str]
    storage_url: str
    jwt_secret: str
    api_secret_key: str
    log_ports: dict[str, int]
    qdrant_url: str | None = None


@dataclass(frozen=True)
class Service:
    """One long-running process of the cluster. ``command``: its argv; ``env``: variables on top of
    the cluster's common environment; ``queues``: the Celery queues a worker serves."""

    name: str
    kind: str  # "postgres" | "redis" | "airflow"
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cluster:
    """The whole definition: ``env`` common to every Airflow process, ``services`` in start order,
    ``init``: one-shot commands run before the Airflow services (migrate, pools)."""

    env: dict[str, str]
    services: tuple[Service, ...]
    init: tuple[tuple[str, ...], ...]
    executor: str = "CeleryExecutor"

    def service(self, name: str) -> Service:
        """The service called ``name``; KeyError when there is none."""
        for s in self.services:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def workers(self) -> tuple[Service, ...]:
        """The Celery workers."""
        return tuple(s for s in self.services if s.command[:3] == ("airflow", "celery", "worker"))


WORKERS: dict[str, tuple[str, ...]] = {
    "worker1": (DEFAULT_QUEUE, "{writer_queue}"),  # the one worker that serves the writer queue
    "worker2": (DEFAULT_QUEUE,),
}
"""The Celery workers and their queues: one serves the writer queue (and the default one), the
other only the default queue. More hosts = more entries like worker2."""


def definition(target: Target, settings: Settings | None = None) -> Cluster:
    """The cluster for ``target`` (see the module docstring). ``settings``: queue and pool names
    (default: from the environment)."""
    s = settings or Settings()
    t = target
    db = f"{PG_USER}:{t.pg_password}@{t.pg_host}:{t.pg_port}/{PG_DB}"
    env = {
        "AIRFLOW_HOME": t.airflow_home,
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": t.dags_folder,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{t.api_host}:{t.api_port}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{db}",
        "AIRFLOW__CELERY__BROKER_URL": f"redis://{t.redis_host}:{t.redis_port}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://{db}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": DEFAULT_QUEUE,
        "AIRFLOW__API__HOST": t.api_bind,
        "AIRFLOW__API__PORT": str(t.api_port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": f"http://{t.api_host}:{t.api_port}",
        "AIRFLOW__API__SECRET_KEY": t.api_secret_key,
        "AIRFLOW__API_AUTH__JWT_SECRET": t.jwt_secret,
        "AIRFLOW__LOGGING__TRIGGERER_LOG_SERVER_PORT": str(t.log_ports["triggerer"]),
        # a worker that disappears (host lost, OOM kill) is noticed within a minute; its task is retried
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "NEUSYM_HOME": t.neusym_home,
        "NEUSYM_STORAGE_URL": t.storage_url,
        "NEUSYM_WRITER_QUEUE": s.writer_queue,
        "NEUSYM_LLM_POOL": s.llm_pool,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if t.qdrant_url:
        env["NEUSYM_QDRANT_URL"] = t.qdrant_url
    services = [
        Service("postgres", "postgres", ("postgres", "-D", "{pg_data}", "-p", str(t.pg_port),
                                         "-c", f"listen_addresses={t.pg_host}", "-c", "unix_socket_directories=")),
        Service("redis", "redis", ("redis-server", "--bind", t.redis_host, "--port", str(t.redis_port),
                                   "--save", "", "--appendonly", "no", "--dir", "{redis_dir}")),
        Service("api-server", "airflow", ("airflow", "api-server")),
        Service("scheduler", "airflow", ("airflow", "scheduler")),
        Service("dag-processor", "airflow", ("airflow", "dag-processor")),
        Service("triggerer", "airflow", ("airflow", "triggerer")),
    ]
    for name, queues in WORKERS.items():
        qs = tuple(q.format(writer_queue=s.writer_queue) for q in queues)
        services.append(Service(
            name, "airflow",
            ("airflow", "celery", "worker", "--queues", ",".join(qs), "--concurrency", "1",
             "--celery-hostname", f"{name}@%h"),
            env={"NEUSYM_HOME": t.worker_homes[name],
                 "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(t.log_ports[name])},
            queues=qs))
    init = (("airflow", "db", "migrate"),
            ("airflow", "pools", "set", s.llm_pool, str(s.llm_pool_slots), "concurrent LLM calls (summaries)"))
    return Cluster(env=env, services=tuple(services), init=init)


def cluster_dir(settings: Settings) -> Path:
    """``$NEUSYM_HOME/cluster`` (absolute)."""
    return Path(settings.home).absolute() / "cluster"


def _secrets(root: Path) -> dict[str, str]:
    path = root / "secrets.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    data = {"jwt_secret": secrets.token_urlsafe(64), "api_secret_key": secrets.token_urlsafe(32),
            "pg_password": secrets.token_urlsafe(16)}
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    return data


def local_target(settings: Settings | None = None, *, port_base: int | None = None) -> Target:
    """This box: everything on 127.0.0.1, ports from ``port_base`` (``$NEUSYM_CLUSTER_PORT_BASE``,
    default 58000: +0 PostgreSQL, +1 Redis, +2 api-server, +3 triggerer logs, +4.. worker logs),
    state under ``$NEUSYM_HOME/cluster``, storage ``$NEUSYM_STORAGE_URL`` or ``file://…/cluster/storage``."""
    s = settings or Settings()
    root = cluster_dir(s)
    base = port_base if port_base is not None else int(os.environ.get(PORT_BASE_ENV, DEFAULT_PORT_BASE))
    sec = _secrets(root)
    repo = Path(__file__).resolve().parents[2]
    return Target(
        pg_host="127.0.0.1", pg_port=base, pg_password=sec["pg_password"], redis_host="127.0.0.1",
        redis_port=base + 1, api_host="127.0.0.1", api_bind="127.0.0.1", api_port=base + 2,
        airflow_home=str(root / "airflow"), dags_folder=str(repo / "dags"), neusym_home=str(Path(s.home).absolute()),
        worker_homes={w: str(root / "hosts" / w) for w in WORKERS},
        storage_url=s.storage_url or (root / "storage").as_uri(),
        jwt_secret=sec["jwt_secret"], api_secret_key=sec["api_secret_key"],
        log_ports={"triggerer": base + 3, **{w: base + 4 + i for i, w in enumerate(WORKERS)}},
        qdrant_url=s.qdrant_url,
    )


def compose_target() -> Target:
    """``docker/compose.yaml``: services reach each other by name, each worker has its own home
    volume, ``/shared`` (a volume standing for NFS; S3/GCS work the same by URL) is the shared
    storage, secrets come from the environment of ``docker compose``, and the vectors live in the
    ``qdrant`` service (the multi-host vector-store choice)."""
    return Target(
        pg_host="postgres", pg_port=5432, pg_password="${POSTGRES_PASSWORD:-airflow}", redis_host="redis",
        redis_port=6379, api_host="api-server", api_bind="0.0.0.0", api_port=8080,
        airflow_home="/opt/airflow", dags_folder="/opt/neusym/dags", neusym_home="/data/home",
        worker_homes={w: "/data/home" for w in WORKERS}, storage_url="file:///shared",
        jwt_secret="${AIRFLOW_JWT_SECRET:?set AIRFLOW_JWT_SECRET}",
        api_secret_key="${AIRFLOW_API_SECRET_KEY:?set AIRFLOW_API_SECRET_KEY}",
        log_ports={"triggerer": 8794, **{w: 8793 for w in WORKERS}},
        qdrant_url="http://qdrant:6333",
    )


# ------------------------------------------------------------------------------------ processes
def _pg_bin() -> Path:
    override = os.environ.get("NEUSYM_CLUSTER_PG_BIN")
    if override:
        return Path(override)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise ClusterError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run `make cluster-up`, "
                           "which installs the Debian package postgresql")
    return found[-1].parent


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _start_time(pid: int) -> str | None:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our exited child
    except ChildProcessError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # field 22: start time in clock ticks since boot


class Node:
    """The cluster on this box: start, stop and inspect the services of :func:`definition`."""

    def __init__(self, settings: Settings | None = None, *, port_base: int | None = None):
        self.settings = settings or Settings()
        self.root = cluster_dir(self.settings)
        self.target = local_target(self.settings, port_base=port_base)
        self.cluster = definition(self.target, self.settings)
        self.logs = self.root / "logs"
        self.run = self.root / "run"

    # -- paths and environment
    @property
    def api_url(self) -> str:
        """Base URL of the api-server (``http://127.0.0.1:PORT``)."""
        return f"http://{self.target.api_host}:{self.target.api_port}"

    def env(self, service: Service | None = None) -> dict[str, str]:
        """The full environment of an Airflow process (of ``service``, else a client's)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env.update(self.cluster.env)
        if service is not None:
            env.update(service.env)
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def _argv(self, service: Service) -> list[str]:
        subst = {"pg_data": str(self.root / "postgres" / "data"), "redis_dir": str(self.root / "redis")}
        argv = [a.format(**subst) if "{" in a else a for a in service.command]
        if service.kind == "postgres":
            return _as_postgres([str(_pg_bin() / "postgres"), *argv[1:]])
        if argv[0] == "airflow":
            argv[0] = str(Path(sys.executable).parent / "airflow")
        return argv

    # -- pid files
    def pid(self, name: str) -> int | None:
        """The pid (= process group) of a running service started by ``up``, else None."""
        path = self.run / f"{name}.pid"
        try:
            pid_text, start = path.read_text().split()
        except (OSError, ValueError):
            return None
        pid = int(pid_text)
        return pid if _start_time(pid) == start else None

    def _spawn(self, service: Service) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.run.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{service.name}.log", "ab") as log:
            proc = subprocess.Popen(self._argv(service), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env(service) if service.kind == "airflow" else self._plain_env(),
                                    cwd=self.root, start_new_session=True)
        (self.run / f"{service.name}.pid").write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
        return proc.pid

    @staticmethod
    def _plain_env() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "NEUSYM_"))}

    # -- up
    def up(self, *, echo: Any = print, timeout_s: float = 300.0) -> None:
        """Start every service that is not running (idempotent), initialising PostgreSQL, the
        Airflow database and the LLM pool on the way; waits until the api-server answers and the
        scheduler, dag-processor, triggerer and both workers report in. Raises :class:`ClusterError`."""
        for d in ("airflow", "redis", "logs", "run", "storage", *[f"hosts/{w}" for w in WORKERS]):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        for home in self.target.worker_homes.values():
            Path(home).mkdir(parents=True, exist_ok=True)
        if self.target.storage_url.startswith("file://"):
            Path(self.target.storage_url[len("file://"):]).mkdir(parents=True, exist_ok=True)
        self._init_postgres(echo)
        for svc in self.cluster.services[:2]:
            self._ensure(svc, echo)
        self._wait(lambda: self._pg_ready(), "postgres", 60)
        self._create_database()
        self._wait(lambda: self._redis_ready(), "redis", 30)
        for argv in self.cluster.init:
            echo(f"  {' '.join(argv[:3])} ...")
            self._run_once(argv)
        for svc in self.cluster.services[2:]:
            self._ensure(svc, echo)
        self._wait(self._api_ready, "api-server", timeout_s)
        self._wait(self._components_ready, "scheduler, dag-processor and triggerer", timeout_s)
        self._wait(self._workers_ready, "celery workers", timeout_s)
        echo(f"cluster up: api-server {self.api_url}, state {self.root}, storage {self.target.storage_url}")

    def _ensure(self, svc: Service, echo: Any) -> None:
        pid = self.pid(svc.name)
        if pid is not None:
            echo(f"  {svc.name}: running (pid {pid})")
            return
        pid = self._spawn(svc)
        echo(f"  {svc.name}: started (pid {pid}, log {self.logs / (svc.name + '.log')})")

    def _init_postgres(self, echo: Any) -> None:
        data = self.root / "postgres" / "data"
        if (data / "PG_VERSION").is_file():
            return
        echo("  initdb ...")
        data.mkdir(parents=True, exist_ok=True)
        pwfile = self.root / "postgres" / "pwfile"
        pwfile.write_text(self.target.pg_password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.root / "postgres", "postgres", "postgres")
            shutil.chown(data, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
            os.chmod(data, 0o700)
            for parent in [self.root, *self.root.parents]:  # postgres must be able to reach its data directory
                if not os.stat(parent).st_mode & 0o001:
                    raise ClusterError(f"{parent} is not searchable by the postgres user (mode "
                                       f"{oct(os.stat(parent).st_mode & 0o777)}): put NEUSYM_HOME elsewhere or chmod o+x it")
        done = subprocess.run(_as_postgres([str(_pg_bin() / "initdb"), "-D", str(data), "-U", PG_USER,
                                            "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"]),
                              capture_output=True, text=True, check=False)
        pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            raise ClusterError(f"initdb failed: {(done.stderr or done.stdout).strip()[-800:]}")

    def _pg_connect(self, dbname: str) -> Any:
        import psycopg2

        return psycopg2.connect(host=self.target.pg_host, port=self.target.pg_port, user=PG_USER,
                                password=self.target.pg_password, dbname=dbname, connect_timeout=3)

    def _pg_ready(self) -> bool:
        try:
            self._pg_connect("postgres").close()
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def _create_database(self) -> None:
        con = self._pg_connect("postgres")
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{PG_DB}"')
        finally:
            con.close()

    def _redis_ready(self) -> bool:
        try:
            with socket.create_connection((self.target.redis_host, self.target.redis_port), timeout=2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _run_once(self, argv: tuple[str, ...]) -> None:
        name = "-".join(argv[1:3])
        with open(self.logs / f"init-{name}.log", "ab") as log:
            cmd = [str(Path(sys.executable).parent / "airflow"), *argv[1:]]
            done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=self.root,
                                  timeout=900, check=False)
        if done.returncode != 0:
            tail = (self.logs / f"init-{name}.log").read_text(errors="replace")[-1500:]
            raise ClusterError(f"`{' '.join(argv)}` failed (log {self.logs / f'init-{name}.log'}):\n{tail}")

    def health(self) -> dict:
        """The api-server's ``/api/v2/monitor/health`` (metadatabase, scheduler, dag processor,
        triggerer status); ``{}`` when it does not answer."""
        import requests

        try:
            r = requests.get(f"{self.api_url}/api/v2/monitor/health", timeout=5)
            return r.json() if r.status_code == 200 else {}
        except (requests.RequestException, ValueError):
            return {}

    def _api_ready(self) -> bool:
        return bool(self.health())

    def _components_ready(self) -> bool:
        h = self.health()
        return all((h.get(k) or {}).get("status") == "healthy" for k in ("scheduler", "dag_processor", "triggerer"))

    def _workers_ready(self) -> bool:
        for w in self.cluster.workers:
            try:
                text = (self.logs / f"{w.name}.log").read_text(errors="replace")
            except OSError:
                return False
            if f"{w.name}@" not in text or " ready." not in text:  # celery logs "celery@worker1@host ready."
                return False
        return True

    def _wait(self, check: Any, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            for svc in self.cluster.services:
                if (self.run / f"{svc.name}.pid").exists() and self.pid(svc.name) is None:
                    tail = (self.logs / f"{svc.name}.log").read_text(errors="replace")[-1500:]
                    raise ClusterError(f"{svc.name} exited while waiting for {what} (log {self.logs}/{svc.name}.log):"
                                       f"\n{tail}")
            time.sleep(1)
        raise ClusterError(f"{what} not ready after {timeout_s:.0f} s (logs in {self.logs})")

    # -- down
    def stop(self, name: str, *, timeout_s: float = 30.0) -> bool:
        """Stop one service's process group (SIGINT for PostgreSQL's fast shutdown, SIGTERM for the
        others, SIGKILL after ``timeout_s``). Returns whether it was running."""
        pid = self.pid(name)
        if pid is None:
            (self.run / f"{name}.pid").unlink(missing_ok=True)  # stale: that process is gone
            return False
        svc = self.cluster.service(name)
        sig = signal.SIGINT if svc.kind == "postgres" else signal.SIGTERM
        _killpg(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _session(pid):
            time.sleep(0.2)
        _kill_session(pid)  # what is left after the timeout, task processes in their own groups included
        (self.run / f"{name}.pid").unlink(missing_ok=True)
        return True

    def kill(self, name: str) -> bool:
        """SIGKILL every process of one service at once — the service, its children and the task
        processes it runs (each in its own process group, all in the service's session): what
        losing its host does."""
        pid = self.pid(name)
        if pid is None:
            return False
        _kill_session(pid)
        return True

    def start(self, name: str) -> int:
        """(Re)start one service (e.g. a killed worker); returns its pid."""
        svc = self.cluster.service(name)
        return self.pid(name) or self._spawn(svc)

    def down(self, *, echo: Any = print) -> None:
        """Stop every service ``up`` started, in reverse order (workers first, PostgreSQL last)."""
        for svc in reversed(self.cluster.services):
            timeout = 20.0 if svc.name.startswith("worker") else 30.0
            if self.stop(svc.name, timeout_s=timeout):
                echo(f"  {svc.name}: stopped")
        echo(f"cluster down ({self.root})")

    def status(self) -> dict:
        """``{"services": {name: {"pid", "running", "log"}}, "health": …, "api": URL, "storage": URL}``."""
        out = {}
        for svc in self.cluster.services:
            pid = self.pid(svc.name)
            out[svc.name] = {"pid": pid, "running": pid is not None, "log": str(self.logs / f"{svc.name}.log"),
                             **({"queues": list(svc.queues), "home": svc.env.get("NEUSYM_HOME")} if svc.queues else {})}
        return {"services": out, "health": self.health() if out["api-server"]["running"] else {},
                "api": self.api_url, "storage": self.target.storage_url}


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _session(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid`` — a service started by :meth:`Node._spawn`
    and everything it started, whatever process groups they made."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(proc.name))
    try:
        os.waitpid(sid, os.WNOHANG)
    except ChildProcessError:
        pass
    return found


def _kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` and wait until they are gone."""
    for _ in range(100):
        pids = _session(sid)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


# ------------------------------------------------------------------------------------ REST client
class Api:
    """A small client of the api-server's REST API (``/api/v2``) for triggering and watching runs."""

    def __init__(self, base_url: str, timeout_s: float = 30.0):
        import requests

        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        self.timeout = timeout_s

    def _req(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, f"{self.base}/api/v2{path}", timeout=self.timeout, **kw)
        if r.status_code >= 400:
            raise ClusterError(f"{method} /api/v2{path}: HTTP {r.status_code}: {r.text[:500]}")
        return r.json() if r.content else None

    def get(self, path: str, **params: Any) -> Any:
        """GET ``/api/v2{path}``."""
        return self._req("GET", path, params=params or None)

    def unpause(self, dag_id: str) -> None:
        """Unpause ``dag_id``."""
        self._req("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def wait_for_dag(self, dag_id: str, timeout_s: float = 180.0) -> dict:
        """Wait until the dag-processor has registered ``dag_id``; returns the DAG."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.get(f"/dags/{dag_id}")
            except ClusterError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        """Trigger a run of ``dag_id`` with ``conf``; returns its run id."""
        body = {"logical_date": None, "conf": conf or {}}
        return self._req("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"]

    def runs(self, dag_id: str) -> list[dict]:
        """Every run of ``dag_id``."""
        return self.get(f"/dags/{dag_id}/dagRuns", limit=100)["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        """Every task instance (mapped ones included) of one run."""
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=1000)["task_instances"]

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float = 1800.0, poll_s: float = 2.0,
                 on_poll: Any = None) -> dict:
        """Wait until the run finishes (``success`` / ``failed``); returns it. ``on_poll(run)`` is
        called on every poll. Raises :class:`ClusterError` on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            run = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")
            if on_poll is not None:
                on_poll(run)
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(poll_s)
        raise ClusterError(f"{dag_id} run {run_id} did not finish within {timeout_s:.0f} s")


# ------------------------------------------------------------------------------------ command line
def _shell_env(node: Node) -> str:
    import shlex

    keys = sorted(node.cluster.env)
    return "\n".join(f"export {k}={shlex.quote(node.cluster.env[k])}" for k in keys
                     if k != "NEUSYM_HOME")


def main(argv: list[str] | None = None) -> int:
    """``python -m neusym.interfaces.cluster up|down|status|env|restore-writer``; one-line errors, exit 1."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m neusym.interfaces.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "status", "env", "restore-writer"])
    parser.add_argument("--json", action="store_true", help="status as JSON")
    args = parser.parse_args(argv)
    try:
        if args.command == "restore-writer":
            from neusym.store.versions import restore_writer_database

            print(json.dumps(restore_writer_database(Settings()), indent=1))
            return 0
        node = Node()
        if args.command == "up":
            node.up()
        elif args.command == "down":
            node.down()
        elif args.command == "env":
            print(_shell_env(node))
        else:
            st = node.status()
            if args.json:
                print(json.dumps(st, indent=1))
            else:
                for name, s in st["services"].items():
                    extra = f"  queues={','.join(s['queues'])} home={s['home']}" if "queues" in s else ""
                    print(f"{name:14s} {'running' if s['running'] else 'stopped':8s} pid={s['pid'] or '-':<8} "
                          f"log={s['log']}{extra}")
                health = {k: (v or {}).get("status") for k, v in st["health"].items()}
                print(f"api {st['api']}  storage {st['storage']}  health {health or 'unavailable'}")
        return 0
    except (ClusterError, ValueError, OSError) as exc:
        print(f"neusym cluster {args.command}: {exc}".splitlines()[0] if "\n" not in str(exc)
              else f"neusym cluster {args.command}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # no traceback for the user (NEUSYM_DEBUG=1 shows it)
        if os.environ.get("NEUSYM_DEBUG"):
            raise
        print(f"neusym cluster {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
