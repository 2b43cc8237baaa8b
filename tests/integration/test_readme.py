"""Every code block of the README runs as written against the session's server.

A block preceded by `<!-- norun: why -->` is not run (the setup commands, a minutes-long
export, the release commands that edit the repository); every other one is: Python blocks
in a subprocess, bash blocks (curl, `tmr`) with bash, from the project root. Only the
address changes: `localhost:8000` / `localhost:8001` become the session server's ports, and
`TMR_URL` / `TMR_GRPC_URL` name them for `tmr`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.paths import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
BLOCK = re.compile(r"(?:<!-- norun: (?P<why>[^>]*?) -->\n)?```(?P<lang>\w+)\n(?P<code>.*?)```",
                   re.S)
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Snippet:
    lang: str
    code: str
    norun: str | None  # why it is not run

    @property
    def label(self) -> str:
        return f"{self.lang}: {self.code.strip().splitlines()[0][:60]}"


def snippets(text: str | None = None) -> list[Snippet]:
    text = README.read_text(encoding="utf-8") if text is None else text
    return [Snippet(m["lang"], m["code"], m["why"]) for m in BLOCK.finditer(text)]


RUN = [s for s in snippets() if s.norun is None]


def as_here(code: str, http_url: str, grpc_url: str) -> str:
    code = code.replace("localhost:8000", http_url).replace("localhost:8001", grpc_url)
    return code.replace(".venv/bin/tmr", str(VENV_BIN / "tmr"))


def test_the_first_block_is_the_two_commands_ci_runs():
    first = snippets()[0]
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert commands == ["make serve", "make test"]
    assert first.norun, "the setup itself is not run by a test"
    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M), "CI runs the README's test command"


def test_every_block_is_run_or_says_why_not():
    every = snippets()
    assert len(every) == len(re.findall(r"^```\w+$", README.read_text(), re.M))
    assert all(s.norun.strip() for s in every if s.norun is not None)
    assert {s.lang for s in RUN} == {"python", "bash"}
    assert sum("curl " in s.code for s in RUN) >= 2 and any("tmr " in s.code for s in RUN)
    assert len(RUN) >= len(every) - 3, [s.label for s in every if s.norun]


def test_a_norun_marker_only_covers_the_block_after_it():
    text = "<!-- norun: setup -->\n```bash\nmake serve\n```\n\n```python\nprint(1)\n```\n"
    assert [(s.lang, s.norun) for s in snippets(text)] == [("bash", "setup"), ("python", None)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("snippet", RUN, ids=[f"{i}-{s.label}" for i, s in enumerate(RUN)])
def test_the_readme_block_runs_as_written(snippet: Snippet, http_url, grpc_url):
    code = as_here(snippet.code, http_url, grpc_url)
    command = [sys.executable, "-c", code] if snippet.lang == "python" else [
        "bash", "-euo", "pipefail", "-c", code]
    env = {**os.environ, "TMR_URL": http_url, "TMR_GRPC_URL": grpc_url}
    done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip(), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if "curl " in snippet.code:
        answers = [json.loads(line) for line in done.stdout.replace("}{", "}\n{").splitlines()
                   if line.strip()]
        assert answers and all("outputs" in a and "error" not in a for a in answers), done.stdout
