from typing import Any, Mapping, Sequence

import numpy as np
import numpy.typing as npt

def expectations(
    qubits: int,
    circuits: Sequence[Sequence[Mapping[str, Any]]],
    device: str = "auto",
) -> npt.NDArray[np.float64]: ...
