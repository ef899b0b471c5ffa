# Sourced by scripts/test: the Debian packages the tests need (a Redis server, Chromium for the browser
# test, fonts so its screenshots show Chinese text and emoji, Prometheus and Alertmanager for the alert tests). Installed when missing and we are root.
need=()
# redis-server is needed even when a Redis answers: the outage tests stop and restart one of their own,
# and the Cluster tests start three (joined with redis-cli, from redis-tools).
if ! command -v redis-server >/dev/null; then need+=(redis-server); fi
if ! command -v redis-cli >/dev/null; then need+=(redis-tools); fi
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null; then need+=(chromium); fi
# Each alert test starts its own Prometheus and Alertmanager on free ports (the packages' services stay off).
if ! command -v prometheus >/dev/null; then need+=(prometheus); fi
if ! command -v prometheus-alertmanager >/dev/null; then need+=(prometheus-alertmanager); fi
if ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then need+=(fonts-noto-cjk fonts-noto-color-emoji); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing from Debian's packages: ${need[*]}" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "Missing system packages: ${need[*]} (install them, e.g. sudo apt-get install ${need[*]})" >&2
  fi
fi
