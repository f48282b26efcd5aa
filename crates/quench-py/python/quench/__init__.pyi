from typing import Any

from . import bench as bench
from . import circuit as circuit
from . import hybrid as hybrid
from . import lindblad as lindblad
from . import meta as meta
from . import qrng as qrng
from . import sgld as sgld
from . import temporal as temporal

__version__: str

def devices() -> list[str]: ...
def doctor(device: str = "auto") -> dict[str, Any]: ...
def set_max_hours(hours: float) -> float: ...
def _panic_for_test() -> None: ...
