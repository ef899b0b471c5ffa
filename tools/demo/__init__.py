"""Demo toolbox over bundled data: search_resource, search_docs (read-only) and restart_service
(mutating, confirmation required in prod) against an in-memory restart backend.

It exists so the engine can be exercised end to end offline. Real backends are a separate issue.
"""

from tools.demo.catalog import Catalog, Service
from tools.demo.docs import DocIndex
from tools.demo.toolbox import DemoRestarts, Toolbox, build

__all__ = ["Catalog", "DemoRestarts", "DocIndex", "Service", "Toolbox", "build"]
