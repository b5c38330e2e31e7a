"""The egress guard: every URL the platform calls on a tenant's behalf (webhooks now, backup
targets later) must lead to a public address. A tenant's URL pointing at loopback, a
private or link-local network (169.254.169.254, the clouds' metadata service, included),
multicast, anything reserved or not globally routed, or the provider's own networks
(GPULEASE_EGRESS_DENY) would let a stranger reach into the provider's network with the
platform's hands (server-side request forgery). The operator may allow networks or host
names (GPULEASE_EGRESS_ALLOW). The name is resolved when the URL is registered and again at
every send, and the request goes to the address just checked (a name that changes its
answer in between, DNS rebinding, gains nothing); redirects are never followed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpulease.domain.errors import InvalidInput
from gpulease.settings import Settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Target:
    """A URL that passed the guard, and the address to connect to."""

    url: str
    host: str
    port: int
    scheme: str
    address: str | None  # None: the operator allowed the host by name

    def pinned_url(self) -> str:
        """The URL with the checked address in place of the name."""
        if self.address is None:
            return self.url
        parts = urlsplit(self.url)
        ip = ipaddress.ip_address(self.address)
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        netloc = f"{host}:{parts.port}" if parts.port else host
        return parts._replace(netloc=netloc).geturl()


def _why_refused(ip: Address, deny: list[ipaddress.IPv4Network | ipaddress.IPv6Network]
                 ) -> str | None:
    if any(ip in net for net in deny):
        return "one of the provider's own networks"
    for test, kind in ((ip.is_loopback, "a loopback"), (ip.is_link_local, "a link-local"),
                       (ip.is_multicast, "a multicast"), (ip.is_unspecified, "an unspecified"),
                       (ip.is_private, "a private"), (ip.is_reserved, "a reserved")):
        if test:
            return f"{kind} address"
    if not ip.is_global:
        return "not a public address"
    return None


def _networks(entries: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for entry in entries:
        try:
            nets.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue  # a host name: matched by name
    return nets


def check(settings: Settings, url: str, field: str = "url",
          resolve: Resolver | None = None) -> Target:
    """The URL's target if the platform may call it; InvalidInput saying why not."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidInput(field, "The URL starts with https:// (or http://) and names a host.")
    if parts.username or parts.password:
        raise InvalidInput(field, "Leave credentials out of the URL; the platform signs its "
                           "requests instead.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput(field, "The URL's port is not a number from 1 to 65535.") from None
    host = parts.hostname.lower().rstrip(".")
    allowed_names = {e.strip().lower().rstrip(".") for e in settings.egress_allow}
    target = Target(url.strip(), host, port, parts.scheme, None)
    if host in allowed_names:
        return target
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            answers = (resolve or _resolve)(host, port)
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in answers]
        except (OSError, UnicodeError, ValueError):
            addresses = []
        if not addresses:
            raise InvalidInput(field, "{host} does not resolve; check the name.",
                               host=host) from None
    allow, deny = _networks(settings.egress_allow), _networks(settings.egress_deny)
    for ip in addresses:  # every answer must pass: the connection may take any of them
        if any(ip in net for net in allow):
            continue
        why = _why_refused(ip, deny)
        if why is not None:
            raise InvalidInput(field, "{host} leads to {ip}, {why}; the platform calls only "
                               "public addresses on a tenant's behalf (an operator may allow "
                               "more with GPULEASE_EGRESS_ALLOW).", host=host, ip=ip, why=why)
    return Target(url.strip(), host, port, parts.scheme, str(addresses[0]))
