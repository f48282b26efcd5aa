import os
from typing import Any, Mapping

def train(
    config: str | os.PathLike[str] | Mapping[str, Any],
    device: str = "auto",
) -> dict[str, Any]: ...
