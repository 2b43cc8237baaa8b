"""The docs name code that exists: every project path a doc names is in the tree (unless the
paragraph says it was retired and how to bring it back), every name written beside a
path is in that file, and docs/cli.md's command groups are `tmr --help`'s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.main import GROUPS
from core.paths import PROJECT_ROOT

TOPS = "core|cli|client|server|python_backends|runtime|export|perf|tests|model_repository"
PATH = rf"(?:{TOPS})/[\w/.-]*\w\.(?:py|json|jsonl|js|md|pbtxt|txt|yml|yaml|template)\b"
IDENT = r"[A-Za-z_]\w{2,}"
# `NAME`, path.py / `NAME` (path.py / path.py `NAME` / path.py CONSTANT
BESIDE = [(rf"`({IDENT})`,? \(?(?:in )?({PATH})", False), (rf"({PATH}):? `({IDENT})`", True),
          (rf"({PATH}) ([A-Z][A-Z0-9_]{{2,}})\b", True)]
GONE = ("retired", "git show", "folded into", "formerly")  # how a paragraph names past code
DOCS = sorted([*(PROJECT_ROOT / "docs").glob("*.md"), PROJECT_ROOT / "README.md",
               *PROJECT_ROOT.glob("*/README.md")])


def paragraphs(doc: Path) -> list[str]:
    return re.split(r"\n\s*\n", doc.read_text(encoding="utf-8"))


def named_paths(text: str) -> list[str]:
    """The project paths a paragraph names, leaving out `REV:path` (a past version)."""
    return [m.group(0) for m in re.finditer(rf"(?<![\w/.:-]){PATH}", text)]


def beside(text: str) -> list[tuple[str, str]]:
    """(name, path) for each name written beside a project path."""
    found = []
    for pattern, path_first in BESIDE:
        for m in re.finditer(pattern, text):
            found.append((m.group(2), m.group(1)) if path_first else (m.group(1), m.group(2)))
    return found


def test_the_patterns_read_what_the_docs_write() -> None:
    text = ("the bound (`HTTP_MAX_BODY_BYTES`, client/limits.py) and core/settings.py "
            "FRONT_BATCHING, recovered with `git show fecba36:perf/load.py`")
    assert named_paths(text) == ["client/limits.py", "core/settings.py"]
    assert beside(text) == [("HTTP_MAX_BODY_BYTES", "client/limits.py"),
                            ("FRONT_BATCHING", "core/settings.py")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(PROJECT_ROOT)))
def test_every_path_a_doc_names_exists_unless_it_says_it_was_retired(doc: Path) -> None:
    missing = [path for text in paragraphs(doc) if not any(w in text for w in GONE)
               for path in named_paths(text) if not (PROJECT_ROOT / path).exists()]
    assert not missing, f"{doc.name} names paths that are not in the tree: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(PROJECT_ROOT)))
def test_every_name_written_beside_a_path_is_in_that_file(doc: Path) -> None:
    wrong = [(name, path) for text in paragraphs(doc) for name, path in beside(text)
             if (PROJECT_ROOT / path).is_file()
             and not re.search(rf"\b{name}\b", (PROJECT_ROOT / path).read_text("utf-8"))]
    assert not wrong, f"{doc.name} names what its file does not hold: {wrong}"


def test_the_cli_doc_groups_the_commands_as_tmr_help_does() -> None:
    table = (PROJECT_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for group, names in GROUPS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {group} |"))
        listed = [re.split(r"[ \\\\]", cell, maxsplit=1)[0]
                  for cell in re.findall(r"`([^`]+)`", row.removeprefix(f"| {group} |"))]
        assert listed == names, row
