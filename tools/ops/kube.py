"""The Kubernetes API, through ``kubernetes_asyncio``: whatever credentials the cluster uses — the pod's
service account, any kubeconfig (token, client certificate, exec credential plugins such as EKS's and
GKE's, OIDC), or an explicit URL and token.

The client is made on first use (loading a kubeconfig may run an exec plugin, which takes time and may
fail: that is the call's error, not a startup crash). Every failure is classified for the model:
401/403 → ``permission_denied``, 404 → ``not_found``, anything else the server or the network did →
``upstream_error``; a credential that cannot be loaded → ``permission_denied`` saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from core.extras import require
from tools.tool_errors import (
    Conflict,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    Refused,
    Throttled,
    ToolTimeout,
    Unreachable,
    UpstreamError,
)

if TYPE_CHECKING:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_NAME = "the Kubernetes API"

FIELD_MANAGER = "opspilot"
"""Who OpsPilot's changes are by in the Deployment's managedFields (the change history's author of a scale): else
the API server names the client library's User-Agent ("OpenAPI-Generator"), as for any other tool using it."""


class KubeClient:
    def __init__(self, *, in_cluster: bool = False, service_account: Path = SERVICE_ACCOUNT,
                 kubeconfig: Path | None = None, context: str | None = None, api_url: str | None = None,
                 token: str | None = None, ca_file: Path | None = None, insecure: bool = False,
                 timeout_s: float = 15.0) -> None:
        if not (in_cluster or kubeconfig or (api_url and token)):
            raise ValueError("the Kubernetes backend needs in_cluster, a kubeconfig, or api_url with token_env")
        self.in_cluster, self.service_account = in_cluster, service_account
        self.kubeconfig, self.context = kubeconfig, context
        self.api_url, self.token, self.ca_file, self.insecure = api_url, token, ca_file, insecure
        self.timeout_s = timeout_s
        # The SDK (~0.2 s of imports) loads here, when a Kubernetes backend is configured: not in every process
        # that imports the toolbox, and not on a tool call's turn of the event loop.
        require("kubernetes", "a Kubernetes backend")  # MissingExtra, naming the extra, without kubernetes_asyncio
        importlib.import_module("kubernetes_asyncio.config")
        self._api: client.ApiClient | None = None
        self._lock = asyncio.Lock()

    async def _client(self) -> client.ApiClient:
        from kubernetes_asyncio import client

        async with self._lock:
            if self._api is None:
                self._api = client.ApiClient(configuration=await self._configuration())
            return self._api

    async def _configuration(self) -> client.Configuration:
        from kubernetes_asyncio import client, config
        from kubernetes_asyncio.config.config_exception import ConfigException
        from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

        cfg = client.Configuration()
        try:
            if self.in_cluster:
                InClusterConfigLoader(token_filename=str(self.service_account / "token"),
                                      cert_filename=str(self.service_account / "ca.crt")).load_and_set(cfg)
            elif self.kubeconfig is not None:
                if not self.kubeconfig.is_file():  # the library reads a missing file as an empty one
                    raise ValueError("no such file")
                await config.load_kube_config(config_file=str(self.kubeconfig), context=self.context,
                                              client_configuration=cfg, persist_config=False)
            else:
                cfg.host = str(self.api_url).rstrip("/")
                cfg.api_key["BearerToken"] = f"Bearer {self.token}"
                cfg.ssl_ca_cert = str(self.ca_file) if self.ca_file else None
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
            where = "the pod's service account" if self.in_cluster else f"kubeconfig {self.kubeconfig}"
            raise PermissionDenied(f"cannot use {where}: {_first_line(exc)}") from exc
        except Exception as exc:  # an exec plugin that fails, hangs or prints garbage
            raise PermissionDenied(f"cannot get credentials from kubeconfig {self.kubeconfig}: "
                                   f"{type(exc).__name__}: {_first_line(exc)}") from exc
        if self.insecure:
            cfg.verify_ssl = False
        return cfg

    async def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        options: dict[str, Any] = {"_request_timeout": self.timeout_s}
        return await self._call(lambda apps: apps.read_namespaced_deployment(name, namespace, **options))

    async def replica_sets(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The ReplicaSets a deployment's selector matches (its rollout history)."""
        options: dict[str, Any] = {"label_selector": selector, "_request_timeout": self.timeout_s}
        body = await self._call(lambda apps: apps.list_namespaced_replica_set(namespace, **options))
        items = body.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def restart(self, namespace: str, name: str, stamp: str) -> dict[str, Any]:
        """``kubectl rollout restart``: the pod template's restartedAt annotation, as a strategic merge patch."""
        patch = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
        options = self._patching("application/strategic-merge-patch+json")
        return await self._call(lambda apps: apps.patch_namespaced_deployment(name, namespace, patch, **options),
                                changes=True)

    def _patching(self, content_type: str) -> dict[str, Any]:
        """A PATCH's options: its body's type and timeout, and OpsPilot as the field manager (_content_type and
        _request_timeout are real keyword arguments the generated stubs leave out)."""
        return {"_content_type": content_type, "_request_timeout": self.timeout_s, "field_manager": FIELD_MANAGER}

    async def patch_deployment(self, namespace: str, name: str, patch: Any,
                               content_type: str = "application/json-patch+json") -> dict[str, Any]:
        """A PATCH of the Deployment (a rollback: a JSON patch whose ``test`` op guards against a concurrent
        change, answered 409/422 by the API server, which this raises as Conflict)."""
        options = self._patching(content_type)
        return await self._call(lambda apps: apps.patch_namespaced_deployment(name, namespace, patch, **options),
                                changes=True)

    async def scale(self, namespace: str, name: str, patch: Any,
                    content_type: str = "application/json-patch+json") -> dict[str, Any]:
        """A PATCH of the Deployment's scale subresource (RBAC ``deployments/scale``: replicas, nothing else)."""
        options = self._patching(content_type)
        return await self._call(lambda apps: apps.patch_namespaced_deployment_scale(name, namespace, patch,
                                                                                    **options), changes=True)

    async def allowed(self, namespace: str, verb: str, resource: str, name: str | None = None,
                      subresource: str | None = None) -> tuple[bool, str]:
        """Whether these credentials may do this (``kubectl auth can-i``: a SelfSubjectAccessReview, which any
        authenticated user may create — no grant in rbac.yaml), and the API server's reason."""
        attributes = {"namespace": namespace, "verb": verb, "group": "apps", "resource": resource,
                      "subresource": subresource, "name": name}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v}}}
        options: dict[str, Any] = {"_request_timeout": self.timeout_s}
        answer = await self._call(lambda auth: auth.create_self_subject_access_review(body, **options),
                                  api="AuthorizationV1Api")
        status = answer.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")

    async def _call(self, call: Callable[[Any], Awaitable[Any]], api: str = "AppsV1Api", *,
                    changes: bool = False) -> dict[str, Any]:
        """One API call, its failure classified. ``changes``: a PATCH; sent and its answer lost, it may have been
        applied (:class:`OutcomeUnknown`), unless no connection was made."""
        try:
            return await self._answer(call, api)
        except (ToolTimeout, UpstreamError) as exc:
            if not changes or isinstance(exc, Unreachable | Throttled):  # never sent, or refused: not applied
                raise
            raise OutcomeUnknown(f"the change was sent to {_NAME}, but {exc.message}: it may or may not have been "
                                 "made; check before retrying") from exc

    async def _answer(self, call: Callable[[Any], Awaitable[Any]], api: str) -> dict[str, Any]:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        connection = await self._client()
        try:
            result = await call(getattr(client, api)(connection))
        except ApiException as exc:
            raise _classified(exc) from exc
        except TimeoutError as exc:
            raise ToolTimeout(f"{_NAME} did not answer within {self.timeout_s:g}s") from exc
        except (aiohttp.ClientConnectorError, aiohttp.ClientSSLError, ssl.SSLError, ConnectionRefusedError) as exc:
            # no connection, or TLS refused it (an untrusted CA, a client certificate the server rejects): the
            # request never reached the API server
            raise Unreachable(f"cannot reach {_NAME}: {type(exc).__name__}: {_first_line(exc)}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"cannot reach {_NAME}: {type(exc).__name__}: {_first_line(exc)}") from exc
        except (ValueError, TypeError) as exc:  # an answer that is not the object it should be
            raise UpstreamError(f"{_NAME} sent an answer that could not be read: {_first_line(exc)}") from exc
        body = connection.sanitize_for_serialization(result)
        return body if isinstance(body, dict) else {}

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


def _classified(exc: ApiException) -> Exception:
    message = exc.reason or "error"
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(exc.body or "{}").get("message") or message
    status = int(exc.status or 0)
    if status in (401, 403):
        word = "refused the credentials" if status == 401 else "forbids this"
        return PermissionDenied(f"{_NAME} {word} ({status}): {message}")
    if status == 404:
        return NotFound(f"{_NAME}: {message}")
    # A JSON patch that did not apply is 422 with a generic message ("the server rejected our request due to an
    # error in our request": the API server does not say which op); ours fail there only on their test op, the
    # object having changed since it was read. An object the change would make invalid says "… is invalid".
    if status == 409 or (status == 422 and " is invalid" not in message):
        return Conflict(f"{_NAME}: the object changed meanwhile, nothing was changed ({status}: {message})")
    if status in (400, 422):  # refused before anything was written
        return Refused(f"{_NAME} refused the request ({status}), nothing was changed: {message}", code="rejected")
    if status == 429:
        return Throttled(f"{_NAME} is throttling requests (429), nothing was done: {message}")
    return UpstreamError(f"{_NAME} answered {status}: {message}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
