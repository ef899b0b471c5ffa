"""Every way a cluster hands out credentials, against the local Kubernetes API stand-in over TLS: a kubeconfig
with a client certificate (verified by the stand-in), one with an exec credential plugin, the pod's service
account files; refusals (401/403/404) classified, a failing plugin said plainly."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.ops_servers import OpsFakes
from tests.test_ops import data, error_code, live, run
from tools.ops import toolbox_config as cfg


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cluster CA, the API server's certificate (127.0.0.1) and a client certificate for "opspilot"."""
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=opspilot-test-cluster-ca")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject, ext in (("server", "/CN=kube-apiserver", ["-extfile", "san.ext"]),
                               ("client", "/O=system:masters/CN=opspilot", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", subject)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", *ext)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key", "-out", "rogue.crt",
            "-days", "2", "-subj", "/CN=opspilot")  # the right name, not signed by the cluster's CA
    yield d


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", "secret-token")  # the toolbox's Loki (tests.test_ops.live) names it


@pytest.fixture
async def cluster(pki: Path) -> AsyncIterator[OpsFakes]:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pki / "server.crt", pki / "server.key")
    tls.load_verify_locations(pki / "ca.crt")
    tls.verify_mode = ssl.CERT_OPTIONAL  # token users need no certificate; a presented one must verify
    fakes = OpsFakes(tls=tls)
    await fakes.server.start()
    yield fakes
    await fakes.server.stop()


def kubeconfig(path: Path, server: str, ca: Path, user: dict[str, object]) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "ops",
        "contexts": [{"name": "ops", "context": {"cluster": "c1", "user": "bot"}}],
        "clusters": [{"name": "c1", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "bot", "user": user}]}))
    return path


async def restart(fakes: OpsFakes, restart_config: cfg.KubernetesRestarts) -> object:
    return await run(live(fakes, restart=restart_config), "restart_service", confirmed_by="UAPPROVER",
                     service_id="payments", environment="prod")


async def test_a_client_certificate_kubeconfig(cluster: OpsFakes, pki: Path, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", cluster.url, pki / "ca.crt", {
        "client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")})
    result = data(await restart(cluster, cfg.KubernetesRestarts(backend="kubernetes", kubeconfig=config)))
    assert result["rollout"] == "complete" and cluster.restarted
    patch = next(r for r in cluster.requests if r[0] == "k8s_PATCH")
    assert "kubectl.kubernetes.io/restartedAt" in patch[2]["spec"]["template"]["metadata"]["annotations"]

    # A certificate with the right name that the cluster's CA did not sign gets nowhere.
    cluster.restarted = False
    rogue = kubeconfig(tmp_path / "rogue", cluster.url, pki / "ca.crt", {
        "client-certificate": str(pki / "rogue.crt"), "client-key": str(pki / "rogue.key")})
    refused = await restart(cluster, cfg.KubernetesRestarts(backend="kubernetes", kubeconfig=rogue))
    assert error_code(refused) in ("upstream_error", "permission_denied") and not cluster.restarted


async def test_an_exec_credential_plugin(cluster: OpsFakes, pki: Path, tmp_path: Path) -> None:
    ran = tmp_path / "plugin-ran"
    plugin = tmp_path / "credential.py"
    plugin.write_text(f"""import json, os, pathlib
pathlib.Path({str(ran)!r}).write_text(os.environ.get("KUBERNETES_EXEC_INFO", "")[:200] or "ran")
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {{"token": os.environ["CLUSTER_TOKEN"]}}}}))
""")
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                          "args": [str(plugin)], "env": [{"name": "CLUSTER_TOKEN", "value": cluster.token}],
                          "interactiveMode": "Never"}}
    config = kubeconfig(tmp_path / "kubeconfig", cluster.url, pki / "ca.crt", exec_user)
    result = data(await restart(cluster, cfg.KubernetesRestarts(backend="kubernetes", kubeconfig=config)))
    assert result["rollout"] == "complete" and ran.exists()

    # A plugin that fails: the call says why, nothing is patched.
    cluster.restarted = False
    broken = {"exec": {**exec_user["exec"], "args": ["-c", "import sys; sys.exit('login expired')"]}}
    refused = await restart(cluster, cfg.KubernetesRestarts(
        backend="kubernetes", kubeconfig=kubeconfig(tmp_path / "broken", cluster.url, pki / "ca.crt", broken)))
    assert error_code(refused) == "permission_denied" and not cluster.restarted
    assert "login expired" in json.loads(refused.result.content)["message"]  # type: ignore[attr-defined]


async def test_the_pods_service_account(cluster: OpsFakes, pki: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(cluster.token)
    (account / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(cluster.server.port))
    in_cluster = cfg.KubernetesRestarts(backend="kubernetes", in_cluster=True, service_account_dir=account)
    assert data(await restart(cluster, in_cluster))["rollout"] == "complete"

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")  # not in a pod after all
    outside = await restart(cluster, in_cluster)
    assert error_code(outside) == "permission_denied"
    assert "service account" in json.loads(outside.result.content)["message"]  # type: ignore[attr-defined]


async def test_refusals_are_classified_over_tls(cluster: OpsFakes, pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def api(token: str) -> cfg.KubernetesRestarts:
        monkeypatch.setenv("OPS_TOKEN", token)
        return cfg.KubernetesRestarts(backend="kubernetes", api_url=cluster.url, token_env="OPS_TOKEN",
                                      ca_file=pki / "ca.crt")

    assert error_code(await restart(cluster, api("wrong"))) == "permission_denied"  # 401
    forbidden = await restart(cluster, api(cluster.read_only_token))  # 403
    assert error_code(forbidden) == "permission_denied"
    assert "cannot patch" in json.loads(forbidden.result.content)["message"]  # type: ignore[attr-defined]
    cluster.deployment["metadata"]["name"] = "gone"
    assert error_code(await restart(cluster, api(cluster.token))) == "not_found"  # 404
    monkeypatch.setenv("OPS_TOKEN", cluster.token)
    untrusted = cfg.KubernetesRestarts(backend="kubernetes", api_url=cluster.url, token_env="OPS_TOKEN")
    assert error_code(await restart(cluster, untrusted)) == "upstream_error"  # the server's CA is not trusted


@pytest.mark.parametrize(("status", "message", "code"), [
    (422, "the server rejected our request due to an error in our request", "conflict"),  # a test op (generic)
    (422, 'Deployment.apps "payments-api" is invalid: spec.template.spec.containers[0].image: Required value',
     "rejected"),  # the object the change would make: refused, not "changed meanwhile"
    (400, "the server could not read the patch", "rejected"),
    (429, "too many requests", "upstream_error"),  # throttled: nothing done
])
def test_the_api_server_s_refusals_are_told_apart_from_an_unknown_outcome(status: int, message: str,
                                                                          code: str) -> None:
    """A JSON patch whose test op failed is answered 422 with a generic message on a real API server: it was read
    as an unknown outcome ("it may or may not have been made"), like a 400 or a 429, all refused before any write."""
    from kubernetes_asyncio.client.exceptions import ApiException

    from tools.ops.kube import _classified
    from tools.tool_errors import OutcomeUnknown, Throttled

    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps({"kind": "Status", "code": status, "message": message})
    found = _classified(exc)
    assert found.code == code and not isinstance(found, OutcomeUnknown)  # type: ignore[attr-defined]
    assert isinstance(found, Throttled) == (status == 429)


async def test_a_kubeconfig_that_is_not_there_is_said_so(tmp_path: Path) -> None:
    """It was "Expected key current-context in kube-config" (the library reads a missing file as an empty one)."""
    from tools.ops.kube import KubeClient
    from tools.tool_errors import PermissionDenied

    kube = KubeClient(kubeconfig=tmp_path / "nope")
    with pytest.raises(PermissionDenied, match=r"kubeconfig .*nope: no such file"):
        await kube.deployment("payments", "payments-api")
    await kube.close()
