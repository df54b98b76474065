"""Which hosts an import may reach: a guard against server-side request forgery through import URLs.

Link-local and cloud metadata addresses are denied by default (a DataVolume URL, or a redirect, pointing at
169.254.169.254 would hand the node's cloud credentials to whoever wrote the manifest). Loopback and private
ranges stay allowed: mirrors inside the cluster are the common case. Allow entries win over deny entries.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from importer.errors import ImportFailed, Reason

DEFAULT_DENY = (
    "169.254.0.0/16",  # IPv4 link-local, incl. the AWS/GCP/Azure/OpenStack metadata service
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "metadata.google.internal",
    "metadata",
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class UrlPolicy:
    """Allow and deny lists of CIDRs and host names."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = DEFAULT_DENY

    @classmethod
    def from_lists(cls, *, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> UrlPolicy:
        """Extra deny entries add to the defaults; they never replace them."""
        return cls(allow=tuple(_clean(allow)), deny=DEFAULT_DENY + tuple(_clean(deny)))

    def check(self, url: str) -> None:
        """Raise URLDenied if the URL's host, or any address it resolves to, is denied."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise ImportFailed(Reason.InvalidArgument, f"unsupported URL {url!r}: only http and https URLs can be imported")
        if _matches(host, [host], self.allow):
            return
        addresses = _resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
        if _matches(host, addresses, self.allow):
            return
        if _matches(host, addresses, self.deny):
            raise ImportFailed(Reason.URLDenied, f"{host} is denied by the import URL policy (link-local and metadata addresses are denied by default)")


def _clean(entries: Iterable[str]) -> list[str]:
    return [e.strip().lower() for item in entries for e in item.split(",") if e.strip()]


def _resolve(host: str, port: int) -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)})
    except socket.gaierror:
        # Unresolvable names fail later as SourceUnreachable, with the resolver's own message.
        return []


def _matches(host: str, addresses: list[str], entries: Iterable[str]) -> bool:
    for entry in entries:
        try:
            network: Network | None = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            network = None
        if network is None:
            if host == entry or host.endswith("." + entry):
                return True
            continue
        for address in addresses:
            try:
                if ipaddress.ip_address(address.split("%")[0]) in network:
                    return True
            except ValueError:
                continue
    return False
