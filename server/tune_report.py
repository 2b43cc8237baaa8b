"""`host_profile.md`: a tuning's record (core/tune_record.py) as markdown, for people.

The host, then per front its verdict, objective and candidates table, the memory of each
server, and the fidelity gates. A figure that does not exist is written as what it is (a
ratio against a zero score is "-", a loss is "slower"), never inf or NaN.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.tune_record import FrontChoice, TuneRecord

TABLE_HEAD = ["| candidate | goodput (median) | rounds | vs reviewed | noise | RSS MB | verdict |",
              "| --- | ---: | --- | ---: | ---: | ---: | --- |"]


def report(record: TuneRecord) -> str:
    """The whole report."""
    host = record.host
    lines = [f"# Host profile ({record.written_at}, `tmr tune --{record.mode}`, "
             f"{record.took_s:.0f} s)", "",
             f"Host: {host.model}, {host.cores} usable cores (affinity {record.affinity}, "
             f"cgroup quota {record.cgroup_quota or 'none'}), flags "
             f"{' '.join(host.flags) or 'none'}; precision rule: {host.precision}.",
             "Served versions: " + ", ".join(f"{m} v{n}" for m, n in record.versions.items())
             + ".",
             "Goodput: requests/s at the p99 objective of each front (below), one new text a "
             "request, interpolated between the concurrencies around it; 0 when even one "
             "client's p99 passed it. RSS: the whole server after a bulk round (budget "
             f"{record.memory_budget_mb:.0f} MB, a ceiling).", ""]
    for front, choice in record.fronts.items():
        lines += front_section(front, choice)
    lines += memory_section(record.memory_mib)
    if "amx_bf16" in host.flags:
        lines += ["On this AMX host Triton's native OpenVINO backend (the GPU image) runs bf16 "
                  "whatever a config says (docs/gpu_hosts.md): the bf16 gate below is what "
                  "holds for it.", ""]
    for key, gate in record.gates.items():
        figures = ", ".join(f"{k} {val:.5f}" for k, val in gate["figures"].items())
        lines.append(f"Gate {key} vs eager PyTorch: {figures}: "
                     f"{'FAIL: ' + gate['failure'] if gate['failure'] else 'pass'}")
    return "\n".join(lines)


def front_section(front: str, choice: FrontChoice) -> list[str]:
    verdict = choice.verdict.value
    lines = [f"## {front}: serves {choice.served}", "",
             f"{verdict[0].upper()}{verdict[1:]}: {choice.reason}.", "",
             f"Objective: p99 <= {choice.objective_p99_ms:.3g} ms ({choice.objective_source}).",
             "", *TABLE_HEAD]
    for c in choice.candidates:
        ratio = 1.0 if c.reviewed else choice.ratios.get(c.name)
        noise = choice.noise.get(c.name)
        said = "serves" if c.name == choice.served else choice.refused.get(c.name, "")
        lines.append(f"| {c.name} | {c.goodput:.0f} | "
                     f"{', '.join(f'{g:.0f}' for g in c.goodputs) or 'none'} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                     f"{'' if noise is None else f'+-{noise:.0%}'} | {c.rss_mb:.0f} | {said} |")
    return [*lines, ""]


def memory_section(memory: Mapping[str, Mapping[str, float]]) -> list[str]:
    tables = list(memory.values())
    lines = ["RSS MiB by process, as each server held it after its rounds:", "",
             "| process | " + " | ".join(memory) + " |", "| --- |" + " ---: |" * len(memory)]
    for name in sorted(set().union(*tables), key=lambda n: -max(t.get(n, 0) for t in tables)):
        lines.append(f"| {name} | " + " | ".join(f"{t.get(name, 0):.0f}" for t in tables) + " |")
    return [*lines, "| **total** | " + " | ".join(f"{sum(t.values()):.0f}" for t in tables)
            + " |", ""]
