"""The console behind a real nginx with its default proxy headers (Host rewritten to the
upstream's address, nothing forwarded): sign-in works once the console's public origin is
known, forms from anywhere else are still refused; and forwarded headers from a trusted
proxy make the session cookie secure. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpulease.platform import Platform
from gpulease.services.accounts import users
from gpulease.testing.callers import new_tenant
from gpulease.testing.servers import LiveServer, free_port

PASSWORD = "correct horse battery staple"


def nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if found is None:
        if os.environ.get("GPULEASE_REQUIRE_NGINX"):
            pytest.fail("nginx is required here (Debian package nginx)")
        pytest.skip("nginx is not installed (Debian package nginx; .ci/run installs it)")
    return found


@pytest.fixture
def proxied(platform: Platform, tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    exe = nginx()
    with LiveServer(platform) as live:
        port = free_port()
        root = tmp_path / "nginx"
        (root / "logs").mkdir(parents=True)
        conf = root / "nginx.conf"
        conf.write_text(f"""
daemon off;
master_process off;
pid {root}/nginx.pid;
error_log {root}/logs/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {root}/body;
  proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fastcgi;
  uwsgi_temp_path {root}/uwsgi;
  scgi_temp_path {root}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://127.0.0.1:{live.port}; }}
  }}
}}
""")
        proc = subprocess.Popen([exe, "-p", str(root), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):  # bounded: 10 s
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            else:
                raise RuntimeError("nginx did not answer in 10 s")
            yield live, url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def sign_in(url: str, origin: str) -> httpx.Response:
    return httpx.post(f"{url}/console/login", headers={"Origin": origin},
                      data={"email": "proxied@example.com", "password": PASSWORD})


def test_console_sign_in_behind_nginx_defaults(platform: Platform,
                                               proxied: tuple[LiveServer, str]) -> None:
    live, url = proxied
    tenant = new_tenant(platform, name="proxied")
    users.change_password(platform, tenant.principal, PASSWORD, None)
    # the browser says it is on nginx's address; the app sees the upstream's Host
    platform.settings.public_url = "http://127.0.0.1:1"  # not where the console is
    refused = sign_in(url, url)
    assert refused.status_code == 401 and "GPULEASE_CONSOLE_ORIGINS" in refused.text

    platform.settings.public_url = url  # the console's public address
    done = sign_in(url, url)
    assert done.status_code == 303, done.text
    cookie = done.cookies.get("gpulease_session")
    assert cookie and "secure" not in done.headers["set-cookie"].lower()
    home = httpx.get(f"{url}/console/", cookies={"gpulease_session": cookie})
    assert home.status_code == 200 and "No instances yet" in home.text
    assert sign_in(url, "https://evil.example").status_code == 401

    platform.settings.console_origins = ["https://gpu.example.com"]
    assert sign_in(url, "https://gpu.example.com").status_code == 303
    assert sign_in(url, url).status_code == 401  # only the origins named now

    # a TLS-terminating proxy the app trusts (127.0.0.1) says the browser used https
    secure = httpx.post(f"{live.url}/console/login",
                        headers={"Origin": "https://gpu.example.com",
                                 "X-Forwarded-Proto": "https",
                                 "X-Forwarded-For": "203.0.113.7"},
                        data={"email": "proxied@example.com", "password": PASSWORD})
    assert secure.status_code == 303 and "secure" in secure.headers["set-cookie"].lower()
