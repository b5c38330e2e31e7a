"""A typed HTTP client for the gpulease API (used by the CLI and the tests)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

import httpx

from gpulease.schemas import (
    CatalogView,
    CredentialsView,
    EnrollRequest,
    ImageCreate,
    ImageView,
    InstanceView,
    NodeView,
    OrderRequest,
    Page,
    TenantCreated,
    TokenCreated,
    TokenView,
    UserView,
)
from gpulease.schemas.fleet import NodeFilter


class ApiError(Exception):
    def __init__(self, status: int, title: str, detail: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status, self.title, self.detail, self.body = status, title, detail, body


class Client:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None,
                 language: str | None = None) -> None:
        """`language` (`zh-CN`, `en`): the one the server's refusals are said in."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if language:
            headers["Accept-Language"] = language
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, raw: bool = False, **kw: Any) -> Any:
        r = self._send(method, path, **kw)
        if raw:
            return r.content
        return r.json() if r.content else None

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """The answer, or ApiError for an unreachable API or a 4xx/5xx."""
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise ApiError(0, "Unreachable", f"cannot reach {self._http.base_url}: {exc}. "
                           "Is `gpulease up` running, and is GPULEASE_URL right?", {}) from None
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {"detail": r.text}
            raise ApiError(r.status_code, body.get("title", "Error"),
                           body.get("detail", r.text), body)
        return r

    # catalog
    def catalog(self) -> CatalogView:
        return CatalogView.model_validate(self._call("GET", "/api/v1/catalog"))

    def every(self, path: str) -> list[Any]:
        """Every item of a list (`/tenants?status=active`), asked a page at a time."""
        where, _, query = path.partition("?")
        items: list[Any] = []
        while True:  # httpx's params replace a query in the path: merged here
            params = httpx.QueryParams(query).merge({"limit": 500, "offset": len(items)})
            page = self._call("GET", f"/api/v1{where}", params=params)
            items += page["items"]
            if not page["items"] or len(items) >= page["total"]:
                return items

    def images(self) -> list[ImageView]:
        return [ImageView.model_validate(i) for i in self.every("/images")]

    def add_image(self, body: ImageCreate) -> ImageView:
        return ImageView.model_validate(
            self._call("POST", "/api/v1/images", json=body.model_dump(mode="json")))

    def remove_image(self, image_id: str) -> None:
        self._call_empty("DELETE", f"/api/v1/images/{image_id}")

    def _call_empty(self, method: str, path: str) -> None:
        try:
            r = self._http.request(method, path)
        except httpx.TransportError as exc:
            raise ApiError(0, "Unreachable", f"cannot reach {self._http.base_url}: {exc}", {}) \
                from None
        if r.status_code >= 400:
            body = r.json()
            raise ApiError(r.status_code, body.get("title", "Error"), body.get("detail", ""), body)

    # instances
    def order(self, req: OrderRequest, idempotency_key: str | None = None) -> InstanceView:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return InstanceView.model_validate(self._call(
            "POST", "/api/v1/instances", json=req.model_dump(mode="json", exclude_none=True),
            headers=headers))

    def instances(self, status: str | None = None, limit: int = 50,
                  offset: int = 0) -> Page[InstanceView]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status:
            params["status"] = status
        return Page[InstanceView].model_validate(
            self._call("GET", "/api/v1/instances", params=params))

    def instance(self, instance_id: str) -> InstanceView:
        return InstanceView.model_validate(self._call("GET", f"/api/v1/instances/{instance_id}"))

    def follow(self, instance_id: str, until: Sequence[str], timeout: float
               ) -> Iterator[InstanceView]:
        """The instance at once and each time it changes, pushed by the API (server-sent
        events), until its status is one of `until` or `timeout` seconds pass. Raises
        ApiError where the stream cannot be had (callers poll instead)."""
        params: dict[str, str | float] = {"until": ",".join(until),
                                          "timeout": max(1.0, min(timeout, 3600.0))}
        try:
            with self._http.stream("GET", f"/api/v1/instances/{instance_id}/events",
                                   params=params, timeout=httpx.Timeout(10.0, read=60.0)
                                   ) as r:
                if r.status_code != 200:
                    raise ApiError(r.status_code, "No event stream", r.read().decode()[:300],
                                   {})
                kind = ""
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: "):
                        if kind == "end":
                            return
                        if kind == "instance":
                            yield InstanceView.model_validate_json(line.removeprefix("data: "))
        except httpx.HTTPError as exc:
            raise ApiError(0, "Stream broken", str(exc), {}) from None

    def release(self, instance_id: str) -> InstanceView:
        return InstanceView.model_validate(
            self._call("POST", f"/api/v1/instances/{instance_id}/release"))

    def credentials(self, instance_id: str) -> CredentialsView:
        return CredentialsView.model_validate(
            self._call("POST", f"/api/v1/instances/{instance_id}/credentials"))

    # nodes (operator)
    def nodes(self, which: NodeFilter = NodeFilter(), limit: int = 500, offset: int = 0
              ) -> Page[NodeView]:
        params = {k: v for k, v in {**asdict(which), "limit": limit, "offset": offset}.items()
                  if v is not None}
        return Page[NodeView].model_validate(self._call("GET", "/api/v1/nodes", params=params))

    def enroll(self, body: EnrollRequest) -> NodeView:
        return NodeView.model_validate(self._call(
            "POST", "/api/v1/nodes", json=body.model_dump(mode="json", exclude_none=True)))

    def node_action(self, node_id: str, action: str, reason: str | None = None) -> NodeView:
        body = {"reason": reason} if reason else None
        return NodeView.model_validate(
            self._call("POST", f"/api/v1/nodes/{node_id}/{action}", json=body))

    # accounts
    def create_tenant(self, name: str, admin_email: str, admin_name: str) -> TenantCreated:
        return TenantCreated.model_validate(self._call("POST", "/api/v1/tenants", json={
            "name": name, "admin_email": admin_email, "admin_name": admin_name}))

    def create_token(self, name: str, expires_in_days: int | None = 90) -> TokenCreated:
        return TokenCreated.model_validate(self._call("POST", "/api/v1/tokens", json={
            "name": name, "expires_in_days": expires_in_days}))

    def tokens(self) -> list[TokenView]:
        return [TokenView.model_validate(t) for t in self.every("/tokens")]

    def get_json(self, path: str) -> Any:
        """A JSON document from the API as is (telemetry, reports, certificates)."""
        return self._call("GET", f"/api/v1{path}")

    def get_bytes(self, path: str) -> bytes:
        """A document (an invoice's PDF or CSV) as is."""
        data: bytes = self._call("GET", f"/api/v1{path}", raw=True)
        return data

    def post_json(self, path: str, body: Any = None) -> Any:
        return self._call("POST", f"/api/v1{path}", **({"json": body} if body is not None
                                                         else {}))

    def put_json(self, path: str, body: Any) -> Any:
        return self._call("PUT", f"/api/v1{path}", json=body)

    def patch_json(self, path: str, body: Any) -> Any:
        return self._call("PATCH", f"/api/v1{path}", json=body)

    def delete(self, path: str, params: dict[str, str] | None = None) -> Any:
        return self._call("DELETE", f"/api/v1{path}", params=params)

    def users(self) -> list[UserView]:
        return [UserView.model_validate(u) for u in self.every("/users")]

    def add_user(self, email: str, name: str, role: str) -> UserView:
        return UserView.model_validate(self._call("POST", "/api/v1/users", json={
            "email": email, "name": name, "role": role}))

    def user_action(self, user_id: str, action: str) -> UserView:
        return UserView.model_validate(self._call("POST", f"/api/v1/users/{user_id}/{action}"))

    def remove_user(self, user_id: str) -> None:
        self._call("DELETE", f"/api/v1/users/{user_id}")

    def set_password(self, password: str, current: str | None) -> None:
        self._call("PUT", "/api/v1/me/password", json={"password": password,
                                                       "current_password": current})

    def revoke_token(self, token_id: str) -> TokenView:
        return TokenView.model_validate(self._call("DELETE", f"/api/v1/tokens/{token_id}"))
