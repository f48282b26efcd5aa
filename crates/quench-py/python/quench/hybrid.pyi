import os
from typing import Any, Mapping

def train(
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    device: str = "auto",
) -> dict[str, Any]: ...
