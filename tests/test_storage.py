"""Shared storage by URL: hosts with different NEUSYM_HOMEs hand each other staging, PDFs and corpus versions.

Real stages on a real sample PDF (parse backend ``pymupdf`` to stay fast): one home parses, another
encodes, the writer home materializes and publishes, a reader home syncs the version, a new writer
home restores the database — every hand-off through the storage URL only (``file://`` standing for
NFS; ``memory://`` for the object-store semantics: no rename, no local path).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import duckdb
import pytest

from neusym.ingest.pipeline import (
    encode_stage,
    ingest,
    input_items,
    materialize_stage,
    parse_stage,
)
from neusym.ingest.publish import publish
from neusym.settings import Settings
from neusym.store.storage import Storage, StorageError, storage
from neusym.store.versions import (
    PublishError,
    current_version,
    open_version,
    remote_current,
    restore_writer_database,
)

from .conftest import SAMPLES
from .test_pipeline import db_fingerprint

PDF = "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"


def host(tmp: Path, name: str, url: str | None) -> Settings:
    return Settings(home=tmp / name, storage_url=url, parse_backend="pymupdf", storage_poll_s=0, versions_keep=2)


def point_ids(settings: Settings) -> set[str]:
    with open_version(settings) as v:
        return {r.id for r in v.cells.scroll(payload=False)}


def rows(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("metadata", "pages", "sections", "chunks", "tables", "images", "equations", "reference",
                          "quarantine")}
    finally:
        con.close()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """An inbox with one real sample PDF and one corrupt file, and a single-machine ingest of it (the reference)."""
    tmp = tmp_path_factory.mktemp("storage-inputs")
    inbox = tmp / "inbox"
    inbox.mkdir()
    shutil.copy(SAMPLES / PDF, inbox / PDF)
    (inbox / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a PDF")
    reference = Settings(home=tmp / "reference", parse_backend="pymupdf")
    ingest([inbox], reference)
    return inbox, reference


def test_hosts_share_staging_pdfs_and_versions_through_a_storage_url(tmp_path, inputs):
    inbox, reference = inputs
    url = (tmp_path / "shared").as_uri()  # file:// — an NFS mount on every host
    writer, worker2, reader = host(tmp_path, "writer", url), host(tmp_path, "worker2", url), host(tmp_path, "reader", url)

    # worker2 finds the PDFs (only it sees the inbox): they go into the shared content-addressed PDF store
    found = sorted(str(p) for p in inbox.iterdir())
    items = input_items(found, worker2)
    assert all(i["source"].startswith(url + "/pdfs/sha256/") for i in items)
    hidden = tmp_path / "moved-away"
    shutil.move(str(inbox), hidden)  # the writer host cannot see the inbox
    try:
        # the writer parses the good PDF from the shared store; worker2 parses (quarantines) the broken one
        good = next(i for i in items if i["pdf_path"].endswith(PDF))
        bad = next(i for i in items if i["pdf_path"].endswith("broken.pdf"))
        parsed_good = parse_stage(good["pdf_path"], writer, source=good["source"])
        shutil.move(str(hidden), inbox)
        parsed_bad = parse_stage(bad["pdf_path"], worker2, source=bad["source"])
    finally:
        if hidden.exists():
            shutil.move(str(hidden), inbox)
    assert (parsed_good.status, parsed_bad.status) == ("parsed", "quarantined")
    assert parsed_good.pdf_path == str(inbox / PDF)  # where it was found, not the writer's cached copy

    # worker2 encodes the paper the writer parsed (pulled from the storage), then the writer loads and publishes
    assert not (worker2.staging_dir / "parsed" / parsed_good.pdf_sha256).exists()
    encoded = encode_stage(parsed_good, worker2)
    assert encoded.status == "encoded" and (worker2.staging_dir / "parsed" / parsed_good.pdf_sha256).is_dir()
    assert not (writer.staging_dir / "vectors" / parsed_good.pdf_sha256).exists()
    materialize_stage([parsed_good.model_dump(), parsed_bad.model_dump()], writer)
    report = publish(writer)
    assert report.vectors_staged > 0 and report.vectors_encoded == 0  # vectors came from worker2 via the storage
    assert not (worker2.home / "corpus.duckdb").exists()

    # the same corpus as one machine ingesting the inbox: every table, quarantine included, and every point
    assert db_fingerprint(writer.db_path) == db_fingerprint(reference.db_path)
    assert rows(writer.db_path)["quarantine"] == 1
    assert point_ids(writer) == point_ids(reference)

    # a reader host syncs the published version from the storage and answers from it
    pointer = remote_current(reader)
    assert pointer["version"] == 1
    archive = tmp_path / "shared" / pointer["archive"]
    local = current_version(writer).path
    apparent = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    assert archive.stat().st_size < apparent / 10  # shards' preallocated holes are not shipped
    assert current_version(reader).number == 1
    assert db_fingerprint(current_version(reader).db_path) == db_fingerprint(writer.db_path)
    assert point_ids(reader) == point_ids(reference)

    # a re-run elsewhere reuses the staged parse and vectors found in the storage (nothing recomputed)
    again = parse_stage(str(inbox / PDF), reader)
    assert again.status == "reused" and not (reader.staging_dir / "parsed").exists()
    assert encode_stage(again, reader).status == "reused"

    # the next publish reaches the reader; old archives are pruned from the storage
    for _ in range(2):
        publish(writer)
    assert current_version(reader).number == 3
    assert sorted(p.name for p in (tmp_path / "shared" / "versions").iterdir()) == [
        "current.json", "v000002.json", "v000002.tar.gz", "v000003.json", "v000003.tar.gz"]

    # a second writer host publishing to the same storage is refused; the current version stays
    storage(writer).write_json("versions/current.json", {**remote_current(writer), "version": 99})
    with pytest.raises(PublishError, match="another writer host"):
        publish(writer)
    storage(writer).write_json("versions/current.json", {**remote_current(writer), "version": 3})
    assert current_version(writer).number == 3 and not list((writer.home / "versions").glob("v000004*"))

    # a new writer host (the old one lost) restores the writer database from the shared current version
    fresh = host(tmp_path, "new-writer", url)
    restored = restore_writer_database(fresh)
    assert restored["version"] == 3
    assert db_fingerprint(fresh.db_path) == db_fingerprint(writer.db_path)
    with pytest.raises(ValueError, match="exists"):
        restore_writer_database(fresh)
    assert publish(fresh).version == 4 and current_version(reader).number == 4


def test_object_store_semantics_without_rename_or_local_paths(tmp_path):
    url = f"memory://neusym-test-{uuid.uuid4().hex}"
    a, b = Storage(Settings(home=tmp_path / "a", storage_url=url)), Storage(Settings(home=tmp_path / "b", storage_url=url))
    staged = tmp_path / "a" / "staging" / "parsed" / "abc"
    staged.mkdir(parents=True)
    (staged / "pages.parquet").write_bytes(b"pages")
    (staged / "manifest.json").write_text('{"staged_at": "1"}')
    (staged / ".lock").write_text("local only")
    a.push(staged)
    assert a.list_keys("staging") == ["staging/parsed/abc/manifest.json", "staging/parsed/abc/pages.parquet"]
    target = tmp_path / "b" / "staging" / "parsed" / "abc"
    assert b.manifest(target) == {"staged_at": "1"}  # readable before any download
    assert b.pull_dir(target) and (target / "pages.parquet").read_bytes() == b"pages"
    # a re-stage on host a replaces the copy on host b as a whole
    (staged / "pages.parquet").write_bytes(b"pages v2")
    (staged / "manifest.json").write_text('{"staged_at": "2"}')
    a.push(staged)
    assert b.pull_dir(target) and (target / "pages.parquet").read_bytes() == b"pages v2"
    # nothing staged: False, and nothing is created
    missing = tmp_path / "b" / "staging" / "parsed" / "nope"
    assert not b.pull_dir(missing) and not missing.exists()
    # a URL of this storage is fetched into the home; outside the home is refused with a clear message
    a.write_bytes("pdfs/sha256/x.pdf", b"%PDF-1.4")
    assert b.fetch_url(f"memory:///{url.split('://')[1]}/pdfs/sha256/x.pdf").read_bytes() == b"%PDF-1.4"
    with pytest.raises(ValueError, match="not inside NEUSYM_HOME"):
        a.push(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="NEUSYM_STORAGE_URL=nosuchscheme://x: cannot open"):
        Storage(Settings(home=tmp_path / "c", storage_url="nosuchscheme://x"))


def test_without_a_storage_url_everything_stays_in_the_home(tmp_path):
    st = Storage(Settings(home=tmp_path / "home"))
    assert not st.shared and st.read_bytes("versions/current.json") is None and st.list_keys("staging") == []
    d = tmp_path / "home" / "staging" / "parsed" / "x"
    d.mkdir(parents=True)
    st.push(d)  # no-op
    assert not st.pull_dir(d)
    (d / "manifest.json").write_text("{}")
    assert st.pull_dir(d)
    with pytest.raises(ValueError, match="NEUSYM_STORAGE_URL is not set"):
        restore_writer_database(Settings(home=tmp_path / "home"))


def test_restoring_a_writer_from_an_empty_storage_names_the_storage(tmp_path):
    from neusym.store.versions import NoCorpusVersion

    url = (tmp_path / "shared").as_uri()
    with pytest.raises(NoCorpusVersion, match=f"nothing is published in the shared storage {url}"):
        restore_writer_database(host(tmp_path, "new-writer", url))
    assert not (tmp_path / "new-writer" / "corpus.duckdb").exists()
