"""The `tmr` parser: every command parses its documented spellings into its typed options,
and `tmr --help` lists each command once, by group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tmr_client.contract import OVERLENGTH_POLICIES

from cli.classify import ClassifyOptions
from cli.embed import TRUNCATE_CHOICES, EmbedOptions, truncate_policy
from cli.export import AddOptions, ExportOptions
from cli.main import GROUPS, build_parser, main
from cli.operate import DegradeOptions, HealthOptions
from cli.options import SUMMARIES, URL_ENV
from cli.release import GateOptions, ReleaseOptions, VersionsOptions
from cli.serve import ServeOptions
from cli.watchdog import WatchdogOptions
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from core.startup import startup_models
from core.variant import REVIEWED
from server.plan import CapacityOptions, PlanOptions
from server.sweep import CheckOptions, CompareOptions, SweepOptions


def parsed(*argv: str) -> object:
    """The typed options `tmr ARGV` hands its command."""
    args = build_parser().parse_args(argv)
    return args.make(args)


@pytest.fixture(autouse=True)
def no_url_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in URL_ENV.values():
        monkeypatch.delenv(name, raising=False)


def test_every_command_is_listed_once_in_the_grouped_help() -> None:
    listed = [name for names in GROUPS.values() for name in names]
    build_parser()
    assert sorted(listed) == sorted(SUMMARIES) and len(listed) == len(set(listed))


def test_tmr_help_is_short_and_grouped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert [g for g in GROUPS if f"\n{g}:\n" in out] == list(GROUPS)
    assert "TMR_URL" in out and "TMR_ADMIN_KEY" in out and "TMR_API_KEY" in out
    assert "exit codes:" in out
    assert len(out.splitlines()) - len(SUMMARIES) - len(GROUPS) <= 21  # + a line a command


def test_python_m_cli_is_tmr() -> None:
    out = subprocess.run([sys.executable, "-m", "cli", "--help"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tmr ") and "models & releases:" in out.stdout


def test_serve_parses_its_ports_control_mode_and_extra_flags() -> None:
    opts = parsed("serve", "--http-port", "9000", "--control-mode", "poll", "--front-door",
                  "--", "--log-info=false")
    assert isinstance(opts, ServeOptions)
    assert (opts.http_port, opts.control_mode, opts.front_door) == (9000, "poll", True)
    assert opts.extra == ("--log-info=false",) and opts.repository == DEFAULT_REPOSITORY


def test_serve_loads_the_start_rules_models_unless_told_to_load_all() -> None:
    from server.serve import server_options

    rule = server_options(parsed("serve"))
    assert not parsed("serve").load_all
    assert rule.load_models == tuple(startup_models(DEFAULT_REPOSITORY, REVIEWED))
    assert "minilm_torchscript" not in rule.load_models
    assert server_options(parsed("serve", "--load-all")).load_models == ("*",)


def test_export_and_add_take_the_model_positionally() -> None:
    opts = parsed("export", "minilm", "--format", "onnx", "--force")
    assert opts == ExportOptions("minilm", False, DEFAULT_REPOSITORY, ["onnx"], True, 2, False)
    assert parsed("export", "--all").all
    assert parsed("export", "minilm", "--format", "primary").formats == ["primary"]
    opts = parsed("add", "mpnet", "--family", "text_embedding", "--from", "src/")
    assert opts == AddOptions("mpnet", "text_embedding", "src/", None, DEFAULT_REPOSITORY, 2,
                              None, False, None, False)
    assert parsed("add", "m", "--family", "f", "--from", "s", "--no-tune").no_tune
    assert parsed("add", "m", "--family", "f", "--from", "s", "--primary", "onnx").primary == "onnx"


def test_calls_take_their_inputs_positionally_and_the_model_as_an_option() -> None:
    opts = parsed("embed", "a text", "another", "--protocol", "grpc", "--timeout-s", "0.5")
    assert opts == EmbedOptions(["a text", "another"], "localhost:8001", "grpc", "embed",
                                None, 0.5)
    assert parsed("embed", "a long text", "--truncate", "chunk").truncate == "chunk"
    opts = parsed("classify", "cat.jpg", "--model", "digits", "--top-k", "3")
    assert opts == ClassifyOptions([Path("cat.jpg")], "localhost:8000", "http", "digits", 3,
                                   None, None)
    assert parsed("classify", "a.png").model == "efficientnet_lite0"


def test_embed_truncate_spells_the_request_contracts_values() -> None:
    assert ["true", "false", *OVERLENGTH_POLICIES] == TRUNCATE_CHOICES
    assert {truncate_policy(s) for s in TRUNCATE_CHOICES} == set(OVERLENGTH_POLICIES)
    assert (truncate_policy("true"), truncate_policy("false")) == ("truncate", "reject")
    assert truncate_policy(None) is None


def test_the_server_url_comes_from_the_environment_per_protocol(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMR_URL", "triton:8000")
    monkeypatch.setenv("TMR_GRPC_URL", "triton:8001")
    assert parsed("embed", "x").url == "triton:8000"
    assert parsed("embed", "x", "--protocol", "grpc").url == "triton:8001"
    assert parsed("health").url == "triton:8000"
    assert parsed("embed", "x", "--url", "other:1").url == "other:1"
    assert parsed("perf", "sweep").url is None, "no --url: the sweep starts its own server"


def test_release_commands_share_server_control_mode_and_timeout() -> None:
    opts = parsed("promote", "minilm_onnx", "2", "--control-mode", "poll", "--timeout-s", "5")
    assert opts == ReleaseOptions("promote", "minilm_onnx", 2, False, "localhost:8000",
                                  DEFAULT_REPOSITORY, "poll", 5.0)
    opts = parsed("rollback", "minilm_onnx", "--to", "1")
    assert (opts.action, opts.version, opts.no_gate, opts.timeout_s) == ("rollback", 1, True,
                                                                        90.0)
    assert parsed("gate", "minilm_onnx", "3") == GateOptions("minilm_onnx", 3,
                                                              DEFAULT_REPOSITORY)
    assert parsed("versions") == VersionsOptions(None, "localhost:8000", DEFAULT_REPOSITORY)


def test_degrade_health_and_watchdog_take_models_positionally() -> None:
    assert parsed("degrade", "--level", "2") == DegradeOptions(
        "embed", "2", "localhost:8000", "explicit", DEFAULT_REPOSITORY, 30.0)
    assert parsed("degrade", "digits", "--level", "auto").model == "digits"
    assert parsed("health") == HealthOptions("localhost:8000", None)
    assert parsed("health", "embed", "digits").models == ["embed", "digits"]
    opts = parsed("watchdog", "embed", "--interval-s", "1")
    assert isinstance(opts, WatchdogOptions) and opts.models == ["embed"]
    assert (opts.interval_s, opts.port) == (1.0, 8102)


def test_perf_verbs_build_perf_s_own_options() -> None:
    opts = parsed("perf", "sweep", "embed_bare", "--concurrency", "1", "2")
    assert opts == SweepOptions("embed_bare", "grpc", [1, 2], None, 60.0, 3000, 20)
    assert parsed("perf", "sweep").model == "embed"
    assert parsed("perf", "compare", "A", "B") == CompareOptions(Path("A"), Path("B"))
    assert parsed("perf", "check", "A").baseline is None
    assert isinstance(parsed("perf", "check", "A"), CheckOptions)
    opts = parsed("perf", "plan", "minilm_onnx", "--write")
    assert isinstance(opts, PlanOptions) and (opts.model, opts.write) == ("minilm_onnx", True)
    opts = parsed("perf", "capacity", "R", "--target-rps", "1000")
    assert opts == CapacityOptions(Path("R"), 1000.0, 60.0, 0.2)


def test_classify_of_an_unreadable_file_is_a_clear_error_and_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jpg"
    assert main(["classify", str(missing), "--url", "localhost:1"]) == 1
    assert f"error: {missing}: cannot read it: No such file or directory" in capsys.readouterr().err


def test_tune_takes_one_mode_a_memory_budget_and_show() -> None:
    from cli.tune import TuneOptions

    assert parsed("tune") == TuneOptions(DEFAULT_REPOSITORY, "default", 1024.0, False, False)
    assert parsed("tune", "--quick").mode == "quick"
    assert parsed("tune", "--full", "--memory-budget", "3000").memory_budget_mb == 3000.0
    assert parsed("tune", "--show").show and parsed("tune", "--if-stale").if_stale
    with pytest.raises(SystemExit):
        parsed("tune", "--quick", "--full")
    assert parsed("serve", "--reviewed").reviewed


def test_rerank_takes_the_query_then_documents_and_the_call_options() -> None:
    from cli.rerank import RerankOptions

    opts = parsed("rerank", "capital of France?", "Paris is", "A cat", "--model", "bge",
                  "--top-n", "2", "--raw-scores", "--truncate", "chunk", "--json",
                  "--file", "more.txt", "--protocol", "grpc")
    assert opts == RerankOptions("capital of France?", ["Paris is", "A cat"],
                                 "localhost:8001", "grpc", "bge", None, None,
                                 [Path("more.txt")], 2, True, "chunk", True)
    plain = parsed("rerank", "q", "d", "--model", "bge")
    assert (plain.top_n, plain.raw_scores, plain.truncate, plain.json) == (None, False, None,
                                                                         False)


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_rerank_top_n_is_an_integer_of_at_least_one(bad: str) -> None:
    with pytest.raises(SystemExit):
        parsed("rerank", "q", "d", "--model", "bge", "--top-n", bad)


def test_rerank_calls_the_repositorys_default_reranker_else_says_how_to_add_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cli import rerank
    from cli.errors import UsageError

    with pytest.raises(UsageError, match=r"no text_ranking front model in .*: name one with "
                                         r"--model, or add one with `tmr add NAME --family "
                                         r"text_ranking --from FOLDER`"):
        parsed("rerank", "q", "d")
    monkeypatch.setattr(rerank, "repository_front", {"text_ranking": "bge_reranker"}.get)
    assert parsed("rerank", "q", "d").model == "bge_reranker"


def test_rerank_without_documents_is_a_usage_error_before_any_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rerank", "q", "--model", "bge", "--url", "localhost:1"]) == 2
    assert "no document to rank: give DOC arguments or --file PATH" in capsys.readouterr().err


def test_rerank_prints_a_ranked_table_or_a_json_list() -> None:
    from tmr_client import Ranked

    from cli.rerank import json_rows, table

    ranked = [Ranked(2, 0.98765, "Paris is the capital " + "x" * 80), Ranked(0, -1.5, "a cat")]
    lines = table(ranked)
    assert lines[0].split() == ["rank", "score", "index", "document"]
    assert lines[1] == f"   1     0.9877      2  {('Paris is the capital ' + 'x' * 39)!r}"
    assert lines[2] == "   2    -1.5000      0  'a cat'"
    assert json_rows(ranked) == [
        {"index": 2, "relevance_score": 0.98765, "document": "Paris is the capital " + "x" * 80},
        {"index": 0, "relevance_score": -1.5, "document": "a cat"}]
