# OpsPilot's image: `docker build -t opspilot .` (or podman / buildah). How to run it: docs/deployment.md.
ARG PYTHON_VERSION=3.11

# Build stage: a virtualenv with every dependency, from wheels only (nothing is compiled), and OpsPilot itself.
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /app
# The dependencies first, from pyproject.toml alone: a change to the code reuses this layer. The core and every
# runtime extra (kubernetes, mcp, openai, otel: the `all` extra), so one image serves any configuration.
COPY pyproject.toml README.md ./
RUN python -m venv /opt/venv \
 && python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; o = p['optional-dependencies']; print('\n'.join(p['dependencies'] + [d for e in ('kubernetes', 'mcp', 'openai', 'otel') for d in o[e]]))" \
      > /tmp/requirements.txt \
 && /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: -r /tmp/requirements.txt
COPY manifest.yml ./
COPY bot ./bot
COPY core ./core
COPY state ./state
COPY tools ./tools
COPY examples ./examples
COPY evals ./evals
# Installed in place (editable): the demo data (examples/), manifest.yml (opspilot check) and evals/ are read
# beside the code, so /app is copied to the same path below. Byte-compiled now: the final filesystem is read-only.
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps -e . \
 && /opt/venv/bin/python -m compileall -q /app/bot /app/core /app/state /app/tools

# Final stage: the slim Python image, no compilers, the venv and the code, run as an unprivileged user.
FROM python:${PYTHON_VERSION}-slim-bookworm
RUN groupadd --gid 10001 opspilot \
 && useradd --uid 10001 --gid opspilot --home-dir /home/opspilot --create-home opspilot
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=3000
WORKDIR /app
USER 10001:10001
EXPOSE 3000
# Alive, not ready: /healthz never asks Redis, so an outage does not get the container replaced.
# (Compose's services check /readyz instead; Kubernetes ignores this and uses its own probes.)
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PORT', '3000') + '/healthz', timeout=4)"]
ENTRYPOINT ["opspilot"]
CMD ["serve"]
