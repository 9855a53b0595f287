-- Record PDFs that could not be parsed in this run (input: temporary view staged_quarantine with
-- pdf_sha256, pdf_path, reason, quarantined_at). Same transaction as 10_upsert_papers.sql.
DELETE FROM quarantine WHERE pdf_sha256 IN (SELECT pdf_sha256 FROM staged_quarantine);
INSERT INTO quarantine
SELECT pdf_sha256, pdf_path, reason, quarantined_at::TIMESTAMP FROM staged_quarantine;
