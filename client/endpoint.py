"""Where a client connects: the URL it is given, and the protocol it speaks there.

    Client()                              TMR_URL, else localhost:8000 (HTTP)
    Client("localhost:8000")              HTTP: any port but 8001
    Client("localhost:8001")              gRPC: 8001 is Triton's gRPC port
    Client("http://host:8000")            HTTP; "https://host" is HTTP over TLS (port 443)
    Client("grpc://host:8001")            gRPC; "grpcs://host" is gRPC over TLS (port 443)
    Client("host:9000", protocol="grpc")  an explicit `protocol=` always wins

Without a port, a URL with a scheme takes the scheme's (http 80, https and grpcs 443,
grpc 8001) and one without takes the protocol's (8000, 8001). An HTTP URL may carry a base
path (`https://host/triton`); a gRPC one may not. Anything else is an `InvalidInputError`
(a `ValueError`) naming the URL, before any connection is tried.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from tmr_client.contract import GRPC_PORT, HTTP_PORT
from tmr_client.errors import InvalidInputError

Protocol = Literal["http", "grpc"]
URL_ENV = "TMR_URL"  # the server a client talks to when it is given no URL
DEFAULT_PORTS: dict[str, int] = {"http": HTTP_PORT, "grpc": GRPC_PORT}
# scheme -> (protocol, TLS, port when the URL names none)
SCHEMES: dict[str, tuple[Protocol, bool, int]] = {
    "http": ("http", False, 80),
    "https": ("http", True, 443),
    "grpc": ("grpc", False, GRPC_PORT),
    "grpcs": ("grpc", True, 443),
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class Endpoint:
    """A server address as tritonclient takes it (`host:port[/path]`, no scheme), the
    protocol and whether it is TLS."""

    address: str
    protocol: Protocol
    ssl: bool = False

    @property
    def url(self) -> str:
        """The address with its scheme, as messages name it."""
        return f"{self.protocol}{'s' if self.ssl else ''}://{self.address}"


def default_url(protocol: Protocol, host: str = "localhost") -> str:
    return f"{host}:{DEFAULT_PORTS[protocol]}"


def endpoint(url: str | None = None, protocol: str | None = None,
             environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint of `url` (None: TMR_URL, else the default), by the rules above."""
    if protocol is not None and protocol not in DEFAULT_PORTS:
        raise InvalidInputError(f"unknown protocol {protocol!r}; expected 'http' or 'grpc'")
    env = os.environ if environ is None else environ
    url = url or env.get(URL_ENV) or default_url(protocol or "http")  # type: ignore[arg-type]
    if not isinstance(url, str):
        raise InvalidInputError(f"url must be a str such as 'localhost:8000', not {url!r}")
    scheme = _SCHEME.match(url)
    named = scheme[1].lower() if scheme else None
    if named is not None and named not in SCHEMES:
        raise InvalidInputError(f"url {url!r} has the scheme {named!r}; expected one of "
                                f"{', '.join(SCHEMES)} or none")
    parts = urlsplit("//" + url[scheme.end():] if scheme else "//" + url)
    try:
        port = parts.port
    except ValueError as err:
        raise InvalidInputError(f"url {url!r} has a bad port: {err}") from err
    if not parts.hostname or parts.query or parts.fragment:
        raise InvalidInputError(f"url {url!r} is not a server address such as "
                                "'localhost:8000' or 'https://host'")
    by_scheme = SCHEMES.get(named or "")
    chosen: Protocol = protocol or (by_scheme[0] if by_scheme else  # type: ignore[assignment]
                                    "grpc" if port == DEFAULT_PORTS["grpc"] else "http")
    path = parts.path.rstrip("/")
    if path and chosen == "grpc":
        raise InvalidInputError(f"url {url!r} has a path; a gRPC server address has none")
    if port is None:
        port = by_scheme[2] if by_scheme else DEFAULT_PORTS[chosen]
        netloc = f"{parts.netloc}:{port}"
    else:
        netloc = parts.netloc
    return Endpoint(netloc + path, chosen, bool(by_scheme and by_scheme[1]))
