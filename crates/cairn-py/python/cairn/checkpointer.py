"""`Checkpointer`: checkpoint/restart of numpy arrays, buffers and small Python values.

A checkpointer is one engine (collective over an mpi4py communicator, or one process) bound
to a checkpoint name. What it saves:

- *regions*: any object exposing a writable, contiguous buffer (numpy arrays, ``bytearray``,
  ``array.array``, ...), protected under an integer id without copying. A restart writes the
  saved bytes back into the same objects. The element type comes from the buffer's format
  and is one of the C API's dtypes, so a C program that protects the same ids with the same
  types restores a checkpoint written from Python, and the reverse.
- *values*: ``ck.state``, a dict of small picklable objects (counters, RNG states, ...),
  pickled into one byte region at every checkpoint and put back into the same dict by a
  restart. The region has a fixed size (``value_capacity``), because a restart must know
  the size of every region before it reads them.

The loop helper :meth:`Checkpointer.steps` makes a loop restartable in two lines.
"""

from __future__ import annotations

import array
import os
import pickle
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar, Union

from . import _cairn
from .errors import CorruptError, InvalidArgumentError, MismatchError, StateError

__all__ = ["Checkpointer", "ExitRequested", "STEP_REGION", "VALUE_REGION", "DTYPES"]

#: Region id of the step counter of :meth:`Checkpointer.steps` (unless given another id).
STEP_REGION = 2**31 - 2
#: Region id of the pickled values of ``Checkpointer.state``.
VALUE_REGION = 2**31 - 1
#: The dtype names and their C API codes (``CAIRN_BYTE`` = 0 ... ``CAIRN_UINT64`` = 8).
DTYPES: dict[str, int] = dict(_cairn.DTYPES)

_HEADER = 8  # the value region starts with the pickle's length, 8 bytes little-endian

T = TypeVar("T")
Config = Union[str, "os.PathLike[str]", Mapping[str, object], None]


class ExitRequested(SystemExit):
    """Raised by :meth:`Checkpointer.steps` when :meth:`Checkpointer.should_exit` said stop.

    Every rank raises it after the same step, once the last checkpoint (version ``version``)
    is written, so the ``with`` block still finalizes (making it durable). It is a
    ``SystemExit`` with code 0: uncaught, the program ends quietly; catch it to do more.
    """

    def __init__(self, version: int) -> None:
        super().__init__(0)
        self.version = version


def _comm_handle(comm: Any) -> int:
    """The MPI_Comm handle of an mpi4py communicator, as an unsigned 64-bit integer."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise InvalidArgumentError(
            "comm= needs mpi4py (pip install --no-binary mpi4py mpi4py, against the same "
            "MPI library as cairn); pass comm=None for one process"
        ) from e
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator or None, not {type(comm).__name__}")
    if not MPI.Is_initialized() or MPI.Is_finalized():
        raise StateError(
            "MPI is not initialised (mpi4py.rc.initialize = False?) or already finalized: "
            "cairn never initialises MPI itself; call MPI.Init() first"
        )
    if comm == MPI.COMM_NULL:
        raise InvalidArgumentError("comm is MPI.COMM_NULL")
    if comm.Is_inter():
        raise InvalidArgumentError("comm is an intercommunicator; give an intracommunicator")
    handle = comm.handle if hasattr(comm, "handle") else MPI._handleof(comm)
    return int(handle) & 0xFFFF_FFFF_FFFF_FFFF


def _config_args(config: Config) -> tuple[str | None, list[tuple[str, str]]]:
    """A config file path or a mapping of dotted keys, as the engine takes them."""
    if config is None:
        return None, []
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config), []
    if isinstance(config, Mapping):
        overrides = []
        for key, value in config.items():
            if not isinstance(key, str):
                raise TypeError(f"config keys are dotted strings like 'cache.keep', not {key!r}")
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, os.PathLike):
                text = os.fspath(value)
            else:
                text = str(value)
            overrides.append((key, text))
        return None, overrides
    raise TypeError(
        "config must be a TOML file path, a mapping of dotted keys "
        f"(e.g. {{'cache.keep': 3}}) or None, not {type(config).__name__}"
    )


class Checkpointer:
    """Checkpoints of the name ``name``, collective over ``comm``.

    ``comm`` is an mpi4py communicator (the engine works on a duplicate of it) or None for
    one process. ``config`` is a TOML file, a mapping of dotted keys to values (``{"cache.keep":
    3, "tiers.global": "/scratch/ckpt"}``) or None; ``CAIRN_*`` environment variables apply
    too. ``value_capacity`` is the size in bytes of the region holding ``state`` and must be
    the same when restarting.

    Used as a context manager, leaving the block closes the checkpointer (:meth:`close`,
    which is collective) unless an exception other than :class:`ExitRequested` ends it: then
    the engine is released without the collective steps other ranks might never match.
    """

    def __init__(
        self,
        name: str,
        comm: Any = None,
        config: Config = None,
        *,
        value_capacity: int = 16384,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if not isinstance(value_capacity, int) or value_capacity < _HEADER + 16:
            raise InvalidArgumentError(f"value_capacity must be an int of at least {_HEADER + 16}")
        _cairn.check_name(name)
        handle = None if comm is None else _comm_handle(comm)
        path, overrides = _config_args(config)
        self._engine = _cairn.Engine(handle, path, overrides)
        self._comm = comm
        self.name = name
        #: Small picklable values saved with every checkpoint and restored in place.
        self.state: dict[str, Any] = {}
        self._values = bytearray(value_capacity)
        self._values_used = 0
        self._values_protected = False
        self._restored: int | None = None
        self._stepping = False
        self._after_restart: list[Callable[[], None]] = []

    # ---- the job ---------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank in the communicator (0 without one)."""
        return self._engine.rank

    @property
    def size(self) -> int:
        """The number of ranks (1 without a communicator)."""
        return self._engine.size

    @property
    def node(self) -> int:
        """This rank's node index (a simulated one with ``topology.sim_nodes``)."""
        return self._engine.node

    @property
    def nodes(self) -> int:
        """The number of (possibly simulated) nodes."""
        return self._engine.nodes

    @property
    def closed(self) -> bool:
        return self._engine.closed

    @property
    def restored_version(self) -> int | None:
        """The version the last restart of this run restored, or None."""
        return self._restored

    # ---- what is protected -----------------------------------------------------------------

    def protect(self, id: int, obj: T) -> T:
        """Protect ``obj``'s buffer under region ``id``, without copying; returns ``obj``.

        ``obj`` must stay the object you compute in: update it in place (``a[...] = ...``,
        ``out=``), because a restart writes into it and a checkpoint reads from it. Protecting
        an id again replaces its object. Raises :class:`InvalidArgumentError` for a read-only,
        non-contiguous or unsupported buffer (float16, bool, complex: protect
        ``a.view(numpy.uint8)``), ``TypeError`` for an object without a buffer.
        """
        if id in (STEP_REGION, VALUE_REGION):
            raise InvalidArgumentError(
                f"region id {id} is reserved for the {'step counter' if id == STEP_REGION else 'values in state'}"
            )
        self._engine.protect(id, obj)
        return obj

    def unprotect(self, id: int) -> None:
        """Stop protecting region ``id`` (releasing the object)."""
        self._engine.unprotect(id)

    def regions(self) -> dict[int, tuple[str, int]]:
        """``{id: (dtype, element count)}`` of the protected regions (the values region is
        listed only while it is in use)."""
        return self._engine.regions()

    def _pack_values(self) -> None:
        """Pickle ``state`` into the value region, or drop the region when ``state`` is empty."""
        if not self.state:
            self._protect_values(False)
            return
        data = pickle.dumps(self.state, protocol=pickle.HIGHEST_PROTOCOL)
        room = len(self._values) - _HEADER
        if len(data) > room:
            raise InvalidArgumentError(
                f"state pickles to {len(data)} bytes, more than the {room} that value_capacity="
                f"{len(self._values)} holds; pass a larger value_capacity (the same when "
                "restarting) or protect large data as arrays"
            )
        buf = memoryview(self._values)
        buf[:_HEADER] = len(data).to_bytes(_HEADER, "little")
        buf[_HEADER : _HEADER + len(data)] = data
        if self._values_used > len(data):  # clear what a longer pickle left behind
            buf[_HEADER + len(data) : _HEADER + self._values_used] = bytes(self._values_used - len(data))
        self._values_used = len(data)
        self._protect_values(True)

    def _protect_values(self, on: bool) -> None:
        if on and not self._values_protected:
            self._engine.protect(VALUE_REGION, self._values)
        elif not on and self._values_protected:
            self._engine.unprotect(VALUE_REGION)
        self._values_protected = on

    def _unpack_values(self) -> None:
        n = int.from_bytes(self._values[:_HEADER], "little")
        if n > len(self._values) - _HEADER:
            raise CorruptError(f"checkpoint {self.name}: the values region claims {n} bytes, more than it holds")
        restored = pickle.loads(self._values[_HEADER : _HEADER + n])
        if not isinstance(restored, dict):
            raise CorruptError(f"checkpoint {self.name}: the values region does not hold a dict")
        self._values_used = n
        self.state.clear()
        self.state.update(restored)

    # ---- checkpoint and restart ------------------------------------------------------------

    def checkpoint(self, version: int) -> None:
        """Collective: write checkpoint ``version`` of every protected region and ``state``.

        Returns once it is captured on every rank. Versions must increase within a run;
        checkpointing the version just restored does nothing.
        """
        self._pack_values()
        self._engine.checkpoint(self.name, version)

    def restart_test(self) -> int | None:
        """Collective: the newest version every rank can restore, or None."""
        return self._engine.restart_test(self.name)

    def restart(self, version: int) -> int:
        """Collective: restore the protected regions and ``state`` from ``version``.

        Put values into ``state`` before restarting, as you protect arrays before it: the
        values region is read only when ``state`` is not empty, and the restart then replaces
        the dict's contents with the saved ones. If ``version`` is damaged on any rank, the
        newest older version every rank can restore is used; returns the version restored.
        """
        self._protect_values(bool(self.state))
        try:
            version = self._engine.restart(self.name, version)
        except MismatchError as e:
            raise MismatchError(self._explain(str(e))) from None
        if self._values_protected:
            self._unpack_values()
        self._restored = version
        for hook in self._after_restart:
            hook()
        return version

    def _explain(self, message: str) -> str:
        notes = []
        if f"region {VALUE_REGION}" in message:
            notes.append(
                f"region {VALUE_REGION} holds the values of ck.state: fill state before "
                "restarting exactly when the checkpoint was written with values, with the "
                "same value_capacity"
            )
        if f"region {STEP_REGION}" in message:
            notes.append(f"region {STEP_REGION} is the step counter of ck.steps()")
        return message + "".join(f" ({n})" for n in notes)

    def resume(self) -> int | None:
        """Collective: restore the newest checkpoint every rank can restore, if there is one;
        returns its version, or None (leaving everything as it is)."""
        version = self.restart_test()
        return None if version is None else self.restart(version)

    def need_checkpoint(self) -> bool:
        """Whether the configured policy (``checkpoint.every`` / ``checkpoint.seconds``) says
        a checkpoint is due; each call counts as one step. Collective with a time policy."""
        return self._engine.need_checkpoint()

    def checkpoint_if_due(self, version: int) -> bool:
        """Checkpoint ``version`` if :meth:`need_checkpoint` says so; returns whether it did."""
        due = self.need_checkpoint()
        if due:
            self.checkpoint(version)
        return due

    def should_exit(self) -> bool:
        """Collective: whether the run should stop now (time limit near, halt file, SIGTERM or
        SIGUSR1 with ``exit.signals``). Once true, stays true."""
        return self._engine.should_exit()

    def test(self, version: int) -> str | None:
        """Collective: the state of ``version``: ``"captured"``, ``"protected"``,
        ``"durable"`` or None when no tier holds it. Never waits for a flush."""
        return self._engine.test(self.name, version)

    def wait(self, version: int) -> None:
        """Collective: make ``version`` durable on the global tier and wait until it is."""
        self._engine.wait(self.name, version)

    def stats(self) -> dict[str, Any]:
        """This rank's counters: checkpoints, bytes written and stored, restarts, flushes."""
        return self._engine.stats()

    # ---- the loop helper -------------------------------------------------------------------

    def steps(self, iterable: Iterable[T], *, every: int | None = None, id: int = STEP_REGION) -> Iterator[T]:
        """Make a loop restartable: ``for step in ck.steps(range(n)):``.

        Call it after protecting the loop's state (and filling ``state``). It restores the
        newest checkpoint, if any, and skips the items already done; after each completed
        item it checkpoints with version = the number of items done, every ``every`` items,
        or when :meth:`need_checkpoint` says so if ``every`` is None. When
        :meth:`should_exit` says stop, it checkpoints (if it just did not) and raises
        :class:`ExitRequested`. A ``break`` or an exception in the loop body writes nothing.

        The counter of items done is an int64 region, ``id``: pass ``id=0`` to share the
        layout of a C program that protects its step counter as region 0 and checkpoints
        with version = step.
        """
        if self._stepping:
            raise StateError("steps() can be used once per Checkpointer")
        if self._restored is not None:
            raise StateError("steps() restores by itself: call it instead of resume() or restart(), not after")
        if every is not None and (not isinstance(every, int) or every < 0):
            raise InvalidArgumentError(f"every must be None or an int >= 0, not {every!r}")
        if id != STEP_REGION and id in self.regions():
            raise InvalidArgumentError(f"steps(id={id}): region {id} is already protected")
        counter = array.array("q", [0])
        self._engine.protect(id, counter)
        self._stepping = True
        done = counter[0] if self.resume() is not None else 0
        return self._loop(iter(iterable), counter, done, every)

    def _loop(self, items: Iterator[T], counter: array.array[int], done: int, every: int | None) -> Iterator[T]:
        for _ in range(done):
            if next(items, _END) is _END:
                return
        for item in items:
            yield item
            done += 1
            counter[0] = done
            due = self.need_checkpoint() if every is None else every > 0 and done % every == 0
            if due:
                self.checkpoint(done)
            if self.should_exit():
                if not due:
                    self.checkpoint(done)
                raise ExitRequested(done)

    # ---- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        """Collective: make the newest checkpoint durable, wait for background work, release
        the engine and the protected objects. A second call does nothing."""
        self._engine.finalize()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or issubclass(exc_type, ExitRequested):
            self.close()
        else:
            self._engine.release()

    def __repr__(self) -> str:
        where = "closed" if self.closed else f"rank {self.rank} of {self.size}"
        return f"<cairn.Checkpointer {self.name!r} {where}>"


_END: Any = object()
