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
import contextlib
import os
import pickle
import warnings
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar, Union

from . import _cairn
from .errors import CorruptError, InvalidArgumentError, MismatchError, StateError

__all__ = [
    "Checkpointer",
    "ExitRequested",
    "FileSet",
    "RestoredFiles",
    "STEP_REGION",
    "VALUE_REGION",
    "DTYPES",
]

#: Region id of the step counter of :meth:`Checkpointer.steps` (unless given another id).
STEP_REGION = 2**31 - 2
#: Region id of the pickled values of ``Checkpointer.state``.
VALUE_REGION = 2**31 - 1
#: The dtype names and their C API codes (``CAIRN_BYTE`` = 0 ... ``CAIRN_UINT64`` = 8).
DTYPES: dict[str, int] = dict(_cairn.DTYPES)

_HEADER = 8  # the value region starts with the pickle's length, 8 bytes little-endian

T = TypeVar("T")
Config = Union[str, "os.PathLike[str]", Mapping[str, object], None]


@dataclass
class FileSet:
    """A dataset of files being written (:meth:`Checkpointer.output`).

    ``route(name)`` gives the path to write ``name`` at. Set ``valid = False`` if this rank's
    files are not good; after the block, ``kept`` says whether every rank's were, and so
    whether the dataset was stored.
    """

    version: int
    _engine: Any = field(repr=False)
    valid: bool = True
    kept: bool | None = None

    def route(self, name: str) -> str:
        """The path where this rank must write ``name``."""
        return os.fspath(self._engine.route_file(name))


@dataclass
class RestoredFiles:
    """The files of a checkpoint restored by :meth:`Checkpointer.start_restart`."""

    version: int
    #: The ``label`` given when it was written, if any.
    label: str | None
    #: The names the files were routed under, in routing order.
    files: list[str]
    _engine: Any = field(repr=False)

    def route(self, name: str) -> str:
        """The path where this rank reads its file ``name``; FileNotFoundError-like
        :class:`NotFoundError` for a name the checkpoint does not hold."""
        return os.fspath(self._engine.route_file(name))


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
        self._output_regions = False

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
        self._regions_restored(version)
        return version

    def _regions_restored(self, version: int) -> None:
        """After the protected regions were restored from ``version``: ``state`` and hooks."""
        if self._values_protected:
            self._unpack_values()
        self._restored = version
        for hook in self._after_restart:
            hook()

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

    # ---- the file API ----------------------------------------------------------------------

    def start_output(
        self,
        version: int,
        *,
        checkpoint: bool = True,
        output: bool = False,
        label: str | None = None,
        regions: bool = False,
    ) -> FileSet:
        """Collective: begin dataset ``version`` of files this program writes itself.

        ``checkpoint``: a restart may use it; ``output``: its files are copied to the paths
        they were routed under and kept there; ``regions``: the protected regions (and
        ``state``) are stored with the files. Route each file with :meth:`route_file` (or the
        returned :class:`FileSet`), write it, then :meth:`complete_output`.
        """
        self._engine.start_output(self.name, version, checkpoint, output, label, regions)
        self._output_regions = regions
        return FileSet(version, self._engine)

    def route_file(self, name: str) -> str:
        """Where to write ``name`` during an output, or read it during a restart; ``name``
        itself outside both. Local to this rank."""
        return os.fspath(self._engine.route_file(name))

    def complete_output(self, valid: bool = True) -> bool:
        """Collective: end the output. Returns whether every rank's files were valid (a
        routed file never written counts as invalid), and so whether the dataset was kept."""
        if self._output_regions:
            # The values as they are now, when the regions are stored.
            self._pack_values()
        self._output_regions = False
        return self._engine.complete_output(bool(valid))

    @contextlib.contextmanager
    def output(
        self,
        version: int,
        *,
        checkpoint: bool = True,
        output: bool = False,
        label: str | None = None,
        regions: bool = False,
    ) -> Iterator[FileSet]:
        """Collective: a dataset of files as a ``with`` block::

            with ck.output(step) as out:
                np.save(out.route("field.npy"), u)

        The output is completed when the block ends: valid unless ``out.valid`` was set to
        False or the block raised (then this rank's files count as invalid, every rank drops
        the dataset, and the exception goes on).
        """
        fs = self.start_output(version, checkpoint=checkpoint, output=output, label=label, regions=regions)
        try:
            yield fs
        except BaseException:
            fs.kept = self.complete_output(False)
            raise
        fs.kept = self.complete_output(fs.valid)

    def have_restart(self) -> int | None:
        """Collective: the newest version the file API may restart from (restorable on every
        rank, and not found invalid in this run), or None."""
        return self._engine.have_restart(self.name)

    def start_restart(self, *, regions: bool = False) -> RestoredFiles | None:
        """Collective: restore the files of the version :meth:`have_restart` offers (and with
        ``regions``, the protected regions and ``state``); None when there is none. Read
        them, then :meth:`complete_restart`."""
        if regions:
            # As in restart: the values region is read when ``state`` is not empty.
            self._protect_values(bool(self.state))
        try:
            got = self._engine.start_restart(self.name, regions)
        except MismatchError as e:
            raise MismatchError(self._explain(str(e))) from None
        if got is None:
            return None
        version, label, files = got
        if regions:
            self._regions_restored(version)
        return RestoredFiles(version, label, list(files), self._engine)

    def complete_restart(self, valid: bool = True) -> bool:
        """Collective: end the restart. If any rank says False, every rank passes over that
        version, and the next :meth:`have_restart` / :meth:`start_restart` offers an older
        one. Returns whether every rank said True."""
        return self._engine.complete_restart(bool(valid))

    def restart_files(
        self, read: Callable[[RestoredFiles], bool], *, regions: bool = False
    ) -> RestoredFiles | None:
        """Collective: restart from the newest checkpoint whose files every rank accepts.

        ``read(restored)`` reads this rank's files (``restored.route(name)``) and returns
        whether they are good; an exception counts as not good (with a warning), so that every
        rank falls back together rather than one rank leaving the others waiting. Returns the
        accepted checkpoint, or None when none is left.
        """
        while True:
            got = self.start_restart(regions=regions)
            if got is None:
                return None
            try:
                ok = bool(read(got))
            except Exception as e:  # noqa: BLE001 - reported, and counted as invalid
                warnings.warn(
                    f"cairn: reading the files of {self.name} v{got.version} failed: {e!r}; "
                    "treating them as invalid",
                    RuntimeWarning,
                    stacklevel=2,
                )
                ok = False
            if self.complete_restart(ok):
                return got

    def drop(self, version: int) -> None:
        """Never restart from ``version`` in this run (its data stays). Call it on every
        rank."""
        self._engine.drop_version(self.name, version)

    def delete(self, version: int) -> None:
        """Collective: delete ``version`` from every tier (refused while a newer incremental
        checkpoint is based on it)."""
        self._engine.delete(self.name, version)

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
