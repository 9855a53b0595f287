"""The focused route's configuration is passed in, not patched: a variant changes what one call reads,
threads answering side by side keep their own, bad variants are refused naming the field, and the CLI's
``--focused`` reaches the answer."""

from __future__ import annotations

import json
import threading

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from neusym.query.answer import focused as auto
from neusym.query.agent.actions import Environment
from neusym.query.answer.config import SHIPPED, FocusedConfig, current, using


def _paper(env, title_start: str) -> list[tuple[str, str]]:
    pid, title = env.query("SELECT paper_id::VARCHAR, title FROM metadata WHERE title LIKE ?", [title_start + "%"])[0]
    return [(pid, title)]


def test_a_variant_changes_the_evidence_of_its_call_only(corpus_settings):
    q = "Which pretrained model is SPECTER initialized from?"
    with Environment(corpus_settings) as env:
        paper = _paper(env, "SPECTER")
        shipped = auto.focused_evidence(q, paper, env, modality=[])
        with using(FocusedConfig(evidence_items=2)):
            two = auto.focused_evidence(q, paper, env, modality=[])
        after = auto.focused_evidence(q, paper, env, modality=[])
    assert len(shipped) == SHIPPED.evidence_items == 4
    assert [c["primary_key"] for c in two] == [c["primary_key"] for c in shipped[:2]]
    assert [c["primary_key"] for c in after] == [c["primary_key"] for c in shipped]


def test_threads_keep_their_own_configuration():
    seen: dict[int, int] = {}
    barrier = threading.Barrier(2)

    def work(k: int) -> None:
        with using(FocusedConfig(evidence_items=k)):
            barrier.wait(timeout=5)  # both are inside their block at once
            seen[k] = current().evidence_items

    threads = [threading.Thread(target=work, args=(k,)) for k in (2, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {2: 2, 7: 7}
    assert current() is SHIPPED


def test_the_previous_configuration_comes_back_after_an_error():
    with pytest.raises(RuntimeError):
        with using(FocusedConfig(front_matter=False)):
            assert current().front_matter is False
            raise RuntimeError("boom")
    assert current().front_matter is True


def test_bad_variants_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="evidence_itemz"):
        FocusedConfig(evidence_itemz=6)
    with pytest.raises(ValidationError, match="table_query_gate"):
        FocusedConfig(table_query_gate="sometimes")
    with pytest.raises(ValidationError, match="evidence_items"):
        FocusedConfig(evidence_items=0)
    with pytest.raises(TypeError):
        with using({"evidence_items": 2}):  # a plain dict is not a configuration
            pass


def test_eval_run_refuses_a_bad_focused_option_before_answering(corpus_settings, tmp_path, monkeypatch):
    from neusym.interfaces.cli import app

    monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"uuid": "u1", "question": "How many pages does the LongEval paper have?",
                                     "answer_format": "an integer", "tags": ["single"],
                                     "evaluator": {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 1}}})
                         + "\n")
    out = tmp_path / "pred.jsonl"
    for bad, field in (('{"evidence_itemz": 6}', "evidence_itemz"), ('{"evidence_items": "six"}', "evidence_items"),
                       ("not json", "value")):
        res = CliRunner().invoke(app, ["eval", "run", str(questions), "--out", str(out), "--focused", bad])
        assert res.exit_code == 2, res.output
        assert f"--focused: {field}" in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_eval_run_answers_with_the_focused_variant_it_is_given(corpus_settings, tmp_path, monkeypatch):
    """``neusym eval run --focused`` reaches the reader's prompt: the same question through a loopback
    OpenAI-compatible endpoint is shown two fused excerpts fewer with ``evidence_items`` 2 than with the shipped four."""
    import re

    from neusym.interfaces.cli import app
    from tests.test_eval_run import LoopbackEndpoint, Script

    q = "Which pretrained model is SPECTER initialized from?"
    with Environment(corpus_settings) as env:
        (pid, _), = _paper(env, "SPECTER")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"uuid": "f0000000-0000-4000-8000-000000000001", "question": q,
                                     "answer_format": "Your answer should be the name only.", "tags": ["single"],
                                     "anchor_pdf": [pid], "reference_pdf": [], "conference": [],
                                     "evaluator": {"eval_func": "eval_string_exact_match",
                                                   "eval_kwargs": {"gold": "SciBERT"}}}) + "\n")
    prompts: list[str] = []

    def answer(messages):
        prompts.append(messages[-1]["content"])
        return {"answer": "SciBERT", "evidence": [1]}

    monkeypatch.setenv("NEUSYM_HOME", str(corpus_settings.home))
    excerpts = {}
    for name, option in (("shipped", []), ("two", ["--focused", '{"evidence_items": 2}'])):
        prompts.clear()
        with LoopbackEndpoint(Script({q: [answer] * 4})) as endpoint:
            monkeypatch.setenv("NEUSYM_LLM_BASE_URL", endpoint.base_url)
            monkeypatch.setenv("NEUSYM_LLM_MODEL", "scripted")
            res = CliRunner().invoke(app, ["eval", "run", str(questions), "--out", str(tmp_path / f"{name}.jsonl"),
                                           *option])
        assert res.exit_code == 0, res.output
        reader = next(p for p in prompts if "[1] (" in p)
        excerpts[name] = re.findall(r"^\[(\d+)\] \(", reader, re.M)
    # the fused excerpts plus what the route always adds (the same for both): two fewer with two kept
    assert len(excerpts["shipped"]) - len(excerpts["two"]) == SHIPPED.evidence_items - 2 == 2
