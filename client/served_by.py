"""What served a row: the SERVED_BY output of every front model, as a value.

The router produces it (`str(ServedBy(...))`), the SDK, `tmr degrade` and the tests
read it back with `ServedBy.parse`; nobody else formats or splits the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tmr_client.contract import SERVED_BY

OUTPUT = SERVED_BY  # the front models' output tensor (tmr_client.contract)
_FORM = re.compile(r"^(?P<model>[^:]+):(?P<version>[^:]+):(?P<precision>[^:]+):L(?P<level>\d+)"
                   r"(?P<cached>:cached)?$")


@dataclass(frozen=True)
class ServedBy:
    """The encoder, its version and precision, the ladder level, and whether the row came
    from the response cache. Text form: `<model>:<version>:<precision>:L<level>[:cached]`."""

    model: str
    version: str  # "?" until the router has read the served version
    precision: str
    level: int
    cached: bool = False

    def __str__(self) -> str:
        text = f"{self.model}:{self.version}:{self.precision}:L{self.level}"
        return text + (":cached" if self.cached else "")

    def from_cache(self) -> ServedBy:
        return replace(self, cached=True)

    @classmethod
    def parse(cls, text: str) -> ServedBy:
        """The inverse of str(); ValueError for anything else."""
        match = _FORM.match(text)
        if match is None:
            raise ValueError(f"not a SERVED_BY value: {text!r}")
        return cls(match["model"], match["version"], match["precision"], int(match["level"]),
                   bool(match["cached"]))
