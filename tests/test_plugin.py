"""The Airflow plugin (plugins/neusym_plugin.py) in a real ``airflow api-server`` on loopback.

A fresh AIRFLOW_HOME (SQLite, ``airflow db migrate``), the repo's ``plugins/`` folder, the
SimpleAuthManager with one viewer user, and NEUSYM_HOME pointing at the session's sample corpus.
The mounted app must refuse requests without Airflow credentials and answer with them — a JWT from
``POST /auth/token`` as a Bearer token, or the UI's ``_token`` cookie (what the iframe sends).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .service_support import wait_for

pytestmark = pytest.mark.slow

LONGEVAL = "LongEval: Guidelines for Human Evaluation of Faithfulness in Long-form Summarization"


@pytest.fixture(scope="module")
def api_server(corpus_settings, repo_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("airflow")
    (root / "dags").mkdir()
    passwords = root / "passwords.json"
    passwords.write_text(json.dumps({"reader": "reader-password"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "NEUSYM_"))}
    env = {
        **inherited,
        "AIRFLOW_HOME": str(root / "home"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(repo_root / "plugins"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "reader:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": "neusym-plugin-test-secret-0123456789",
        "NEUSYM_HOME": str(corpus_settings.home),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
    url = f"http://127.0.0.1:{port}"
    with open(root / "api-server.log", "w") as log:
        proc = subprocess.Popen([airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            if proc.poll() is not None:
                pytest.fail("airflow api-server exited:\n" + (root / "api-server.log").read_text()[-3000:])
            try:
                return httpx.get(url + "/api/v2/monitor/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_for(up, 180, "airflow api-server", interval_s=0.5)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture(scope="module")
def token(api_server) -> str:
    r = httpx.post(api_server + "/auth/token", json={"username": "reader", "password": "reader-password"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["access_token"]


def test_the_mounted_app_needs_airflow_credentials(api_server):
    with httpx.Client(base_url=api_server, timeout=60) as c:
        for method, path, body in [("GET", "/neusym/search?q=faithfulness", None),
                                   ("POST", "/neusym/sql", {"sql": "SELECT 1"}),
                                   ("GET", "/neusym/schema", None),
                                   ("POST", "/neusym/ask/json", {"question": "x"}),
                                   ("POST", "/neusym/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                                   ("GET", "/neusym/", None)]:
            anonymous = c.request(method, path, json=body)
            assert anonymous.status_code == 401, (path, anonymous.text)
            assert anonymous.json()["detail"] == "Not authenticated"
            forged = c.request(method, path, json=body, headers={"Authorization": "Bearer not.a.jwt"})
            assert forged.status_code == 403 and "Invalid JWT" in forged.json()["detail"], (path, forged.text)
        health = c.get("/neusym/healthz")  # the probe stays open, as in the standalone service
        assert health.status_code == 200 and health.json()["papers"] == 5


def test_the_mounted_app_answers_with_a_token_or_the_ui_cookie(api_server, token):
    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=api_server, timeout=60) as c:
        r = c.get("/neusym/search", params={"q": "human evaluation of faithfulness", "limit": 2}, headers=bearer)
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["title"] == LONGEVAL
        sql = c.post("/neusym/sql", json={"sql": "SELECT count(*) AS n FROM metadata"}, headers=bearer)
        assert sql.status_code == 200 and sql.json()["rows"] == [[5]]
        pid = r.json()["hits"][0]["paper_id"]
        page = c.get(f"/neusym/papers/{pid}/pages/1.png", headers=bearer)
        assert page.status_code == 200 and page.content[:8] == b"\x89PNG\r\n\x1a\n"
    with httpx.Client(base_url=api_server, timeout=60, cookies={"_token": token}) as ui:  # the iframe's requests
        html = ui.get("/neusym/")
        assert html.status_code == 200 and "static/app.js" in html.text
        assert ui.get("/neusym/static/app.js").status_code == 200
        assert ui.get("/neusym/schema").json()["relations"]


def test_the_mcp_server_answers_inside_the_api_server_with_a_token(api_server, token):
    """The MCP server of the mounted app (no lifespan runs there: its session manager starts with the
    first request), driven by the SDK's client with an Airflow token."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from neusym.interfaces.service.mcp_client import McpClient

    headers = {"Authorization": f"Bearer {token}"}
    with McpClient(lambda: streamable_http_client(api_server + "/neusym/mcp",
                                                  http_client=create_mcp_http_client(headers=headers))) as client:
        assert "search_papers" in {t.name for t in client.list_tools()}
        r = client.call_tool("search_papers", {"query": "human evaluation of faithfulness", "limit": 2})
        assert not r.is_error and r.structured_content["hits"][0]["title"] == LONGEVAL
        sql = client.call_tool("retrieve_from_database", {"sql": "SELECT count(*) AS n FROM metadata"})
        assert sql.structured_content["rows"] == [[5]]


def test_the_plugin_adds_paper_search_to_the_airflow_ui(api_server, token):
    r = httpx.get(api_server + "/api/v2/plugins", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200
    plugin = next(p for p in r.json()["plugins"] if p["name"] == "neusym")
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/neusym"
    view = plugin["external_views"][0]
    assert view["name"] == "Paper search" and view["href"] == "neusym/" and view["destination"] == "nav"
    assert view["url_route"] == "paper-search"
