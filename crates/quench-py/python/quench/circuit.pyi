from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import numpy.typing as npt

def expectations(
    qubits: int,
    circuits: Sequence[Sequence[Mapping[str, Any]]],
    device: str = "auto",
) -> npt.NDArray[np.float64]: ...

class CircuitRun(NamedTuple):
    z: npt.NDArray[np.float64]
    zz: npt.NDArray[np.float64]
    inputs_grad: npt.NDArray[np.float64] | None
    weights_grad: npt.NDArray[np.float64] | None

def run(
    qubits: int,
    gates: Sequence[Mapping[str, Any]],
    inputs: npt.ArrayLike | None = None,
    weights: npt.ArrayLike | None = None,
    pairs: Sequence[tuple[int, int]] = (),
    z_cotangent: npt.ArrayLike | None = None,
    zz_cotangent: npt.ArrayLike | None = None,
    device: str = "auto",
) -> CircuitRun: ...
