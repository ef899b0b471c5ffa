"""Real-shaped secrets inside the places they turn up (log lines, runbooks, tool arguments, questions), and the
ordinary lines an ops bot reads all day, which must come through untouched. The secrets are made up; their
shapes are the providers' own."""

from __future__ import annotations

import random

# (the line it appears in, the secret itself): after redaction the secret must be gone from the line.
SECRETS: list[tuple[str, str]] = [
    # AWS
    ("2026-12-01T10:00:01Z ERROR boto: aws_secret_access_key={s} rejected", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("export AWS_SECRET_ACCESS_KEY={s}", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"),
    ("credentials file line: {s}", "Zq3Ab9Kd7Lm2Np5Rs8Tv1Wx4Yz6Bc0De3Fg7Hj9K"),
    ("using access key {s} for s3://payments-exports", "AKIAIOSFODNN7EXAMPLE"),
    ("assumed role, temporary key {s}", "ASIAY34FZKBOKMUTVV7A"),
    # GitHub / GitLab
    ("git clone https://{s}@github.com/acme/payments.git", "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"),
    ("GITHUB_TOKEN: {s}", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("runner registered with {s}", "ghs_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"),
    ("fine-grained token {s} expires soon",
     "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"),
    ("curl --header 'PRIVATE-TOKEN: {s}' https://gitlab.example.com/api/v4/projects", "glpat-Xk9vQ2mZr7TbLw4NyH8c"),
    # Slack
    ("slack client init token={s}", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("user token {s} was revoked", "xoxp-123456789012-123456789012-123456789012-0123456789abcdef0123456789abcdef"),
    ("socket mode with {s}", "xapp-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef"),
    ("alert hook {s} returned 404", "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/AbCdEfGhIjKlMnOpQrStUvWx"),
    # Stripe
    ("stripe.api_key = '{s}'", "sk_live_51H8xYzAbCdEfGhIjKlMnOpQr"),
    ("restricted key {s} used by refunds-worker", "rk_live_51H8xYzAbCdEfGhIjKlMnOpQrSt"),
    ("webhook signing secret {s}", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    # Google
    ("maps client key={s}", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"),
    ("oauth client secret {s}", "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"),
    ("Authorization header had {s}", "ya29.a0AfH6SMBx-abcDEF123ghiJKL456mnoPQR789"),
    # Azure
    ("DefaultEndpointsProtocol=https;AccountName=payexports;AccountKey={s};EndpointSuffix=core.windows.net",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="),
    ("Endpoint=sb://pay.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={s}",
     "K8fjJHlq3sHkn3Kp2DGw7VXf0y0aKf3VjzG2YjT1QhE="),
    ("GET https://payexports.blob.core.windows.net/c/f.csv?sv=2021-06-08&se=2026-12-31&sig={s}",
     "Xq1%2BvJk9Lr3Ty7Pq2Wm8Zn5Bc4Df6Gh0Jk1Lm2Np3Q%3D"),
    # OpenAI / Anthropic
    ("openai.api_key set to {s}", "sk-proj-Ab3dEf5gHi7jKl9mNo1pQr3sTu5vWx7yZa9bCd1eFg3hIj5kLm7n"),
    ("legacy key {s}", "sk-T3BlbkFJaBcDeFgHiJkLmNoPqRsTuVwXyZ012345678"),
    ("ANTHROPIC_API_KEY={s}", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdefAA"),
    ("tool output: {s}", "sk-ant-api03-Zq8Xy2Wv4Ut6Sr8Qp0On2Ml4Kj6Ih8Gf0Ed2Cb4Az6Yx8Wv0Ut2Sr4Qp6On8Ml0Kj2Ih4Gf6Ed8"
                         "Cb0Az2Yx4Wv6Ut8Sr0Qp2On4Ml6_-AA"),
    ('{{"anthropic": "{s}"}}', "sk-ant-admin01-Hq3Jw5Ke7Lr9Mt1Ny3Pu5Qi7Ro9Sp1Ta3Ub5Vc7Wd9Xe1Yf3Zg5Ah7Bi9Cj1Dk3El5"
                               "Fm7Gn9"),
    # npm
    ("//registry.npmjs.org/:_authToken={s}", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("NPM publish with {s} failed: 403", "npm_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"),
    ("//npm.internal.example.com/:_authToken={s}", "3f1c9a2e-77b4-4d0e-9c51-8a6b2f0e4d71"),
    ("//registry.example.com/:_auth={s}", "dXNlcjpzM2NyM3RwYXNzd29yZA=="),
    # HTTP Token scheme (Rails, DRF and friends)
    ("Authorization: Token {s}", "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"),
    ("curl -H 'Authorization: Token {s}' https://api.internal/v1", "tok_5f3b2a1c9d8e7f6a5b4c3d2e"),
    # private keys, JWTs, HTTP auth
    ("{s}", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq3x\nq2w3e4r5t6y7u8i9o0p\n"
            "-----END RSA PRIVATE KEY-----"),
    ("deploy key: {s}", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n"
                        "-----END OPENSSH PRIVATE KEY-----"),
    ("session cookie {s}", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1MTIzIiwicm9sZSI6ImFkbWluIn0."
                           "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    ("proxy log: Authorization: Basic {s}", "YWRtaW46c3VwZXJzZWNyZXQxMjM="),
    ("upstream call with Authorization: Bearer {s}", "9f8e7d6c5b4a39281706f5e4d3c2b1a0zz"),
    ("curl -H 'X-Api-Key: {s}' https://api.internal/v1/charges", "4f9c2a7e1b8d3f6a0c5e9b2d7f1a4c8e"),
    # credentials in URLs
    ("connecting to postgres://payments:{s}@db-primary:5432/payments", "Pg_s3cret!2026"),
    ("REDIS_URL=redis://:{s}@cache-1:6379/0", "r3dis-Pa55word"),
    ("amqp://orders:{s}@rabbit.internal:5672/vhost", "Rabb1tPassw0rd"),
    # keyword assignments, every separator and quoting
    ("DB_PASSWORD={s}", "Tr0ub4dor&3horse"),
    ('{{"user": "app", "password": "{s}"}}', "correct-horse-battery-9"),
    ("client.secret = {s}", "c1i3nt-s3cr3t-v4lu3"),
    ("api-key: {s}", "a8f5f167f44f4964e6c998dee827110c"),
    ("spring.datasource.password: {s}", "P@ssw0rd2026!"),
    ("Private Key = {s}", "5KYZdUEo39z3FPrtuX2QbbwGnNP5zTd7yyr2SC1j299sBCnWjss"),
    ("the admin password is {s}, do not share it", "hunter2hunter2"),
    ("SMTP credential: {s}", "smtp-cred-7f3a9b"),
    ("vault token={s}", "hvs.CAESIJlHbNqKx8z9aBcDeFgHiJkLmNoPqRsTuVwXyZ"),
    ("passwd => '{s}'", "Zx9!kq2#Lm"),
    # personal data
    ("ticket opened by {s}", "oncall.alice@example.com"),
    ("call the on-call phone {s}", "+1 415-555-0134"),
    ("客户手机号 {s} 支付失败", "13812345678"),
]

_SERVICES = ["payments", "orders", "gateway", "billing-ledger", "inventory", "search", "auth", "notifications"]
_TEMPLATES = [
    "{ts} INFO  {svc} request_id={uuid} GET /api/v1/orders/{n} 200 {ms}ms",
    "{ts} WARN  {svc} slow query took {ms}ms: SELECT * FROM charges WHERE id = {n}",
    "{ts} ERROR {svc} timeout acquiring connection from pool (active={k}, idle=0, waiting={k2})",
    "{ts} INFO  deploy {svc}@{sha} rolled out to prod ({k}/{k} pods ready)",
    "{ts} INFO  image registry.internal/{svc}@sha256:{sha256} pulled in {ms}ms",
    "{ts} DEBUG trace_id={hex32} span_id={hex16} parent={hex16} {svc}.handle",
    "{ip} - - [{clf}] \"GET /health HTTP/1.1\" 200 {n} \"-\" \"kube-probe/1.29\"",
    "{ts} INFO  pod {svc}-{rs}-{pod} restarted (exit code 137, OOMKilled)",
    "{ts} ERROR {svc} upstream https://{svc}.internal:8443/v2/charge?attempt={k}&idempotency_key={uuid} failed",
    "{ts} INFO  {svc} token refreshed for user {n} (ttl=3600s)",
    "{ts} WARN  {svc} invalid token for session {uuid}: token expired",
    "{ts} INFO  {svc} password reset requested for account {n}",
    "{ts} INFO  secret rotation for {svc} completed in {ms}ms",
    "{ts} INFO  {svc} s3://acme-{svc}-exports/{date}/part-{k}.csv.gz uploaded ({n} bytes)",
    "{ts} INFO  arn:aws:iam::{acct}:role/{svc}-runner assumed",
    "{ts} INFO  commit {sha} by ci merged into main (#{k})",
    "{ts} INFO  {svc} cursor={b64} page={k}",
    "{ts} ERROR java.lang.IllegalStateException: pool exhausted at com.acme.{svc}.Pool.acquire(Pool.java:{k})",
    "{ts} INFO  {svc} api_key_id={k} rotated; api key last used {date}",
    "{ts} INFO  {svc} token_ttl={k} max_tokens={n} temperature=0.2",
    "{ts} INFO  kafka offset {n} partition {k} lag {k2} for topic {svc}.events",
    "{ts} WARN  {svc} retry {k}/5 after 503 from 10.0.{k}.{k2}:9090",
    "{ts} INFO  build {b36} finished: {svc} v1.{k}.{k2}",
    "{ts} INFO  {svc} order {n} charged 42.{k2} EUR, card ending 4242",
    "{ts} INFO  etag W/\"{hex32}\" for /catalog/{svc}",
    "{ts} DEBUG s3 response x-amz-request-id={hex16} x-amz-id-2={b64long}",
    "{ts} INFO  {svc} event_time={epoch_ms} received_at={epoch_s} phone_verified=false",
    "{ts} INFO  {svc} GET https://grafana.internal/d/{b36}/{svc}?orgId=1&from={epoch_ms}&to=now",
]


def ordinary_lines(count: int = 250, seed: int = 7) -> list[str]:
    """Log lines full of ids, hashes, URLs and timestamps, with no secret in them."""
    rnd = random.Random(seed)

    def hexs(n: int) -> str:
        return "".join(rnd.choice("0123456789abcdef") for _ in range(n))

    def chars(alphabet: str, n: int) -> str:
        return "".join(rnd.choice(alphabet) for _ in range(n))

    lines = []
    for i in range(count):
        template = _TEMPLATES[i % len(_TEMPLATES)]
        lines.append(template.format(
            ts=f"2026-12-0{rnd.randint(1, 9)}T{rnd.randint(0, 23):02d}:{rnd.randint(0, 59):02d}:"
               f"{rnd.randint(0, 59):02d}.{rnd.randint(0, 999):03d}Z",
            clf=f"0{rnd.randint(1, 9)}/Dec/2026:{rnd.randint(10, 23)}:{rnd.randint(10, 59)}:11 +0000",
            svc=rnd.choice(_SERVICES), uuid=f"{hexs(8)}-{hexs(4)}-4{hexs(3)}-a{hexs(3)}-{hexs(12)}",
            n=rnd.randint(1000, 99_999_999), ms=rnd.randint(1, 30_000), k=rnd.randint(1, 99), k2=rnd.randint(0, 99),
            sha=hexs(40), sha256=hexs(64), hex32=hexs(32), hex16=hexs(16),
            ip=f"10.{rnd.randint(0, 255)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}",
            rs=chars("bcdfghjklmnpqrstvwxz2456789", 10), pod=chars("bcdfghjklmnpqrstvwxz2456789", 5),
            date=f"2026-11-{rnd.randint(10, 30)}", acct=rnd.randint(10**11, 10**12 - 1),
            b64=chars("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 24),
            b36=chars("abcdefghijklmnopqrstuvwxyz0123456789", 12),
            b64long=chars("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 76) + "=",
            epoch_ms=rnd.randint(1_700_000_000_000, 1_800_000_000_000),
            epoch_s=rnd.randint(1_700_000_000, 1_800_000_000)))
    return lines
