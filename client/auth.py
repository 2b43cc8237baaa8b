"""The keys a client sends: its API key to the front door, the admin key to restricted APIs.

    API key     header `x-api-key` (gRPC metadata too); from the caller, else TMR_API_KEY,
                else none (a server without the front door needs none)
    admin key   HTTP header `admin-key`, gRPC metadata `triton-grpc-protocol-admin-key`;
                from the caller, else TMR_ADMIN_KEY, else none: the SDK never presents
                an admin credential it was not given (the dev server's own key lives
                with the server, server/settings.py)

An empty string means "send none". Every call returns a fresh dict: tritonclient's HTTP
client adds its own headers to the dict it is given.
"""

from __future__ import annotations

import os

API_KEY_HEADER = "x-api-key"  # the front door's client key, HTTP header and gRPC metadata
API_KEY_ENV = "TMR_API_KEY"  # the one key a client (the SDK, `tmr`) sends
# Triton's restricted admin APIs want this header (HTTP); its gRPC frontend on 2.51 wants it
# under a prefix (measured: "expecting header 'triton-grpc-protocol-admin-key'").
ADMIN_KEY_HEADER = "admin-key"
GRPC_ADMIN_KEY_HEADER = f"triton-grpc-protocol-{ADMIN_KEY_HEADER}"
ADMIN_KEY_ENV = "TMR_ADMIN_KEY"


def admin_key_header(protocol: str) -> str:
    """The header (HTTP) or metadata key (gRPC) that carries the admin key."""
    return GRPC_ADMIN_KEY_HEADER if protocol == "grpc" else ADMIN_KEY_HEADER


def resolve_api_key(api_key: str | None = None) -> str:
    return os.environ.get(API_KEY_ENV, "") if api_key is None else api_key


def resolve_admin_key(admin_key: str | None = None) -> str:
    """The caller's admin key, else TMR_ADMIN_KEY, else "" (none is sent)."""
    return os.environ.get(ADMIN_KEY_ENV, "") if admin_key is None else admin_key


def key_headers(protocol: str = "http", *, api_key: str | None = None, admin: bool = False,
                admin_key: str | None = None) -> dict[str, str]:
    """Headers for one call: the API key if any, plus the admin key when `admin`."""
    headers = {}
    if key := resolve_api_key(api_key):
        headers[API_KEY_HEADER] = key
    if admin and (key := resolve_admin_key(admin_key)):
        headers[admin_key_header(protocol)] = key
    return headers
