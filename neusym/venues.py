"""One vocabulary of ACL-family venues and volume types, shared by the crawl and the PDF parser.

``conference_full`` / ``conference_abbreviation`` / ``volume`` in ``metadata`` come from either the
ACL Anthology XML (:mod:`neusym.ingest.sources.acl_source`) or a PDF's proceedings footer
(:mod:`neusym.ingest.parse.metadata`); both map through these tables so a paper gets the same values
whichever source saw it first.
"""

from __future__ import annotations

import re

#: Anthology venue acronym -> (conference_full, conference_abbreviation).
ACL_VENUES: dict[str, tuple[str, str]] = {
    "acl": ("Annual Meeting of the Association for Computational Linguistics", "ACL"),
    "emnlp": ("Conference on Empirical Methods in Natural Language Processing", "EMNLP"),
    "naacl": ("Annual Conference of the North American Chapter of the Association for Computational Linguistics", "NAACL"),
    "eacl": ("Conference of the European Chapter of the Association for Computational Linguistics", "EACL"),
    "aacl": ("Conference of the Asia-Pacific Chapter of the Association for Computational Linguistics", "AACL"),
    "coling": ("International Conference on Computational Linguistics", "COLING"),
    "conll": ("Conference on Computational Natural Language Learning", "CoNLL"),
    "tacl": ("Transactions of the Association for Computational Linguistics", "TACL"),
    "cl": ("Computational Linguistics", "CL"),
    "lrec": ("International Conference on Language Resources and Evaluation", "LREC"),
    "ijcnlp": ("International Joint Conference on Natural Language Processing", "IJCNLP"),
    "semeval": ("International Workshop on Semantic Evaluation", "SemEval"),
    "wmt": ("Conference on Machine Translation", "WMT"),
    "starsem": ("Joint Conference on Lexical and Computational Semantics", "*SEM"),
}

#: Anthology volume id (or the word used for it) -> metadata.volume value.
VOLUME_TYPES: dict[str, str] = {
    "long": "long", "short": "short", "main": "main", "findings": "findings",
    "demo": "demo", "demos": "demo", "srw": "srw", "tutorial": "tutorials", "tutorials": "tutorials",
    "industry": "industry",
}


def _full_name_pattern(full: str) -> re.Pattern[str]:
    # footers sometimes drop the leading "Annual" of the NAACL name
    core = full[len("Annual "):] if full.startswith("Annual Conference") else full
    return re.compile(re.escape(core), re.I)


#: How a PDF's proceedings footer names an event, most specific first: full names, then acronyms.
#: Each entry: (pattern, conference_abbreviation, conference_full).
FOOTER_EVENTS: list[tuple[re.Pattern[str], str, str]] = [
    (_full_name_pattern(ACL_VENUES[key][0]), ACL_VENUES[key][1], ACL_VENUES[key][0])
    for key in ("acl", "eacl", "naacl", "aacl", "emnlp", "coling", "conll")
] + [
    (re.compile(r"\bNAACL(-HLT)?\b"), *ACL_VENUES["naacl"][::-1]),
    (re.compile(r"\bEMNLP\b"), *ACL_VENUES["emnlp"][::-1]),
    (re.compile(r"\bEACL\b"), *ACL_VENUES["eacl"][::-1]),
    (re.compile(r"\bCOLING\b"), *ACL_VENUES["coling"][::-1]),
    (re.compile(r"\bACL\b"), *ACL_VENUES["acl"][::-1]),
]

#: Volume names printed in proceedings titles -> metadata.volume value.
FOOTER_VOLUMES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"Long Papers", re.I), VOLUME_TYPES["long"]),
    (re.compile(r"Short Papers", re.I), VOLUME_TYPES["short"]),
    (re.compile(r"System Demonstrations|Demo(nstration)?s? Track", re.I), VOLUME_TYPES["demo"]),
    (re.compile(r"Industry Track", re.I), VOLUME_TYPES["industry"]),
    (re.compile(r"Student Research Workshop", re.I), VOLUME_TYPES["srw"]),
    (re.compile(r"Tutorial Abstracts", re.I), VOLUME_TYPES["tutorial"]),
]
