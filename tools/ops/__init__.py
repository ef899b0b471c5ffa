"""The ops toolbox: service catalog, runbook search, logs, metrics and verified restarts, each behind a
small backend interface chosen in the config, each with an offline variant over ``examples/demo``."""

from tools.ops.catalog import Catalog, CatalogError, Service
from tools.ops.docs import DocIndex
from tools.ops.restart import DemoRestarts
from tools.ops.toolbox import DEMO_DATA, Toolbox, build
from tools.ops.toolbox_config import OpsConfig

__all__ = ["DEMO_DATA", "Catalog", "CatalogError", "DemoRestarts", "DocIndex", "OpsConfig", "Service", "Toolbox",
           "build"]
