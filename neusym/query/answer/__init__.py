"""The answer engine of method ``auto`` (the default): the router and the facts it computes once per
question (:mod:`.router`: routes as objects in one registry), one module per route — database
templates (:mod:`.symbolic`, with page 1's author block: :mod:`.authorblock`), paper search
(:mod:`.paper_search`), focused reading (:mod:`.focused`, configured by :mod:`.config`) and its table
query (:mod:`.table_query`) — then verification (:mod:`.verify`), citations (:mod:`.citations`),
answer shapes (:mod:`.answer_format`), every rule that reads question wording (:mod:`.cues`) and what
an answer is (:mod:`.results`). The ``agent`` route runs the ReAct loop of :mod:`neusym.query.agent`,
handed in by :func:`neusym.query.ask.ask` (the agent stands on this package, not the reverse).
"""
