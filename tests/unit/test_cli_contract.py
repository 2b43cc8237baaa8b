"""The pure parts of `tmr`'s contract: server addresses with or without a scheme, one
error line per error type with its exit code, names resolved to the kind a command takes,
units in seconds and fractions, and help text on every option."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
from tmr_client.errors import AccessDeniedError, ModelNotFoundError, ServerUnreachableError

from cli.errors import FAILURE, USAGE, Tried, UsageError, message_for, unreachable_reason
from cli.main import build_parser
from cli.names import ENCODER, FOLDER, FRONT, resolve
from cli.options import parse_url
from cli.rollout import with_verb
from core.errors import CoreError, UnknownFamilyError
from core.families.catalog import UnknownModelError, served_encoder
from core.params import ConfigError
from core.paths import DEFAULT_REPOSITORY
from core.variant import REVIEWED
from core.versions import VersionError
from export.errors import ExportCheckError, ExportError
from export.pipeline import AddError
from export.sources import SourceError
from server import errors as server_errors
from server.errors import PortInUseError, ServerError, TraceBackendError


@pytest.mark.parametrize(("text", "protocol", "expected"), [
    ("localhost:8000", None, ("localhost:8000", "http")),
    ("http://localhost:8000", None, ("localhost:8000", "http")),
    ("http://localhost:8000/", None, ("localhost:8000", "http")),
    ("grpc://triton:8001", None, ("triton:8001", "grpc")),
    ("GRPC://triton", None, ("triton:8001", "grpc")),
    ("triton", "grpc", ("triton:8001", "grpc")),
    ("triton", None, ("triton:8000", "http")),
    ("http://[::1]", None, ("[::1]:8000", "http")),
    ("[::1]:9000", "http", ("[::1]:9000", "http")),
])
def test_a_server_address_takes_an_optional_scheme_and_port(text, protocol, expected) -> None:
    assert parse_url(text, protocol) == expected


@pytest.mark.parametrize(("text", "protocol", "match"), [
    ("https://triton:8000", None, "not https"),
    ("grpc://triton:8001", "http", "is grpc, but this call uses http"),
    ("http://triton:8000/v2/health", None, "no path"),
    ("http://", None, "no path"),
])
def test_a_server_address_tmr_cannot_use_is_a_usage_error(text, protocol, match) -> None:
    with pytest.raises(UsageError, match=match):
        parse_url(text, protocol)


def test_the_url_the_banner_prints_parses_for_every_server_command() -> None:
    args = build_parser().parse_args(["health", "--url", "http://localhost:8000"])
    assert args.make(args).url == "localhost:8000"
    args = build_parser().parse_args(["embed", "x", "--url", "grpc://localhost:8001"])
    assert (args.make(args).url, args.make(args).protocol) == ("localhost:8001", "grpc")


TRIED = Tried("health", "http://localhost:1", "embed", 2)


def test_an_unreachable_server_names_its_url_and_how_to_start_it() -> None:
    err = ServerUnreachableError("ConnectionRefusedError: [Errno 111] Connection refused")
    text, code = message_for(err, TRIED)
    assert text == ("cannot reach Triton at http://localhost:1 (connection refused): start it "
                    "with `make serve` (or `tmr serve`) or pass --url")
    assert code == FAILURE


def test_an_error_caused_by_an_unreachable_server_reads_as_that() -> None:
    try:
        try:
            raise ServerUnreachableError("connection refused")
        except ServerUnreachableError as cause:
            raise RuntimeError("Triton refused to load embed") from cause
    except RuntimeError as err:
        assert message_for(err, TRIED)[0].startswith("cannot reach Triton at http://localhost:1")


@pytest.mark.parametrize(("err", "fragment", "code"), [
    (ModelNotFoundError("unknown model"), "has no model 'embed' v2", USAGE),
    (AccessDeniedError("restricted"), "refused the key", FAILURE),
    (UnknownModelError("no model 'x' in repo"), "no model 'x' in repo: `tmr versions`", USAGE),
    (VersionError("embed has no version 9 on disk"), "no version 9", FAILURE),
    (UnknownFamilyError("unknown model family 'x'"), "unknown model family 'x'", USAGE),
    (ConfigError("max_batch_size must be > 0"), "max_batch_size", USAGE),
    (PortInUseError("http port 8000 already in use"), "in use: stop what listens", FAILURE),
    (TraceBackendError("no Phoenix in .venv-traces"), "no Phoenix", FAILURE),
    (SourceError("nosuch is neither a folder"), "nosuch is neither", USAGE),
    (AddError("'m' already exists"), "already exists", USAGE),
    (ExportCheckError("int8 parity", 0.9, 0.99), "threshold 0.99: nothing was written", FAILURE),
    (UsageError("give one --metrics-url per --url"), "one --metrics-url", USAGE),
    (FileNotFoundError(2, "No such file or directory", "/a/b"), "/a/b: No such file", USAGE),
    (subprocess.CalledProcessError(99, ["/x/perf_analyzer", "-m"]),
     "perf_analyzer exited with status 99 against http://localhost:1", FAILURE),
    (ZeroDivisionError("boom\nsecond line"),
     "internal error: ZeroDivisionError: boom; second line; rerun with --debug", FAILURE),
])
def test_each_error_type_is_one_line_with_its_exit_code(err, fragment, code) -> None:
    text, got = message_for(err, TRIED)
    assert fragment in text and "\n" not in text
    assert got == code


def test_each_layer_has_one_error_root_that_carries_the_exit_code() -> None:
    tree = [getattr(server_errors, name) for name in dir(server_errors)
            if name.endswith("Error")]
    assert {cls for cls in tree if not issubclass(cls, ServerError)} == set()
    for cls in (VersionError, ConfigError, UnknownModelError, UnknownFamilyError):
        assert issubclass(cls, CoreError)
    for cls in (ExportCheckError, SourceError, AddError):
        assert issubclass(cls, ExportError)
    assert (ServerError.exit_code, CoreError.exit_code, ExportError.exit_code,
            UsageError.exit_code) == (FAILURE, FAILURE, FAILURE, USAGE)


def test_unreachable_reasons_are_a_few_words() -> None:
    assert unreachable_reason("[Errno 111] Connection refused") == "connection refused"
    assert unreachable_reason("timed out") == "timed out"
    assert unreachable_reason("something odd") == "something odd"


@pytest.mark.parametrize(("name", "kind", "expected"), [
    ("minilm_onnx", ENCODER, "minilm_onnx"),
    ("minilm_int8", ENCODER, "minilm_int8"),
    ("minilm", ENCODER, "served"),
    ("embed", ENCODER, "served"),
    ("embed", FRONT, "embed"),
    ("minilm", FRONT, "embed"),
    ("minilm_onnx", FRONT, "embed"),
    ("digits_onnx", FRONT, "digits"),
    ("embed", FOLDER, "embed"),
    ("health", FRONT, "health"),
])
def test_a_command_resolves_a_name_to_the_kind_it_takes(name, kind, expected) -> None:
    if expected == "served":  # the encoder its front serves on this host (its profile's)
        expected = served_encoder(DEFAULT_REPOSITORY, name, REVIEWED)
        assert expected.startswith("minilm_")
    resolved = resolve(DEFAULT_REPOSITORY, name, kind)
    assert resolved.name == expected
    assert bool(resolved.note) == (resolved.name != name)


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown model 'nosuch' .*valid names: .*embed"):
        resolve(DEFAULT_REPOSITORY, "nosuch", FRONT)
    with pytest.raises(UsageError, match=r"valid names: .*minilm_onnx"):
        resolve(DEFAULT_REPOSITORY, "nosuch", ENCODER)


@pytest.mark.parametrize(("argv", "expected"), [
    (["rollout", "minilm", "2"], ["rollout", "start", "minilm", "2"]),
    (["--debug", "rollout", "minilm", "2"], ["--debug", "rollout", "start", "minilm", "2"]),
    (["rollout", "status"], ["rollout", "status"]),
    (["rollout", "--help"], ["rollout", "--help"]),
    (["embed", "rollout"], ["embed", "rollout"]),
])
def test_rollout_model_version_is_shorthand_for_rollout_start(argv, expected) -> None:
    assert with_verb(argv) == expected


def test_rollout_status_help_is_status_s_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "status", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: tmr rollout status") and "--steps" not in out


def parsers(parser: argparse.ArgumentParser, path: str = "tmr"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}")


def test_every_option_and_argument_has_help() -> None:
    missing = [f"{path} {a.option_strings or a.dest}" for path, p in parsers(build_parser())
               for a in p._actions
               if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
               and not a.help]
    assert missing == []


def test_help_shows_each_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "start", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--min-requests MIN_REQUESTS candidate rows a step needs (default: " in out
    assert "--max-error-fraction" in out and "(default: 0.01)" in out


def test_new_units_parse_as_given() -> None:
    args = build_parser().parse_args(["rollout", "start", "m", "2", "--max-error-fraction",
                                      "0.05", "--canary-shadow-fraction", "0.2"])
    assert (args.max_error_rate, args.canary_shadow) == (0.05, 0.2)
    args = build_parser().parse_args(["perf", "sweep", "--p99-budget-s", "0.1",
                                      "--interval-s", "2", "--concurrency", "1"])
    opts = args.make(args)
    assert (opts.p99_budget_ms, opts.interval_ms) == (100.0, 2000)


def test_embed_reads_texts_from_arguments_then_files_and_stdin(tmp_path) -> None:
    import io

    from cli.embed import read_texts

    (tmp_path / "a.txt").write_text("one\n\n  \ntwo\n", encoding="utf-8")
    texts = read_texts(["zero"], [tmp_path / "a.txt", Path("-")], io.StringIO("three\n"))
    assert texts == ["zero", "one", "two", "three"]
    with pytest.raises(UsageError, match="no text to embed"):
        read_texts([], [], io.StringIO(""))


def test_embed_writes_npy_or_json_lines_and_refuses_other_formats(tmp_path) -> None:
    import json

    import numpy as np

    from cli.embed import check_out, write_vectors

    vectors = np.arange(6, dtype=np.float64).reshape(2, 3)
    write_vectors(tmp_path / "v.npy", ["a", "b"], vectors)
    saved = np.load(tmp_path / "v.npy")
    assert saved.dtype == np.float32 and saved.tolist() == vectors.tolist()
    write_vectors(tmp_path / "v.jsonl", ["a", "b"], vectors)
    lines = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert lines == [{"text": "a", "embedding": [0.0, 1.0, 2.0]},
                     {"text": "b", "embedding": [3.0, 4.0, 5.0]}]
    with pytest.raises(UsageError, match=r"writes \.npy or \.jsonl"):
        check_out(tmp_path / "v.csv")
