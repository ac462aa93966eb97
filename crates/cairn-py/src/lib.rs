//! `cairn._cairn`: the extension module of the Python package `cairn`.
//!
//! The principal type is [`PyEngine`] (`cairn._cairn.Engine` in Python): one
//! [`cairn_core::Engine`] plus the table of regions protected from Python, each a held buffer
//! export ([`buffer::Region`]) of a numpy array or any other writable contiguous buffer. It
//! has the C API's data model (integer region ids, the `cairn_dtype` element types), so a
//! checkpoint written from Python restores into a C program and the reverse. Everything
//! friendlier (`cairn.Checkpointer`, values in `ck.state`, the `steps` loop, the exception
//! classes) is Python, in `python/cairn/`.
//!
//! Every collective or I/O call releases the GIL while the engine works, catches panics (they
//! become `cairn.CairnError`, never an unwinding into Python), and never aborts or exits the
//! process. The communicator comes from mpi4py as a raw handle, duplicated by
//! [`cairn_mpi::MpiComm::from_raw_dup`]; the engine never initialises MPI itself.
//!
//! ```python
//! from cairn import _cairn
//! e = _cairn.Engine(None, None, [("tiers.global", "/tmp/g"), ("tiers.local", "none")])
//! step = bytearray(8)
//! e.protect(0, step)
//! e.checkpoint("demo", 1)
//! assert e.restart_test("demo") == 1
//! e.finalize()
//! ```

mod buffer;
mod error;

use buffer::Region;
use cairn_core::files::{FLAG_CHECKPOINT, FLAG_OUTPUT};
use cairn_core::{CkptState, Config, Engine, Error, ErrorKind, Files, RegionMut, RegionRef};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, TryLockError};

/// The engine and the regions it checkpoints.
struct Inner {
    engine: Engine,
    regions: BTreeMap<i32, Region>,
    /// The file API; whether the output under way keeps the protected regions too.
    files: Files,
    output_regions: bool,
}

/// What `start_restart` gives Python: the version, its label and the routed names.
type RestartedFiles = (i64, Option<String>, Vec<String>);

/// The protected regions, to save.
fn refs(regions: &BTreeMap<i32, Region>) -> Vec<RegionRef<'_>> {
    regions
        .iter()
        .map(|(id, r)| RegionRef {
            id: *id,
            dtype: r.dtype(),
            bytes: r.bytes(),
        })
        .collect()
}

/// Split `inner` into the engine, the file API and the protected regions to restore in
/// place (all of them, or none).
fn muts(inner: &mut Inner, all: bool) -> (&mut Engine, &mut Files, Vec<RegionMut<'_>>) {
    let regions = if all {
        inner
            .regions
            .iter_mut()
            .map(|(id, r)| RegionMut {
                id: *id,
                dtype: r.dtype(),
                bytes: r.bytes_mut(),
            })
            .collect()
    } else {
        Vec::new()
    };
    (&mut inner.engine, &mut inner.files, regions)
}

/// `cairn._cairn.Engine`: a checkpoint engine over an MPI communicator or one process.
#[pyclass(module = "cairn._cairn", name = "Engine", frozen)]
pub struct PyEngine {
    /// `None` once finalized or released.
    inner: Mutex<Option<Inner>>,
    /// Whether the engine runs over MPI (it must then be dropped before MPI is finalized).
    mpi: bool,
    rank: usize,
    size: usize,
    node: usize,
    nodes: usize,
}

const CLOSED: &str = "the checkpointer is closed (close() was called or its with block ended)";

/// The MPI handle mpi4py gives as an integer (`MPI._handleof(comm)`), as an `MPI_Comm`.
fn comm_handle(h: u64) -> Result<cairn_mpi::mpi::ffi::MPI_Comm, Error> {
    use cairn_mpi::mpi::ffi::MPI_Comm;
    match std::mem::size_of::<MPI_Comm>() {
        // SAFETY: MPI_Comm is a plain handle (a pointer in Open MPI, an int in MPICH) of the
        // size matched here, and any bit pattern is a value of such a type; whether it names
        // a communicator is from_raw_dup's contract, which the caller upholds.
        8 => Ok(unsafe { std::mem::transmute_copy::<u64, MPI_Comm>(&h) }),
        // SAFETY: as above, for 4-byte handles (mpi4py passes the int's bits).
        4 => Ok(unsafe { std::mem::transmute_copy::<u32, MPI_Comm>(&(h as u32)) }),
        n => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("MPI_Comm handles of {n} bytes are not supported"),
        )),
    }
}

/// Whether MPI is still usable for dropping our communicator, asked of mpi4py (the module
/// that initialised it). When in doubt, no.
fn mpi_alive(py: Python<'_>) -> bool {
    py.import("mpi4py.MPI")
        .and_then(|m| m.call_method0("Is_finalized"))
        .and_then(|f| f.extract::<bool>())
        .map(|finalized| !finalized)
        .unwrap_or(false)
}

fn check_id(id: i64) -> PyResult<i32> {
    i32::try_from(id).map_err(|_| {
        error::invalid(format!(
            "region id {id} is out of range: ids are C ints ({} to {})",
            i32::MIN,
            i32::MAX
        ))
    })
}

impl PyEngine {
    /// Lock the engine. A second Python thread waits without the GIL, so the thread that holds
    /// the lock (also without the GIL, during I/O) can take the GIL back and finish.
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Option<Inner>> {
        loop {
            match self.inner.try_lock() {
                Ok(g) => return g,
                // A panic was reported as an exception; the state is still usable.
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.inner.lock())),
            }
        }
    }

    /// Run `f` on the engine without the GIL, catching panics.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut Inner) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        let mut g = self.lock(py);
        let inner = g.as_mut().ok_or_else(|| error::state(CLOSED))?;
        match py.detach(|| catch_unwind(AssertUnwindSafe(|| f(inner)))) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(error::engine(e)),
            Err(p) => Err(error::panic(what, p)),
        }
    }

    /// Take the engine out, for finalize or release. `None` when it is already closed.
    fn take(&self, py: Python<'_>) -> Option<Inner> {
        self.lock(py).take()
    }

    /// Drop an engine without finalizing it. Its communicator can be freed only while MPI is
    /// initialised; after MPI_Finalize it is leaked instead (the process is ending anyway), as
    /// freeing it then would make Open MPI abort the process.
    fn discard(&self, py: Python<'_>, inner: Inner) {
        let Inner {
            engine, regions, ..
        } = inner;
        drop(regions);
        if self.mpi && !mpi_alive(py) {
            std::mem::forget(engine);
        } else {
            py.detach(|| drop(engine));
        }
    }
}

fn start(
    comm: Option<u64>,
    path: Option<PathBuf>,
    overrides: &[(String, String)],
) -> Result<Engine, Error> {
    let cfg = Config::resolve(path.as_deref(), overrides);
    let comm: Box<dyn cairn_comm::Comm + Send> = match comm {
        None => Box::new(cairn_comm::Solo),
        Some(h) => {
            let raw = comm_handle(h)?;
            // SAFETY: the handle is mpi4py's communicator, valid while the caller holds the
            // mpi4py object (the Python wrapper does), of the MPI library this extension links
            // when mpi4py was built against it; a different library is reported below as "not
            // initialised" before the handle is used.
            match unsafe { cairn_mpi::MpiComm::from_raw_dup(raw) } {
                Ok(c) => Box::new(c),
                Err(e) if e.op == "init" => {
                    return Err(Error::new(
                        ErrorKind::Comm,
                        "the MPI library cairn uses is not initialised although mpi4py gave a \
                         communicator: mpi4py runs on a different MPI library; install mpi4py \
                         built against the system MPI (pip install --no-binary mpi4py mpi4py)",
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    // Configuration errors are usually the same on every rank, but agree anyway so no rank
    // goes on alone (as cairn_init does).
    let ok = comm.all_agree(cfg.is_ok())?;
    match (cfg, ok) {
        (Ok(c), true) => Engine::new(comm, c),
        (Err(e), _) => Err(e),
        (Ok(_), false) => Err(Error::new(
            ErrorKind::Peer,
            "the configuration is invalid on another rank (see its message)",
        )),
    }
}

#[pymethods]
impl PyEngine {
    /// Collective over `comm` (an MPI_Comm handle as an int) or, with None, one process.
    #[new]
    #[pyo3(signature = (comm=None, config=None, overrides=Vec::new()))]
    fn new(
        py: Python<'_>,
        comm: Option<u64>,
        config: Option<PathBuf>,
        overrides: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let res = py.detach(|| catch_unwind(AssertUnwindSafe(|| start(comm, config, &overrides))));
        let engine = match res {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => return Err(error::engine(e)),
            Err(p) => return Err(error::panic("Engine()", p)),
        };
        let topo = engine.topology();
        Ok(PyEngine {
            mpi: comm.is_some(),
            rank: topo.rank,
            size: topo.size,
            node: topo.node,
            nodes: topo.nodes,
            inner: Mutex::new(Some(Inner {
                files: Files::new(&engine),
                engine,
                regions: BTreeMap::new(),
                output_regions: false,
            })),
        })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// This rank's (possibly simulated) node.
    #[getter]
    fn node(&self) -> usize {
        self.node
    }

    #[getter]
    fn nodes(&self) -> usize {
        self.nodes
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.lock(py).is_none()
    }

    /// Protect `obj`'s buffer under `id`, replacing what `id` held.
    fn protect(&self, py: Python<'_>, id: i64, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = check_id(id)?;
        let region = Region::export(obj, id)?;
        let mut g = self.lock(py);
        let inner = g.as_mut().ok_or_else(|| error::state(CLOSED))?;
        // The replaced region's export is released here, with the GIL held.
        inner.regions.insert(id, region);
        Ok(())
    }

    fn unprotect(&self, py: Python<'_>, id: i64) -> PyResult<()> {
        let id = check_id(id)?;
        let mut g = self.lock(py);
        let inner = g.as_mut().ok_or_else(|| error::state(CLOSED))?;
        match inner.regions.remove(&id) {
            Some(_) => Ok(()),
            None => Err(error::invalid(format!(
                "unprotect: region {id} is not protected"
            ))),
        }
    }

    /// `{id: (dtype name, element count)}` of the protected regions.
    fn regions(&self, py: Python<'_>) -> PyResult<BTreeMap<i32, (&'static str, usize)>> {
        let g = self.lock(py);
        let inner = g.as_ref().ok_or_else(|| error::state(CLOSED))?;
        Ok(inner
            .regions
            .iter()
            .map(|(id, r)| (*id, (r.dtype().name(), r.count())))
            .collect())
    }

    fn checkpoint(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<()> {
        self.run(py, "checkpoint", |inner| {
            let regions = refs(&inner.regions);
            inner.engine.checkpoint(name, version, &regions)
        })
    }

    fn restart_test(&self, py: Python<'_>, name: &str) -> PyResult<Option<i64>> {
        self.run(py, "restart_test", |inner| inner.engine.restart_test(name))
    }

    /// Restore the protected regions from `version` (or an older one, if it is damaged);
    /// returns the version restored.
    fn restart(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<i64> {
        self.run(py, "restart", |inner| {
            let (engine, _, mut regions) = muts(inner, true);
            engine.restart(name, version, &mut regions)
        })
    }

    fn need_checkpoint(&self, py: Python<'_>) -> PyResult<bool> {
        self.run(py, "need_checkpoint", |inner| {
            inner.engine.need_checkpoint()
        })
    }

    fn should_exit(&self, py: Python<'_>) -> PyResult<bool> {
        self.run(py, "should_exit", |inner| inner.engine.should_exit())
    }

    /// The lifecycle state of `version`: "captured", "protected", "durable" or None.
    fn test(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<Option<&'static str>> {
        let st = self.run(py, "test", |inner| inner.engine.test(name, version))?;
        Ok(match st {
            None | Some(CkptState::Writing) => None,
            Some(CkptState::Captured) => Some("captured"),
            Some(CkptState::Protected) => Some("protected"),
            Some(CkptState::Durable) => Some("durable"),
        })
    }

    /// Collective: begin dataset `version` of `name` for the file API (`checkpoint`: a restart
    /// may use it; `output`: its files are copied to their own paths and kept; `regions`: the
    /// protected regions are stored with the files).
    #[pyo3(signature = (name, version, checkpoint=true, output=false, label=None, regions=false))]
    // The Python keywords, one argument each.
    #[allow(clippy::too_many_arguments)]
    fn start_output(
        &self,
        py: Python<'_>,
        name: &str,
        version: i64,
        checkpoint: bool,
        output: bool,
        label: Option<&str>,
        regions: bool,
    ) -> PyResult<()> {
        let flags =
            if checkpoint { FLAG_CHECKPOINT } else { 0 } | if output { FLAG_OUTPUT } else { 0 };
        self.run(py, "start_output", |inner| {
            inner
                .files
                .start_output(&mut inner.engine, name, version, flags, label)?;
            inner.output_regions = regions;
            Ok(())
        })
    }

    /// Where to write `file` (during an output) or read it (during a restart); `file` itself
    /// outside both.
    fn route_file(&self, py: Python<'_>, file: &str) -> PyResult<PathBuf> {
        self.run(py, "route_file", |inner| inner.files.route_file(file))
    }

    /// Collective: end the output; returns whether every rank's files were valid (and so
    /// the dataset was kept).
    fn complete_output(&self, py: Python<'_>, valid: bool) -> PyResult<bool> {
        self.run(py, "complete_output", |inner| {
            let Inner {
                engine,
                files,
                regions,
                output_regions,
            } = inner;
            let memory = if *output_regions {
                refs(regions)
            } else {
                Vec::new()
            };
            files.complete_output(engine, valid, &memory)
        })
    }

    /// Collective: the newest version of `name` the file API may restart from, or None.
    fn have_restart(&self, py: Python<'_>, name: &str) -> PyResult<Option<i64>> {
        self.run(py, "have_restart", |inner| {
            inner.files.have_restart(&mut inner.engine, name)
        })
    }

    /// Collective: restore the files (and with `regions`, the protected regions) of the
    /// newest version `have_restart` offers; `(version, label, files)` or None.
    #[pyo3(signature = (name, regions=false))]
    fn start_restart(
        &self,
        py: Python<'_>,
        name: &str,
        regions: bool,
    ) -> PyResult<Option<RestartedFiles>> {
        self.run(py, "start_restart", |inner| {
            let (engine, files, mut memory) = muts(inner, regions);
            let got = files.start_restart(engine, name, &mut memory)?;
            Ok(got.map(|r| (r.version, r.label, r.files)))
        })
    }

    /// Collective: end the restart; False (on every rank) if any rank said its files were
    /// not valid, and then that version is passed over.
    fn complete_restart(&self, py: Python<'_>, valid: bool) -> PyResult<bool> {
        self.run(py, "complete_restart", |inner| {
            inner.files.complete_restart(&mut inner.engine, valid)
        })
    }

    /// Never restart from `version` of `name` in this run (the data stays).
    fn drop_version(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<()> {
        self.run(py, "drop_version", |inner| {
            inner.files.drop_version(name, version);
            Ok(())
        })
    }

    /// Collective: delete `version` of `name` from every tier.
    fn delete(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<()> {
        self.run(py, "delete", |inner| inner.engine.delete(name, version))
    }

    /// Make `version` durable on the global tier and wait until it is.
    fn wait(&self, py: Python<'_>, name: &str, version: i64) -> PyResult<()> {
        self.run(py, "wait", |inner| inner.engine.flush(name, version))
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, "stats", |inner| Ok(inner.engine.stats()))?;
        let d = PyDict::new(py);
        d.set_item("checkpoints", s.checkpoints)?;
        d.set_item("checkpoint_seconds", s.checkpoint_seconds)?;
        d.set_item("bytes_written", s.bytes_written)?;
        d.set_item("bytes_stored", s.bytes_stored)?;
        d.set_item("incrementals", s.incrementals)?;
        d.set_item("restarts", s.restarts)?;
        d.set_item("restart_seconds", s.restart_seconds)?;
        d.set_item(
            "restored_version",
            (s.restored_version >= 0).then_some(s.restored_version),
        )?;
        d.set_item("flushes", s.flushes)?;
        d.set_item("flush_failures", s.flush_failures)?;
        d.set_item("flush_seconds", s.flush_seconds)?;
        Ok(d)
    }

    /// Collective: make the newest checkpoint of each name durable, wait for background work
    /// and release the engine and the protected buffers. A second call does nothing.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        let Some(inner) = self.take(py) else {
            return Ok(());
        };
        if self.mpi && !mpi_alive(py) {
            self.discard(py, inner);
            return Err(error::state(
                "MPI was finalized before the checkpointer was closed: close it (or leave its \
                 with block) before MPI.Finalize(); its newest checkpoint was not flushed",
            ));
        }
        let Inner {
            engine, regions, ..
        } = inner;
        drop(regions);
        match py.detach(|| catch_unwind(AssertUnwindSafe(|| engine.finalize()))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(error::engine(e)),
            Err(p) => Err(error::panic("finalize", p)),
        }
    }

    /// Release the engine and the protected buffers without the collective finalize (for a
    /// rank leaving on an exception, which the other ranks may never match). Checkpoints
    /// written so far stay restart-eligible. A second call does nothing.
    fn release(&self, py: Python<'_>) {
        if let Some(inner) = self.take(py) {
            self.discard(py, inner);
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.closed(py) { ", closed" } else { "" };
        format!(
            "<cairn._cairn.Engine rank {} of {} on node {} of {}{state}>",
            self.rank, self.size, self.node, self.nodes
        )
    }
}

impl Drop for PyEngine {
    fn drop(&mut self) {
        let inner = self
            .inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(inner) = inner {
            Python::attach(|py| self.discard(py, inner));
        }
    }
}

/// The dtype names and their C codes (`CAIRN_BYTE` ... `CAIRN_UINT64`).
fn dtypes() -> BTreeMap<&'static str, u32> {
    cairn_core::Dtype::ALL
        .iter()
        .map(|d| (d.name(), *d as u32))
        .collect()
}

/// Check a checkpoint name by the rule of the format (1-128 characters from `A-Z a-z 0-9 . _ -`,
/// not starting with `.`), raising `InvalidArgumentError`. The engine checks names only when a
/// checkpoint is written or looked for; a checkpointer checks its name when it is made.
#[pyfunction]
fn check_name(name: &str) -> PyResult<()> {
    cairn_format::check_name(name).map_err(|e| error::invalid(e.to_string()))
}

#[pymodule]
fn _cairn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_function(wrap_pyfunction!(check_name, m)?)?;
    m.add("DTYPES", dtypes())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
