from . import circuit as circuit
from . import lindblad as lindblad

__version__: str

def devices() -> list[str]: ...
def _panic_for_test() -> None: ...
