import os
from typing import Any, Mapping

def classify(
    config: str | os.PathLike[str] | Mapping[str, Any],
    data: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    device: str = "auto",
) -> dict[str, Any]: ...
def tournament(
    config: str | os.PathLike[str] | Mapping[str, Any],
    data: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    device: str = "auto",
) -> dict[str, Any]: ...
