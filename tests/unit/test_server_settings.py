"""server.settings.server_flags: the one tritonserver command line, rendered from options."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from core.paths import DEFAULT_REPOSITORY
from core.variant import GPU, REVIEWED
from server.settings import (
    ALL_MODELS,
    POLL_INTERVAL_S,
    RESPONSE_CACHE_BYTES,
    Ports,
    ServerOptions,
    control_mode_flags,
    server_flags,
)


def flag_names(flags: list[str]) -> list[str]:
    return [f.split("=", 1)[0] for f in flags]


@pytest.mark.parametrize("mode", ["explicit", "poll"])
def test_server_flags_contain_each_flag_exactly_once(mode):
    """--load-model alone may repeat: once per model loaded at start."""
    opts = ServerOptions(control_mode=mode, variant=GPU, load_models=("a", "b"))
    names = flag_names(server_flags(opts))
    assert [n for n, count in Counter(names).items() if count > 1] == (
        ["--load-model"] if mode == "explicit" else [])
    assert all(n.startswith("--") for n in names)


def test_server_flags_render_repository_ports_and_server_wide_settings():
    opts = ServerOptions(repository=Path("/models"), ports=Ports(9000, 9001, 9002))
    flags = server_flags(opts)
    for expected in ["--model-repository=/models", "--http-port=9000", "--grpc-port=9001",
                     "--metrics-port=9002", "--strict-readiness=true",
                     "--disable-auto-complete-config", "--exit-timeout-secs=30",
                     f"--cache-config=local,size={RESPONSE_CACHE_BYTES}",
                     "--log-format=ISO8601", "--log-verbose=0"]:
        assert expected in flags


def test_default_options_serve_the_project_repository_on_the_standard_ports():
    flags = server_flags(ServerOptions())
    assert f"--model-repository={DEFAULT_REPOSITORY}" in flags
    assert {"--http-port=8000", "--grpc-port=8001", "--metrics-port=8002"} <= set(flags)


def test_explicit_mode_loads_every_model_at_start_by_default():
    """The default of compose (GPU hosts) and of the test suite's session server."""
    flags = server_flags(ServerOptions(control_mode="explicit"))
    assert ServerOptions().load_models == ALL_MODELS == ("*",)
    assert "--model-control-mode=explicit" in flags
    assert [f for f in flags if f.startswith("--load-model")] == ["--load-model=*"]
    assert "--repository-poll-secs" not in flag_names(flags)


def test_explicit_mode_loads_the_named_models_once_each_in_order():
    flags = server_flags(ServerOptions(load_models=("embed", "minilm_onnx", "health")))
    assert [f for f in flags if f.startswith("--load-model")] == [
        "--load-model=embed", "--load-model=minilm_onnx", "--load-model=health"]


def test_explicit_mode_may_load_nothing_at_start():
    assert "--load-model" not in flag_names(server_flags(ServerOptions(load_models=())))


def test_every_model_and_named_models_together_are_refused():
    with pytest.raises(ValueError, match=r"load '\*' alone or name the models, not both"):
        server_flags(ServerOptions(load_models=("*", "embed")))


@pytest.mark.parametrize("load_models", [ALL_MODELS, ("embed", "health")])
def test_poll_mode_rescans_the_repository_and_loads_nothing_explicitly(load_models):
    """Poll mode loads every model whatever load_models says (Triton refuses --load-model
    outside explicit mode)."""
    flags = server_flags(ServerOptions(control_mode="poll", load_models=load_models))
    assert "--model-control-mode=poll" in flags
    assert f"--repository-poll-secs={POLL_INTERVAL_S}" in flags
    assert "--load-model" not in flag_names(flags)


def test_unknown_control_mode_is_refused_naming_the_mode():
    with pytest.raises(ValueError, match=r"unknown model control mode 'none'; expected "):
        server_flags(ServerOptions(control_mode="none"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'explicit' or 'poll'"):
        control_mode_flags("EXPLICIT")  # type: ignore[arg-type]


def test_model_config_name_flag_appears_only_when_set():
    assert "--model-config-name" not in flag_names(server_flags(ServerOptions()))
    assert "--model-config-name=gpu" in server_flags(ServerOptions(variant=GPU))
    assert "--model-config-name" not in flag_names(
        server_flags(ServerOptions(variant=REVIEWED)))


def test_extra_flags_are_appended_last_in_order():
    extra = ("--log-info=false", "--backend-config=python,shm-default-byte-size=1048576")
    flags = server_flags(ServerOptions(variant=GPU, extra=extra))
    assert flags[-2:] == list(extra)
    assert flags.index("--model-config-name=gpu") < len(flags) - 2


def test_ports_as_dict_names_the_three_ports():
    assert Ports(1, 2, 3).as_dict() == {"http": 1, "grpc": 2, "metrics": 3}


def test_log_verbose_and_exit_timeout_follow_the_options():
    flags = server_flags(ServerOptions(log_verbose=1, exit_timeout_s=5, cache_bytes=1024))
    assert {"--log-verbose=1", "--exit-timeout-secs=5", "--cache-config=local,size=1024"} <= \
        set(flags)
