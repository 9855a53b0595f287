"""Every rule that reads the wording of a question (or of its answer format), in one place.

Each rule is a :class:`Cue`: a regular expression with a ``name``, a ``family`` (what it decides:
``routing``, ``modality``, ``search_scope``, ``computation``, ``intent_count``,
``intent_authors``, ``intent_guard``, ``intent_affiliation``, ``missing_title``,
``answer_format``), what it ``reads`` (``question`` or ``answer_format``), its ``rationale`` and
examples it must match and must not match (``tests/test_cues.py`` checks every one). The modules
that use a cue import it from here; nothing else in the agent reads question wording with a regular
expression of its own.

A family can be turned off for an evaluation (``neusym eval run --cues-off '["computation"]'``, or
:func:`families_off` around a call): its cues then
never match (``search`` / ``match`` return None, ``findall`` nothing, ``sub`` leaves the text as it
is), so the answer shows what the family is worth. ``benchmarks/cue_hits.py`` lists every cue with
how many dev and test questions it fires on.
"""

from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

_OFF: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("neusym_cues_off", default=frozenset())


@dataclass(frozen=True)
class Cue:
    """One wording rule: a compiled ``regex`` with its ``name``, ``family``, what it ``reads``, its
    ``rationale`` and ``examples`` / ``counterexamples``. Used like the compiled pattern (``search``,
    ``match``, ``fullmatch``, ``finditer``, ``findall``, ``sub``, ``pattern``); while its family is
    off it never matches."""

    name: str
    family: str
    reads: str
    regex: re.Pattern
    rationale: str
    examples: tuple[str, ...] = ()
    counterexamples: tuple[str, ...] = field(default=())

    @property
    def off(self) -> bool:
        """Whether this cue's family is turned off in the current context."""
        return self.family in _OFF.get()

    @property
    def pattern(self) -> str:
        return self.regex.pattern

    @property
    def flags(self) -> int:
        return self.regex.flags

    def search(self, string: str, *args: Any) -> re.Match | None:
        return None if self.off else self.regex.search(string, *args)

    def match(self, string: str, *args: Any) -> re.Match | None:
        return None if self.off else self.regex.match(string, *args)

    def fullmatch(self, string: str, *args: Any) -> re.Match | None:
        return None if self.off else self.regex.fullmatch(string, *args)

    def finditer(self, string: str, *args: Any) -> Iterator[re.Match]:
        return iter(()) if self.off else self.regex.finditer(string, *args)

    def findall(self, string: str, *args: Any) -> list:
        return [] if self.off else self.regex.findall(string, *args)

    def sub(self, repl: Any, string: str, count: int = 0) -> str:
        return string if self.off else self.regex.sub(repl, string, count)


CUES: dict[str, Cue] = {}
"""Every cue by name, in the order they are defined."""


def cue(name: str, family: str, reads: str, pattern: str, flags: int = 0, *, rationale: str,
        examples: Iterable[str] = (), counterexamples: Iterable[str] = ()) -> Cue:
    """Define and register one cue; raises ValueError for a duplicate name or an empty rationale."""
    if name in CUES:
        raise ValueError(f"cue {name!r} is defined twice")
    if not rationale.strip():
        raise ValueError(f"cue {name!r} has no rationale")
    if reads not in ("question", "answer_format"):
        raise ValueError(f"cue {name!r}: reads must be question or answer_format, not {reads!r}")
    c = Cue(name, family, reads, re.compile(pattern, flags), rationale, tuple(examples), tuple(counterexamples))
    CUES[name] = c
    return c


def families() -> list[str]:
    """The families of the registered cues, in order of first definition."""
    return list(dict.fromkeys(c.family for c in CUES.values()))


@contextmanager
def families_off(names: Iterable[str]) -> Iterator[None]:
    """Turn the cue families ``names`` off for the block (this thread's context). Raises ValueError
    naming an unknown family (a setting that names none would silently change nothing)."""
    names = frozenset(names or ())
    unknown = sorted(names - set(families()))
    if unknown:
        raise ValueError(f"unknown cue family {', '.join(unknown)}; known: {', '.join(families())}")
    token = _OFF.set(_OFF.get() | names)
    try:
        yield
    finally:
        _OFF.reset(token)


# ------------------------------------------------------------------------------------ vocabularies
ELEMENT_WORDS = {
    "table": "tables", "tables": "tables",
    "figure": "figures", "figures": "figures", "image": "figures", "images": "figures",
    "equation": "equations", "equations": "equations", "formula": "equations", "formulas": "equations",
    "formulae": "equations",
    "section": "sections", "sections": "sections", "subsection": "subsections", "subsections": "subsections",
    "page": "pages", "pages": "pages",
    "reference": "references", "references": "references", "citation": "references", "citations": "references",
    "author": "authors", "authors": "authors",
}
"""The words a count question may count, and the element kind each one counts."""
_COUNTED = (r"(?=\s*(?:[?,.;:)]|$|(?:does|do|did|are|is|were|was|has|have|had|in|of|on|appear\w*|there|the|this|"
            r"that|these|and|or|can|altogether|overall|in\s+total|with|without|across|from|contain\w*|listed|"
            r"numbered|at|for|by|it|its|they|their)\b))")
"""After the counted word: the end of the question or a function word. "How many author nodes does the
graph have?" counts nodes, not the paper's authors."""
_ELEMENT_ALT = "|".join(sorted(ELEMENT_WORDS, key=len, reverse=True))
VENUES = ("acl", "emnlp", "naacl", "eacl", "aacl", "coling", "iclr", "icml", "neurips", "nips", "aaai", "ijcai",
           "cvpr", "iccv", "eccv", "kdd", "sigir", "www", "tacl", "cl", "findings")
"""Venue names the paper search recognises in a question."""


# ------------------------------------------------------------------------------------ cues
PAPER_SEARCH = cue(
    "paper_search", "routing", "question",
    r"^\s*(?:(?:is|are)\s+there\s+(?:any|a|an|some)?\s*(?:recent\s+)?(?:papers?|works?|stud(?:y|ies)|research)\b|"
    r"(?:which|what)\s+(?:papers?|works?|stud(?:y|ies)|article)\b|"
    r"(?:can you\s+)?(?:find|recommend|suggest|show)\s+(?:me\s+)?(?:a|the|any|some)?\s*(?:papers?|works?|stud(?:y|ies))\b|"
    r"(?:i(?:'m|’m| am)\s+)?(?:looking|searching)\s+for\s+(?:a\s+|any\s+|some\s+)?(?:papers?|works?|research|stud(?:y|ies))\b|"
    r"has\s+anyone\b)",
    re.I,
    rationale='The question asks for a paper to be found ("Is there any paper that ...", "Which paper ...", "find me work on ..."): answer it with the paper index, not by reading a paper.',
    examples=['Is there any paper that distils LMs for OOD detection?', 'Which paper first introduced a benchmark of long documents?', 'Can you find me a paper on retrieval-augmented generation?'],
    counterexamples=['What loss does SPECTER optimize?', 'How many tables does the paper have?'])

TITLE_FORMAT = cue(
    "title_format", "routing", "answer_format",
    r"\btitle\b",
    re.I,
    rationale='The answer format asks for a title: with an AirQA conference scope the question is a paper search.',
    examples=['Your answer should be the title of the paper.'],
    counterexamples=['Your answer should be a single integer.'])

MODALITY_TABLE = cue(
    "modality_table", "modality", "question",
    r"\btables?\b",
    re.I,
    rationale='The question is about a table: focused reading weighs table cells fully (other modalities at a lower weight).',
    examples=['Which model is best in Table 2?'],
    counterexamples=['What does the model use as negatives?'])

MODALITY_FIGURE = cue(
    "modality_figure", "modality", "question",
    r"\b(figures?|fig\.|plots?|images?|charts?)\b",
    re.I,
    rationale='The question is about a figure, plot or chart: figure captions and OCR text get the full weight.',
    examples=['What does Figure 3 plot on its y-axis?'],
    counterexamples=['Which dataset is used?'])

MODALITY_FORMULA = cue(
    "modality_formula", "modality", "question",
    r"\b(equations?|formulas?|formulae|eq\.)\b",
    re.I,
    rationale='The question is about an equation or formula: equation cells get the full weight.',
    examples=['What does the symbol lambda mean in Equation 2?'],
    counterexamples=['Which dataset is used?'])

ENTITY = cue(
    "entity", "routing", "question",
    r"\b(?:[A-Z][a-z]*[A-Z]\w*|[A-Z]{2,}\w*|\d+(?:\.\d+)?%?)\b|\"[^\"]+\"",
    0,
    rationale="Named things in the question (CamelCase, acronyms, numbers, quoted strings): a feature the router logs (SymRAG's entity count).",
    examples=['How does SPECTER use SciBERT?'],
    counterexamples=['what is the main idea'])

VENUE_IN_QUESTION = cue(
    "venue_in_question", "search_scope", "question",
    r"\b(" + "|".join(VENUES) + r")(?:[\s-]?(\d{4}))?\b",
    re.I,
    rationale='A venue (and year) named in the question ("at ACL 2023") becomes a filter of the paper search.',
    examples=['Find the ACL 2023 paper on long-form summarization.'],
    counterexamples=['Find the paper on long-form summarization.'])

YEAR_IN_QUESTION = cue(
    "year_in_question", "search_scope", "question",
    r"\b(19[5-9]\d|20[0-4]\d)\b",
    0,
    rationale='A publication year named in the question.',
    examples=['Which 2021 paper introduced it?'],
    counterexamples=['Which paper introduced it?'])


ELEMENT_NUMBER_BEFORE = cue(
    "element_number_before", "computation", "question",
    r"\b(?:tables?|figures?|fig\.|sections?|eq\.|equations?|appendix|algorithm|steps?)\s*$",
    re.I,
    rationale='A number right after "Table", "Figure", "Section" ... names an element, it is not a value to compute with.',
    examples=['the results in Table'],
    counterexamples=['the results in'])

ASSIGNMENT = cue(
    "assignment", "computation", "question",
    r"\b[A-Za-z]\w{0,10}\s*=\s*-?\d",
    0,
    rationale='The question assigns a value ("k = 3"): it gives numbers to compute with.',
    examples=['With k = 3 and n = 10, what is the score?'],
    counterexamples=['What is the score?'])

WORKED_ASK = cue(
    "worked_ask", "computation", "question",
    r"\b(?:using|if|given|whose|when|for\s+a|suppose|assume)\b",
    re.I,
    rationale='Words that hand over values ("using", "given", "whose", "suppose"): with two or more numbers the question is a worked computation.',
    examples=['Given distances of 0.8 and 1.5, what is the loss?'],
    counterexamples=['What is the loss?'])

ASKS_TO_COMPUTE = cue(
    "asks_to_compute", "computation", "question",
    r"\b(difference|differ|improve|improvement|increase|decrease|gain|drop|ratio|times|percent|"
                      r"percentage|average|mean|sum|total|combined|how much (?:more|less|higher|lower|better|worse)|"
                      r"compute|calculate|given|by how (?:many|much)|beats?|loses?)\b|\bwhen\s+\w+\s*=",
    re.I,
    rationale='The question asks for a computed value (a difference, ratio, percentage, sum ...): the answer may be an expression and its numbers need not be quoted by the evidence.',
    examples=['What is the difference between the two F1 scores?', 'By how much does it improve?'],
    counterexamples=['Which dataset is used?'])

COUNT = cue(
    "count", "intent_count", "question",
    r"\bhow many\s+(?:distinct\s+|different\s+|numbered\s+|main\s+|top-level\s+)?"
                    r"(" + _ELEMENT_ALT + r")\b" + _COUNTED,
    re.I,
    rationale='"How many tables / figures / pages / authors ..." of a paper: a count the database answers with SQL.',
    examples=['How many tables does the SPECTER paper have?'],
    counterexamples=['How many author nodes does the graph have?'])

AND_ELEMENT = cue(
    "and_element", "intent_count", "question",
    r"^\s*(?:,\s*)?and\s+(?:how many\s+)?(?:distinct\s+|different\s+|numbered\s+|main\s+|"
                          r"top-level\s+)?(" + _ELEMENT_ALT + r")\b" + _COUNTED,
    re.I,
    rationale='"..., and how many figures": a second counted element after the first.',
    examples=[' and figures does it have?'],
    counterexamples=[' and what is its title?'])

NUMBER_OF = cue(
    "number_of", "intent_count", "question",
    r"\b(?:the\s+)?(?:total\s+)?number\s+of\s+(" + _ELEMENT_ALT
                        + r")\b" + _COUNTED,
    re.I,
    rationale='"the number of tables": a count asked without "how many".',
    examples=['What is the total number of figures in the paper?'],
    counterexamples=['What is the number of negatives sampled?'])

IN_SECTION = cue(
    "in_section", "intent_count", "question",
    r"\bin\s+(?:the\s+)?(?:section\s+(?P<num>[A-Z]?\d+(?:\.\d+)*)\b|[\"“']?(?P<name>[A-Za-z][\w \-&]{2,60}?)[\"”']?\s+"
    r"(?:section|subsection)\b|section\s+[\"“'](?P<qname>[^\"”']{3,60})[\"”'])",
    re.I,
    rationale='"in section 3" / "in the Experiments section": a count restricted to one section of the tree.',
    examples=['How many tables are in section 4?', 'How many figures are in the Experiments section?'],
    counterexamples=['How many tables are there?'])

AUTHOR_POSITION = cue(
    "author_position", "intent_authors", "question",
    r"\b(first|last|second|third|fourth|fifth|corresponding)\s+author\b",
    re.I,
    rationale='"the first / last / second author": one author by position.',
    examples=['Who is the last author of the paper?'],
    counterexamples=['Who are the authors?'])

AUTHORS = cue(
    "authors", "intent_authors", "question",
    r"\b(?:who\s+(?:are|were|is|wrote)\b.*\bauthors?\b|(?:list|name|give)\s+(?:all\s+)?(?:of\s+)?"
                      r"(?:the\s+)?authors\b|\bwho\s+wrote\b|^\s*(?:what|which)\s+are\s+the\s+(?:names\s+of\s+the\s+)?"
                      r"authors\b)",
    re.I,
    rationale='"Who wrote ...", "list the authors": the author list.',
    examples=['Who wrote the SPECTER paper?', 'List all the authors of LongEval.'],
    counterexamples=['What do the authors propose?'])

UNCOVERED = cue(
    "uncovered", "intent_guard", "question",
    r"\baffiliat\w*|\be-?mails?\b|\bcontribut\w*\s+equally\b|\bequal\s+contribution\b|\bdoi\b|\bgrants?\b|"
    r"\bfund(?:ed|ing)\b",
    re.I,
    rationale='Parts of a question no template answers (affiliations, e-mails, equal contribution, DOI, funding): such a question is not symbolic even when it also asks for a venue.',
    examples=['At which conference was it published, and what is its DOI?'],
    counterexamples=['At which conference was it published?'])

AND_ASKS = cue(
    "and_asks", "intent_guard", "question",
    r"\band\s+(?:on\s+|in\s+|at\s+|for\s+)?(?:which|what|how|who|where|when)\b",
    re.I,
    rationale='"..., and which / what / how ..." after a template\'s question: a second question the template does not answer.',
    examples=['What is the title, and on which page is Table 2?'],
    counterexamples=['What is the title of the paper?'])


AFFILIATED = cue(
    "affiliated", "intent_affiliation", "question",
    r"^\s*(?:which|who|name|list)\b[^?]{0,120}?\b(?:affiliated\s+with|(?:are|is|were|was)\s+(?:at|from)|"
    r"work(?:s|ed)?\s+(?:at|for))\s+(?:the\s+)?(?P<org>[^?]{2,80}?)\s*\??\s*$",
    re.I,
    rationale="Which authors are affiliated with an organisation: matched against the footnote marks of page 1's author block.",
    examples=['Which authors of DecompX are affiliated with the University of Tehran?'],
    counterexamples=['Which authors of DecompX contributed equally?'])


AUTHORS_WORD = cue(
    "authors_word", "intent_affiliation", "question",
    r"\bauthors?\b|\bwho\b",
    re.I,
    rationale='An affiliation or equal-contribution question must be about authors ("authors", "who").',
    examples=['Which authors are at Google?'],
    counterexamples=['Which models are at the top?'])


QUOTED_TITLE = cue(
    "quoted_title", "missing_title", "question",
    r"(?:(?<=\s)|(?<=\()|^)['\"“‘]([^'\"“”‘’]{12,200})['\"”’](?=[\s,.;:?!)]|$)",
    0,
    rationale='A quoted title (12-200 characters): when no corpus title contains it, the paper is not in the corpus.',
    examples=["Who wrote 'Attention Is All You Need'?"],
    counterexamples=['Who wrote it?'])

WITHOUT_YEAR = cue(
    "without_year", "answer_format", "answer_format",
    r"\bwithout\s+(?:the\s+)?(?:years?|parenthes\w+|citations?|references?)\b",
    re.I,
    rationale='The format asks for labels without the year or citation: "(2019a)" is dropped from the answer.',
    examples=['the model name without the year'],
    counterexamples=['the model name'])

FORMAT_LIST = cue(
    "format_list", "answer_format", "answer_format",
    r"\bpython\s+list\b|\blist\s+of\b",
    re.I,
    rationale='The format asks for a list: the answer schema is a JSON array.',
    examples=['Your answer should be a Python list of strings.'],
    counterexamples=['Your answer should be a single integer.'])

FORMAT_LIST_LENGTH = cue(
    "format_list_length", "answer_format", "answer_format",
    r"\blist\s+of\s+(one|two|three|four|five|six|\d)\b",
    re.I,
    rationale='A list of a given length: the array has exactly that many items.',
    examples=['a Python list of two strings'],
    counterexamples=['a Python list of strings'])

FORMAT_INT = cue(
    "format_int", "answer_format", "answer_format",
    r"\b(?:single|an|one)\s+integer\b|\bpython\s+integer\b|\bshould be an? integer\b",
    re.I,
    rationale='The format asks for an integer.',
    examples=['Your answer should be a single integer.'],
    counterexamples=['Your answer should be a float.'])

FORMAT_FLOAT = cue(
    "format_float", "answer_format", "answer_format",
    r"\b(?:a|one|single)\s+(?:python\s+)?(?:float|decimal|number)\b|\bas a float\b",
    re.I,
    rationale='The format asks for a float or decimal number.',
    examples=['Your answer should be a float rounded to 2 decimal places.'],
    counterexamples=['Your answer should be a single integer.'])

FORMAT_DECIMALS = cue(
    "format_decimals", "answer_format", "answer_format",
    r"(?:rounded to|with)\s+(one|two|three|four|\d)\s+decimal",
    re.I,
    rationale='The format says how many decimals to keep.',
    examples=['rounded to two decimal places'],
    counterexamples=['rounded to an integer'])

FORMAT_BOOL = cue(
    "format_bool", "answer_format", "answer_format",
    r"\bpython\s+boolean\b|\b(?:a|one)\s+boolean\b",
    re.I,
    rationale='The format asks for a boolean.',
    examples=['Your answer should be a Python boolean.'],
    counterexamples=['Your answer should be a string.'])

FORMAT_FREE = cue(
    "format_free", "answer_format", "answer_format",
    r"\blatex\b|\bformula\b|\bparagraph\b|\bplain text\b|\btitle\b",
    re.I,
    rationale='The format asks for free text (LaTeX, a formula, a paragraph, a title): no JSON type is imposed.',
    examples=['Your answer should be a LaTeX formula.'],
    counterexamples=['Your answer should be a single integer.'])

FORMAT_HEAD = cue(
    "format_head", "answer_format", "answer_format",
    r"^\s*your answer should be\s+",
    re.I,
    rationale='The "Your answer should be" lead-in of a format, dropped before it is shown.',
    examples=['Your answer should be a string.'],
    counterexamples=['The answer is a string.'])


__all__ = ["CUES", "Cue", "ELEMENT_WORDS", "VENUES", "cue", "families", "families_off",
           "PAPER_SEARCH",
           "TITLE_FORMAT",
           "MODALITY_TABLE",
           "MODALITY_FIGURE",
           "MODALITY_FORMULA",
           "ENTITY",
           "VENUE_IN_QUESTION",
           "YEAR_IN_QUESTION",
           "ELEMENT_NUMBER_BEFORE",
           "ASSIGNMENT",
           "WORKED_ASK",
           "ASKS_TO_COMPUTE",
           "COUNT",
           "AND_ELEMENT",
           "NUMBER_OF",
           "IN_SECTION",
           "AUTHOR_POSITION",
           "AUTHORS",
           "UNCOVERED",
           "AND_ASKS",
           "AFFILIATED",
           "AUTHORS_WORD",
           "QUOTED_TITLE",
           "WITHOUT_YEAR",
           "FORMAT_LIST",
           "FORMAT_LIST_LENGTH",
           "FORMAT_INT",
           "FORMAT_FLOAT",
           "FORMAT_DECIMALS",
           "FORMAT_BOOL",
           "FORMAT_FREE",
           "FORMAT_HEAD",
]
