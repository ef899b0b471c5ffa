"""The tool runtime: declare tools, register them, run the model's calls.

Public API for teams writing their own tools (see docs/tools.md, "Writing a tool")::

    from pydantic import BaseModel
    from tools import tool, ToolContext, NotFound

    class Args(BaseModel):
        service_id: str

    @tool(description="Show who is on call for a service.")
    async def who_is_on_call(args: Args, ctx: ToolContext) -> dict[str, str]:
        ...

List the module under ``plugins:`` in the config; every ``ToolSpec`` it defines at
module level (or returns from ``opspilot_tools(config)``) is registered.
"""

from tools.registry import Registry, ToolContext, ToolDefinition, ToolSpec, always, confirm_in, never, tool
from tools.tool_errors import (
    ConfirmRisky,
    Interrupt,
    InvalidArguments,
    NotFound,
    ParamsRequired,
    PermissionDenied,
    ToolError,
    ToolTimeout,
    UpstreamError,
)

__all__ = [
    "ConfirmRisky",
    "Interrupt",
    "InvalidArguments",
    "NotFound",
    "ParamsRequired",
    "PermissionDenied",
    "Registry",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolSpec",
    "ToolTimeout",
    "UpstreamError",
    "always",
    "confirm_in",
    "never",
    "tool",
]
