#!/usr/bin/env python
"""Sanity-check a hand-written table-cell ground-truth file against the PDFs.

Usage: check_truth.py TRUTH.jsonl [--pdf-dir DIR]

For every table line and every cell it checks that
  * the line has pdf / page / label / cells, every cell has row / column /
    value / text with the right types;
  * the cell's "text" (whitespace-normalised) occurs in the page text -- or, when the cell carries
    "pdf_text" (the same cell as the PDF's text layer spells it, e.g. "87.0˘3.0" for a printed
    "87.0±3.0" whose glyphs map to other characters), that string does
    (page.get_text(), whitespace-normalised).  When the text layer splits the
    cell (e.g. "84.76 ±" and "0.37" on separate lines) a looser check is used:
    first with all whitespace removed, then every token of the cell in the page
    in order; cells passing only the loose checks are listed as notes;
  * "value" equals the main number parsed from "text" (no ± spread, %, marks, enclosing parentheses;
    unicode minus kept as a sign; thousands separators removed; k/M/B suffixes
    multiplied out).
Duplicate (row, column) pairs inside a table are reported as warnings.
Exits 1 if any error was found, 0 otherwise.
"""
import argparse
import json
import math
import re
import sys

import pymupdf

MARKS = '*†‡§¶#'
MULT = {'k': 1e3, 'K': 1e3, 'M': 1e6, 'B': 1e9}


def norm(s):
    return ' '.join(s.split())


def parse_value(text):
    """Main number of a printed cell, or None if it does not look like one."""
    t = norm(text)
    t = re.sub(r'^\((.*)\)$', r'\1', t)      # a value printed in parentheses: "(.891)", "(91.48±0.07)"
    t = re.sub(r'\s*\(\s*±[^()]*\)$', '', t)  # a spread in parentheses after the value: "91.24(±0.12)"
    t = re.split(r'\s*±\s*', t)[0]           # drop ± spread
    t = t.strip().rstrip(MARKS).strip()       # trailing marks
    t = t.rstrip('%').strip()
    t = t.rstrip(MARKS).strip()
    mult = 1.0
    if t and t[-1] in MULT and re.search(r'\d', t[:-1] or ''):
        mult, t = MULT[t[-1]], t[:-1]
    else:
        t = re.sub(r'(?<=\d)[a-z]$', '', t)   # superscript-letter footnote mark
    t = t.replace(',', '')
    t = re.sub(r'^[−–-]', '-', t)
    t = t.lstrip('+')
    if not re.fullmatch(r'-?(\d+(\.\d*)?|\.\d+)', t):
        return None
    return float(t) * mult


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('truth')
    ap.add_argument('--pdf-dir', default='/work/shared/corpus/pdfs')
    args = ap.parse_args()

    errors, notes, warnings = [], [], []
    docs, page_text = {}, {}
    n_tables = n_cells = 0
    per_pdf = {}
    with open(args.truth, encoding='utf-8') as fh:
        lines = [l for l in fh if l.strip()]
    for ln, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f'line {ln}: bad JSON: {e}')
            continue
        where = f"line {ln} ({rec.get('pdf')} p{rec.get('page')} {rec.get('label')})"
        if not all(k in rec for k in ('pdf', 'page', 'label', 'cells')):
            errors.append(f'{where}: missing key')
            continue
        if not isinstance(rec['page'], int) or isinstance(rec['page'], bool):
            errors.append(f'{where}: page is not an int')
            continue
        pdf = rec['pdf']
        if pdf not in docs:
            try:
                docs[pdf] = pymupdf.open(f'{args.pdf_dir}/{pdf}')
            except Exception as e:  # noqa: BLE001
                errors.append(f'{where}: cannot open pdf: {e}')
                continue
        doc = docs[pdf]
        if not 1 <= rec['page'] <= len(doc):
            errors.append(f'{where}: page out of range')
            continue
        key = (pdf, rec['page'])
        if key not in page_text:
            page_text[key] = norm(doc[rec['page'] - 1].get_text())
        ptext = page_text[key]
        ptext_nows = re.sub(r'\s+', '', ptext)
        n_tables += 1
        per_pdf.setdefault(pdf, [0, 0])
        per_pdf[pdf][0] += 1
        seen = set()
        for i, c in enumerate(rec['cells']):
            cw = f'{where} cell {i}'
            if not isinstance(c, dict) or not all(k in c for k in ('row', 'column', 'value', 'text')):
                errors.append(f'{cw}: missing key')
                continue
            if not all(isinstance(c[k], str) and c[k].strip() for k in ('row', 'column', 'text')):
                errors.append(f'{cw}: row/column/text must be non-empty strings')
                continue
            if not isinstance(c['value'], (int, float)) or isinstance(c['value'], bool):
                errors.append(f'{cw}: value is not a number')
                continue
            n_cells += 1
            per_pdf[pdf][1] += 1
            if (c['row'], c['column']) in seen:
                warnings.append(f"{cw}: duplicate (row, column) {c['row']!r} / {c['column']!r}")
            seen.add((c['row'], c['column']))
            txt = norm(c['text'])
            if 'pdf_text' in c and not (isinstance(c['pdf_text'], str) and c['pdf_text'].strip()):
                errors.append(f'{cw}: pdf_text must be a non-empty string')
                continue
            present = norm(c.get('pdf_text') or c['text'])
            if present in ptext:
                pass
            elif re.sub(r'\s+', '', present) in ptext_nows:
                notes.append(f'{cw}: {present!r} found only with whitespace removed')
            else:
                pos, ok = 0, True
                for tok in present.split():
                    j = ptext.find(tok, pos)
                    if j < 0:
                        ok = False
                        break
                    pos = j + len(tok)
                if ok:
                    notes.append(f'{cw}: {present!r} found only token by token')
                else:
                    errors.append(f'{cw}: text {present!r} not in page text')
            v = parse_value(txt)
            if v is None:
                errors.append(f'{cw}: cannot parse a number from {txt!r}')
            elif not math.isclose(v, float(c['value']), rel_tol=1e-9, abs_tol=1e-9):
                errors.append(f"{cw}: value {c['value']!r} != parsed {v!r} from {txt!r}")

    for pdf, (t, n) in sorted(per_pdf.items()):
        print(f'{pdf}: {t} tables, {n} cells')
    print(f'TOTAL: {n_tables} tables, {n_cells} cells')
    for w in warnings:
        print('WARNING', w)
    for n in notes:
        print('NOTE', n)
    for e in errors:
        print('ERROR', e)
    print('OK' if not errors else f'{len(errors)} error(s)')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
