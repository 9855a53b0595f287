"""A page of a paper's PDF as PNG: ``GET /papers/{paper_id}/pages/{page}.png`` (what a citation links
to; :class:`neusym.interfaces.service.papers.PageRenderer`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from fastapi.responses import Response

from neusym.interfaces.service.corpus import ServedVersion
from neusym.interfaces.service.papers import NotFound, parse_bbox, parse_paper_id, pdf_of
from neusym.interfaces.service.routes.deps import service_state
from neusym.interfaces.service.state import ServiceState

router = APIRouter()
"""``GET /papers/{paper_id}/pages/{page}.png``."""


@router.get("/papers/{paper_id}/pages/{page}.png", tags=["papers"], response_class=Response,
            responses={200: {"content": {"image/png": {}}, "description": "The rendered page."}})
async def page_image(
    paper_id: str = PathParam(..., description="metadata.paper_id (UUID)"),
    page: str = PathParam(..., description="Page number, from 1."),
    bbox: str | None = Query(None, description="x0,y0,width,height in PDF points from the top-left corner: "
                             "the box to highlight (what a citation points at)."),
    zoom: float = Query(1.5, description="Scale: 1 = 72 dpi; 0.5-4. A page or box larger than the pixel "
                        "budget (16 million pixels) is rendered at the largest zoom that fits; the "
                        "X-Neusym-Zoom header says which."),
    crop: bool = Query(False, description="Render only the box (and a small margin)."),
    state: ServiceState = Depends(service_state),
) -> Response:
    """Page ``page`` of the paper's PDF as PNG, with ``bbox`` outlined and shaded (or cropped to
    it). 404 for an unknown paper or page or a paper without a PDF here; 400 for a malformed box
    or one outside the page."""
    try:
        number = int(page)
    except ValueError:
        raise NotFound(f"no page {page[:40]!r}: pages are numbered from 1") from None
    if number < 1:
        raise NotFound(f"no page {number}: pages are numbered from 1")
    box = parse_bbox(bbox)
    pid = parse_paper_id(paper_id)

    def work(served: ServedVersion) -> Any:
        cur = served.cursor()
        try:
            pdf, sha = pdf_of(cur, pid, state.settings)
        finally:
            cur.close()
        return state.renderer.render(pdf, number, bbox=box, zoom=zoom, crop=crop, key=sha)

    image = await state.with_version("pages", work)
    return Response(image.png, media_type="image/png",
                    headers={"Cache-Control": "private, max-age=3600", "ETag": f'"{image.etag}"',
                             "X-Neusym-Zoom": f"{image.zoom:g}"})
