"""A deterministic evaluation corpus of real English text, built offline from stdlib docstrings.

The texts depend only on the running Python's standard library, so a given interpreter always
yields the same corpus; `corpus_sha256` lets provenance record exactly which one was used.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator, Sequence

# Fixed, sorted list: stdlib modules with plenty of prose in their docstrings and no import-time
# side effects.
CORPUS_MODULES: tuple[str, ...] = (
    "argparse", "ast", "asyncio", "calendar", "collections", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message",
    "enum", "fractions", "ftplib", "functools", "gettext", "heapq", "http.client",
    "http.cookiejar", "imaplib", "inspect", "ipaddress", "json", "logging", "mailbox",
    "multiprocessing", "numbers", "optparse", "os", "pathlib", "pickle", "pprint", "queue",
    "random", "re", "sched", "selectors", "shlex", "shutil", "smtplib", "socket", "sqlite3",
    "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
    "tokenize", "traceback", "typing", "unittest", "urllib.parse", "urllib.request", "uuid",
    "warnings", "weakref", "xml.dom.minidom", "zipfile",
)  # fmt: skip

MIN_WORDS = 3
MIN_LETTER_RATIO = 0.7
LONG_PARAGRAPH_WORDS = 40

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_CODE_HINT = re.compile(r"(>>>|::|://|[{}]|==|->|\w\(|=\S)")


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a docstring: blank-line separated, indented/code blocks dropped."""
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or any(line.startswith((" ", "\t", ">>>")) for line in lines):
            continue
        paragraphs.append(" ".join(" ".join(lines).split()))
    return paragraphs


def is_prose(text: str) -> bool:
    """True for text that reads as English prose: enough words, mostly letters, no code."""
    if len(text.split()) < MIN_WORDS or _CODE_HINT.search(text):
        return False
    letters = sum(ch.isalpha() for ch in text)
    return letters / max(len(text.replace(" ", "")), 1) >= MIN_LETTER_RATIO


def sentences_from_docstring(text: str) -> list[str]:
    """Split a docstring into prose sentences, in order, skipping code and fragments."""
    sentences: list[str] = []
    for paragraph in _paragraphs(text):
        for sentence in _SENTENCE_END.split(paragraph):
            sentence = sentence.strip()
            if sentence[:1].isupper() and sentence[-1:] in ".!?" and is_prose(sentence):
                sentences.append(sentence)
    return sentences


def long_paragraphs_from_docstring(text: str, min_words: int = LONG_PARAGRAPH_WORDS) -> list[str]:
    """Whole prose paragraphs of at least min_words words (the long end of the corpus)."""
    return [p for p in _paragraphs(text) if len(p.split()) >= min_words and is_prose(p)]


def _docstrings(module_name: str) -> Iterator[str]:
    """Docstrings of a module, its classes, functions and methods defined in it."""
    module = importlib.import_module(module_name)
    objects: list[object] = [module]
    for _, member in inspect.getmembers(module):
        if getattr(member, "__module__", None) == module.__name__:
            objects.append(member)
            if inspect.isclass(member):
                objects.extend(vars(member).values())
    for obj in objects:
        doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else None
        if doc:
            yield doc


def texts_from_docstrings(docstrings: Iterable[str]) -> list[str]:
    """Deduplicated, sorted sentences and long paragraphs from the given docstrings."""
    texts: set[str] = set()
    for doc in docstrings:
        texts.update(sentences_from_docstring(doc))
        texts.update(long_paragraphs_from_docstring(doc))
    return sorted(texts)


def build_corpus(modules: Iterable[str] = CORPUS_MODULES) -> list[str]:
    """The evaluation corpus: prose from the docstrings of the given stdlib modules."""
    return texts_from_docstrings(doc for name in modules for doc in _docstrings(name))


def corpus_sha256(texts: Iterable[str]) -> str:
    """A fingerprint of a corpus: sha256 over its texts, newline-separated."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\n")
    return digest.hexdigest()


PARITY_BATCH_SIZES: tuple[int, ...] = (1, 3, 8, 17)


def parity_batches(
    texts: Sequence[str], sizes: Sequence[int] = PARITY_BATCH_SIZES
) -> list[list[str]]:
    """Deterministic batches spanning short to long texts, for parity checks.

    A batch of 1 holds a single word. Larger batches take evenly spaced texts from the
    length-sorted corpus, so each mixes the shortest text (a row that is mostly padding) with
    the longest; the largest batch swaps its longest text for the three longest joined, which
    exceeds the tokenizer's truncation length.
    """
    by_length = sorted(set(texts), key=lambda t: (len(t), t))
    if len(by_length) < 3:
        raise ValueError("parity batches need at least 3 distinct texts")
    last = len(by_length) - 1
    batches: list[list[str]] = []
    for size in sizes:
        if size == 1:
            batches.append([by_length[0].split()[0].strip(".,;:!?")])
            continue
        batch = [by_length[round(i * last / (size - 1))] for i in range(size)]
        if size == max(sizes):
            batch[-1] = " ".join(by_length[-3:])
        batches.append(batch)
    return batches
