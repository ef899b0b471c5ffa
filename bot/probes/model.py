"""The model serve would use (provider and name as configured, empty variables unset): one short request shaped
as serve's (its max_tokens, one tool), with a short timeout and no retries — the SDKs' defaults would wait 10
minutes, three times."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.assembly import model_choice
from bot.config import ConfigError, Settings
from bot.probes import PROBE_S, Check
from core.urls import safe_url

SDK_TIMEOUT_S = PROBE_S - 1.0  # inside the probe's own deadline, so the SDK's words (not a cut) are reported
_OWN_HOSTS = ("api.anthropic.com", "api.openai.com")  # the providers' own APIs: a 5xx there is their outage
_PING = [{"role": "user", "content": "Reply with the one word: pong."}]  # short: the budget is serve's
_TOOL = {"name": "noop", "description": "Does nothing.", "input_schema": {"type": "object", "properties": {}}}


async def model_check(settings: Settings, timeout_s: float = SDK_TIMEOUT_S) -> Check:
    try:
        provider, name = model_choice(settings)
    except ConfigError as exc:
        return Check("Model", False, str(exc), "set the provider's key, or llm.provider to match the key you have",
                     refused=True)
    if provider == "scripted":
        return Check("Model", False, "no key: the scripted demo model will answer, rule-based (not an LLM), "
                     "reading the systems configured here and proposing changes to them (whether a confirmed one "
                     "runs: the restart, rollback and scale line)",
                     "set ANTHROPIC_API_KEY or OPENAI_API_KEY", required=False)
    # The SDK is imported first (seconds, on a loaded machine): only the request counts against the deadline.
    if provider == "anthropic":
        import anthropic

        client: Any = anthropic.AsyncAnthropic(timeout=timeout_s, max_retries=0)
        # serve's max_tokens and a tool: a budget above the model's limit, or tools refused, fail every run
        ask = client.messages.create(model=name, max_tokens=settings.llm.max_tokens, messages=_PING, tools=[_TOOL],
                                     tool_choice={"type": "auto"})
    else:
        import openai

        client = openai.AsyncOpenAI(timeout=timeout_s, max_retries=0)
        field = settings.llm.token_field
        if field == "auto":  # as OpenAIModel chooses it
            field = "max_completion_tokens" if client.base_url.host == "api.openai.com" else "max_tokens"
        tool = {"type": "function", "function": {"name": _TOOL["name"], "description": _TOOL["description"],
                                                 "parameters": _TOOL["input_schema"]}}
        ask = client.chat.completions.create(model=name, messages=_PING, tools=[tool], tool_choice="auto",
                                             **{field: settings.llm.max_tokens})
    try:
        async with asyncio.timeout(timeout_s + 0.5):  # the SDK's own timeout is per read: this bounds the whole
            answer = await ask
    except Exception as exc:  # the SDKs' errors: said, with the class name the operator can look up
        status = getattr(exc, "status_code", None)
        if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
            says = f"{provider} ({name}) did not answer within {timeout_s:g}s"
        elif status in (400, 402, 429) and _billing(exc):  # out of credit (Anthropic: a 400): until billing is fixed
            return Check("Model", False, f"{provider} ({name}) refuses requests: the account is out of credit or "
                         f"quota ({getattr(exc, 'code', '') or 'billing'!s})", "add credit or raise the quota "
                         "in the provider's billing settings, or use another key")
        elif status in (500, 502, 503, 529) and client.base_url.host not in _OWN_HOSTS:
            # an endpoint of this installation's choosing (a proxy, a vLLM): failing is its fault, not an outage
            return Check("Model", False, f"{provider} ({name}) answered HTTP {status} at "
                         f"{safe_url(str(client.base_url))}: every run fails while it does",
                         f"check {provider.upper()}_BASE_URL and the server behind it (its log)")
        elif status in (429, 500, 502, 503, 529):  # the provider's own trouble: the setup is not at fault
            return Check("Model", False, f"{provider} ({name}) is overloaded or failing right now (HTTP {status}): "
                         "runs will fail or wait until it recovers", "none in the config: wait, or see the "
                         "provider's status page", required=False)
        elif status == 400:  # it answered, and refused what serve sends: every run would be refused the same
            return Check("Model", False, f"{provider} ({name}) refused a request as serve sends it (max_tokens "
                         f"{settings.llm.max_tokens}, with tools): {type(exc).__name__}: {str(exc)[:240]}",
                         "check llm.max_tokens against the model's output limit, llm.name, and that the endpoint "
                         "takes tools (vLLM: --enable-auto-tool-choice)")
        else:
            says = f"{provider} ({name}) did not answer a short request ({type(exc).__name__}: {str(exc)[:120]})"
        return Check("Model", False, says, "check the key, llm.name (or OPSPILOT_MODEL) and the network path to "
                                           f"the provider ({provider.upper()}_BASE_URL if you use one)")
    finally:  # its connections, now: left to the garbage collector, it closes itself on whatever loop runs then
        await client.close()
    # A proxy's login page, another API's JSON: the SDK hands back what it got, and every run would fail on it.
    expected = "Message" if provider == "anthropic" else "ChatCompletion"
    if type(answer).__name__ != expected or not (getattr(answer, "content", None) is not None or
                                                 getattr(answer, "choices", None)):
        kind = "an Anthropic message" if provider == "anthropic" else "an OpenAI chat completion"
        return Check("Model", False, f"something answered at the {provider} endpoint, but not {kind} "
                     f"({type(answer).__name__})",
                     f"point {provider.upper()}_BASE_URL at the provider's API (a proxy's login page answers "
                     "otherwise)")
    return Check("Model", True, f"{provider} answers as {name}")


def _billing(exc: BaseException) -> bool:
    """A refusal for want of credit (OpenAI's 429 ``insufficient_quota``; Anthropic's "credit balance is too
    low"), not a passing rate limit."""
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    said = error if isinstance(error, dict) else {}
    words = " ".join(str(v) for v in (said.get("code"), said.get("type"), said.get("message"),
                                      getattr(exc, "code", None)) if v).lower()
    return any(w in words for w in ("insufficient_quota", "billing", "credit balance", "quota exceeded"))

