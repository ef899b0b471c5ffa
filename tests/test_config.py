"""Configuration: file + environment, readable errors; plugins as a public API."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.assembly import build_model, build_registry, validate
from bot.config import ConfigError, Settings, load_settings
from state import RedisStore
from tests.conftest import make_harness
from tools import ops
from tools.plugins import PluginError, load_plugin


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("OPSPILOT_CONFIG", "OPSPILOT_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "opspilot.yml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults_without_any_file() -> None:
    s = load_settings()
    assert s.limits.max_steps == 8 and s.redis_url == "redis://localhost:6379/0" and s.llm.provider == "auto"


def test_file_then_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "limits:\n  max_steps: 5\n  identical_call_limit: 4\nkey_prefix: team-a\n")
    monkeypatch.setenv("OPSPILOT_LIMITS__MAX_STEPS", "6")
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.1:6380/2")
    monkeypatch.setenv("OPSPILOT_MODEL", "claude-x")
    s = load_settings()  # ./opspilot.yml is picked up by default
    assert s.limits.max_steps == 6 and s.limits.identical_call_limit == 4 and s.key_prefix == "team-a"
    assert s.redis_url == "redis://10.0.0.1:6380/2" and s.llm.name == "claude-x"


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "limits:\n  max_steps: [1,\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+"):
        load_settings(path)


def test_a_misspelt_key_gets_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "limits:\n  max_stepz: 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "limits.max_stepz" in str(info.value) and "did you mean 'max_steps'" in str(info.value)
    assert "Traceback" not in str(info.value)


def test_a_bad_value_names_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, "limits:\n  max_steps: 0\n")
    with pytest.raises(ConfigError, match=r"limits\.max_steps: Input should be greater than or equal to 1"):
        load_settings(path)
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_settings(write(tmp_path, "- just\n- a list\n"))


@pytest.mark.parametrize("section", ["slack:\n  - allowed_users: [UALICE]\n", "toolbox: catalog.yml\n"])
def test_a_section_that_is_no_mapping_is_refused_whatever_the_environment_sets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str) -> None:
    """With OPSPILOT_SLACK__SIGNING_SECRET set (as documented), the environment's slack section replaced the file's
    list without a word: its allowed_users gone, so anyone could use OpsPilot."""
    monkeypatch.setenv("OPSPILOT_SLACK__SIGNING_SECRET", "s3cret")
    monkeypatch.setenv("OPSPILOT_TOOLBOX__DATA_DIR", str(tmp_path))
    name = section.split(":", 1)[0]
    with pytest.raises(ConfigError, match=rf"{name}: must be a mapping of settings \(key: value\), not"):
        load_settings(write(tmp_path, section))


def test_model_choice_follows_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_model(load_settings()).scripted
    assert "scripted" in build_model(load_settings()).label
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert build_model(load_settings()).label.startswith("anthropic:")
    monkeypatch.setenv("OPSPILOT_LLM__PROVIDER", "scripted")
    with pytest.raises(ConfigError, match="API key is configured"):
        build_model(load_settings())


def test_tool_policy_from_config_changes_where_confirmation_is_needed(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "tools:\n  restart_service:\n    confirm_in: [prod, staging]\n"))
    registry = build_registry(settings, ops.build())
    spec = registry.get("restart_service")
    assert spec is not None
    args = spec.args_model.model_validate({"service_id": "payments", "environment": "staging"})
    assert spec.needs_confirmation(args)
    with pytest.raises(ConfigError, match="no tool named"):
        build_registry(load_settings(write(tmp_path, "tools:\n  nope:\n    confirm_in: [prod]\n")), ops.build())
    with pytest.raises(ConfigError, match="read-only"):
        build_registry(load_settings(write(tmp_path, "tools:\n  search_docs:\n    confirm_in: [prod]\n")),
                       ops.build())


def test_environment_keys_are_case_folded_once_at_load(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, """
slack:
  approvers: {restart_service: {Prod: {users: [uboss]}, " PROD": {usergroups: [s0ops]}, "*": {users: [UANY]}}}
  two_person_rule: [PROD, Staging]
  mutating_channels: [c0ops]
tools:
  restart_service: {confirm_in: [STAGING]}
mcp_servers:
  - {name: am, command: /bin/true, tools: {post_silence: {confirm: {in: [Prod]}}}}
"""))
    prod = settings.slack.approvers["restart_service"]["prod"]
    assert set(settings.slack.approvers["restart_service"]) == {"prod", "*"}  # Prod and " PROD" are one rule
    assert (prod.users, prod.usergroups) == (["UBOSS"], ["S0OPS"])
    assert settings.slack.two_person_rule == ["prod", "staging"] and settings.slack.mutating_channels == ["C0OPS"]
    assert settings.tools["restart_service"].confirm_in == ["staging"]
    rule = settings.mcp_servers[0].tools["post_silence"].confirm
    assert not isinstance(rule, str) and rule.environments == ["prod"]
    spec = build_registry(settings, ops.build()).get("restart_service")
    assert spec is not None
    assert spec.needs_confirmation(spec.args_model.model_validate({"service_id": "orders", "environment": "Staging"}))


def test_rules_that_can_never_match_are_refused_at_start(tmp_path: Path) -> None:
    """Each would leave the real one unprotected (no approvers rule: anyone may confirm; no confirmation): serve
    refuses them all, with the nearest known name. A rule for an MCP server's tool waits for the server."""
    settings = load_settings(write(tmp_path, """
slack:
  approvers: {restart_service: {prdo: {users: [UBOSS]}}, restart_servce: {prod: {users: [UBOSS]}},
              k8s__scale: {prod: {users: [UBOSS]}}}
  two_person_rule: [production]
tools: {restart_service: {confirm_in: [stagin]}}
mcp_servers: [{name: k8s, command: "true"}]
"""))
    with pytest.raises(ConfigError) as refused:
        build_registry(settings, ops.build())
    assert str(refused.value).splitlines() == [
        "slack.approvers.restart_service.prdo: no service in the catalog has environment 'prdo' (did you mean "
        "'prod'?)",
        "slack.approvers.restart_servce: there is no tool named 'restart_servce' (did you mean 'restart_service'?)",
        "slack.two_person_rule: no service in the catalog has environment 'production' (known: prod, staging)",
        "tools.restart_service.confirm_in: no service in the catalog has environment 'stagin' (did you mean "
        "'staging'?)"]


def test_replica_bounds_are_folded_and_checked_like_every_rule(tmp_path: Path) -> None:
    """``Prod`` bounds ``prod`` (it was left unread: the defaults applied, 3 → 1 offered below the min), and
    bounds for a service or environment nobody has are refused (a typo let staging scale within the defaults)."""
    folded = load_settings(write(tmp_path, "toolbox: {scale_bounds: {payments: {Prod: {min: 3, max: 6}}}}\n"))
    assert set(folded.toolbox.scale_bounds["payments"]) == {"prod"}
    build_registry(folded, ops.build())
    settings = load_settings(write(tmp_path, "toolbox: {scale_bounds: {payment: {staging: {min: 2, max: 2}}, "
                                             "orders: {stagin: {min: 1, max: 2}}}}\n"))
    with pytest.raises(ConfigError) as refused:
        build_registry(settings, ops.build())
    assert str(refused.value).splitlines() == [
        "toolbox.scale_bounds.payment: there is no service 'payment' in the catalog (did you mean 'payments'?)",
        "toolbox.scale_bounds.orders.stagin: no service in the catalog has environment 'stagin' (did you mean "
        "'staging'?)"]


def test_a_rule_that_loosens_the_gate_or_reads_as_protection_is_said(tmp_path: Path) -> None:
    """Started with, but said: a confirm_in that leaves out an environment its tool asks about by default, and
    approvers where the tool never asks outside an alert's run (staging restarts ran with no approver)."""
    settings = load_settings(write(tmp_path, """
slack:
  approvers: {restart_service: {staging: {users: [UBOSS]}, prod: {users: [UBOSS]}}, query_logs: {prod: {users: [U]}}}
tools: {rollback_service: {confirm_in: [staging]}}
"""))
    _, warnings = validate(settings, ops.build())
    assert warnings == [
        "tools.rollback_service.confirm_in leaves prod out: rollback_service runs there with no person's "
        "confirmation, which it asks for by default",
        "slack.approvers.restart_service.staging: restart_service asks for a confirmation in staging only in an "
        "alert's run (tools.restart_service.confirm_in): elsewhere it runs with no one's",
        "slack.approvers.query_logs: query_logs is read-only: nobody is asked to confirm it"]


def test_plugin_tools_register_and_run(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "plugins: [tests.plugins.oncall]\n"))
    registry = build_registry(settings, ops.build())
    assert {"who_is_on_call", "page_oncall"} <= {s.name for s in registry}
    page = registry.get("page_oncall")
    assert page is not None and page.mutating
    assert page.source == "plugin:tests.plugins.oncall"  # `opspilot tools` said "builtin" of a team's own code


async def test_a_plugin_tool_is_used_by_the_engine(store: RedisStore) -> None:
    specs = load_plugin("tests.plugins.oncall")
    model = ScriptedModel([reply("", call("who_is_on_call", service_id="payments")), reply("alice is on call")])
    h = make_harness(model, store, specs)
    assert (await h.engine.ask("t", "who is on call for payments?")).answer == "alice is on call"
    assert "on_call=alice" in h.of("tool_result")[0].summary


def test_plugin_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="could not be imported: ImportError"):
        load_plugin("tests.plugins.broken")
    with pytest.raises(PluginError, match="could not be imported: ModuleNotFoundError"):
        load_plugin("tests.plugins.nope")
    with pytest.raises(PluginError, match="defines no tools"):
        load_plugin("tests.plugins")
    with pytest.raises(ConfigError, match="could not be imported"):
        build_registry(load_settings(write(tmp_path, "plugins: [tests.plugins.broken]\n")), ops.build())


async def test_toolbox_config_errors_are_readable(tmp_path: Path) -> None:
    from bot.assembly import assemble

    with pytest.raises(ConfigError, match="does not match any of the expected tags: 'files', 'loki'"):
        load_settings(write(tmp_path, "toolbox:\n  logs: {backend: elastic}\n"))
    settings = load_settings(write(tmp_path, f"toolbox:\n  catalog: {tmp_path / 'missing.yml'}\n"))
    with pytest.raises(ConfigError, match="toolbox: cannot read the service catalog"):
        await assemble(settings)
    # A token the config names and the environment lacks: the webhook was called with no credentials mid-incident.
    unset = load_settings(write(tmp_path, "toolbox:\n  restart: {backend: webhook, url: 'https://ci.example/r', "
                                          "token_env: OPSPILOT_TEST_UNSET_TOKEN}\n"))
    with pytest.raises(ConfigError, match="token_env names OPSPILOT_TEST_UNSET_TOKEN, which is not set"):
        await assemble(unset)


@pytest.mark.parametrize("url", ["localhost:6379", "127.0.0.1:6379", "http://localhost:6379", "redis://h:port/0",
                                 # an option redis-py cannot read was a traceback in every command; a database not
                                 # a number was database 0 (another installation's), unsaid
                                 "redis://h:6379/1?socket_timeout=abc", "redis://h:6379/1?sockettimeout=5",
                                 "redis://h:6379/l3"])
def test_a_redis_url_redis_cannot_use_is_refused_at_load(url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for source in ("env", "file"):  # either way it is named as both: the file's key and the variable
        if source == "env":
            monkeypatch.setenv("REDIS_URL", url)
            path = None
        else:
            monkeypatch.delenv("REDIS_URL")
            path = write(tmp_path, f'redis_url: "{url}"\n')
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        said = str(info.value)
        assert f"redis_url (REDIS_URL): Value error, {url!r} is not a Redis URL" in said
        assert "redis://localhost:6379/0" in said and "Traceback" not in said


@pytest.mark.parametrize("url", ["redis://10.0.0.1:6380/2", "rediss://:pw@cache.example:6380", "unix:///run/r.sock",
                                 "redis+cluster://a:7000,b:7001", "rediss+cluster://a:7000",
                                 "redis://h:6379/0?socket_timeout=5", "rediss://h:6380/?ssl_cert_reqs=none"])
def test_every_redis_url_the_store_connects_to_is_accepted(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", url)
    assert load_settings().redis_url == url


def test_a_config_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "opspilot.yml"
    path.write_bytes(b"limits:\n  max_steps: 3\n# caf\xe9\n")  # Latin-1, as an old editor saves it
    with pytest.raises(ConfigError, match=r"opspilot\.yml is not UTF-8 text \(at byte 28\): save it as UTF-8"):
        load_settings(str(path))


@pytest.mark.parametrize("url", ["redis://:@/", "redis://:6379/0", "rediss://@/0"])
def test_a_redis_url_without_a_host_is_refused(url: str) -> None:
    """It would dial whatever answers on localhost (the demo's "nothing to configure" Redis included)."""
    with pytest.raises(ValidationError, match="no host"):
        Settings(redis_url=url)


@pytest.mark.parametrize(("text", "said"), [
    ("mcp_servers: [{name: a, comand: x}]", "mcp_servers.0.comand: Extra inputs are not permitted (did you mean "
                                            "'command'?)"),
    ("toolbox: {logs: {backend: loki, url: 'http://l', urll: x}}",  # the backend's tag is no key: not shown
     "toolbox.logs.urll: Extra inputs are not permitted (did you mean 'url'?)"),
    ("slack: {approvers: {restart_service: {prod: {userz: [U1]}}}}",
     "slack.approvers.restart_service.prod.userz: Extra inputs are not permitted (did you mean 'users'?)"),
])
def test_did_you_mean_at_any_depth(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, text))
    assert f"  {said}\n" in str(refused.value)


def test_a_list_given_as_a_variable_that_is_not_json_is_one_readable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSPILOT_SLACK__ALLOWED_CHANNELS", "C1")
    with pytest.raises(ConfigError) as refused:
        load_settings(None)
    assert "OPSPILOT_SLACK__ALLOWED_CHANNELS: not readable as the setting's type" in str(refused.value)
    assert "OPSPILOT_SLACK__ALLOWED_CHANNELS='[\"C012AB3CD\"]'" in str(refused.value)
    monkeypatch.setenv("OPSPILOT_SLACK__ALLOWED_CHANNELS", '["C1"]')
    assert load_settings(None).slack.allowed_channels == ["C1"]


def test_the_otlp_endpoint_variable_is_in_the_settings_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel.test:4318")  # `opspilot config` shows it
    assert load_settings(None).telemetry.otlp_endpoint == "http://otel.test:4318"
    monkeypatch.setenv("OPSPILOT_TELEMETRY__OTLP_ENDPOINT", "http://ours.test:4318")  # ours, set, wins
    assert load_settings(None).telemetry.otlp_endpoint == "http://ours.test:4318"


def test_what_reads_the_bundled_demo_data_is_named_and_live_backends_keep_the_real_clock(tmp_path: Path) -> None:
    """Own catalog and runbooks with live backends: not the demo data (it was refused as such), and the backends
    are asked about now, not the bundled dataset's replayed 10:00. Only the catalog set: the rest is named."""
    import shutil

    from bot.assembly import demo_data_problem

    shutil.copy(ops.DEMO_DATA / "catalog.yml", tmp_path / "catalog.yml")
    (tmp_path / "docs").mkdir()
    live = load_settings(write(tmp_path, f"""
toolbox:
  catalog: {tmp_path / "catalog.yml"}
  docs_dir: {tmp_path / "docs"}
  logs: {{backend: loki, url: "http://127.0.0.1:9"}}
  metrics: {{backend: prometheus, url: "http://127.0.0.1:9"}}
  changes: {{backend: http, url: "http://127.0.0.1:9/changes"}}
"""))
    assert demo_data_problem(live) is None
    assert not ops.build(live.toolbox).clock.replayed
    partly = load_settings(write(tmp_path, f"toolbox: {{catalog: {tmp_path / 'catalog.yml'}}}\n"))
    said = demo_data_problem(partly)
    assert said is not None and said.endswith("its runbooks, logs, metrics, change history"), said
    assert ops.build(partly.toolbox).clock.replayed  # what it reads is the replayed dataset: on its clock


def test_bounds_for_a_catalog_whose_environments_are_capitalised(tmp_path: Path) -> None:
    """A catalog saying ``Prod``: bounds written ``Prod`` were folded to ``prod`` and then refused as an environment
    no service has (and ``prod`` the same), so no bounds could be written at all."""
    catalog = tmp_path / "catalog.yml"
    catalog.write_text((ops.DEMO_DATA / "catalog.yml").read_text().replace("[prod, staging]", "[Prod, Staging]"))
    settings = load_settings(write(tmp_path, f"toolbox: {{catalog: {catalog}, scale_bounds: "
                                             "{payments: {Prod: {min: 3, max: 6}}}}\n"))
    build_registry(settings, ops.build(settings.toolbox))
    from tools.ops.changing import bounds_for

    found = bounds_for(settings.toolbox.scale_bounds, "payments", "Prod")
    assert found is not None and (found.min, found.max) == (3, 6)


def test_a_single_value_is_never_suggested_or_taken_as_a_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPSPILOT_REDIS__KEY_PREFIX was answered "did you mean 'OPSPILOT_REDIS_URL__KEY_PREFIX'?", a variable then
    accepted and setting nothing (redis_url is one value): the key prefix stayed opspilot."""
    monkeypatch.setenv("OPSPILOT_REDIS__KEY_PREFIX", "x")
    with pytest.raises(ConfigError, match="did you mean 'OPSPILOT_KEY_PREFIX'"):
        load_settings()
    monkeypatch.delenv("OPSPILOT_REDIS__KEY_PREFIX")
    monkeypatch.setenv("OPSPILOT_REDIS_URL__KEY_PREFIX", "x")
    with pytest.raises(ConfigError, match="REDIS_URL is one value"):
        load_settings()


@pytest.mark.parametrize(("name", "meant"), [("OPSPILOT_SLACK_ALLOWED_USERS", "OPSPILOT_SLACK__ALLOWED_USERS"),
                                             ("OPSPILOT_SLAK__ALLOWED_USERS", "OPSPILOT_SLACK__ALLOWED_USERS"),
                                             ("opspilot_slack_allowed_users", "OPSPILOT_SLACK__ALLOWED_USERS")])
def test_a_variable_that_sets_nothing_is_refused(name: str, meant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One underscore between the section and its key, or a misspelt section: passed by without a word, so an
    ``allowed_users`` meant to keep everyone else out let anyone in."""
    monkeypatch.setenv(name, '["U0ONLYME"]')
    with pytest.raises(ConfigError, match=f"{name} is not a setting \\(did you mean {meant!r}\\?\\)"):
        load_settings()
    monkeypatch.delenv(name)
    monkeypatch.setenv("OPSPILOT_MODEL", "claude-x")  # OpsPilot's own variables that are not settings pass
    monkeypatch.setenv(meant, '["U0ONLYME"]')
    assert load_settings().slack.allowed_users == ["U0ONLYME"]


def test_a_slack_api_url_that_is_no_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve started in HTTP mode with it, without a word, while check said not ready."""
    monkeypatch.setenv("SLACK_API_URL", "not a url")
    with pytest.raises(ConfigError, match="SLACK_API_URL\\) must be an http\\(s\\) URL, got 'not a url'"):
        load_settings()


@pytest.mark.parametrize("name", ["OPSPILOT_FRONT_SERVICE_HOST", "OPSPILOT_FRONT_PORT",
                                  "OPSPILOT_FRONT_PORT_80_TCP_ADDR", "OPSPILOT_SLACK_SERVICE_PORT_HTTP",
                                  "OPSPILOT_SLACK_PORT_443_TCP", "OPSPILOT_ANYTHING"])
def test_what_kubernetes_and_deployments_set_is_left_alone(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes gives every pod its namespace's Services as variables: the front's Service, opspilot-front, made
    every worker pod refuse to start."""
    monkeypatch.setenv(name, "10.0.0.1")
    assert load_settings().slack.allowed_users == []


def test_a_key_given_twice_is_refused_not_half_read(tmp_path: Path) -> None:
    """Two `slack:` sections: YAML kept the second, and the first's approvers and two-person rule were gone
    without a word (anyone could confirm a prod restart)."""
    path = write(tmp_path, "slack:\n  two_person_rule: [prod]\nlimits:\n  max_steps: 5\nslack:\n  language: en\n")
    with pytest.raises(ConfigError, match=r"'slack' is given twice \(lines 1 and 5\)"):
        load_settings(path)
    nested = write(tmp_path, "slack:\n  language: en\n  language: zh\n")
    with pytest.raises(ConfigError, match="'language' is given twice"):
        load_settings(nested)
    # A merge (`<<: *anchor`) is YAML's way to share a block, an explicit key overriding what it brings: kept.
    merged = load_settings(write(tmp_path, "slack:\n  approvers:\n    restart_service:\n      prod: &sre "
                                           "{users: [UBOSS]}\n      staging:\n        <<: *sre\n        "
                                           "usergroups: [S0SRE]\n        users: [UOPS]\n"))
    staging = merged.slack.approvers["restart_service"]["staging"]
    assert (staging.users, staging.usergroups) == (["UOPS"], ["S0SRE"])
    with pytest.raises(ConfigError, match="unhashable key"):  # one line, not a traceback
        load_settings(write(tmp_path, "slack:\n  ? [a, b]\n  : 1\n"))


def test_a_slack_api_url_that_cannot_be_parsed_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_API_URL", "http://[::1/api/")
    with pytest.raises(ConfigError, match=r"SLACK_API_URL.*Invalid IPv6 URL"):
        load_settings(None)
