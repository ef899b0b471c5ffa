"""How MCP tool servers are configured (``mcp_servers:`` in the settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ConfirmIn(BaseModel):
    """Ask a person only when the argument ``field`` names one of these environments."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    environments: list[str] = Field(alias="in", min_length=1, description="environments where a person confirms")
    field: str = Field("environment", description="the tool argument that names the environment")

    @field_validator("environments")
    @classmethod
    def _folded(cls, value: list[str]) -> list[str]:
        return [e.strip().lower() for e in value]  # compared case-folded, like every environment


class McpToolRule(BaseModel):
    """Per-tool rules. Annotations come from a server we do not control: ``read_only: false`` treats a tool
    the server calls read-only as a change; ``read_only: true`` is the operator's trust for a tool whose
    server says nothing (no ``readOnlyHint``, no ``destructiveHint: true``), and is ignored for one the server
    marks as a change: config never overrides what the server said to loosen it."""

    model_config = ConfigDict(extra="forbid")

    read_only: bool | None = Field(None, description="false: treat as a change; true: trust as read-only a tool "
                                   "its server says nothing about")
    confirm: Literal["always", "never"] | ConfirmIn = Field(
        "always", description="for a tool that changes things: ask a person always, never, or in some environments")
    timeout_s: float | None = Field(None, gt=0, description="per call (default: the server's)")


class McpServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9-]{1,24}$", description="prefix of its tools: <name>__<tool>")
    command: str | None = Field(None, description="stdio: the program to start")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: environment values for the server")
    env_from: dict[str, str] = Field(default_factory=dict,
                                     description="stdio: server variable -> name of our environment variable")
    cwd: str | None = Field(None, description="stdio: its working directory")
    url: str | None = Field(None, description="streamable HTTP: the server's MCP endpoint")
    headers_from_env: dict[str, str] = Field(default_factory=dict,
                                             description="HTTP header -> name of the environment variable holding it")
    allow: list[str] = Field(default_factory=list, description="only these tools (server names); empty: all")
    deny: list[str] = Field(default_factory=list, description="never these tools")
    tools: dict[str, McpToolRule] = Field(default_factory=dict, description="rules per tool (server names)")
    required: bool = Field(False, description="true: OpsPilot does not start without this server")
    timeout_s: float = Field(30.0, gt=0, description="per call")
    startup_timeout_s: float = Field(20.0, gt=0, description="to start and list its tools")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name!r}: give exactly one of command (stdio) or url (HTTP)")
        return self

    def rule(self, tool: str) -> McpToolRule:
        return self.tools.get(tool) or McpToolRule()
