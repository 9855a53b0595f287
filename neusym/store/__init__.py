"""The store layer: the only code that opens DuckDB files and vector stores.

- :mod:`neusym.store.db` — the single writer of ``corpus.duckdb`` (home writer lock) and read-only
  connections;
- :mod:`neusym.store.vectors` — vector collections behind one interface: embedded qdrant-edge
  shards by default, a Qdrant server when ``NEUSYM_QDRANT_URL`` is set;
- :mod:`neusym.store.versions` — published corpus versions (a DuckDB snapshot plus its vector
  shards) that readers open and that a refresh switches atomically;
- :mod:`neusym.store.cells` — the cell collection and RetrieveFromVectorstore over it.

Everything above this layer (stages, query, interfaces) goes through these modules.
"""
