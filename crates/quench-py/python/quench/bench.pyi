import os
from typing import Any, Sequence

def run(
    suite: str | os.PathLike[str] | None = None,
    *,
    device: str = "auto",
    only: str | Sequence[str] | None = None,
    variants: str | Sequence[str] | None = None,
    precision: str | None = None,
    repeats: int | None = None,
    out: str | os.PathLike[str] | None = None,
    peers: bool = False,
    python: str | os.PathLike[str] | None = None,
) -> dict[str, Any]: ...
