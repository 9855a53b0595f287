"""The service's routes, one module per resource; :func:`neusym.interfaces.service.app.create_app`
includes each module's ``router`` (the protected ones behind the app's authentication).

============== =================================================================================
:mod:`.public`  ``GET /healthz``, the page ``GET /`` and its static files (no API key)
:mod:`.search`  ``GET /search``
:mod:`.export`  ``GET /search.bib|.ris``, ``GET /papers/{paper_id}.bib|.ris``
:mod:`.sql`     ``POST /sql``, ``GET /schema``
:mod:`.papers`  ``GET /papers/{paper_id}``, ``GET /papers/{paper_id}/similar``, ``GET /overview``
:mod:`.watches` ``GET /watches``, ``GET /feeds/{name}.atom``
:mod:`.pages`   ``GET /papers/{paper_id}/pages/{page}.png``
:mod:`.ask`     ``POST /ask``, ``GET /ask/methods``, ``POST /ask/json`` and the agent run they share
:mod:`.mcp`     ``/mcp``: the MCP server (:mod:`neusym.interfaces.service.mcp`)
:mod:`.errors`  the exception handlers (JSON ``{"detail"}``, never a traceback)
:mod:`.deps`    what several routers share: :func:`~.deps.service_state`, the error responses
============== =================================================================================

Each route reaches the app's :class:`~neusym.interfaces.service.state.ServiceState` through the
dependency :func:`~.deps.service_state` (``app.state.neusym``).
"""
