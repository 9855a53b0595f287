"""The query layer (layer 3): the agent and its routes, paper search, LLM rerank, read-only SQL,
CalculateExpr. Reads published corpus versions through :mod:`neusym.store`; never writes.
"""
