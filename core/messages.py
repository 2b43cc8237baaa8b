"""Triton's error messages, in one table: written once in the SDK (tmr_client.messages).

The Python backend (python_backends.bls, the fronts) and the server side import it from
here; the SDK's errors (tmr_client.errors) read the same table.
"""

from __future__ import annotations

from tmr_client.messages import (  # noqa: F401  (re-exported)
    MARKERS,
    FailureKind,
    degraded_level,
    degraded_refusal,
    kind_of,
    row_ref,
)
