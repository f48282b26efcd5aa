from . import circuit as circuit
from . import lindblad as lindblad
from . import meta as meta
from . import sgld as sgld

__version__: str

def devices() -> list[str]: ...
def _panic_for_test() -> None: ...
