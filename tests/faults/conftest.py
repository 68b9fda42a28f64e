from __future__ import annotations

import sys
from pathlib import Path

# The suite's harness (faultlib) sits beside its tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))
