"""Which names the API answers to: a defence against DNS rebinding.

A web page can make a browser resolve a name of the page's own to 127.0.0.1 and send requests to
pacer as though from that name's site; its Host header, and its Origin, then name the page's
host, not pacer's. So a request is answered only when its Host names this service (`HostNames`:
an IP address, localhost, PACER_API__HOST, PACER_API__ALLOWED_HOSTS) and its Origin, if it has
one, names one of those too.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from pacer.config.operation import ApiSettings


@dataclass(frozen=True)
class HostNames:
    """The names a request may give in its Host or Origin: any IP address (no name to rebind),
    ``localhost`` and its subdomains, ``bound`` (PACER_API__HOST) and ``extra``
    (PACER_API__ALLOWED_HOSTS, where ``*`` allows any).

    >>> names = HostNames("127.0.0.1", frozenset({"pacer.internal"}))
    >>> names.allows_host("localhost:9470"), names.allows_host("rebind.evil.example")
    (True, False)
    """

    bound: str
    extra: frozenset[str] = frozenset()

    @classmethod
    def of(cls, api: ApiSettings) -> HostNames:
        return cls(api.host.lower().rstrip("."), api.host_names)

    def allows(self, name: str) -> bool:
        """Whether a host name (no port) is this service's."""
        name = name.lower().rstrip(".")
        if "*" in self.extra or name in self.extra or name == self.bound:
            return True
        if name == "localhost" or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            return False
        return True

    def allows_host(self, header: str) -> bool:
        """Whether a Host header (``name[:port]``, ``[v6]:port``) names this service."""
        name = _host_of(f"//{header}")
        return name is not None and self.allows(name)

    def allows_origin(self, origin: str) -> bool:
        """Whether an Origin header (``scheme://name[:port]``) names this service; ``null``
        (a sandboxed page, a file) never does."""
        name = _host_of(origin) if "://" in origin else None
        return name is not None and self.allows(name)


def _host_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not one
    except ValueError:
        return None
    return parts.hostname or None
