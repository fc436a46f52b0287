"""What a coordinator or client process loads at start: every federation starts several, so an
import at module level of a package only an opt-in feature uses costs each of them its CPU
seconds (scikit-learn with SciPy: about 1 s a process)."""

from __future__ import annotations

import subprocess
import sys

HEAVY_OPTIONAL = ("sklearn", "scipy", "pandas", "lightgbm")


def test_given_the_client_and_coordinator_when_imported_then_no_optional_heavy_package() -> None:
    code = (
        "import sys, vfl_client.runner, vfl_coordinator.runner; "
        f"print(sorted(m for m in {HEAVY_OPTIONAL!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
