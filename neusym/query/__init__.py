"""The query layer (layer 3): the agent and its routes, paper search (with its LLM-assisted accurate mode), read-only SQL,
CalculateExpr. Reads published corpus versions through :mod:`neusym.store`; never writes.
"""
