"""Silence the chatter of tracing and exporting (tracer notices, transformers' reports)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_export() -> Iterator[None]:
    """Warnings off, and transformers' logging at ERROR when it is loaded: the parity
    checks that follow every export catch the real problems."""
    hf_logging = None
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging
    verbosity = hf_logging.get_verbosity() if hf_logging else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hf_logging:
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if hf_logging:
                hf_logging.set_verbosity(verbosity)
                hf_logging.enable_progress_bar()
