"""Write docs/mcp-transcript.md: a real MCP session (the official SDK's client spawning `neusym mcp`
over stdio) listing the tools, resources and prompt and calling every tool on the sample corpus.

Usage (after `make demo` or `neusym ingest samples/pdfs`, which publish the sample corpus):
    NEUSYM_HOME=.neusym .venv/bin/python docs/mcp_transcript.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHOW_CHARS = 900


def main() -> None:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    from neusym.interfaces.service.mcp_client import McpClient

    command = str(Path(sys.executable).with_name("neusym"))
    params = StdioServerParameters(command=command, args=["mcp"], env=dict(os.environ))
    out = ["# A session with `neusym mcp`", "",
           "Written by `docs/mcp_transcript.py`: the official MCP Python SDK's `ClientSession` spawns `neusym mcp` "
           "(stdio) on the bundled sample corpus, lists what the server offers and calls each tool. Long results are "
           f"cut at {SHOW_CHARS} characters here.", ""]

    def shown(text: str) -> str:
        return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + f"\n... ({len(text)} characters)"

    with McpClient(lambda: stdio_client(params)) as client:
        tools = client.list_tools()
        out += ["## tools/list", ""]
        for t in tools:
            args = ", ".join(f"{k}{'' if k in t.input_schema.get('required', []) else '?'}"
                             for k in t.input_schema["properties"])
            out.append(f"- **{t.name}**({args}): {t.description}")
        out += ["", "## resources/list", ""]
        resources = client._request(lambda s: s.list_resources()).resources
        out += [f"- `{r.uri}` ({r.mime_type}): {r.description}" for r in resources]
        prompts = client._request(lambda s: s.list_prompts()).prompts
        out += ["", "## prompts/list", ""] + [f"- `{p.name}`: {p.description}" for p in prompts]
        out += ["", "## resources/read neusym://corpus", "", "```json", client.read_resource("neusym://corpus"), "```"]

        def call(name: str, arguments: dict) -> dict:
            result = client.call_tool(name, arguments)
            text = "\n".join(c.text for c in result.content if c.type == "text")
            kinds = [c.type for c in result.content]
            out.extend(["", f"## tools/call {name}", "", "```json", json.dumps(arguments, ensure_ascii=False), "```", "",
                        f"is_error: {str(result.is_error).lower()}; content: {', '.join(kinds)}", "", "```text",
                        shown(text), "```"])
            if result.structured_content and not result.is_error:
                data = json.dumps(result.structured_content, ensure_ascii=False, indent=1)
                out.extend(["", "structured_content:", "", "```json", shown(data), "```"])
            return result.structured_content or {}

        hits = call("search_papers", {"query": "human evaluation of faithfulness in long summaries", "limit": 3})
        pid = hits["hits"][0]["paper_id"]
        paper = call("get_paper", {"paper_id": pid})
        table = paper["tables"][0]
        call("retrieve_from_database", {"sql": f"SELECT row_header, column_header_path, number FROM table_cells "
                                                f"WHERE ref_table_id = '{table['table_id']}' AND number IS NOT NULL "
                                                "ORDER BY row_index, column_index LIMIT 6"})
        call("retrieve_from_vectorstore", {"query": "how many annotators", "collection_name": "text_bm25_en",
                                           "table_name": "chunks", "column_name": "text_content",
                                           "filter": f"paper_id == '{pid}'", "limit": 2})
        call("view_image", {"paper_id": pid, "page_number": table["page_number"],
                            "bounding_box": table["bounding_box"]})
        call("calculate_expr", {"expr": "round((85.1 - 83.4) / 83.4 * 100, 2)"})
        call("ask", {"question": "How many tables are in this paper?", "paper_ids": [pid]})
        call("retrieve_from_database", {"sql": "DELETE FROM metadata"})
    target = REPO / "docs" / "mcp-transcript.md"
    target.write_text("\n".join(out) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
