"""The accurate mode of paper search (neusym.query.hyde): an LLM-written hypothetical abstract joins the query.

The corpus is a real one: the ACL 2024 demos and tutorials volumes (real Anthology XML fixture, 44
papers), crawled and published through the real crawl stages into a fresh NEUSYM_HOME. The LLM is
the real ``OpenAICompatibleLLM`` client talking HTTP to a scripted OpenAI-compatible server on
loopback (:mod:`tests.openai_loopback`), so requests, replies and HTTP errors are real; the scripted
reply is the kind of hypothetical abstract a model writes: a paraphrase of the request, not the
target paper's text.
"""

from __future__ import annotations

import json

import httpx
import pytest

from neusym.query.hyde import HYPOTHESIS_SCHEMA, MAX_TOKENS, accurate_search, parse_hypothesis
from neusym.query.paper_search import search_papers
from neusym.settings import Settings
from neusym.store.paper_index import close_paper_indexes, current_paper_index

from .openai_loopback import LoopbackOpenAI, completion
from .test_search import crawl_and_publish

QUESTION = "Is there any work on keeping what a model knows up to date after it was trained?"
TARGET = "2024.acl-demos.9"  # EasyEdit: An Easy-to-use Knowledge Editing Framework for Large Language Models
HYPOTHESIS = {
    "title": "Updating Facts in Pretrained Language Models without Retraining",
    "abstract": "Language models store outdated or wrong facts. We present a framework that modifies specific "
                "knowledge in a trained model by editing its parameters, covering several editing methods. "
                "Experiments on LLaMA show reliable edits that generalise and keep unrelated knowledge.",
}


def replying(*texts: str, status: int = 200) -> LoopbackOpenAI:
    """A loopback endpoint answering every request with the next of ``texts`` (the last one repeats)."""
    queue = list(texts)

    def respond(body: dict) -> tuple[int, dict]:
        text = queue.pop(0) if len(queue) > 1 else queue[0]
        if status != 200:
            return status, {"error": {"message": text, "type": "server_error"}}
        return 200, completion(text, body.get("model", "scripted"), prompt_tokens=120, completion_tokens=70)

    return LoopbackOpenAI(respond)


@pytest.fixture(scope="module")
def home(repo_root, tmp_path_factory):
    """A NEUSYM_HOME whose current version holds the ACL 2024 demos and tutorials (metadata only)."""
    home = tmp_path_factory.mktemp("hyde") / "home"
    crawl_and_publish(Settings(home=home), [repo_root / "tests" / "fixtures" / "acl" / "2024.acl.xml"],
                      volumes=["demos", "tutorials"])
    yield home
    close_paper_indexes()


def settings_for(home, endpoint: LoopbackOpenAI | None, **extra) -> Settings:
    url = endpoint.base_url if endpoint is not None else None
    return Settings(home=home, llm_base_url=url, llm_model="scripted", llm_temperature=0.0, **extra)


@pytest.fixture(scope="module")
def default(home):
    """The default-mode ranking of QUESTION: the knowledge-editing paper is not first."""
    hits = search_papers(QUESTION, settings=Settings(home=home), limit=44)
    assert len(hits) == 44 and all(h.default_rank is None for h in hits)
    ranked = [h.anthology_id for h in hits]
    assert 2 <= ranked.index(TARGET) + 1 <= 10
    return hits


# ---------------------------------------------------------------------------------- the expansion
def test_the_hypothetical_abstract_lifts_the_paper_the_request_paraphrases(home, default):
    with replying(json.dumps(HYPOTHESIS)) as endpoint:
        result = accurate_search(current_paper_index(settings_for(home, endpoint)), QUESTION, limit=5,
                                 settings=settings_for(home, endpoint))
    assert result.applied and result.note is None
    assert result.hits[0].anthology_id == TARGET
    default_ids = [h.paper_id for h in default]
    # every hit says where the default mode had it
    assert [h.default_rank for h in result.hits] == [default_ids.index(h.paper_id) + 1 for h in result.hits]
    assert result.hits[0].default_rank == [h.anthology_id for h in default].index(TARGET) + 1
    assert result.hypothesis.title == HYPOTHESIS["title"]
    assert (result.hypothesis.prompt_tokens, result.hypothesis.completion_tokens) == (120, 70)
    summary = result.to_dict()
    assert summary["applied"] is True and summary["abstract"] == HYPOTHESIS["abstract"]
    # the request: the question in the user message, the JSON shape and the token cap of the measurement
    (request,) = endpoint.received
    body = request["body"]
    assert body["messages"][0]["role"] == "system" and "title" in body["messages"][0]["content"]
    assert body["messages"][1]["content"] == f"Search request: {QUESTION}"
    assert body["max_tokens"] == MAX_TOKENS
    assert body["response_format"]["json_schema"]["schema"] == HYPOTHESIS_SCHEMA


def test_expansion_words_reach_the_sparse_views(home):
    """A query no paper shares a word with finds nothing by keywords; the expansion's words do."""
    index = current_paper_index(Settings(home=home))
    query = "zqxv wrbl"
    expanded = index.search(query, limit=3, expansion="Fundus news scraper")
    assert expanded[0].anthology_id == "2024.acl-demos.29"
    assert index.search(query, limit=3)[0].anthology_id != "2024.acl-demos.29"


def test_filters_hold_in_the_accurate_mode(home):
    with replying(json.dumps(HYPOTHESIS)) as endpoint:
        hits = search_papers(QUESTION, settings=settings_for(home, endpoint), mode="accurate", limit=10,
                             venue="acl", author="Zhang")
    assert hits and all(any("Zhang" in a for a in h.authors) for h in hits)
    assert all(h.default_rank is not None for h in hits)


# ---------------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("reply", ["ok", '{"title": "", "abstract": ""}', ""])
def test_an_unusable_reply_keeps_the_default_ranking_and_says_so(home, default, reply, caplog):
    with replying(reply) as endpoint:
        result = accurate_search(current_paper_index(settings_for(home, endpoint)), QUESTION, limit=5,
                                 settings=settings_for(home, endpoint))
    assert not result.applied and result.hypothesis is None
    assert result.note.startswith("LLM reply unusable, default ranking kept")
    assert [h.paper_id for h in result.hits] == [h.paper_id for h in default[:5]]
    assert [h.default_rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert "default ranking kept" in caplog.text


def test_an_http_error_keeps_the_default_ranking_and_says_so(home, default):
    with replying("overloaded", status=503) as endpoint:
        hits = search_papers(QUESTION, settings=settings_for(home, endpoint, llm_timeout_s=10.0), mode="accurate",
                             limit=3)
        result = accurate_search(current_paper_index(settings_for(home, endpoint)), QUESTION, limit=3,
                                 settings=settings_for(home, endpoint, llm_timeout_s=10.0))
    assert [h.paper_id for h in hits] == [h.paper_id for h in default[:3]]
    assert result.note.startswith("LLM call failed: LLMError, default ranking kept") and "overloaded" in result.note
    assert result.to_dict()["title"] is None and result.to_dict()["llm_seconds"] == 0.0


def test_bad_arguments_are_refused_before_any_llm_call(home):
    with replying(json.dumps(HYPOTHESIS)) as endpoint:
        settings = settings_for(home, endpoint)
        for kwargs in ({"limit": 0}, {"year": "twenty"}, {"author": "%"}):
            with pytest.raises(ValueError):
                search_papers(QUESTION, settings=settings, mode="accurate", **kwargs)
        with pytest.raises(ValueError, match="mode must be one of default, accurate"):
            search_papers(QUESTION, settings=settings, mode="rerank")
    assert endpoint.received == []


def test_parse_hypothesis_reads_json_truncated_json_fences_and_plain_text():
    assert parse_hypothesis('{"title": "A B", "abstract": "We do C with D."}') == ("A B", "We do C with D.")
    assert parse_hypothesis('```json\n{"title": "A B C D", "abstract": "x"}\n```') == ("A B C D", "x")
    # cut by the token cap: the unterminated abstract is kept
    assert parse_hypothesis('{"title": "Knowledge Editing", "abstract": "We edit \\"facts\\" in models wit') == (
        "Knowledge Editing", 'We edit "facts" in models wit')
    assert parse_hypothesis("A paper that edits facts stored in language models.") == (
        "", "A paper that edits facts stored in language models.")
    assert parse_hypothesis('{"title": "Edit", "abstract": ""}') is None  # too few words
    assert parse_hypothesis("   ") is None


# ------------------------------------------------------------------------------------- CLI, service
def test_cli_accurate_flag(home, default):
    from typer.testing import CliRunner

    from neusym.interfaces.cli import app

    env = {"NEUSYM_HOME": str(home), "NEUSYM_LLM_MODEL": "scripted"}
    with replying(json.dumps(HYPOTHESIS)) as endpoint:
        result = CliRunner().invoke(app, ["search", QUESTION, "--accurate", "--json", "--limit", "3"],
                                    env={**env, "NEUSYM_LLM_BASE_URL": endpoint.base_url})
        table = CliRunner().invoke(app, ["search", QUESTION, "--accurate", "--limit", "3"],
                                   env={**env, "NEUSYM_LLM_BASE_URL": endpoint.base_url})
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits[0]["anthology_id"] == TARGET and hits[0]["default_rank"] > 1
    assert table.exit_code == 0 and "default" in table.stdout
    assert "hypothetical paper" in table.stderr and "Updating Facts" in table.stderr

    with replying("oops", status=503) as endpoint:
        failed = CliRunner().invoke(app, ["search", QUESTION, "--accurate", "--json", "--limit", "3"],
                                    env={**env, "NEUSYM_LLM_BASE_URL": endpoint.base_url})
    assert failed.exit_code == 0, failed.output
    assert [h["paper_id"] for h in json.loads(failed.stdout)] == [h.paper_id for h in default[:3]]
    assert "default ranking kept" in failed.stderr and "Traceback" not in failed.output

    plain = CliRunner().invoke(app, ["search", QUESTION, "--json", "--limit", "3"], env=env)
    assert plain.exit_code == 0, plain.output
    assert [h["paper_id"] for h in json.loads(plain.stdout)] == [h.paper_id for h in default[:3]]
    assert all("default_rank" not in h for h in json.loads(plain.stdout))


def test_service_search_mode_parameter(home, default):
    from neusym.interfaces.service import create_app

    from .service_support import LiveServer

    with replying(json.dumps(HYPOTHESIS)) as endpoint:
        app = create_app(settings_for(home, endpoint))
        with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=60) as client:
            plain = client.get("/search", params={"q": QUESTION, "limit": 3}).json()
            assert endpoint.received == []
            accurate = client.get("/search", params={"q": QUESTION, "limit": 3, "mode": "accurate"}).json()
            bad = client.get("/search", params={"q": QUESTION, "mode": "fastest"})
            spec = client.get("/openapi.json").json()["components"]["schemas"]
    assert plain["mode"] == "default" and "hyde" not in plain
    assert [h["paper_id"] for h in plain["hits"]] == [h.paper_id for h in default[:3]]
    assert all("default_rank" not in h for h in plain["hits"])
    assert accurate["mode"] == "accurate" and accurate["hits"][0]["anthology_id"] == TARGET
    assert [h["rank"] for h in accurate["hits"]] == [1, 2, 3]
    assert accurate["hits"][0]["default_rank"] == [h.anthology_id for h in default].index(TARGET) + 1
    assert accurate["hyde"]["applied"] is True and accurate["hyde"]["title"] == HYPOTHESIS["title"]
    assert accurate["facets"] == plain["facets"]
    assert bad.status_code == 422
    assert set(accurate["hyde"]) == set(spec["SearchHyde"]["properties"])
