# Sourced by scripts/test: the MCP servers the tests connect to, each in its own virtualenv (they pin their
# own dependencies), from the package registry: prometheus-mcp-server and mcp-server-git.
# Installed once per version; MCP_SERVERS_HOME says where (default: .mcp-servers/ in the checkout).
set -euo pipefail
MCP_DIR="${MCP_SERVERS_HOME:-$ROOT/.mcp-servers}"
export MCP_SERVERS_HOME="$MCP_DIR"
for pinned in "prometheus-mcp-server==1.6.2" "mcp-server-git==2026.10.19"; do
  name="${pinned%%==*}"
  if [ ! -f "$MCP_DIR/$name/.installed-$pinned" ]; then
    echo "Installing the MCP server $pinned into $MCP_DIR/$name ..." >&2
    rm -rf "${MCP_DIR:?}/$name"
    "${PYTHON:-python3}" -m venv "$MCP_DIR/$name"
    if ! "$MCP_DIR/$name/bin/python" -m pip install --quiet --disable-pip-version-check "$pinned" \
        >"$MCP_DIR/$name.log" 2>&1; then
      cat "$MCP_DIR/$name.log" >&2
      echo "Could not install the MCP server $pinned (see above)." >&2
      exit 1
    fi
    touch "$MCP_DIR/$name/.installed-$pinned"
  fi
done
