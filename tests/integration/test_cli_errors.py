"""Every `tmr` command fails as one line that names what it tried, never a traceback: (a)
against a stopped server (a free port where nothing listens) and (b) given an unknown
name. The commands come from the parser itself, so a new one fails here until it has its
cases. No server is started; nothing runs long (unknown names fail before any export,
tuning or sweep)."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import build_parser
from core.paths import PROJECT_ROOT
from tests.integration.helpers import repository_of, tmr

pytestmark = pytest.mark.timeout(300)

# command -> (argv against a stopped server or None where the command needs no server,
#             argv with an unknown name). {url}: the stopped server, given with its scheme;
# {repo}: a temporary copy of the repository (a command that would edit it edits the copy).
CASES: dict[str, tuple[list[str] | None, list[str]]] = {
    "serve": (None, ["serve", "--repository", "/nonexistent/nosuch"]),
    "tune": (None, ["tune", "--show", "--repository", "/nonexistent/nosuch"]),
    "watchdog": (["watchdog", "--url", "{url}"], ["watchdog", "nosuch", "--url", "{url}"]),
    "export": (None, ["export", "nosuch", "--repository", "{repo}"]),
    "add": (None, ["add", "nosuch", "--family", "nosuch", "--from", "/nonexistent/nosuch",
                   "--repository", "{repo}", "--no-tune"]),
    "versions": (["versions", "--url", "{url}", "--repository", "{repo}"],
                 ["versions", "nosuch", "--repository", "{repo}"]),
    "gate": (None, ["gate", "nosuch", "1", "--repository", "{repo}"]),
    "promote": (["promote", "minilm_onnx", "1", "--no-gate", "--url", "{url}",
                 "--repository", "{repo}"],
                ["promote", "nosuch", "1", "--repository", "{repo}"]),
    "rollback": (["rollback", "minilm_onnx", "--to", "1", "--url", "{url}",
                  "--repository", "{repo}"],
                 ["rollback", "nosuch", "--repository", "{repo}"]),
    "rollout start": (["rollout", "start", "minilm_onnx", "1", "--no-gate", "--url", "{url}",
                       "--repository", "{repo}"],
                      ["rollout", "nosuch", "2", "--repository", "{repo}"]),
    # status and pause read and edit the repository only: no server to miss
    "rollout status": (None, ["rollout", "status", "nosuch", "--repository", "{repo}"]),
    "rollout pause": (None, ["rollout", "pause", "nosuch", "--repository", "{repo}"]),
    "rollout resume": (["rollout", "resume", "minilm_onnx", "--url", "{url}",
                        "--repository", "{repo}"],
                       ["rollout", "resume", "nosuch", "--repository", "{repo}"]),
    "rollout abort": (["rollout", "abort", "minilm_onnx", "--url", "{url}",
                       "--repository", "{repo}"],
                      ["rollout", "abort", "nosuch", "--repository", "{repo}"]),
    "degrade": (["degrade", "--level", "2", "--url", "{url}", "--repository", "{repo}"],
                ["degrade", "nosuch", "--level", "2", "--repository", "{repo}"]),
    "health": (["health", "--url", "{url}"], ["health", "nosuch", "--url", "{url}"]),
    "embed": (["embed", "a text", "--url", "{url}"],
              ["embed", "a text", "--model", "nosuch", "--url", "{url}"]),
    "tokens": (["tokens", "a text", "--url", "{url}"],
               ["tokens", "a text", "--model", "nosuch", "--url", "{url}"]),
    "rerank": (["rerank", "a query", "a document", "--model", "reranker", "--url", "{url}"],
               ["rerank", "a query", "a document", "--model", "nosuch", "--url", "{url}"]),
    "classify": (["classify", str(PROJECT_ROOT / "model_repository/efficientnet_lite0/warmup"
                                  "/IMAGE"), "--url", "{url}"],
                 ["classify", "/nonexistent/nosuch.jpg", "--url", "{url}"]),
    "perf sweep": (["perf", "sweep", "--url", "{url}", "--concurrency", "1"],
                   ["perf", "sweep", "nosuch", "--url", "{url}", "--concurrency", "1"]),
    "perf compare": (None, ["perf", "compare", "/nonexistent/nosuch", "/nonexistent/b"]),
    "perf check": (None, ["perf", "check", "/nonexistent/nosuch"]),
    "perf plan": (None, ["perf", "plan", "nosuch", "--repository", "{repo}"]),
    "perf capacity": (None, ["perf", "capacity", "/nonexistent/nosuch", "--target-rps", "1"]),
}
DAEMONS = {"watchdog"}  # waits for its server: it must say where, and stop cleanly


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """Every leaf command of the parser, as `perf sweep`."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [" ".join(path)]
    return [leaf for sub in subs for name, child in sub.choices.items()
            for leaf in commands(child, (*path, name))]


@pytest.fixture(scope="module")
def stopped_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://localhost:{port}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repository_of(tmp_path_factory.mktemp("cli_errors"), "embed", "embed_interactive",
                         "minilm_onnx", "minilm_int8")


def test_every_command_has_its_error_cases() -> None:
    assert sorted(commands(build_parser())) == sorted(CASES)


def filled(argv: list[str], url: str, repo: Path) -> list[str]:
    return [a.replace("{url}", url).replace("{repo}", str(repo)) for a in argv]


def run(argv: list[str], command: str) -> tuple[int, str, str]:
    if command not in DAEMONS:
        out = tmr(*argv, timeout_s=120)
        return out.returncode, out.stdout, out.stderr
    process = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], cwd=PROJECT_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=3)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    return (process.returncode or 1), stdout, stderr  # a daemon stopped is not a success


def check(argv: list[str], command: str, *named: str) -> None:
    """Failed, no traceback, says one of `named`, and each error line is `tmr ...`."""
    code, stdout, stderr = run(argv, command)
    shown = f"tmr {' '.join(argv)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    assert code != 0, shown
    assert "Traceback" not in stdout + stderr, shown
    assert any(name in stdout + stderr for name in named), shown
    if command not in DAEMONS:
        errors = [line for line in stderr.splitlines() if "error" in line.lower()]
        assert errors and all(line.startswith("tmr ") for line in errors), shown


@pytest.mark.parametrize("command", sorted(c for c, (stopped, _) in CASES.items() if stopped))
def test_a_stopped_server_is_one_line_naming_it(command: str, stopped_url: str,
                                                repo: Path) -> None:
    argv = filled(CASES[command][0] or [], stopped_url, repo)
    # the URL; or the model, where the command refuses it before it calls the server
    models = [a for a in argv if a == "minilm_onnx"]
    check(argv, command, stopped_url.removeprefix("http://"), *models)


@pytest.mark.parametrize("command", sorted(CASES))
def test_an_unknown_name_is_one_line_naming_it(command: str, stopped_url: str,
                                               repo: Path) -> None:
    argv = filled(CASES[command][1], stopped_url, repo)
    named = "nosuch" if command not in {"health", "embed", "tokens", "rerank",
                                        "perf sweep"} else \
        stopped_url.removeprefix("http://")  # the server would name it; it is down
    check(argv, command, named)


@pytest.mark.parametrize(("extra", "said"), [
    ([], "no earlier version in the history to roll back to"),
    (["--to", "0"], "minilm_onnx has no version 0 on disk"),
])
def test_a_rollback_past_the_first_version_is_refused_and_changes_nothing(
        extra: list[str], said: str, stopped_url: str, repo: Path) -> None:
    """Issue 56: a rollback with nothing to return to is one line naming why, before any
    server is called, and the served config stays as it was."""
    before = (repo / "minilm_onnx" / "config.pbtxt").read_text()
    out = tmr("rollback", "minilm_onnx", *extra, "--url", stopped_url, "--repository",
              str(repo))
    assert out.returncode == 1 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert (repo / "minilm_onnx" / "config.pbtxt").read_text() == before
