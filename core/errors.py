"""The root of every error `core` raises; each class says the exit code `tmr` ends with
(cli/errors.py maps the roots of every layer in one place):

    CoreError              something core was asked to do cannot be done (exit 1)
    ├── ConfigError        a config parameter is present but cannot be used (exit 2)
    ├── TemplateError      a template names a placeholder given no value (exit 1)
    ├── VersionError       a version operation refused before anything changed (exit 1)
    ├── ProfileError       a host profile that must not be served (exit 2)
    ├── UnknownModelError  a name that is no model of the repository (exit 2)
    ├── UnknownFamilyError a name that is no model family (exit 2)
    ├── SelectionError     `tmr serve --models` names no front or family (exit 2)
    └── RolloutError       a rollout request refused before anything changes (exit 1)

Each is defined beside the code that raises it and keeps its builtin base (ValueError,
KeyError, RuntimeError) for callers that catch those.
"""

from __future__ import annotations


class CoreError(Exception):
    """Raised by core for a request it cannot carry out; `exit_code` is tmr's exit code."""

    exit_code = 1


class UnknownFamilyError(CoreError, KeyError):
    """Raised for a family name that is not one of core.families.FAMILIES."""

    exit_code = 2
