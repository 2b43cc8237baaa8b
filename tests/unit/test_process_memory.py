"""core/process_memory.py: the server's memory per model from /proc, on a /proc of our own
making (a server, its stubs and a stranger), and on this very process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.process_memory import (
    SERVER,
    Usage,
    memory_kb,
    server_memory,
    stub_processes,
    summary,
    total,
    tree_memory,
)
from perf.memory import MemoryRun

STUB = "/x/.triton/backends/python/triton_python_backend_stub"


def process(proc: Path, pid: int, ppid: int, argv: list[str], rss_kb: int, pss_kb: int) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (folder / "stat").write_text(f"{pid} ({Path(argv[0]).name}) S {ppid} 1 1 0 -1\n")
    (folder / "status").write_text(f"Name:\tx\nVmRSS:\t{rss_kb} kB\nThreads:\t4\n")
    (folder / "smaps_rollup").write_text(f"Rss:\t{rss_kb} kB\nPss:\t{pss_kb} kB\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    process(root, 100, 1, ["/bin/tritonserver", "--model-repository=/r"], 80 * 1024, 60 * 1024)
    for pid, model in ((101, "embed"), (102, "embed"), (103, "minilm_onnx")):
        process(root, pid, 100, [STUB, f"/r/{model}/1/model.py", "shm"], 60 * 1024, 40 * 1024)
    process(root, 104, 101, ["/bin/sh"], 1024, 1024)  # a stub's own child: not a stub
    # another server's stub
    process(root, 200, 1, [STUB, "/other/embed/1/model.py"], 50 * 1024, 50 * 1024)
    return root


def test_the_stubs_of_a_server_by_model(proc: Path) -> None:
    assert stub_processes(100, proc) == {"embed": [101, 102], "minilm_onnx": [103]}


def test_the_table_sums_each_models_stubs_and_the_server(proc: Path) -> None:
    table = server_memory(100, proc)
    assert list(table) == ["embed", "minilm_onnx", SERVER]
    assert table["embed"] == Usage(2, 120.0, 80.0)
    assert total(table) == Usage(4, 260.0, 180.0)
    assert summary(table) == ("260 MiB RSS (PSS 180) in 4 processes: embed 120, "
                              "tritonserver 80, minilm_onnx 60")


def test_a_process_tree_counts_every_descendant(proc: Path) -> None:
    assert tree_memory(100, proc) == Usage(5, 261.0, 181.0)
    assert tree_memory(999, proc) == Usage(0, 0.0, 0.0)  # gone


def test_a_gone_process_reads_as_zero(proc: Path) -> None:
    assert memory_kb(12345, proc) == (0, 0)


def test_this_process_reads_as_itself() -> None:
    rss, pss = memory_kb(os.getpid())
    assert rss > 10 * 1024 and 0 < pss <= rss


def test_the_memory_table_of_a_run_is_warm_then_loaded_largest_first() -> None:
    run = MemoryRun({"embed": Usage(2, 120, 80), SERVER: Usage(1, 60, 50)},
                    {"embed": Usage(2, 130, 90), SERVER: Usage(1, 70, 55),
                     "minilm_int8": Usage(1, 100, 80)}, 300, {"w p0": (1000, 2)})
    lines = run.markdown().splitlines()
    assert lines[2] == "| embed | 2 | 120 | 130 | 90 |"
    assert lines[3] == "| minilm_int8 | 1 | - | 100 | 80 |"  # loaded under the load
    assert lines[5] == "| **total** | 4 | 180 | 300 | 225 |"
    assert lines[-1] == "The load: 300 s of ClosedLoop, Bulk, ImageLoop (w p0 1,000 served, " \
                        "2 failed)."
