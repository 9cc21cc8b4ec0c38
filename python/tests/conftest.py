import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(REPO, "models", "default")
MOE_MODEL = os.path.join(REPO, "models", "default-moe")


@pytest.fixture
def flashroll_bin():
    """The built flashroll binary ($FLASHROLL_BIN, which ctest sets)."""
    path = os.environ.get("FLASHROLL_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.skip(f"FLASHROLL_BIN is {'unset' if not path else 'not executable: ' + path}; "
                    "ctest sets it to the built flashroll")
    return path
