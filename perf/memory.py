"""The server's memory per process as `tmr serve` starts it, warm and after a mixed load of
both families (Locust's ClosedLoop, Bulk and ImageLoop users); `make bench` runs 60 s.

    python -m perf.memory [--seconds 300] [--models embed ...]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from core.families.catalog import catalog
from core.paths import DEFAULT_REPOSITORY
from core.process_memory import Usage, server_memory, total
from perf.locust_run import locust
from perf.subjects import text_model
from server.served_copy import free_port_server
from server.stamp import run_dir

MIXED = ["ClosedLoop", "Bulk", "ImageLoop"]  # perf/locustfile.py's users, a third each


@dataclass(frozen=True)
class MemoryRun:
    warm: dict[str, Usage]
    loaded: dict[str, Usage]
    seconds: float
    served: dict[str, tuple[int, int]]  # request name -> (served, failed)

    def markdown(self) -> str:
        rows = ["| process | processes | RSS MiB warm | RSS MiB after the load | PSS MiB after "
                "the load |", "| --- | ---: | ---: | ---: | ---: |"]
        for name, u in sorted(self.loaded.items(), key=lambda item: -item[1].rss_mib):
            warm = f"{self.warm[name].rss_mib:.0f}" if name in self.warm else "-"
            rows.append(f"| {name} | {u.processes} | {warm} | {u.rss_mib:.0f} | {u.pss_mib:.0f} |")
        warm, loaded = total(self.warm), total(self.loaded)
        load = ", ".join(f"{n} {ok:,} served, {bad:,} failed" for n, (ok, bad) in
                         sorted(self.served.items()))
        return "\n".join([*rows, f"| **total** | {loaded.processes} | {warm.rss_mib:.0f} | "
                          f"{loaded.rss_mib:.0f} | {loaded.pss_mib:.0f} |", "",
                          f"The load: {self.seconds:.0f} s of {', '.join(MIXED)} ({load})."])


def measure(out: Path, seconds: float, models: tuple[str, ...] = (), users: int = 12
            ) -> MemoryRun:
    """The server as `tmr serve` starts it (or `--models`), warm, then after the load."""
    images = ",".join(m.front for m in catalog(DEFAULT_REPOSITORY) if m.front and m.family.name
                      == "image_classification" and (not models or {m.front, m.family.name}
                                                     & set(models)))
    with free_port_server(log_path=out / "triton.log", load_all=False, models=models) as server:
        warm = server_memory(server.pid)
        run = locust(out, f"http://{server.http_url}", MIXED if images else MIXED[:2],
                     seconds=seconds, count=users, name="mixed",
                     env={"TMR_IMAGE_MODELS": images, "TMR_MODEL": text_model().front})
        loaded = server_memory(server.pid)
    return MemoryRun(warm, loaded, seconds,
                     {n: (s.served, s.failures) for n, s in run.stats.items()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--models", nargs="*", default=[], help="fronts or families only")
    args = parser.parse_args()
    text = measure(out := run_dir("memory"), args.seconds, tuple(args.models)).markdown()
    (out / "memory.md").write_text(text + "\n")
    print(text)
