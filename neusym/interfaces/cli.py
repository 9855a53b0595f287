"""The ``neusym`` command line: ingest PDFs, ask questions, run read-only SQL, print the schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from neusym.settings import Settings


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="NeuSym-RAG corpus pipeline and query layer over AI research papers.")
console = Console()
err = Console(stderr=True)


def _settings() -> Settings:
    return Settings()


@app.callback()
def _options(verbose: bool = typer.Option(False, "--verbose", "-v", help="Print INFO log lines, the model "
                                          "libraries' included (default: NEUSYM_LOG_LEVEL, else warnings only).")) -> None:
    """NeuSym-RAG corpus pipeline and query layer over AI research papers."""
    from neusym.telemetry import configure

    configure("INFO" if verbose else Settings().log_level)


class _RunProgress:
    """What ``neusym ingest`` / ``crawl`` show while they run: on a terminal, progress bars for download,
    parse and encode (papers done, pages per second); otherwise (a pipe, CI, a log file) one plain line
    per finished paper. Fed by :func:`neusym.ingest.pipeline.ingest`'s ``on_event``."""

    def __init__(self, quiet: bool = False):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.quiet = quiet
        self.bars: dict[str, int] = {}
        self.pages = 0
        self.progress = Progress(TextColumn("{task.description:<8}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                                 console=err, transient=False) if err.is_terminal and not quiet else None

    def __enter__(self) -> "_RunProgress":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def _bar(self, name: str, total: int | None) -> int:
        if name not in self.bars:
            self.bars[name] = self.progress.add_task(name, total=total, rate="", last="")
        return self.bars[name]

    def __call__(self, stage: str, result) -> None:
        if self.quiet:
            return
        if stage == "plan":  # sent before the downloads and again with the PDFs to parse
            if self.progress is not None:
                if result.downloads:
                    self.progress.update(self._bar("download", result.downloads), total=result.downloads)
                for name in ("parse", "encode"):
                    self.progress.update(self._bar(name, result.pdfs), total=result.pdfs)
            return
        if stage in ("parse", "encode", "download") and self.progress is not None:
            bar = self._bar(stage, None)
            fields = {}
            if stage == "parse":
                self.pages += result.num_pages
                elapsed = self.progress.tasks[bar].elapsed or 0.0
                fields = {"rate": f"{self.pages / elapsed:.2f} pages/s" if elapsed else "",
                          "last": Path(result.pdf_path).name[:40]}
            self.progress.update(bar, advance=1, **fields)
            return
        if stage == "parse":
            label = result.title or result.reason or ""
            err.print(f"parse {result.status:<11} {Path(result.pdf_path).name}  {label[:70]} ({result.seconds:.1f} s)",
                      markup=False, highlight=False, soft_wrap=True)


def _stage_table(stages: dict, wall: float, pages: int) -> Table:
    """The run's seconds per stage (one screen: :mod:`neusym.ingest.stages`)."""
    from neusym.ingest.stages import STAGES, is_part

    t = Table(title=f"where the time went: {wall:.1f} s" + (f", {pages / wall:.2f} pages/s" if wall and pages else ""))
    t.add_column("stage")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    work = sum(v for k, v in stages.items() if not is_part(k)) or 1.0
    for name, value in stages.items():
        if is_part(name):
            t.add_row(f"  of which {name.split('/')[-1]}", f"{value:.1f}", "", style="dim")
        else:
            t.add_row(name, f"{value:.1f}", f"{100 * value / work:.0f}%")
    t.caption = ("parallel stages add up their papers' time" if any(s in stages for s in STAGES[:5]) else None)
    return t


def _watches_after_publish(settings: Settings) -> None:
    """Evaluate the saved searches against the version just published (``neusym ingest`` / ``crawl``), so a
    home without the scheduler gets the same feeds; a line on stderr says what they found. A failure is
    reported and never fails the command that published."""
    from neusym.store.watches import store_path

    if not store_path(settings).is_file():
        return
    from neusym.query.watches import run_watches

    try:
        report = run_watches(settings)
    except Exception as exc:  # noqa: BLE001 - the publish succeeded; the feeds catch up at the next run
        err.print(f"[yellow]warning:[/yellow] saved searches not evaluated: {exc}", soft_wrap=True, highlight=False)
        return
    if report.watches:
        new = sum(n or 0 for n in report.new_matches.values())
        err.print(f"watches: {report.evaluated} of {report.watches} evaluated against version {report.version}, "
                  f"{new} new papers", highlight=False)


@app.command()
def ingest(
    paths: List[Path] = typer.Argument(..., help="PDF files or folders (searched recursively)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
    force: bool = typer.Option(False, "--force", help="Let a PDF replace the stored copy of its paper even when "
                               "it holds less content (by default such a copy is held in quarantine)."),
) -> None:
    """Parse, load and encode PDFs into $NEUSYM_HOME (the same stages as the corpus_refresh DAG).

    A damaged PDF is quarantined with its reason; a copy that would replace a stored paper with less
    content, or add the same work a second time, is held (listed, kept in ``quarantine``)."""
    from neusym.ingest.pipeline import ingest as run_ingest

    settings = _settings()

    from neusym.errors import NeusymError

    try:
        with _RunProgress(quiet=as_json) as progress:
            report = run_ingest(paths, settings, on_event=progress, force=force)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    except NeusymError as exc:  # no PDF in the inputs; another writer holds the home; a failed publish check
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    _watches_after_publish(settings)
    if as_json:
        print(report.model_dump_json(indent=1))
        return
    total = sum(report.seconds.values())
    t = Table(title=f"corpus at {settings.home}, version {report.publish.version}")
    t.add_column("table")
    t.add_column("rows", justify="right")
    for name, n in report.row_counts.items():
        t.add_row(name, str(n))
    t.add_row("points: cells", str(report.publish.points))
    t.add_row("points: papers (search index)", str(report.publish.paper_index.get("papers", 0)))
    console.print(t)
    quarantined = [r for r in report.parsed if r.status == "quarantined"]
    for r in quarantined:
        err.print(f"[yellow]quarantined[/yellow] {r.pdf_path}: {r.reason}")
    for h in report.held:
        err.print(f"[yellow]held[/yellow] {h['pdf_path']}: {h['reason']}")
    for d in report.same_files:
        err.print(f"[dim]same file[/dim] {d['pdf_path']} = {d['same_as']} (parsed once)")
    for r in report.refused:
        err.print(f"refused {r['pdf_path']}: {r['reason']}", soft_wrap=True, markup=False, highlight=False)
    console.print(_stage_table(report.stages, total, report.pages))
    console.print(
        f"{len(report.parsed)} PDFs ({len(quarantined)} quarantined, {len(report.held)} held), "
        f"{report.pages} pages in {total:.1f} s "
        f"= {report.pages / total if total else 0:.2f} pages/s; steps: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items())
    )


@app.command()
def crawl(
    source: str = typer.Argument(..., help="acl | arxiv | openreview"),
    targets: Optional[List[str]] = typer.Argument(
        None, help="acl: collection XML files, folders or URLs; arxiv: ids; openreview: venue ids."),
    volume: Optional[List[str]] = typer.Option(None, "--volume", help="acl: volume selector (long, findings, 2024.acl-long...)."),
    category: Optional[List[str]] = typer.Option(None, "--category", help="arxiv: category, e.g. cs.CL (repeatable)."),
    query: Optional[str] = typer.Option(None, "--query", help="arxiv: search query terms."),
    max_results: Optional[int] = typer.Option(None, "--max-results", help="arxiv: cap per run."),
    all_submissions: bool = typer.Option(False, "--all-submissions", help="openreview: not only accepted papers."),
    download: bool = typer.Option(True, "--download/--no-download", help="Download and parse the PDFs."),
    as_json: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
) -> None:
    """Crawl a metadata source into $NEUSYM_HOME (same stages as the DAG), then download and parse new PDFs.

    A bad record (e.g. an Anthology paper without title) is skipped with a warning line naming its id
    and the reason, and the rest is loaded (exit 0). Exit 1 when a crawl failed: the source could not
    be read, every record was bad, or nothing was found (a folder without collection XML, a file
    without papers)."""
    from neusym.ingest.crawl import CrawlSpec
    from neusym.ingest.pipeline import ingest as run_ingest
    from neusym.ingest.sources.base import SourceError

    targets = targets or []
    if source == "acl":
        if not targets:
            err.print("[red]error:[/red] neusym crawl acl needs collection XML files, folders or URLs")
            raise typer.Exit(2)
        specs = [CrawlSpec(source="acl", paths=targets, volumes=volume or [])]
    elif source == "arxiv":
        if not (targets or category or query):
            err.print("[red]error:[/red] neusym crawl arxiv needs ids, --category or --query")
            raise typer.Exit(2)
        specs = [CrawlSpec(source="arxiv", id_list=targets, categories=category or [], query=query,
                           max_results=max_results)]
    elif source == "openreview":
        if not targets:
            err.print("[red]error:[/red] neusym crawl openreview needs venue ids, e.g. ICLR.cc/2024/Conference")
            raise typer.Exit(2)
        specs = [CrawlSpec(source="openreview", venue_id=v, accepted_only=not all_submissions) for v in targets]
    else:
        err.print(f"[red]error:[/red] unknown source {source!r}: use acl, arxiv or openreview")
        raise typer.Exit(2)
    from neusym.errors import NeusymError

    settings = _settings()
    try:
        with _RunProgress(quiet=as_json) as progress:
            report = run_ingest([], settings, crawl_specs=[s.model_dump() for s in specs], download=download,
                                on_event=progress)
    except (SourceError, NeusymError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    _watches_after_publish(settings)
    if as_json:
        print(report.model_dump_json(indent=1))
        if any(c.status == "failed" for c in report.crawled):
            raise typer.Exit(1)
        return
    from rich.markup import escape

    for c in report.crawled:
        line = escape(f"{c.source}: {c.status}, {c.papers} records ({c.watermark_key})")
        if c.skipped_count:
            line += f", {c.skipped_count} bad skipped"
        err.print(line + (f" — [red]{escape(c.error)}[/red]" if c.error else ""), soft_wrap=True, highlight=False)
        for r in c.skipped:
            err.print(f"[yellow]warning:[/yellow] {escape(c.source)}: skipped record {escape(r.id)}: {escape(r.reason)}"
                      + (f" ({escape(r.where)})" if r.where else ""), soft_wrap=True, highlight=False)
        if c.skipped_count > len(c.skipped):
            err.print(f"[yellow]warning:[/yellow] {c.source}: and {c.skipped_count - len(c.skipped)} more bad "
                      "record(s) skipped", soft_wrap=True, highlight=False)
    failed = [d for d in report.downloads if d["status"] == "failed"]
    console.print(f"downloads: {len(report.downloads)} ({len(failed)} failed); parsed: "
                  f"{sum(r.status == 'parsed' for r in report.parsed)}; rows: " +
                  ", ".join(f"{k} {v}" for k, v in report.row_counts.items()))
    for d in failed:
        err.print(f"[yellow]download failed[/yellow] {d['download_url']}: {d['error']}")
    console.print(f"published corpus version {report.publish.version}: {report.publish.points} cell points, "
                  f"{report.publish.paper_index.get('papers', 0)} papers searchable")
    console.print(_stage_table(report.stages, sum(report.seconds.values()), report.pages))
    if any(c.status == "failed" for c in report.crawled):
        raise typer.Exit(1)


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question, in natural language."),
    paper: Optional[List[str]] = typer.Option(None, "--paper", help="Restrict to this paper_id (repeatable)."),
    shape: Optional[str] = typer.Option(None, "--shape", help="The answer's shape: text, string, integer, number or "
                                        "number:DECIMALS, boolean, list, list:N or list:NAME,NAME,..."),
    answer_format: Optional[str] = typer.Option(None, "--answer-format", help="An answer-format sentence as AirQA "
                                                "question sets write it (instead of --shape)."),
    method: Optional[str] = typer.Option(None, "--method", help="auto (the default: route the question: SQL "
                                         "template, paper search, focused reading or the full agent), neusym (always "
                                         "the agent loop), or another method of `neusym eval run`."),
    as_json: bool = typer.Option(False, "--json", help="Print {answer, route, verification, citations, trajectory, ...}."),
    trace: bool = typer.Option(False, "--trace", help="Print every thought/action/observation."),
) -> None:
    """Answer a question about the corpus, with the route taken, a verification and citations."""
    from neusym.errors import NeusymError
    from neusym.query.agent.methods import get_method
    from neusym.query.ask import ask as ask_question
    from neusym.store.versions import NoCorpusVersion, open_version

    settings = _settings()
    typed = None
    if shape is not None:
        from neusym.query.answer.shapes import AnswerShape

        try:
            typed = AnswerShape.parse(shape)
        except ValueError as exc:
            err.print(f"[red]error:[/red] --shape: {' '.join(str(exc).split())[:300]}", soft_wrap=True)
            raise typer.Exit(2)
        if answer_format is not None:
            err.print("[red]error:[/red] --shape and --answer-format say the same thing: give one")
            raise typer.Exit(2)
    try:
        chosen = get_method(method)
        version = open_version(settings)
    except (NoCorpusVersion, NeusymError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    turn = [0]

    def show(step) -> None:  # print each turn as it finishes (the offline model takes seconds per turn)
        turn[0] += 1
        console.rule(f"turn {turn[0]}: {step.action}")
        console.print(f"[bold]thought:[/bold] {step.thought}", highlight=False)
        console.print(f"[bold]arguments:[/bold] {json.dumps(step.arguments, ensure_ascii=False)}", highlight=False)
        if step.observation:
            console.print("[bold]observation:[/bold]", highlight=False)
            console.print(step.observation, markup=False, highlight=False)

    try:
        with version:
            result = ask_question(question, settings=settings, method=chosen, paper_ids=paper or None,
                                  answer_format=answer_format, shape=typed, version=version,
                                  on_step=show if trace and not as_json else None)
    except NeusymError as exc:  # the LLM backend failed, ...
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, default=str))
        return
    if trace:
        console.rule("answer")
    answer = result.answer if isinstance(result.answer, str) else json.dumps(result.answer, ensure_ascii=False)
    console.print(answer if answer is not None else "(no answer)", markup=False, highlight=False)
    if result.route:
        v = result.verification or {}
        checks = ", ".join(f"{c['kind']} {c['claim'][:40]!r}: {'ok' if c['ok'] else ('failed' if c['ok'] is False else '?')}"
                           for c in v.get("checks", [])[:6])
        basis = v.get("basis_text", "")
        console.print(f"[dim]route: {result.route} ({result.route_features.get('reason', '')}); verification: "
                      f"{v.get('status', '-')}{' after repair' if v.get('repaired') else ''}"
                      f"{' (' + basis + ')' if basis else ''}"
                      f"{' — ' + checks if checks else ''}[/dim]", soft_wrap=True)
    for i, c in enumerate(result.citations, start=1):
        where = f"page {c['page_number']}" if c.get("page_number") else "metadata"
        box = f", box {c['bounding_box']}" if c.get("bounding_box") else ""
        console.print(f"[{i}] {c['title']} — {where}{box}, {c['table_name']}.{c['column_name']} "
                      f"{c['primary_key']}: \"{' '.join(c['quote'].split())}\"", markup=False, highlight=False, soft_wrap=True)
    if trace:
        console.print(f"[dim]{result.turns} LLM calls, {result.prompt_tokens} prompt + {result.completion_tokens} "
                      f"completion tokens, {result.seconds:.1f} s"
                      + (" (" + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()) + ")"
                         if result.timings else "") + "[/dim]", highlight=False)


@app.command()
def search(
    query: str = typer.Argument(..., help="A natural-language question or keywords."),
    venue: Optional[str] = typer.Option(None, "--venue", help="Conference abbreviation, e.g. acl, emnlp, or findings."),
    year: Optional[int] = typer.Option(None, "--year", help="Publication year."),
    author: Optional[str] = typer.Option(None, "--author", help="Author name or last name."),
    limit: int = typer.Option(10, "--limit", help="Number of papers."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of hits, best first (= --format json)."),
    fmt: str = typer.Option("table", "--format", help="table | json | bibtex | ris: bibtex and ris print a citation "
                            "entry per hit, read from the same corpus version's metadata."),
    accurate: bool = typer.Option(False, "--accurate", help="Accurate mode: the configured LLM (NEUSYM_LLM_BASE_URL, "
                                  "else the offline model) writes a hypothetical title + abstract of the paper you "
                                  "describe, whose words and vector join the query (HyDE); one LLM call per query."),
    sort: str = typer.Option("relevance", "--sort", help="relevance | cited_by: the first 100 papers of the ranking "
                             "ordered by how many papers of this corpus cite them."),
    min_cited_by: Optional[int] = typer.Option(None, "--min-cited-by", min=0,
                                               help="Only papers cited by at least N papers of this corpus."),
) -> None:
    """Search papers across the corpus (titles, abstracts, full text when parsed): hybrid BM25 + MiniLM.

    Reads the paper index of the current corpus version (every `neusym ingest`, `crawl`, `enrich`
    and DAG run publishes one). With --accurate, an LLM first writes the abstract such a paper would
    have and the search uses it too (seconds; the hypothetical title is printed on stderr, and the
    `default` column / `default_rank` says where each paper was without it; if the LLM fails the
    default ranking is kept and a note is printed on stderr). --format bibtex / ris prints each hit's
    citation (the stored BibTeX of crawled papers, else one made from the metadata; see
    neusym.query.citation_export), best first.
    """
    from rich.markup import escape

    from neusym.errors import NeusymError
    from neusym.store.paper_index import PaperIndex, close_paper_indexes, current_paper_index

    if fmt not in ("table", "json", "bibtex", "ris"):
        err.print(f"[red]error:[/red] --format must be table, json, bibtex or ris, not {fmt!r}")
        raise typer.Exit(2)
    if as_json and fmt not in ("table", "json"):
        err.print(f"[red]error:[/red] --json is --format json; it cannot be combined with --format {fmt}")
        raise typer.Exit(2)
    if as_json:
        fmt = "json"
    from neusym.query.paper_search import search as search_corpus

    by_citations = sort == "cited_by" or min_cited_by is not None
    settings = _settings()
    version = None
    records: list[dict] = []
    try:
        index = None
        if fmt in ("bibtex", "ris") or by_citations:  # the hits and their metadata from one corpus version
            from neusym.store.versions import open_version

            version = open_version(settings)
            index = PaperIndex.of_version(version, settings)
        cursor = None
        if by_citations:
            from neusym.store.db import connect_readonly

            cursor = lambda: connect_readonly(version.db_path)  # noqa: E731 - closed by the search
        found = search_corpus(query, index=index or current_paper_index(settings), venue=venue, year=year,
                              author=author, limit=limit, sort=sort, min_cited_by=min_cited_by,
                              mode="accurate" if accurate else "default", cursor=cursor, settings=settings,
                              version=version.number if version is not None else None)
        hits, counts, hyde = found.hits, found.cited_by, found.hyde
        if fmt in ("bibtex", "ris"):
            from neusym.query.citation_export import paper_records
            from neusym.store.db import connect_readonly

            con = connect_readonly(version.db_path)
            try:
                records = paper_records(con, [h.paper_id for h in hits])
            finally:
                con.close()
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    except NeusymError as exc:  # nothing published yet
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    finally:
        close_paper_indexes()
        if version is not None:
            version.close()
    if hyde and hyde["note"]:
        err.print(f"[yellow]note:[/yellow] {escape(hyde['note'])}", highlight=False, soft_wrap=True)
    elif hyde and (hyde["title"] or hyde["abstract"]):
        err.print(f"[dim]hypothetical paper ({hyde['llm_seconds']:.1f} s): "
                  f"{escape(hyde['title'] or hyde['abstract'][:120])}[/dim]", highlight=False, soft_wrap=True)
    if fmt == "json":
        print(json.dumps([{**h.to_dict(), **({"cited_by": counts.get(h.paper_id, 0)} if counts is not None else {})}
                          for h in hits], ensure_ascii=False, default=str))
        return
    if fmt in ("bibtex", "ris"):
        from neusym.query.citation_export import to_bibtex, to_ris

        sys.stdout.write((to_bibtex if fmt == "bibtex" else to_ris)(records))
        return
    t = Table()
    cols = ("score", "title", "venue", "year", "authors", "snippet")
    if accurate:
        cols = ("default",) + cols
    if counts is not None:
        cols = ("cited by",) + cols
    for col in cols:
        t.add_column(col)
    for h in hits:
        row = [f"{h.score:.3f}", h.title, h.venue or "", str(h.year or ""), ", ".join(h.authors[:3]),
               (h.snippet or "")[:160]]
        if accurate:
            row.insert(0, str(h.default_rank) if h.default_rank is not None else ">100")
        if counts is not None:
            row.insert(0, str(counts.get(h.paper_id, 0)))
        t.add_row(*row)
    console.print(t)


@app.command()
def retrieve(
    query: str = typer.Argument(..., help="The text to search for."),
    collection: str = typer.Option("text_bm25_en", "--collection",
                                   help="text_bm25_en (BM25) or text_sentence_transformers_all_minilm_l6_v2 (MiniLM)."),
    table: str = typer.Option("chunks", "--table", help="Table of the encodable column, e.g. chunks, pages, metadata."),
    column: str = typer.Option("text_content", "--column", help="Encodable column, e.g. text_content, abstract."),
    filter_: str = typer.Option("", "--filter", help="e.g. \"paper_id == '...' and page_number <= 3\"."),
    limit: int = typer.Option(5, "--limit", help="Number of cells (at most 50)."),
    as_json: bool = typer.Option(False, "--json", help="Print {version, hits: [...]} as JSON."),
) -> None:
    """RetrieveFromVectorstore from the command line: the agent's vector search, on the current version."""
    from neusym.query.agent.actions import Environment, format_vector_hits
    from neusym.errors import NeusymError
    from neusym.store.versions import open_version

    settings = _settings()
    try:
        with open_version(settings) as version, Environment(settings, version=version) as env:
            hits = env.search(query, collection, table, column, filter_, limit)
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    if as_json:
        print(json.dumps({"version": version.number, "hits": hits}, ensure_ascii=False, default=str))
        return
    where = f"{table}.{column} in {collection}" + (f" with filter {filter_}" if filter_ else "")
    console.print(format_vector_hits(hits, where), markup=False, highlight=False)


@app.command()
def status(
    paper: Optional[str] = typer.Option(None, "--paper", help="Also count this paper_id's cells and points."),
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """The current corpus version: number, age, papers, rows, points; with --paper, that paper's
    encodable cells (SQL) and cell points, both read from the same version."""
    from neusym.errors import NeusymError
    from neusym.ingest.publish import cells_sql
    from neusym.ingest.stages import recorded, summary_line
    from neusym.store.db import connect_plain_readonly
    from neusym.store.vectors import Filter, Match
    from neusym.store.versions import open_version

    settings = _settings()
    try:
        with open_version(settings) as version:
            m = version.info.manifest
            out = {"version": version.number, "created_at": m.get("created_at"), "engine": m.get("engine"),
                   "encoder_version": m.get("encoder_version"),
                   "paper_encoder": m.get("paper_encoder") or m.get("encoder_version"),
                   "papers": m.get("papers"), "rows": m.get("rows", {}),
                   "points": {"cells": version.cells.count(), "papers": version.papers.count()},
                   "stages": recorded(settings, m, version.number)}
            if paper:
                con = connect_plain_readonly(version.db_path)
                try:
                    n = con.execute(f"SELECT count(*) FROM ({cells_sql()}) WHERE paper_id = ?", [paper]).fetchone()[0]
                finally:
                    con.close()
                out["paper"] = {"paper_id": paper, "cells": n,
                                "points": version.cells.count(Filter.all(Match("paper_id", paper)))}
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    if as_json:
        print(json.dumps(out, ensure_ascii=False))
        return
    adapted = out["paper_encoder"] if out["paper_encoder"] != out["encoder_version"] else None
    console.print(f"corpus version {out['version']} ({out['engine']}, {out['encoder_version']}), published "
                  f"{out['created_at']}: {out['papers']} papers, {out['points']['cells']} cell points, "
                  f"{out['points']['papers']} papers in the search index"
                  + (f" (corpus-adapted encoder {adapted})" if adapted else ""), soft_wrap=True)
    if out["stages"]:
        console.print(f"its refresh: {summary_line(out['stages'])}", soft_wrap=True, highlight=False)
    if paper:
        console.print(f"paper {paper}: {out['paper']['cells']} encodable cells, {out['paper']['points']} points")


@app.command()
def publish(
    as_json: bool = typer.Option(False, "--json", help="Print the publish report as JSON."),
) -> None:
    """Publish the database as a new corpus version (cell vectors + paper index), e.g. to migrate a
    home built by an older neusym. Ingest, crawl, enrich and the DAGs do this by themselves."""
    from neusym.errors import NeusymError
    from neusym.ingest.publish import publish as run_publish

    settings = _settings()
    try:
        report = run_publish(settings, on_step=None if as_json else _publish_progress)
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    if as_json:
        print(report.model_dump_json(indent=1))
        return
    console.print(f"published corpus version {report.version} (previous {report.parent}): {report.papers} papers, "
                  f"{report.points} cell points (+{report.upserted} -{report.deleted}), "
                  f"{report.paper_index.get('papers', 0)} in the paper index; "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items()))


@app.command("train-retriever")
def train_retriever(
    minutes: Optional[float] = typer.Option(None, "--minutes", min=0.1,
                                            help="Training budget in minutes (default NEUSYM_RETRIEVER_TRAIN_MINUTES)."),
    no_publish: bool = typer.Option(False, "--no-publish", help="Train and check on held-out papers only."),
    reset: bool = typer.Option(False, "--reset", help="Publish a version whose paper search uses the packaged "
                                                      "encoder again (no training)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Adapt the paper-search encoder to the current corpus (what the retriever_refresh DAG runs).

    Fine-tunes all-MiniLM-L6-v2 on pairs the corpus provides (title -> abstract, an abstract sentence ->
    the rest of its paper, tldr -> abstract), checks it on held-out papers against the serving encoder
    and, when it is at least as good, publishes a corpus version whose paper index uses it.
    """
    from neusym.errors import NeusymError
    from neusym.ingest.retriever import refresh_retriever, reset_retriever

    settings = _settings()
    try:
        if reset:
            version = reset_retriever(settings)
            if as_json:
                print(json.dumps({"published": True, "version": version, "paper_encoder": "packaged"}))
            else:
                console.print(f"published corpus version {version}: paper search uses the packaged encoder")
            return
        report = refresh_retriever(settings, budget_minutes=minutes, publish=not no_publish,
                                   on_progress=None if as_json else (lambda m: err.print(f"[dim]{m}[/dim]")))
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    if as_json:
        print(report.model_dump_json(indent=1))
        return
    t, v = report.training, report.validation
    console.print(f"trained encoder {report.retriever_id}: {t.get('steps')} steps, {t.get('pairs_used')} pairs of "
                  f"{t.get('papers')} papers, {t.get('train_seconds')} s, peak {t.get('peak_rss_mb')} MB; held-out "
                  f"MRR@10 {v.get('serving', {}).get('MRR@10')} -> {v.get('adapted', {}).get('MRR@10')}", soft_wrap=True)
    if report.published:
        console.print(f"published corpus version {report.version}: paper search uses {report.retriever_id} "
                      f"(paper index re-encoded in {report.paper_index_seconds} s)")
    else:
        console.print(report.reason)


def _publish_progress(step: str, info: dict) -> None:
    if "of" in info:
        err.print(f"[dim]{step}: {info['done']}/{info['of']} papers[/dim]")


@app.command()
def enrich(
    stage: str = typer.Option("all", "--stage", help="ocr, summaries or all."),
    budget_tokens: Optional[int] = typer.Option(None, "--budget-tokens",
                                                help="LLM token budget of this run (default NEUSYM_ENRICH_BUDGET_TOKENS)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
) -> None:
    """Summaries, tldr/tags and figure OCR for the published corpus (what the corpus_enrich DAG runs).

    Incremental and resumable: only elements without a cached result for the configured model and
    prompt are done, within the budget; the rest waits for the next run.
    """
    from neusym.ingest.enrich import enrich as run_enrich
    from neusym.errors import NeusymError

    stages = {"all": ("ocr", "summaries"), "ocr": ("ocr",), "summaries": ("summaries",)}.get(stage)
    if stages is None:
        err.print(f"[red]error:[/red] --stage must be ocr, summaries or all, not {stage!r}")
        raise typer.Exit(2)
    settings = _settings()

    def progress(res) -> None:
        if not as_json:
            err.print(f"[dim]{res.unit_id}[/dim] done {res.done}, failed {res.failed}, "
                      f"left {res.left_for_next_run}, {res.seconds:.1f}s")

    try:
        report = run_enrich(settings, stages=stages, budget_tokens=budget_tokens, on_unit=progress)
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    if as_json:
        print(report.model_dump_json(indent=1))
        return
    for applied in report.applied:
        filled = ", ".join(f"{k} +{v}" for k, v in applied.filled.items() if v)
        console.print(f"applied {applied.results_loaded} results, {applied.failures_recorded} failures; "
                      f"{filled or 'no new cells'}; points +{applied.points_upserted} -{applied.points_deleted}"
                      + (f"; published version {applied.version}" if applied.version else ""))
    console.print(f"pending for later runs: {report.pending_after}; {report.seconds:.1f}s")


@app.command()
def sql(
    query: str = typer.Argument(..., help="One read-only SQL query (DuckDB dialect)."),
    fmt: str = typer.Option("table", "--format", help="table | json | csv"),
) -> None:
    """Run a read-only SQL query on the current corpus version (time limit and row cap from settings)."""
    from neusym.errors import NeusymError
    from neusym.query.sqlsafe import format_result, run_query
    from neusym.store.versions import current_db

    settings = _settings()
    if fmt not in ("table", "json", "csv"):
        err.print(f"[red]error:[/red] --format must be table, json or csv, not {fmt!r}")
        raise typer.Exit(2)
    try:
        result = run_query(settings, current_db(settings), query)
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    text = format_result(result, fmt)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if result.bytes_capped:
        err.print(f"[yellow]note:[/yellow] output cut at {len(result.rows)} rows: the result reached "
                  f"{settings.sql_max_bytes:,} bytes (NEUSYM_SQL_MAX_BYTES)")
    elif result.truncated:
        err.print(f"[yellow]note:[/yellow] output truncated to {settings.sql_max_rows} rows")
    if result.cells_cut:
        err.print(f"[yellow]note:[/yellow] {result.cells_cut} text cell(s) longer than {settings.sql_max_cell_chars:,} "
                  "characters were cut (NEUSYM_SQL_MAX_CELL_CHARS)")


@app.command()
def schema(
    markdown: bool = typer.Option(False, "--markdown", help="Markdown with every table and view (docs/schema.md)."),
) -> None:
    """Print the database schema with the comments from sql/ (the text the agent sees, or Markdown)."""
    from neusym.store.schema import database_schema_prompt
    from neusym.store.schema_docs import database_schema_markdown
    from neusym.store.versions import NoCorpusVersion, current_db

    settings = _settings()
    try:
        db = current_db(settings)
    except NoCorpusVersion as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    if markdown:
        sys.stdout.write(database_schema_markdown(db))
    else:
        print(database_schema_prompt(db))


export_app = typer.Typer(no_args_is_help=True, help="Export the current corpus version for other engines.")
app.add_typer(export_app, name="export")


@export_app.command("parquet")
def export_parquet_cmd(
    out_dir: Path = typer.Argument(..., help="Directory for <table>.parquet files."),
    native_uuid: bool = typer.Option(False, "--native-uuid", help="Keep Parquet UUID type (default: strings)."),
) -> None:
    """Write every table and view of the current corpus version as DIR/<name>.parquet."""
    from neusym.errors import NeusymError
    from neusym.store.export import export_parquet
    from neusym.store.versions import current_db

    settings = _settings()
    try:
        counts = export_parquet(current_db(settings), out_dir, uuid_as_string=not native_uuid)
    except NeusymError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1)
    t = Table(title=f"exported to {out_dir}")
    t.add_column("table / view")
    t.add_column("rows", justify="right")
    for name, n in counts.items():
        t.add_row(name, str(n))
    console.print(t)


eval_app = typer.Typer(no_args_is_help=True, help="Run and score AirQA-Real question files (paper §3).")
app.add_typer(eval_app, name="eval")


def _error(message: object) -> None:
    """Print an error on stderr unwrapped (file:line names stay greppable) and without markup."""
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(str(message))}", soft_wrap=True, highlight=False)


@eval_app.command("run")
def eval_run_cmd(
    questions: Path = typer.Argument(..., help="AirQA-Real JSONL (uuid, question, answer_format, tags, anchor_pdf, ...)."),
    out: Path = typer.Option(..., "--out", help="Predictions JSONL; appended to, uuids already in it are skipped."),
    method: Optional[str] = typer.Option(None, "--method", help="auto (the router, the default), neusym, question-only, "
                                         "title-abstract, full-text, "
                               "classic-rag, iterative-classic-rag, two-stage-neu, iterative-neu, two-stage-sym, "
                               "iterative-sym, two-stage-hybrid."),
    concurrency: int = typer.Option(1, "--concurrency", help="Questions in parallel (for OpenAI-compatible "
                                    "endpoints; the offline model serializes its calls)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first K questions of the file."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="Re-run questions whose line has an error."),
    focused: Optional[str] = typer.Option(None, "--focused", help="A variant of the focused route's configuration "
                                          "as JSON, e.g. '{\"evidence_items\": 6}' (neusym.query.answer.config)."),
    cues_off: Optional[str] = typer.Option(None, "--cues-off", help="Cue families to turn off for every answer, "
                                           "as a JSON list, e.g. '[\"computation\"]' (neusym.query.answer.cues)."),
) -> None:
    """Answer every question with one method, one JSON line per question (resumable)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from neusym.llm.chat import OpenAICompatibleLLM, make_llm
    from neusym.query.agent.methods import get_method
    from neusym.errors import NeusymError
    from neusym.evaluation.runner import run_eval

    settings = _settings()
    try:
        chosen = get_method(method)
    except NeusymError as exc:
        _error(exc)
        raise typer.Exit(2)
    config = _focused_config(focused)
    families = _json_list("--cues-off", cues_off)
    from neusym.store.versions import NoCorpusVersion, current_version

    try:
        current_version(settings)
    except NoCorpusVersion as exc:
        _error(exc)
        raise typer.Exit(2)
    llm = make_llm(settings)
    if concurrency > 1 and not isinstance(llm, OpenAICompatibleLLM):
        err.print("[yellow]note:[/yellow] the offline model answers one request at a time; --concurrency > 1 "
                  "only overlaps retrieval and defeats its prompt cache", soft_wrap=True)
    progress = Progress(TextColumn(f"{chosen.name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=err)
    task = [None]
    errors = [0]

    def on_start(n: int) -> None:
        task[0] = progress.add_task(chosen.name, total=n, last="")

    def on_item(record: dict) -> None:
        errors[0] += bool(record["error"])
        status = "error" if record["error"] else f"{record['turns']} turns, {record['seconds']:.0f} s"
        progress.update(task[0], advance=1, last=f"{record['uuid'][:8]}: {status}; errors {errors[0]}")

    try:
        with progress:
            report = run_eval(questions, out, settings=settings, method=chosen, llm=llm, concurrency=concurrency,
                              limit=limit, retry_errors=retry_errors, on_start=on_start, on_item=on_item,
                              focused=config, cues_off=families)
    except NeusymError as exc:
        _error(exc)
        raise typer.Exit(2)
    except ValueError as exc:
        _error(exc)
        raise typer.Exit(2)
    err.print(f"{report.selected} questions: {report.skipped} already in {out}, {report.answered} answered, "
              f"{report.errors} errors, {report.seconds:.1f} s", soft_wrap=True, markup=False, highlight=False)


def _json_list(option: str, text: str | None) -> list[str]:
    """``option``'s JSON list of strings (empty when not given); exits 2 naming the option otherwise."""
    if text is None:
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        value = exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _error(f"{option}: expected a JSON list of strings, got {text[:200]!r}")
        raise typer.Exit(2)
    return value


def _focused_config(text: str | None):
    """``--focused JSON`` as a :class:`neusym.query.answer.config.FocusedConfig` (None when not given);
    exits 2 with the field and the reason for bad JSON, an unknown field or a value out of range."""
    if text is None:
        return None
    from pydantic import ValidationError

    from neusym.query.answer.config import FocusedConfig

    try:
        return FocusedConfig.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
        _error(f"--focused: {problems}")
        raise typer.Exit(2)


@eval_app.command("score")
def eval_score_cmd(
    questions: Path = typer.Argument(..., help="AirQA-Real JSONL with an evaluator per question."),
    predictions: Path = typer.Argument(..., help="Predictions JSONL from `neusym eval run` (matched by uuid)."),
    judge_llm: Optional[str] = typer.Option(None, "--judge-llm", help="Judge for subjective items: an "
                                            "OpenAI-compatible base URL, or 'offline'; default the configured LLM."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Model name at --judge-llm."),
    as_json: bool = typer.Option(False, "--json", help="Print {overall, by_tag, items: [{uuid, score, error}]}."),
) -> None:
    """Score predictions by uuid: overall and per-tag accuracy, mean turns, tokens and seconds."""
    from neusym.errors import NeusymError
    from neusym.evaluation.scoring import make_judge, score_predictions

    settings = _settings()
    if not predictions.is_file():
        _error(f"predictions file {predictions} does not exist")
        raise typer.Exit(2)
    try:
        report = score_predictions(questions, predictions,
                                   judge_factory=lambda: make_judge(settings, judge_llm, judge_model))
    except NeusymError as exc:
        _error(exc)
        raise typer.Exit(2)
    if as_json:
        print(json.dumps(report.to_json(), ensure_ascii=False))
        return
    t = Table(title=f"{predictions.name}: accuracy over {len(report.items)} questions")
    t.add_column("split")
    t.add_column("n", justify="right")
    t.add_column("accuracy", justify="right")
    t.add_row("overall", str(len(report.items)), f"{100 * report.overall:.1f}%")
    for tag, acc in report.by_tag.items():
        t.add_row(tag, str(report.tag_counts[tag]), f"{100 * acc:.1f}%")
    for key, group in report.by_verification.items():  # how far a verdict of each basis can be trusted
        t.add_row(f"verification: {key}", str(group["n"]), f"{100 * group['accuracy']:.1f}%")
    console.print(t)
    m = report.means

    def fmt(value, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    console.print(f"per question: {fmt(m['turns'], 2)} turns, {fmt(m['prompt_tokens'], 0)} prompt + "
                  f"{fmt(m['completion_tokens'], 0)} completion tokens, {fmt(m['seconds'])} s", soft_wrap=True)
    console.print(f"missing predictions {report.missing}, run errors {report.run_errors}, evaluation errors "
                  f"{report.eval_errors}, predictions of unknown uuids {report.unknown_predictions}", soft_wrap=True)
    for note, count in report.notes.items():
        err.print(f"note: {note} ({count} item{'s' if count != 1 else ''})", soft_wrap=True, markup=False,
                  highlight=False)
    for item in report.items:
        if item.error:
            err.print(f"{item.uuid}: {item.error}", soft_wrap=True, markup=False, highlight=False)


@eval_app.command("check")
def eval_check_cmd(
    questions: Path = typer.Argument(..., help="AirQA-Real JSONL with an evaluator per question."),
    as_json: bool = typer.Option(False, "--json", help="Print {checked, skipped, passed, items, notes}."),
) -> None:
    """Feed every objective item its own gold answer: each must score 1 (checks a question file
    against this scorer; LLM-judged items and eval_negation are skipped). Exit 1 if any does not."""
    from neusym.errors import NeusymError
    from neusym.evaluation.scoring import check_gold

    try:
        report, skipped = check_gold(questions)
    except NeusymError as exc:
        _error(exc)
        raise typer.Exit(2)
    failing = [i for i in report.items if i.error or i.score < 1.0 - 1e-9]
    if as_json:
        print(json.dumps({
            "checked": len(report.items), "skipped": skipped, "passed": len(report.items) - len(failing),
            "items": [{"uuid": i.uuid, "score": i.score, "error": i.error, "detail": i.detail} for i in failing],
            "notes": [{"note": n, "items": c} for n, c in report.notes.items()],
        }, ensure_ascii=False))
    else:
        console.print(f"{len(report.items) - len(failing)} of {len(report.items)} objective items score 1 with their "
                      f"own gold answer; {skipped} skipped (LLM-judged, eval_negation or no evaluator)", soft_wrap=True)
        for note, count in report.notes.items():
            err.print(f"note: {note} ({count} item{'s' if count != 1 else ''})", soft_wrap=True, markup=False,
                      highlight=False)
        for item in failing:
            err.print(f"{item.uuid}: score {item.score:g}: {item.error or item.detail}", soft_wrap=True,
                      markup=False, highlight=False)
    if failing:
        raise typer.Exit(1)


watch_app = typer.Typer(no_args_is_help=True, help="Saved searches: what is new in the corpus after each refresh "
                        "(feeds at GET /feeds/NAME.atom of `neusym serve`).")
app.add_typer(watch_app, name="watch")


def _watch_store(settings: Settings, readonly: bool = False):
    from neusym.store.watches import WatchStore

    return WatchStore(settings, readonly=readonly)


@watch_app.command("add")
def watch_add(
    query: str = typer.Argument(..., help="What to follow: a question or keywords, as for `neusym search`."),
    venue: Optional[str] = typer.Option(None, "--venue", help="Conference abbreviation, e.g. acl, or findings."),
    year: Optional[int] = typer.Option(None, "--year", help="Publication year."),
    author: Optional[str] = typer.Option(None, "--author", help="Author name or last name."),
    name: Optional[str] = typer.Option(None, "--name", help="The watch's name (its feed is /feeds/NAME.atom); "
                                       "default: made from the query's words."),
    replace: bool = typer.Option(False, "--replace", help="Replace a watch of the same name (its matches start afresh)."),
) -> None:
    """Save a search. It is evaluated against the current corpus version at once (its first papers are
    recorded as the corpus already held them) and after every publish (new papers only)."""
    from neusym.errors import NeusymError
    from neusym.query.watches import run_watches
    from neusym.store.watches import WatchError, check_watch, default_name

    settings = _settings()
    try:
        watch = check_watch(name or default_name(query), query, venue, year, author)
        with _watch_store(settings) as store:
            store.add(watch, replace=replace)
    except WatchError as exc:
        _error(exc)
        raise typer.Exit(2)
    console.print(f"watch {watch.name}: {watch.query!r}" + "".join(
        f" {k}={v}" for k, v in (("venue", watch.venue), ("year", watch.year), ("author", watch.author)) if v),
        markup=False, highlight=False)
    try:
        report = run_watches(settings, names=[watch.name])
    except NeusymError as exc:  # nothing published yet: evaluated after the first publish
        err.print(f"note: not evaluated yet ({exc})", soft_wrap=True, highlight=False, markup=False)
        return
    console.print(f"evaluated against corpus version {report.version}: "
                  f"{report.new_matches.get(watch.name) or 0} papers recorded", highlight=False)


@watch_app.command("list")
def watch_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The saved searches with their filters, papers found, and the version each was last evaluated against."""
    settings = _settings()
    with _watch_store(settings, readonly=True) as store:
        watches, counts = store.list(), store.counts()
    rows = [{**w.to_dict(), **counts.get(w.name, {"matches": 0, "new": 0, "last_version": None})} for w in watches]
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        console.print("no saved searches (add one with `neusym watch add \"QUERY\"`)", markup=False)
        return
    t = Table()
    for col in ("name", "query", "filters", "papers", "new", "evaluated"):
        t.add_column(col)
    for r in rows:
        filters = " ".join(f"{k}={r[k]}" for k in ("venue", "year", "author") if r[k])
        t.add_row(r["name"], r["query"], filters, str(r["matches"]), str(r["new"]),
                  str(r["evaluated_version"] or "never"))
    console.print(t)


@watch_app.command("remove")
def watch_remove(name: str = typer.Argument(..., help="The watch's name.")) -> None:
    """Delete a saved search and the papers it found."""
    from neusym.store.watches import WatchError

    try:
        with _watch_store(_settings()) as store:
            store.remove(name)
    except WatchError as exc:
        _error(exc)
        raise typer.Exit(2)
    console.print(f"removed watch {name}", markup=False, highlight=False)


@watch_app.command("run")
def watch_run(
    names: Optional[List[str]] = typer.Argument(None, help="Watches to evaluate (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the run report as JSON."),
) -> None:
    """Evaluate the saved searches against the current corpus version (what the corpus_watches DAG does
    after each publish). Idempotent: a watch already evaluated against this version adds nothing."""
    from neusym.errors import NeusymError
    from neusym.query.watches import run_watches
    from neusym.store.watches import WatchError

    try:
        report = run_watches(_settings(), names=names or None)
    except WatchError as exc:
        _error(exc)
        raise typer.Exit(2)
    except NeusymError as exc:
        _error(exc)
        raise typer.Exit(1)
    if as_json:
        print(json.dumps(report.to_dict()))
        return
    for name, n in report.new_matches.items():
        console.print(f"{name}: " + ("already evaluated" if n is None else f"{n} new papers"), markup=False,
                      highlight=False)
    console.print(f"{report.evaluated} of {report.watches} watches evaluated against version {report.version} "
                  f"in {report.seconds:.2f} s", highlight=False)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    workers: int = typer.Option(1, "--workers", min=1, max=16,
                                help="Server processes (one core each); e.g. the number of cores for many clients."),
) -> None:
    """Serve the HTTP API and the web page over the current corpus version (docs/service.md)."""
    from neusym.interfaces.service import main as serve_main

    try:
        serve_main(host, port, settings=_settings(), workers=workers)
    except OSError as exc:  # the port cannot be bound (workers > 1; uvicorn reports it itself for one)
        err.print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}")
        raise typer.Exit(1)


@app.command()
def mcp() -> None:
    """Serve the corpus to an LLM client (Claude Desktop, Cursor, ...) as an MCP server over stdio:
    the five NeuSym-RAG actions, paper search, paper outlines and ask (docs/mcp.md)."""
    from neusym.interfaces.service.mcp import run_stdio

    run_stdio(_settings())


def main() -> None:
    """The ``neusym`` command. An unexpected error prints one line naming it, not a traceback
    (``NEUSYM_DEBUG=1`` shows the traceback); expected errors are handled by each command."""
    import os

    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence of a command-line tool
        if os.environ.get("NEUSYM_DEBUG"):
            raise
        from pydantic import ValidationError
        from rich.markup import escape

        if isinstance(exc, ValidationError) and exc.title == Settings.__name__:  # a bad NEUSYM_* variable
            for e in exc.errors():
                if not e["loc"]:  # a check of the settings as a whole (a retired variable): its message names it
                    err.print(f"[red]error:[/red] {escape(e['msg'].removeprefix('Value error, '))}", soft_wrap=True,
                              highlight=False)
                    continue
                name = "NEUSYM_" + "_".join(str(part) for part in e["loc"]).upper()
                err.print(f"[red]error:[/red] invalid setting {escape(name)}={escape(repr(e.get('input')))}: "
                          f"{escape(e['msg'])}", soft_wrap=True, highlight=False)
            raise SystemExit(1)

        err.print(f"[red]error:[/red] {escape(type(exc).__name__)}: {escape(str(exc).strip().splitlines()[0] if str(exc).strip() else '')} "
                  "(set NEUSYM_DEBUG=1 to see where)", soft_wrap=True, highlight=False)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
