"""The servers in the comparison: the project's Triton (the text model's front) and the peers,
each on free ports, waited for and stopped with the project's one stop sequence. A `Running`
server is its base URL and the perf/locustfile.py settings that ask it. Every peer runs from
its own venv under `.peers/` (`make peers`), its paths on the command line, no project import.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from core.families import TEXT_EMBEDDING
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from core.ports import free_port
from core.versions import artifact_file
from perf.subjects import build_repository, text_model
from server.launcher import http_status, stop_process
from server.served_copy import free_port_server
from server.settings import TRITON_VERSION

PEERS_DIR = PROJECT_ROOT / ".peers"
HERE = Path(__file__).resolve().parent
STOP_TIMEOUT_S = 20.0
BARE = "embed_bare"  # the single-stub fixture of perf/fixtures
LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")  # not for a peer's interpreter
TEXT_IN = TEXT_EMBEDDING.contract.front_inputs[0].name
VECTOR_OUT = TEXT_EMBEDDING.contract.front_outputs[0].name


class PeerStartError(RuntimeError):
    """Raised when a peer is not installed, exits during start, or is not healthy in time."""


@dataclass(frozen=True)
class PeerSpec:
    """How to start one peer and how to ask it."""

    name: str
    label: str
    venv: str  # folder under the peers dir
    argv: Callable[[Path, int], list[str]]  # (peers dir, port) -> command line
    load_env: Callable[[], dict[str, str]]  # how perf/locustfile.py asks it
    env: tuple[tuple[str, str], ...] = ()
    start_timeout_s: float = 60.0
    packages: tuple[str, ...] = ()  # whose installed versions the results record


@dataclass
class Running:
    """A started server: its name and label, where and how to ask it, its versions."""

    name: str
    label: str
    url: str  # http://host:port
    load_env: dict[str, str]  # perf/locustfile.py's TMR_* settings for it
    versions: dict[str, str]
    pid: int  # the server's process, the root of its tree (its memory)


def fastapi_peer(name: str, label: str, script: str) -> PeerSpec:
    """A FastAPI peer: `script` on the served ONNX of the text model's primary encoder (what
    its front runs) and the front's tokenizer.json, asked as the seeds' batcher is."""
    def argv(peers: Path, port: int) -> list[str]:
        model = text_model()
        onnx = artifact_file(DEFAULT_REPOSITORY / model.encoder(model.primary))
        return [str(peers / "fastapi" / "venv" / "bin" / "python"), str(HERE / script),
                "--onnx", str(onnx.resolve()), "--tokenizer",
                str(DEFAULT_REPOSITORY / model.front / "1" / "tokenizer.json"), "--port", str(port)]
    return PeerSpec(name, label, "fastapi", argv, lambda: {"TMR_ENDPOINT": "infer"},
                    packages=("fastapi", "uvicorn", "onnxruntime", "tokenizers", "numpy"))


def infinity_argv(peers: Path, port: int) -> list[str]:
    """infinity-emb v2 with the flags that serve the text model offline (shared/DESIGN.md)."""
    return [str(peers / "infinity" / "venv" / "bin" / "infinity_emb"), "v2",
            "--model-id", str((peers / "infinity" / "model").resolve()),
            "--served-model-name", text_model().base, "--engine", "optimum",
            "--device", "cpu", "--batch-size", "32", "--pooling-method", "mean",
            "--no-vector-disk-cache", "--onnx-do-not-prefer-quantized",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


PEERS: dict[str, PeerSpec] = {spec.name: spec for spec in (
    PeerSpec("infinity", "infinity-emb 0.0.78, ONNX fp32", "infinity", infinity_argv,
             lambda: {"TMR_ENDPOINT": "openai", "TMR_MODEL": text_model().base,
                      "TMR_PATH": "/embeddings"},
             env=(("INFINITY_ANONYMOUS_USAGE_STATS", "0"), ("HF_HUB_OFFLINE", "1")),
             start_timeout_s=300.0, packages=("infinity-emb", "optimum", "onnxruntime",
                                              "transformers", "torch", "numpy")),
    fastapi_peer("batcher", "the seeds' asyncio batcher", "batcher_server.py"),
    fastapi_peer("naive", "naive FastAPI + onnxruntime", "naive_server.py"),
)}


def peer_environment(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """`base` without this venv's Python variables, no user site, plus `extra`."""
    env = {k: v for k, v in base.items() if k not in LEAKY_ENV}
    return {**env, "PYTHONNOUSERSITE": "1", **extra}


def missing_peers(names: list[str], peers: Path) -> list[str]:
    """The named peers whose venv (or infinity's model folder) is not there."""
    missing = [n for n in names if n in PEERS
               and not (peers / PEERS[n].venv / "venv" / "bin" / "python").exists()]
    if "infinity" in names and not (peers / "infinity" / "model" / "model.onnx").exists():
        missing.append("infinity (model folder)")
    return missing


def wait_healthy(name: str, process: subprocess.Popen[bytes], url: str, timeout_s: float,
                 log_path: Path) -> None:
    """Block until GET `url` answers 200; raise PeerStartError with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if http_status(url) == 200:
            return
        time.sleep(0.5)
    what = (f"not healthy after {timeout_s:.0f} s" if time.monotonic() >= deadline
            else f"exited with {process.returncode} during start")
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
    raise PeerStartError(f"{name} {what}; last lines of {log_path}:\n{tail}")


def installed_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """The versions of `packages` as the interpreter `python` sees them."""
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
    out = subprocess.run([str(python), "-c", code, *packages], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


@contextmanager
def peer(spec: PeerSpec, peers: Path, log_path: Path) -> Iterator[Running]:
    """Start `spec` on a free port, wait for GET /health, yield it, stop it."""
    port = free_port()
    env = peer_environment(dict(os.environ), {
        **dict(spec.env), "HF_HOME": str(peers / spec.venv / "hf-home")})
    log: IO[bytes] = log_path.open("wb")
    process = subprocess.Popen(spec.argv(peers, port), stdout=log, stderr=subprocess.STDOUT,
                               env=env, cwd=peers, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(spec.name, process, f"{base}/health", spec.start_timeout_s, log_path)
        python = peers / spec.venv / "venv" / "bin" / "python"
        yield Running(spec.name, spec.label, base, spec.load_env(),
                      installed_versions(python, spec.packages), process.pid)
    finally:
        stop_process(process, signal.SIGTERM, STOP_TIMEOUT_S, log)


@contextmanager
def triton_embed(log_path: Path) -> Iterator[Running]:
    """The project's Triton with the shipped repository on free ports, serving the text family
    as `tmr serve --models` does (front, lane, encoder, health), asked through its front."""
    model = text_model()
    with free_port_server(log_path=log_path, models=(model.family.name,)) as server:
        yield Running("embed", f"`{model.front}` on Triton (this project)",
                      f"http://{server.http_url}", kserve(model.front), triton_versions(),
                      server.pid)


@contextmanager
def triton_bare(log_path: Path) -> Iterator[Running]:
    """The least serving Triton allows here: the `embed_bare` fixture (tokenizer and onnxruntime
    in one Python model, no BLS hop, no second stub) beside the text model it reads."""
    with tempfile.TemporaryDirectory(prefix="tmr-bare-") as tmp:
        repo = build_repository(Path(tmp), [], text_only=True, fixtures=[BARE])
        with free_port_server(repo, log_path) as server:
            yield Running("bare", f"`{BARE}` on Triton: one stub, no BLS hop (the floor)",
                          f"http://{server.http_url}", kserve(BARE), triton_versions(),
                          server.pid)


def triton_versions() -> dict[str, str]:
    return {"tritonserver": TRITON_VERSION,
            **installed_versions(Path(sys.executable), ("onnxruntime", "numpy"))}


def kserve(model: str) -> dict[str, str]:
    return {"TMR_ENDPOINT": "kserve", "TMR_MODEL": model}


def embed_one(url: str, load_env: Mapping[str, str], text: str) -> list[float]:
    """The vector the server at `url` gives for `text`, asked as perf/locustfile.py asks it
    under `load_env`; ValueError for anything but a 200 with a vector."""
    kind, model = load_env.get("TMR_ENDPOINT", "kserve"), load_env.get("TMR_MODEL", "")
    path = load_env.get("TMR_PATH") or {"kserve": f"/v2/models/{model}/infer",
                                        "openai": "/v1/embeddings", "infer": "/infer"}[kind]
    body = {"openai": {"model": model, "input": [text]}, "infer": {"text": text}}.get(kind) or {
        "inputs": [{"name": TEXT_IN, "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}
    headers = {"Content-Type": "application/json", **json.loads(load_env.get("TMR_HEADERS", "{}"))}
    request = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        vector = (answer["data"][0]["embedding"] if kind == "openai" else answer["result"]
                  if kind == "infer" else
                  next(o["data"] for o in answer["outputs"] if o["name"] == VECTOR_OUT))
    except (OSError, ValueError, KeyError, IndexError, TypeError, StopIteration) as err:
        raise ValueError(f"{url}{path} answered {text!r} with {err!r}") from err
    if not (isinstance(vector, list) and vector):
        raise ValueError(f"{url}{path} answered {text!r} without a vector")
    return vector
