"""The NeuSym-RAG agent: the five actions and their environment (:mod:`.actions`), the methods of the
paper (:mod:`.methods`), the ReAct loop (:mod:`.react`), the router and its routes (:mod:`.auto`,
:mod:`.symbolic`, :mod:`.tablesql`, :mod:`.authorblock`), verification and citations (:mod:`.verify`,
:mod:`.citations`), and what an answer is (:mod:`.results`).

Entry point for callers: :func:`neusym.query.ask.ask`.
"""
