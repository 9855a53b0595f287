"""The NeuSym-RAG agent: the five actions and their environment (:mod:`.actions`), the methods of the
paper (:mod:`.methods`) and the ReAct loop (:mod:`.react`). The router, its routes and what every
answer is checked and cited with are the answer engine, :mod:`neusym.query.answer`.

Entry point for callers: :func:`neusym.query.ask.ask`.
"""
