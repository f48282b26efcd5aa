from typing import Literal, Optional, Sequence

import numpy as np
import numpy.typing as npt

Method = Literal["exact", "rk4", "euler"]

class System:
    def __init__(
        self,
        drift: npt.ArrayLike,
        controls: Sequence[npt.ArrayLike] = ...,
        jumps: Sequence[npt.ArrayLike] = ...,
    ) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def controls(self) -> int: ...
    @property
    def jumps(self) -> int: ...

def evolve(
    system: System,
    rho0: npt.ArrayLike,
    amplitudes: npt.ArrayLike,
    rates: npt.ArrayLike,
    t_total: float,
    method: Method = "exact",
    dt: Optional[float] = None,
    device: str = "auto",
) -> npt.NDArray[np.complex128]: ...
def fidelity_and_grad(
    system: System,
    rho0: npt.ArrayLike,
    amplitudes: npt.ArrayLike,
    rates: npt.ArrayLike,
    t_total: float,
    target: npt.ArrayLike,
    method: Method = "exact",
    dt: Optional[float] = None,
    device: str = "auto",
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
