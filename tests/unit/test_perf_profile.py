"""The profiler's pure parts: py-spy's collapsed stacks, /proc CPU times, the report."""

from __future__ import annotations

import os
from collections import Counter

from perf.profile import OTHERS, Profile, cpu_by_group, own_frames, report

RAW = (
    "<module> (model.py:1);execute (python_backends/base.py:40);"
    "_encode (python_backends/embed.py:190);bls_infer (python_backends/bls.py:30);"
    "exec (triton_python_backend_utils.py:9) 30\n"
    "<module> (model.py:1);execute (python_backends/base.py:40);"
    "token_ids (runtime/tokenization.py:108) 10\n"
    "garbage line\n"
)


def test_own_frames_counts_each_project_function_once_per_stack_inclusively() -> None:
    counts = own_frames(RAW)
    assert counts["<all samples>"] == 40
    assert counts["execute (base.py)"] == 40
    assert counts["bls_infer (bls.py)"] == 30
    assert counts["token_ids (tokenization.py)"] == 10
    assert not any("triton_python_backend_utils" in k for k in counts)


def test_cpu_by_group_of_this_process_is_positive_grows_and_leaves_the_machine_the_rest() -> None:
    first = cpu_by_group({"me": [os.getpid()]})
    sum(i * i for i in range(2_000_000))
    then = cpu_by_group({"me": [os.getpid()]})
    assert then["me"] > first["me"] > 0 and then[OTHERS] >= 0


def test_report_divides_cpu_by_requests_per_group() -> None:
    embed = Profile("embed", requests=1000, seconds=10,
                    cpu={"embed": 0.6, "minilm_onnx": 8.0, "tritonserver": 0.5},
                    frames=Counter({"<all samples>": 10, "execute (base.py)": 10}))
    text = report([embed], 16)
    assert "| embed | 0.60 |" in text
    assert "| minilm_onnx | 8.00 |" in text
    assert "| **Triton, all processes** | **9.10** |" in text
    assert "| served infer/s | 100 |" in text
    assert "| `execute (base.py)` | 100% |" in text
