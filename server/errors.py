"""Every error the server-side tooling raises, in one tree; `exit_code` is what `tmr`
exits with (cli/errors.py maps the roots of every layer in one place):

    ServerError              root: the server-side tooling could not do its job (exit 1)
    ├── ServerStartError     the server cannot start
    │   ├── PortInUseError   something listens on one of its ports
    │   ├── ModelLoadError   Triton reported a model that failed to load (named, with why)
    │   └── TraceBackendError  the trace backend (Phoenix) is not installed or did not start
    ├── DistributionError    the Triton binary or a Python stub for this interpreter is missing
    ├── FrontDoorError       nginx is missing, refuses its config, or did not start or stop
    ├── PrometheusError      Prometheus did not start, or answered a query with an error
    └── ReleaseError         a promotion or rollback that did not happen (the old version serves)

A config template with a placeholder given no value raises core.files.TemplateError.
"""

from __future__ import annotations

from pathlib import Path


class ServerError(RuntimeError):
    """Raised when the server-side tooling cannot do its job; `exit_code` is tmr's."""

    exit_code = 1


class ServerStartError(ServerError):
    """Raised when the server cannot start: a port in use, a model that fails to load."""


class PortInUseError(ServerStartError):
    """Raised before start when one of the server's ports is already taken."""


class ModelLoadError(ServerStartError):
    """Raised when Triton reports that a model failed to load; names the model and reason."""

    def __init__(self, failures: dict[str, str], log_path: Path) -> None:
        self.failures = failures
        lines = "; ".join(f"model '{m}': {why}" for m, why in failures.items())
        super().__init__(f"{lines} (full log: {log_path})")


class TraceBackendError(ServerStartError):
    """Raised when `tmr serve --trace` finds no Phoenix in .venv-traces, or it did not start."""


class DistributionError(ServerError):
    """Raised when the Triton binary or a matching Python stub cannot be found."""


class FrontDoorError(ServerError):
    """Raised when nginx is missing, its config is refused, or it did not start or stop."""


class PrometheusError(ServerError):
    """Raised when Prometheus did not start, or answered a query with an error."""


class ReleaseError(ServerError):
    """Raised for a promotion or rollback that did not happen; the old version still serves."""
