"""The peer comparison's pure parts, how it asks each server and the peers' pins and isolation."""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from perf import locust_run
from perf.peers import ort_text, servers
from perf.peers.ort_text import load_tokenizer
from perf.peers.run import PeersResult, ServerResult, check_servers, cosine
from perf.stats import best_of, cell, goodput, render_table, round_orders
from server.goodput import LoadPoint, percentile, summarize
from tests.conftest import MINILM_SOURCE

PEERS_SRC = Path(servers.__file__).parent
PEER_SIDE = ("batcher_server.py", "naive_server.py", "ort_text.py")
PEER_IMPORTS = {"fastapi", "uvicorn", "pydantic", "onnxruntime", "tokenizers", "numpy",
                "ort_text", "locust"}


def point(c: int, rps: float, p99: float, errors: int = 0, p50: float | None = None) -> LoadPoint:
    p50 = p99 / 2 if p50 is None else p50
    return LoadPoint(c, 6.0, int(rps * 6), errors, rps, p50, p99 * 0.9, p99,
                     {"HTTP 503": errors} if errors else {})


# --- stats -------------------------------------------------------------------------------

@pytest.mark.parametrize("q", [0, 1, 50, 95, 99, 100])
def test_percentile_interpolates_like_numpy(q: float) -> None:
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 30.0]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_nan_and_q_must_be_a_percentage() -> None:
    assert math.isnan(percentile([], 50))
    assert percentile([4.0], 99) == 4.0
    with pytest.raises(ValueError, match=r"outside 0\.\.100"):
        percentile([1.0], 101)


def test_summarize_counts_answers_as_throughput_and_errors_apart() -> None:
    got = summarize(4, [10.0, 20.0, 30.0, 40.0], Counter({"HTTP 503": 2, "timeout": 1}), 2.0)
    assert (got.requests, got.errors, got.rps) == (4, 3, 2.0)
    assert got.p50_ms == 25.0 and got.error_kinds == {"HTTP 503": 2, "timeout": 1}
    with pytest.raises(ValueError, match="positive duration"):
        summarize(1, [], Counter(), 0)


def test_best_of_keeps_the_whole_point_of_the_faster_round_per_level() -> None:
    first = [point(1, 90, 20), point(4, 150, 50)]
    second = [point(4, 160, 70), point(1, 80, 10)]
    assert best_of([first, second]) == [first[0], second[0]]
    assert best_of([]) == []


def test_goodput_is_the_fastest_error_free_point_within_the_p99_budget() -> None:
    points = [point(1, 90, 17), point(4, 185, 40), point(8, 230, 59.9, errors=1),
              point(16, 246, 134)]
    assert goodput(points, 60) == points[1]
    assert goodput(points, 10) is None


def test_round_two_visits_the_servers_in_reverse() -> None:
    assert round_orders(["embed", "infinity", "naive"], 3) == [
        ["embed", "infinity", "naive"], ["naive", "infinity", "embed"],
        ["embed", "infinity", "naive"]]


def test_table_shows_rps_and_p99_per_level_the_c1_p50_the_c16_spread_and_goodput() -> None:
    rows = [("embed", [point(1, 91.4, 17.2, p50=10.5), point(4, 185, 40),
                       point(16, 246, 134, p50=67)]),
            ("naive", [point(1, 118, 70, errors=2)])]
    lines = render_table(rows, [1, 4, 16], 60).splitlines()
    assert lines[0] == ("| server | c1 | c4 | c16 | p50 c1 (ms) | p99/p50 c16 | "
                        "goodput at p99 <= 60 ms |")
    assert lines[2] == "| embed | 91 / 17 | 185 / 40 | 246 / 134 | 10.5 | 2.0 | 185 (c4) |"
    assert lines[3] == "| naive | 118 / 70 (2 err) | - | - | 35.0 | - | none |"


# --- how each server is asked ------------------------------------------------------------

VECTOR = [0.05] * 384
ANSWERS = {
    "kserve": {"outputs": [{"name": "SERVED_BY", "data": ["x"]},
                           {"name": "EMBEDDING", "datatype": "FP32", "shape": [1, 384],
                            "data": VECTOR}]},
    "openai": {"object": "list", "data": [{"embedding": VECTOR, "index": 0}]},
    "infer": {"result": VECTOR},
}


@pytest.fixture
def stub() -> Iterator[tuple[str, list[tuple[str, dict, dict]]]]:
    """An HTTP server answering POSTs with ANSWERS[first path word] (`/fail` a 503); the
    requests it saw as (path, headers, body)."""
    seen: list[tuple[str, dict, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            kind = {"v2": "kserve", "v1": "openai", "embeddings": "openai"}.get(
                self.path.split("/")[1], self.path.split("/")[1])
            raw = json.dumps(ANSWERS.get(kind, {})).encode()
            self.send_response(503 if kind == "fail" else 200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_the_probe_asks_each_server_as_the_locustfile_does(stub) -> None:
    url, seen = stub
    assert servers.embed_one(url, servers.kserve("embed"), "hi") == VECTOR
    assert servers.embed_one(url, servers.PEERS["naive"].load_env(), "hi") == VECTOR
    infinity = {**servers.PEERS["infinity"].load_env(), "TMR_MODEL": "minilm"}
    assert servers.embed_one(url, infinity, "hi") == VECTOR
    door = {"TMR_ENDPOINT": "openai", "TMR_MODEL": "m", "TMR_HEADERS": '{"x-api-key": "k"}'}
    assert servers.embed_one(url, door, "hi") == VECTOR
    assert [(path, body) for path, _, body in seen] == [
        ("/v2/models/embed/infer", {"inputs": [{"name": "TEXT", "datatype": "BYTES",
                                                "shape": [1, 1], "data": ["hi"]}]}),
        ("/infer", {"text": "hi"}),
        ("/embeddings", {"model": "minilm", "input": ["hi"]}),
        ("/v1/embeddings", {"model": "m", "input": ["hi"]})]
    assert seen[-1][1]["x-api-key"] == "k"


def test_a_probe_without_a_384_d_vector_is_an_error(stub) -> None:
    url, _ = stub
    with pytest.raises(ValueError, match="503"):
        servers.embed_one(url, {"TMR_ENDPOINT": "infer", "TMR_PATH": "/fail"}, "hi")
    with pytest.raises(ValueError, match="KeyError"):  # a KServe answer to an OpenAI ask
        servers.embed_one(url, {"TMR_ENDPOINT": "openai", "TMR_PATH": "/v2/x"}, "hi")
    with pytest.raises(ValueError):
        servers.embed_one("http://127.0.0.1:1", servers.kserve("embed"), "hi")


# --- servers, results --------------------------------------------------------------------

def test_peer_environment_drops_this_venvs_python_settings() -> None:
    env = servers.peer_environment({"PYTHONPATH": "/p", "VIRTUAL_ENV": "/v", "HOME": "/h"},
                                   {"HF_HUB_OFFLINE": "1"})
    assert env == {"HOME": "/h", "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}


def test_infinity_starts_with_the_settings_that_run_offline_here() -> None:
    spec = servers.PEERS["infinity"]
    argv = spec.argv(Path("/peers"), 7997)
    for flag in ("--no-vector-disk-cache", "--onnx-do-not-prefer-quantized"):
        assert flag in argv
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--engine"] == "optimum" and pairs["--pooling-method"] == "mean"
    assert pairs["--batch-size"] == "32" and pairs["--model-id"] == "/peers/infinity/model"
    assert dict(spec.env) == {"INFINITY_ANONYMOUS_USAGE_STATS": "0", "HF_HUB_OFFLINE": "1"}


def test_missing_peers_name_what_make_peers_has_not_installed(tmp_path: Path) -> None:
    assert servers.missing_peers(["embed", "naive", "infinity"], tmp_path) == [
        "naive", "infinity", "infinity (model folder)"]


def test_cosine_of_vectors() -> None:
    assert cosine([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 3.0]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="length 2 and 1"):
        cosine([1.0, 0.0], [1.0])


def test_results_serialise_to_json_and_report_the_table() -> None:
    best = [point(1, 90, 17), point(16, 240, 130)]
    result = PeersResult([ServerResult("embed", "embed on Triton", {"tritonserver": "2.51.0"},
                                       1.0, [best, best], best)], [1, 16], 6.0, 2, 60.0,
                         "2026-01-01 00:00:00", "/tmp/x", (0.2, 1.9))
    assert json.loads(json.dumps(asdict(result)))["servers"][0]["best"][0]["rps"] == 90
    assert result.table() in result.report()
    assert "- embed: 1.0000; tritonserver 2.51.0" in result.report()
    assert "before the servers started 0.2, at the end 1.9" in result.report()


# --- the peers' side: pins, isolation, padding --------------------------------------------

@pytest.mark.parametrize("path", [PEERS_SRC / "requirements-infinity.txt",
                                  PEERS_SRC / "requirements-fastapi.txt",
                                  PEERS_SRC.parent / "requirements-locust.txt"])
def test_every_pin_of_a_tool_venv_is_exact(path: Path) -> None:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    bad = [ln for ln in lines if not re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,\-]+\])?==\S+", ln)]
    assert lines and bad == []


def test_infinity_pins_are_the_ones_that_run_offline_and_bring_no_torch() -> None:
    pins = dict(ln.split("==") for ln in
                (PEERS_SRC / "requirements-infinity.txt").read_text().splitlines()
                if ln and not ln.startswith("#"))
    assert pins["infinity-emb[server,optimum]"] == "0.0.78"
    assert pins["optimum[onnxruntime]"] == "1.24.0"
    assert (pins["transformers"], pins["pyarrow"]) == ("4.48.3", "23.0.1")
    assert pins["numpy"].startswith("1.")
    assert not any(name.startswith("torch") for name in pins)


@pytest.mark.parametrize("script", PEER_SIDE)
def test_peer_side_code_imports_no_project_module(script: str) -> None:
    tree = ast.parse((PEERS_SRC / script).read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    foreign = roots - PEER_IMPORTS - set(sys.stdlib_module_names) - {"__future__"}
    assert foreign == set()


def test_the_fastapi_peers_feed_the_text_familys_encoder_tensors() -> None:
    from core.families import TEXT_EMBEDDING

    names = (*(t.name for t in TEXT_EMBEDDING.contract.encoder_inputs),
             TEXT_EMBEDDING.contract.encoder_output.name)
    assert names == (ort_text.INPUT_IDS, ort_text.ATTENTION_MASK, ort_text.OUTPUT)


def test_the_fastapi_peers_pad_each_batch_to_its_longest_text() -> None:
    tokenizer = load_tokenizer(str(MINILM_SOURCE / "tokenizer.json"))
    short, long = tokenizer.encode_batch(["hi", "a somewhat longer sentence than that"])
    assert len(short.ids) == len(long.ids) == sum(long.attention_mask) < 128
    assert sum(short.attention_mask) == 3  # [CLS] hi [SEP]


def test_unknown_or_uninstalled_servers_are_refused_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(servers.PeerStartError, match=r"unknown servers \['tei'\]"):
        check_servers(["embed", "tei"], tmp_path)
    with pytest.raises(servers.PeerStartError, match=r"\['batcher'\]; run `make peers`"):
        check_servers(["embed", "batcher"], tmp_path)
    monkeypatch.setattr(locust_run, "LOCUST", tmp_path / "locust")
    with pytest.raises(servers.PeerStartError, match="run `make locust`"):
        check_servers(["embed"], tmp_path)
    (tmp_path / "locust").touch()
    check_servers(["embed"], tmp_path)


# --- other work on the machine (its reading: test_cpu_share.py) ----------------------

def test_a_point_measured_while_other_work_ran_is_marked() -> None:
    noisy = LoadPoint(1, 6.0, 500, 0, 83.0, 10.0, 15.0, 20.0, foreign_cpu=0.4)
    assert cell(noisy) == "83 / 20 *"
    assert cell(LoadPoint(1, 6.0, 500, 0, 83.0, 10.0, 15.0, 20.0, foreign_cpu=0.02)) == "83 / 20"
