"""Cairn: multi-level checkpoint/restart for HPC applications, from Python.

Protect numpy arrays (or any writable buffer) and small Python values, then checkpoint and
restart them with the same engine, storage and data model as the C library::

    import numpy as np
    from mpi4py import MPI
    import cairn

    with cairn.Checkpointer("heat", MPI.COMM_WORLD) as ck:
        u = ck.protect(1, np.zeros((rows, cols)))
        for step in ck.steps(range(1000), every=100):   # resumes, checkpoints every 100
            compute(u)

The principal names are :class:`Checkpointer`, its loop helper :meth:`Checkpointer.steps`,
and the exceptions in :mod:`cairn.errors`, rooted at :class:`CairnError`. The PyTorch helper
is :mod:`cairn.torch`.
"""

# Re-exported names are imported "as" themselves, so type checkers see them as the package's.
from . import errors as errors
from ._cairn import __version__ as __version__
from .checkpointer import DTYPES as DTYPES
from .checkpointer import STEP_REGION as STEP_REGION
from .checkpointer import VALUE_REGION as VALUE_REGION
from .checkpointer import Checkpointer as Checkpointer
from .checkpointer import ExitRequested as ExitRequested
from .checkpointer import FileSet as FileSet
from .checkpointer import RestoredFiles as RestoredFiles
from .errors import *  # noqa: F403 - the exception classes, named in errors.__all__
