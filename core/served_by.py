"""What served a row: the SERVED_BY value, written once in the SDK (tmr_client.served_by).

The router produces it (`str(ServedBy(...))`); the SDK, `tmr degrade` and the tests read
it back with `ServedBy.parse`.
"""

from __future__ import annotations

from tmr_client.served_by import (  # noqa: F401  (re-exported)
    OUTPUT,
    ServedBy,
)
