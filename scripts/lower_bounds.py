"""Print pip constraints pinning every dependency to the lowest version pyproject.toml allows.

CI installs the project a second time with these (``pip install -c``) and runs the tests there, so
a bound that no longer holds (a test or a feature that needs a newer release) fails CI instead of a
user's install:

    python scripts/lower_bounds.py cpu test > lower.txt
    pip install -c lower.txt -e ".[cpu,test]"
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LOWER = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def constraints(extras: list[str]) -> list[str]:
    """``name==lowest`` for the dependencies and the named extras that state a lower bound."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    out = []
    for spec in specs:
        m = _LOWER.match(spec)
        if m:
            out.append(f"{m.group(1)}=={m.group(2)}")
    return out


if __name__ == "__main__":
    print("\n".join(constraints(sys.argv[1:])))
