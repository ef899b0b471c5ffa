"""Slack: the bot token (``auth.test``), its scopes against manifest.yml, and the mode's secret — for Socket
Mode the app token itself, with ``apps.connections.open`` as serve's first call (a prefix proves nothing)."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.config import Settings
from bot.probes import PROBE_S, Check
from bot.slack.outbound.api_errors import TOKEN_REFUSED, slack_error

MANIFEST = Path(__file__).resolve().parents[2] / "manifest.yml"


def manifest_scopes(path: Path = MANIFEST) -> set[str]:
    body = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return set(((body.get("oauth_config") or {}).get("scopes") or {}).get("bot") or [])


async def slack_checks(settings: Settings) -> list[Check]:
    slack = settings.slack
    if not slack.bot_token:
        return [Check("Slack", False, "no SLACK_BOT_TOKEN: serve refuses to start without it (`opspilot chat` and "
                      "`opspilot demo` need none)", "set SLACK_BOT_TOKEN (xoxb-…) to serve Slack", refused=True)]
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    # What serve refuses without asking Slack anything is said whatever Slack answers.
    secretless = [] if slack.app_token or slack.signing_secret else [_http_mode(slack.signing_secret)]
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, timeout=int(PROBE_S) - 1)
    try:
        answer = await client.auth_test()
    except SlackApiError as exc:
        # A body that is not JSON leaves the SDK's raw response here (no .data, its status as .status).
        data = getattr(exc.response, "data", None)
        status = int(getattr(exc.response, "status_code", None) or getattr(exc.response, "status", 0) or 0)
        said = data.get("error") if isinstance(data, dict) else None
        if 200 <= status < 300 and not said:  # a success that is no Slack answer: a proxy's page, a broken stub
            return [Check("Slack token", False, f"auth.test answered HTTP {status} with no Slack answer: what "
                          f"answers at {slack.api_url} is not Slack's Web API", "check SLACK_API_URL (or unset it)"),
                    *secretless]
        if (slack_error(exc) not in TOKEN_REFUSED and status >= 500) or \
                not isinstance(said, str) or not said:  # Slack's trouble, or not Slack (no error of its own)
            return [Check("Slack token", False, f"Slack answered auth.test with HTTP {status} "
                          f"({slack_error(exc)}): the token could not be checked",
                          "check status.slack.com, or SLACK_API_URL if you set one"), *secretless]
        return [Check("Slack token", False, f"refused by Slack ({slack_error(exc)})",
                      "copy the Bot User OAuth Token from the app's OAuth & Permissions page",
                      refused=slack_error(exc) in TOKEN_REFUSED), *secretless]  # serve stops on it too
    except Exception as exc:  # unreachable, a timeout: said, not raised
        return [Check("Slack token", False, f"Slack did not answer ({type(exc).__name__})",
                      "check the network path to Slack (or SLACK_API_URL)"), *secretless]
    if not answer.get("team_id"):  # what answered is not Slack's auth.test (a proxy, a stub)
        return [Check("Slack token", False, "auth.test answered without a workspace: what answers at "
                      f"{slack.api_url} is not Slack's Web API", "check SLACK_API_URL (or unset it)"), *secretless]
    checks = [Check("Slack token", True, f"valid for workspace {answer.get('team')} ({answer.get('team_id')})")]
    granted = {s.strip() for s in str(answer.headers.get("x-oauth-scopes", "")).split(",") if s.strip()}
    wanted = manifest_scopes()
    if not granted:
        checks.append(Check("Slack scopes", False, "Slack did not report the token's scopes", required=False))
    else:
        missing = sorted(wanted - granted)
        checks.append(Check("Slack scopes", not missing,
                            f"missing {', '.join(missing)}" if missing else "every scope manifest.yml asks for",
                            "add them under OAuth & Permissions (or reinstall from manifest.yml)"))
        extra = sorted(granted - wanted)  # an install from an older manifest keeps scopes nothing uses now
        if extra:
            checks.append(Check("Slack scopes beyond the manifest", False, f"granted but unused: {', '.join(extra)}",
                                "remove them under OAuth & Permissions and reinstall (least privilege)",
                                required=False))
    if slack.app_token:
        checks.append(await _socket_mode(slack.app_token, slack.api_url))
    else:
        checks.append(_http_mode(slack.signing_secret))
    return checks


def _http_mode(signing_secret: str | None) -> Check:
    return Check("Slack mode", bool(signing_secret), "HTTP mode" + (
        "" if signing_secret else ": no SLACK_SIGNING_SECRET, so no request can be verified"),
        "set SLACK_SIGNING_SECRET (Basic Information → Signing Secret), or SLACK_APP_TOKEN for Socket Mode",
        refused=not signing_secret)  # serve refuses it too


async def _socket_mode(app_token: str, api_url: str) -> Check:
    """``apps.connections.open`` answers a websocket URL that is never opened here: nothing connects."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    fix = "SLACK_APP_TOKEN is the app-level token (xapp-…) with connections:write, under Basic Information"
    try:
        await AsyncWebClient(base_url=api_url, timeout=int(PROBE_S) - 1).apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        return Check("Slack mode", False, f"Socket Mode: Slack refused SLACK_APP_TOKEN ({slack_error(exc)})", fix,
                     refused=slack_error(exc) in TOKEN_REFUSED)  # serve stops on it too
    except Exception as exc:
        return Check("Slack mode", False, f"Socket Mode: Slack did not answer apps.connections.open "
                                          f"({type(exc).__name__})", "check the network path to Slack")
    return Check("Slack mode", True, "Socket Mode (SLACK_APP_TOKEN opens a connection)")
