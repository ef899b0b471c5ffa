"""Scrubbing secrets and personal data; bounding output with an explicit note."""

from __future__ import annotations

import json

from tools.hygiene import bound, clean, scrub_text


def test_secrets_and_personal_data_are_redacted() -> None:
    raw = ("token xoxb-123456789012-abcdefABCDEF key AKIAABCDEFGHIJKLMNOP "
           "Authorization: Bearer abc.def-ghi_jkl.mno123 "
           "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLWhlcmU "
           "dsn postgres://app:s3cretpass@db:5432/pay password=hunter22 "
           "mail oncall@example.com phone 13812345678 or (415) 555-0134 "
           "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----")
    out = scrub_text(raw)
    for secret in ("xoxb-1234", "AKIAABCDEF", "abc.def-ghi", "eyJhbGci", "s3cretpass", "hunter22",
                   "oncall@example.com", "13812345678", "555-0134", "MIIEow"):
        assert secret not in out, secret
    assert "postgres://app:[REDACTED]@db:5432/pay" in out
    assert scrub_text("order 12345 took 2024 ms") == "order 12345 took 2024 ms"


def test_long_output_is_bounded_and_says_what_was_left_out() -> None:
    data = {"lines": [f"line {i}" for i in range(500)], "note": "n" * 50}
    out = bound(data, 1000)
    assert len(json.dumps(out)) <= 1000
    assert any("more items omitted" in str(x) for x in out["lines"])
    text = bound("y" * 5000, 300)
    assert isinstance(text, str) and "more characters omitted" in text and len(text) < 400


def test_clean_scrubs_nested_values() -> None:
    assert clean({"k": ["a@b.io"]}, 1000) == {"k": ["[REDACTED email]"]}


def test_a_failure_s_stack_trace_and_error_page_are_cut_to_their_words() -> None:
    """An MCP server's error text with its Python traceback, or an upstream's HTML error page, reached the model and
    the user verbatim."""
    from tools.hygiene import scrub_text
    from tools.ops.http import _detail

    said = scrub_text("failed: Traceback (most recent call last):\n  File \"srv.py\", line 3, in call\n"
                      "    raise ValueError(\"boom\")\nValueError: boom")
    assert said == "failed: ValueError: boom (its stack trace left out)"
    assert _detail("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>") == "502 Bad Gateway"
    assert _detail("<html><body><h1>Oops</h1><p>upstream\n down</p></body></html>") == "Oops upstream down"


def test_a_result_with_nan_is_still_json() -> None:
    """An MCP server's structuredContent with NaN or Infinity put tokens no JSON parser takes into the result."""
    import json

    from core.messages import ok_content

    body = json.loads(ok_content({"p95": float("nan"), "peaks": [1.0, float("inf")], "ok": 2}))
    assert body == {"ok": True, "data": {"p95": None, "peaks": [1.0, None], "ok": 2}}
