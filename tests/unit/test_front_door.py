"""The front door's pure parts: restricted-API flags, keys, limits, template rendering, and
how the client names and sends the keys and reads the front door's refusals."""

from __future__ import annotations

import math
import re

import pytest
from google.protobuf import text_format
from tmr_client.auth import ADMIN_KEY_ENV, API_KEY_ENV, key_headers
from tmr_client.core import output_names
from tmr_client.errors import (
    AccessDeniedError,
    InvalidInputError,
    RateLimitedError,
    RequestTooLargeError,
    UnavailableError,
    classify,
)
from tritonclient.grpc import model_config_pb2, service_pb2

from core.files import placeholders
from core.paths import DEFAULT_REPOSITORY
from server import front_door
from server.front_door import (
    PLACEHOLDERS,
    TEMPLATE,
    FrontDoorError,
    api_keys_map,
    parse_api_keys,
    policy_values,
    render,
)
from server.settings import (
    DEV_ADMIN_KEY,
    MAX_BODY_BYTES,
    MAX_GRPC_BODY_BYTES,
    RESTRICTED_APIS,
    FrontDoorSettings,
    ServerOptions,
    admin_key,
    restricted_api_flags,
    server_flags,
)


def embed_config() -> model_config_pb2.ModelConfig:
    text = (DEFAULT_REPOSITORY / "embed" / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig())


# -- the restricted admin APIs ------------------------------------------------------------


def test_server_flags_restrict_the_admin_apis_on_both_protocols_with_the_admin_key():
    flags = server_flags(ServerOptions(admin_key="k3y"))
    apis = "model-repository,model-config,shared-memory,statistics,trace,logging"
    assert f"--http-restricted-api={apis}:admin-key=k3y" in flags
    assert f"--grpc-restricted-protocol={apis}:admin-key=k3y" in flags


def test_inference_metadata_and_health_stay_open():
    assert not {"inference", "metadata", "health"} & set(RESTRICTED_APIS)


def test_an_empty_admin_key_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=f"the admin key is empty; set {ADMIN_KEY_ENV}"):
        restricted_api_flags("")


def test_admin_key_comes_from_the_environment_or_the_dev_default(monkeypatch):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    assert admin_key() == DEV_ADMIN_KEY == ServerOptions().admin_key
    monkeypatch.setenv(ADMIN_KEY_ENV, "from-env")
    assert admin_key() == "from-env" == ServerOptions().admin_key


# -- limits -------------------------------------------------------------------------------


MIB = 1024 * 1024
ENVELOPE = 64 * 1024  # names, shapes and parameters of one request, generously


def front_configs() -> list[model_config_pb2.ModelConfig]:
    configs = [text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
               for path in sorted(DEFAULT_REPOSITORY.glob("*/config.pbtxt"))]
    return [c for c in configs if {"max_text_bytes", "max_image_bytes"} & set(c.parameters)]


def limit(config: model_config_pb2.ModelConfig, key: str) -> int:
    return int(config.parameters[key].string_value)


def test_http_body_limit_holds_the_longest_text_json_escaped_and_a_full_batch_of_long_ones():
    """A text at max_text_bytes fits one HTTP request (a 4-byte emoji escapes to 12
    characters), and so does a full batch of texts of max_tokens tokens (at most 4 bytes a
    token: every longer text is overlength). A request of many long texts is cut by bytes
    by the SDK; over the front door it gets a 413 naming the limit."""
    texts = [c for c in front_configs() if "max_text_bytes" in c.parameters]
    assert texts
    for config in texts:
        assert 3 * limit(config, "max_text_bytes") + ENVELOPE <= MAX_BODY_BYTES, config.name
        full = 3 * config.max_batch_size * 4 * limit(config, "max_tokens") + ENVELOPE
        assert full <= MAX_BODY_BYTES, config.name
    # and stays under what killed Triton 2.51's HTTP server here (4,194,202 bytes)
    assert MAX_BODY_BYTES < 4_180_000
    assert FrontDoorSettings().max_body_bytes == MAX_BODY_BYTES


def test_grpc_limit_holds_one_image_at_the_largest_max_image_bytes():
    largest = max(limit(c, "max_image_bytes") for c in front_configs()
                  if "max_image_bytes" in c.parameters)
    assert math.ceil((largest + ENVELOPE) / MIB) * MIB == MAX_GRPC_BODY_BYTES
    assert FrontDoorSettings().max_grpc_body_bytes == MAX_GRPC_BODY_BYTES


def test_burst_is_one_and_a_half_times_the_average_rate_per_second():
    assert FrontDoorSettings(rate_per_minute=6000).burst == 150
    assert FrontDoorSettings(rate_per_minute=120).burst == 3
    assert FrontDoorSettings(rate_per_minute=1).burst == 1  # never zero


def test_policy_values_are_the_settings_as_nginx_wants_them():
    values = policy_values(FrontDoorSettings())
    assert set(values) == set(front_door.POLICY_PLACEHOLDERS)
    assert values["MAX_BODY_BYTES"] == str(MAX_BODY_BYTES)
    assert values["RATE_PER_MINUTE"] == "6000"
    assert values["BURST"] == str(math.ceil(6000 / 60 * 1.5))


# -- the template -------------------------------------------------------------------------


def test_the_template_uses_exactly_the_public_placeholder_list():
    assert placeholders(TEMPLATE.read_text()) == sorted(PLACEHOLDERS)
    assert len(set(PLACEHOLDERS)) == len(PLACEHOLDERS)


def test_render_fills_every_placeholder_and_keeps_nginx_variables():
    values = {name: f"<{name.lower()}>" for name in PLACEHOLDERS}
    conf = render(TEMPLATE.read_text(), values)
    assert "${" not in conf
    assert "listen <front_door_http_port>;" in conf
    assert "$presented_key $api_client" in conf and "$api_client = \"\"" in conf


def test_render_names_every_missing_placeholder():
    with pytest.raises(FrontDoorError, match=r"no value for template placeholders \['A', 'B'\]"):
        render("${B} ${A} ${A} $nginx_variable", {})
    assert render("${A} $a ${a}", {"A": 1}) == "1 $a ${a}"  # only UPPER_CASE names


def test_envsubst_variables_list_every_placeholder_braced():
    listed = front_door.envsubst_variables().split()
    assert listed == [f"${{{name}}}" for name in PLACEHOLDERS]


def test_refusals_answer_json_with_the_limits_in_the_message():
    conf = render(TEMPLATE.read_text(), {**{n: "x" for n in PLACEHOLDERS},
                                         **policy_values(FrontDoorSettings())})
    assert ("return 413 '{\"error\":\"request body over the front door limit of "
            f"{MAX_BODY_BYTES} ") in conf
    assert "6000 requests per minute, burst 150" in conf
    assert re.search(r"limit_req zone=per_client burst=150 nodelay;", conf)


# -- API keys -----------------------------------------------------------------------------


def test_api_keys_parse_from_name_key_pairs():
    assert parse_api_keys(" alice:alice-key-1 , bob:b0b.key~2=,") == {
        "alice": "alice-key-1", "bob": "b0b.key~2="}


@pytest.mark.parametrize(("spec", "message"), [
    ("", "no API keys given"),
    ("alice", "bad API key entry 'alice'"),
    ("alice:short", "bad API key entry 'alice'"),
    ("al ice:long-enough-key", "bad API key entry 'al ice'"),
    ('alice:key-with-"quote', "bad API key entry 'alice'"),
    ("alice:key-with;semicolon", "bad API key entry 'alice'"),
    ("alice:same-key-1,bob:same-key-1", "'bob' repeats a name or a key"),
    ("alice:first-key-1,alice:second-key", "'alice' repeats a name or a key"),
])
def test_bad_api_key_entries_are_refused_without_echoing_the_key(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        parse_api_keys(spec)
    assert "same-key-1" not in str(info.value) and "short" not in str(info.value)


def test_the_key_map_has_one_quoted_line_per_client():
    assert api_keys_map({"bob": "bob-key-22", "alice": "alice-key-1"}) == (
        '"alice-key-1" alice;\n"bob-key-22" bob;\n')


# -- the client side ----------------------------------------------------------------------


def test_key_headers_send_the_admin_key_under_each_protocols_name(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    assert key_headers() == {}
    assert key_headers(admin=True) == {}  # never the dev server's key unless given it
    monkeypatch.setenv(ADMIN_KEY_ENV, "from-env")
    assert key_headers(admin=True) == {"admin-key": "from-env"}
    assert key_headers("grpc", admin=True, admin_key="k") == {
        "triton-grpc-protocol-admin-key": "k"}
    assert key_headers(admin=True, admin_key="") == {}  # "" = send none


def test_key_headers_add_the_api_key_from_the_caller_or_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "env-api-key")
    assert key_headers() == {"x-api-key": "env-api-key"}
    assert key_headers(api_key="mine") == {"x-api-key": "mine"}
    assert key_headers(api_key="") == {}
    first = key_headers()
    first["Inference-Header-Content-Length"] = "12"  # what tritonclient's HTTP client does
    assert key_headers() == {"x-api-key": "env-api-key"}


OBSERVED_REFUSALS = [
    ("403", "This API is restricted, expecting header 'admin-key'", AccessDeniedError),
    ("StatusCode.UNAVAILABLE",
     "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'",
     AccessDeniedError),
    ("401", "missing or unknown API key: send the header x-api-key", AccessDeniedError),
    ("StatusCode.UNAUTHENTICATED", "missing or unknown API key: send the metadata x-api-key",
     AccessDeniedError),
    ("429", "rate limit exceeded for this API key: 6000 requests per minute, burst 150; "
     "retry later", RateLimitedError),
    ("StatusCode.RESOURCE_EXHAUSTED", "rate limit exceeded for this API key: 6000 requests "
     "per minute, burst 150; retry later", RateLimitedError),
    ("413", "request body over the front door limit of 4000000 bytes", RequestTooLargeError),
    ("StatusCode.RESOURCE_EXHAUSTED", "request over the front door limit of 17825792 bytes",
     RequestTooLargeError),
]


@pytest.mark.parametrize(("status", "message", "expected"), OBSERVED_REFUSALS)
def test_front_door_and_restricted_api_refusals_map_to_typed_errors(status, message, expected):
    assert classify(status, message) is expected


def test_a_restricted_api_is_not_retried_but_a_rate_limit_is():
    assert not AccessDeniedError.retriable  # gRPC says UNAVAILABLE, but waiting won't help
    assert issubclass(RateLimitedError, UnavailableError) and RateLimitedError.retriable
    assert issubclass(RequestTooLargeError, InvalidInputError)


def test_outputs_come_from_the_metadata_when_the_config_is_restricted():
    http = {"name": "embed", "outputs": [{"name": "EMBEDDING"}, {"name": "SERVED_BY"}]}
    assert output_names(http) == ["EMBEDDING", "SERVED_BY"]
    grpc = service_pb2.ModelMetadataResponse(
        name="embed", outputs=[service_pb2.ModelMetadataResponse.TensorMetadata(name="EMBEDDING")])
    assert output_names(grpc) == ["EMBEDDING"]
    assert output_names(service_pb2.ModelConfigResponse(config=embed_config())) == [
        "EMBEDDING", "SERVED_BY", "TOKENS", "TRUNCATED_TOKENS", "WINDOWS"]
