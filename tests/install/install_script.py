"""scripts/install.py as a module (scripts/ is not a package: it is run as a file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install.py"


def install_script() -> ModuleType:
    if "dg_install_script" not in sys.modules:
        spec = importlib.util.spec_from_file_location("dg_install_script", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["dg_install_script"] = module
        spec.loader.exec_module(module)
    return sys.modules["dg_install_script"]
