"""The wording rules (neusym/query/answer/cues.py): every cue has a name, a family, a rationale and
examples it must match and must not match; a family can be turned off, and then the router acts as if
its words were not there."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from neusym.query.answer import cues
from neusym.query.answer.cues import CUES, families, families_off
from neusym.query.ask import ask

from .test_auto import NoLLM

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(CUES))
def test_every_cue_is_documented_and_matches_its_examples(name):
    c = CUES[name]
    assert c.rationale.strip() and c.family in families() and c.reads in ("question", "answer_format")
    assert c.examples, f"{name} has no example"
    for text in c.examples:
        assert c.search(text), f"{name} does not match its example {text!r}"
    for text in c.counterexamples:
        assert not c.search(text), f"{name} matches its counterexample {text!r}"


def test_no_agent_module_compiles_question_rules_of_its_own():
    """The modules whose rules moved to cues.py compile no other regular expression at module level
    that is applied to a question (the ones left read PDF text, tables, replies or numbers)."""
    allowed = {  # module: names of module-level patterns that read something else than the question
        "focused.py": {"_NUMBER", "_SENTENCE_END", "_LITERAL", "_CHUNK_TOKEN"},  # _CHUNK_TOKEN: excerpt text
        "paper_search.py": {"_CONF"},  # the AirQA conference scope ("acl2023")
        "router.py": set(),
        "symbolic.py": set(),
        "table_query.py": {"_UUID", "_WITH"},  # a table id; the model's SQL
        "verify.py": {"_NUMBER", "_QUOTED"},
        "answer_format.py": set(),
    }
    for module, names in allowed.items():
        tree = ast.parse((REPO / "neusym" / "query" / "answer" / module).read_text())
        compiled = {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                    and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "re.compile"}
        assert compiled == names, (module, compiled ^ names)


def test_a_family_turned_off_never_matches():
    c = CUES["paper_search"]
    assert c.search(c.examples[0])
    with families_off(["routing"]):
        assert c.search(c.examples[0]) is None and c.findall(c.examples[0]) == []
    with families_off(["modality"]):
        assert CUES["modality_table"].sub(" ", "the table") == "the table"
        assert CUES["count"].search("How many tables does it have?")  # other families are on
    assert c.search(c.examples[0])
    with pytest.raises(ValueError, match="unknown cue family telepathy"):
        with families_off(["telepathy"]):
            pass


def test_an_evaluation_turns_a_family_off_for_its_answers(corpus_settings, tmp_path, monkeypatch):
    """``neusym eval run --cues-off '["intent_count"]'``: a count question is no longer read as a count
    (the router sends it to focused reading); the family is on again once the answer is done, and the
    retired NEUSYM_CUES_OFF setting is refused rather than ignored."""
    import json

    from typer.testing import CliRunner

    from neusym.evaluation.runner import run_eval
    from neusym.interfaces.cli import app
    from neusym.query.answer import router

    question = "How many tables does the SPECTER paper have?"
    assert ask(question, settings=corpus_settings, llm=NoLLM()).route == "symbolic"
    routed = []
    real = router.route_question

    def stop_after_routing(*args, **kwargs):
        routed.append(real(*args, **kwargs))
        raise RuntimeError("stop after routing")

    monkeypatch.setattr(router, "route_question", stop_after_routing)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"uuid": "c0000000-0000-4000-8000-000000000001", "question": question,
                                 "answer_format": "an integer", "tags": ["single"], "anchor_pdf": [],
                                 "reference_pdf": [], "conference": [],
                                 "evaluator": {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": 3}}}) + "\n")
    run_eval(qfile, tmp_path / "pred.jsonl", settings=corpus_settings, method="auto", llm=NoLLM(),
             cues_off=["intent_count"])
    assert routed[0].route == "focused" and routed[0].features["symbolic_intent"] is None
    assert cues.CUES["count"].search(question)
    with pytest.raises(ValueError, match="unknown cue family nope"):
        run_eval(qfile, tmp_path / "pred2.jsonl", settings=corpus_settings, method="auto", llm=NoLLM(), cues_off=["nope"])
    assert not (tmp_path / "pred2.jsonl").exists()
    res = CliRunner().invoke(app, ["eval", "run", str(qfile), "--out", str(tmp_path / "p3.jsonl"), "--cues-off", "nope"])
    assert res.exit_code == 2 and "--cues-off: expected a JSON list" in res.output
    import subprocess
    import sys

    env = {**os.environ, "NEUSYM_CUES_OFF": '["intent_count"]', "NEUSYM_HOME": str(corpus_settings.home)}
    res = subprocess.run([sys.executable, "-c", "from neusym.interfaces.cli import main; main()", "status"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stderr.startswith("error: NEUSYM_CUES_OFF is no longer a setting: ")
    assert "neusym eval run --cues-off" in res.stderr and "Traceback" not in res.stderr
