"""The real GPU as one more stage of the tests that run the emulated one. Where there is an
NVIDIA GPU and its driver (scripts/gpu-check runs those tests there), the same programs run on
it and must give the same results; elsewhere `GPU` is False and no stage is added."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapeml.codegen import cuda_driver, get_backend

GPU = cuda_driver.available()


def run_on_gpu(module: Any, *args: np.ndarray, **options: Any) -> list[np.ndarray]:
    """The compiled module's results on the GPU, copied back to the host."""
    return [np.asarray(x) for x in get_backend("cuda", **options).compile(module)(*args)]
