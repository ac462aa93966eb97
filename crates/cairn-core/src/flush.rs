//! The DURABLE step's data movement: copying a rank's part from the node-local tier to the
//! global tier, in the background, with bounded memory, verifying every block on the way,
//! merging incremental chains into full parts and re-encoding for the global tier's codec.
//!
//! The [`Flusher`] owns one I/O thread per process and a queue of copy jobs. It moves bytes,
//! and after each copy it writes the rank's commit record (`rank<r>.done`, a manifest that
//! lists that rank alone) next to the copy, without waiting for any other rank: so a copy
//! that finished is known to be complete even if the job dies before its next collective
//! call. The global manifest is published collectively by the engine (`Engine::settle`),
//! at the next collective call after every rank's copy has finished; a restart that finds
//! no global manifest but every rank's commit record agrees the version is complete and
//! publishes the manifest then. A crash before some rank's commit record is written leaves
//! a version restart does not take from the global tier.

use crate::catalog::rank_key;
use crate::error::{Error, ErrorKind, Result};
use crate::part::{self, Codecs};
use cairn_format::{BlockSumStream, RankIndex};
use cairn_tier::{ObjectReader, Tier, DIRECT_ALIGN};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a copy job stands on this rank.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    Queued,
    Running {
        done: u64,
        total: u64,
    },
    /// Copied and committed on the destination (or found there already, intact).
    Done {
        bytes: u64,
        seconds: f64,
    },
    Failed(String),
}

impl JobState {
    pub fn finished(&self) -> bool {
        matches!(self, JobState::Done { .. } | JobState::Failed(_))
    }
}

/// Limits of the copy.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes held in memory at once (at least one block of the part is read whole).
    pub buffer: u64,
    /// Bytes per second, 0 for no limit.
    pub bandwidth: u64,
    /// Run the copy thread at the lowest CPU priority (nice 19), so that on a core it shares
    /// with the application's compute it takes only the time the compute leaves idle.
    pub low_priority: bool,
    /// Write the copy past the destination's page cache where its file system allows
    /// (`O_DIRECT`): the copy's bytes are not read again soon, and writing them through the
    /// cache costs a second copy and the writeback work on the application's cores.
    pub direct: bool,
}

type Key = (String, i64);

#[derive(Default)]
struct Book {
    jobs: HashMap<Key, JobState>,
}

struct Shared {
    book: Mutex<Book>,
    changed: Condvar,
    /// Set when the engine is dropped without finalize: copies stop at the next piece.
    cancel: AtomicBool,
}

fn lock(m: &Mutex<Book>) -> MutexGuard<'_, Book> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One copy for the flush thread: rank `rank`'s part of `name` v`version` from `src` to
/// `dst`, then `commit` (the rank's commit record, see the module docs) beside it.
pub struct CopyJob {
    pub name: String,
    pub version: i64,
    pub rank: usize,
    pub src: Arc<dyn Tier>,
    pub dst: Arc<dyn Tier>,
    pub recode: Recode,
    pub commit: Option<Vec<u8>>,
}

/// How the global copy of a part is encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recode {
    /// Codec of the destination tier.
    pub codecs: Codecs,
    /// The source tier uses the same codec: a full part is copied byte for byte. Otherwise,
    /// and for every incremental part, the copy is a full part re-encoded with `codecs`.
    pub same: bool,
}

/// One background I/O thread copying parts to the global tier.
pub struct Flusher {
    shared: Arc<Shared>,
    tx: Option<mpsc::Sender<CopyJob>>,
    handle: Option<JoinHandle<()>>,
    limits: Limits,
}

impl Flusher {
    pub fn new(limits: Limits) -> Flusher {
        let shared = Arc::new(Shared {
            book: Mutex::new(Book::default()),
            changed: Condvar::new(),
            cancel: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel::<CopyJob>();
        let worker = shared.clone();
        let handle = std::thread::Builder::new()
            .name("cairn-flush".into())
            .spawn(move || {
                if limits.low_priority {
                    lower_priority();
                }
                for job in rx {
                    run_job(&worker, job, limits);
                }
            })
            .ok();
        Flusher {
            shared,
            tx: Some(tx),
            handle,
            limits,
        }
    }

    /// Queue the copy of rank `rank`'s part of `name` v`version` from `src` to `dst`.
    pub fn submit(&self, job: CopyJob) {
        let id = (job.name.clone(), job.version);
        lock(&self.shared.book).jobs.insert(id, JobState::Queued);
        match (&self.tx, &self.handle) {
            (Some(tx), Some(_)) => {
                if let Err(mpsc::SendError(job)) = tx.send(job) {
                    run_job(&self.shared, job, self.limits);
                }
            }
            // No thread could be started: copy inline rather than not at all.
            _ => run_job(&self.shared, job, self.limits),
        }
    }

    /// How the job for `name` v`version` stands, if there is one.
    pub fn state(&self, name: &str, version: i64) -> Option<JobState> {
        lock(&self.shared.book)
            .jobs
            .get(&(name.to_string(), version))
            .cloned()
    }

    /// Block until the job for `name` v`version` has finished (or there is none).
    pub fn wait(&self, name: &str, version: i64) -> Option<JobState> {
        let id = (name.to_string(), version);
        let mut book = lock(&self.shared.book);
        loop {
            match book.jobs.get(&id) {
                Some(s) if !s.finished() => {}
                other => return other.cloned(),
            }
            book = self
                .shared
                .changed
                .wait(book)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Forget a finished job.
    pub fn forget(&self, name: &str, version: i64) {
        lock(&self.shared.book)
            .jobs
            .remove(&(name.to_string(), version));
    }

    /// Let the queue run dry and stop the thread.
    pub fn finish(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Flusher {
    /// Dropped without `finish` (the engine was dropped, not finalized): abandon the copies
    /// rather than hold the process up; nothing unfinished is ever published.
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Relaxed);
        self.finish();
    }
}

/// Give the calling thread the lowest CPU priority. Linux keeps a nice value per thread; no
/// privilege is needed to lower it. Failure only costs speed, so it is ignored. Threads the
/// caller starts afterwards inherit it (`cairn fs drain` lowers its whole process this way).
pub fn lower_priority() {
    // SAFETY: gettid has no preconditions; setpriority only reads its integer arguments.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

fn set_state(shared: &Shared, job: &CopyJob, state: JobState) {
    lock(&shared.book)
        .jobs
        .insert((job.name.clone(), job.version), state);
    shared.changed.notify_all();
}

fn run_job(shared: &Shared, job: CopyJob, limits: Limits) {
    let t0 = Instant::now();
    let progress = |done: u64, total: u64| -> bool {
        lock(&shared.book).jobs.insert(
            (job.name.clone(), job.version),
            JobState::Running { done, total },
        );
        !shared.cancel.load(Ordering::Relaxed)
    };
    let res = if shared.cancel.load(Ordering::Relaxed) {
        Err(Error::new(ErrorKind::State, "the engine was dropped"))
    } else {
        copy_part(
            &*job.src,
            &*job.dst,
            (&job.name, job.version, job.rank),
            limits,
            job.recode,
            &progress,
        )
        .and_then(|bytes| {
            if let Some(record) = &job.commit {
                let key = crate::catalog::commit_key(&job.name, job.version, job.rank);
                job.dst.put(&key, record).map_err(|e| {
                    Error::from(e).context(format!("writing the commit record {key}"))
                })?;
            }
            Ok(bytes)
        })
    };
    let state = match res {
        Ok(bytes) => JobState::Done {
            bytes,
            seconds: t0.elapsed().as_secs_f64(),
        },
        Err(e) => JobState::Failed(format!(
            "flushing {} from the {} tier {} to the {} tier {}: {}",
            rank_key(&job.name, job.version, job.rank),
            job.src.label(),
            job.src.location(),
            job.dst.label(),
            job.dst.location(),
            e.msg
        )),
    };
    set_state(shared, &job, state);
}

/// One stretch of a rank file: a checksummed stored block, or the bytes between them.
struct Piece {
    start: u64,
    end: u64,
    sum: Option<u64>,
}

/// The rank file cut into pieces in file order: every stored block, and the gaps (header,
/// index, trailer) between them cut to at most `gap` bytes.
fn pieces(r: &dyn ObjectReader, index: &RankIndex, gap: u64) -> Result<Vec<Piece>> {
    let mut chunks: Vec<Piece> = Vec::new();
    for e in &index.regions {
        for b in e.stored_blocks() {
            chunks.push(Piece {
                start: b.offset,
                end: b.offset + b.len as u64,
                sum: Some(b.sum),
            });
        }
    }
    chunks.sort_by_key(|p| p.start);
    let mut out = Vec::with_capacity(chunks.len() * 2 + 1);
    let mut at = 0;
    let push_gap = |out: &mut Vec<Piece>, from: u64, to: u64| {
        let mut s = from;
        while s < to {
            let e = to.min(s + gap);
            out.push(Piece {
                start: s,
                end: e,
                sum: None,
            });
            s = e;
        }
    };
    for c in chunks {
        if c.start < at || c.end > r.len() {
            return Err(Error::new(
                ErrorKind::Corrupt,
                "rank file index has overlapping or out-of-range blocks",
            ));
        }
        push_gap(&mut out, at, c.start);
        at = c.end;
        out.push(c);
    }
    push_gap(&mut out, at, r.len());
    Ok(out)
}

/// Whether `dst` already holds `key` with the same index as `src` and every block intact:
/// what a flush interrupted after its commit left behind, so it need not be copied again.
fn already_there(src: &RankIndex, src_len: u64, dst: &dyn Tier, key: &str) -> bool {
    let Ok(d) = dst.open(key) else {
        return false;
    };
    d.len() == src_len
        && part::read_index(&*d).is_ok_and(|ix| ix == *src)
        && part::verify(&*d).is_ok()
}

/// Whether `dst` already holds `key` as an intact full part with the contents `src`
/// describes (the same regions, every block with the same hash): a merged copy an
/// interrupted flush committed.
fn already_merged(src: &RankIndex, dst: &dyn Tier, key: &str) -> bool {
    let Ok(d) = dst.open(key) else {
        return false;
    };
    let same = |ix: &RankIndex| {
        ix.base.is_none()
            && ix.hashed()
            && ix.regions.len() == src.regions.len()
            && ix.regions.iter().zip(&src.regions).all(|(a, b)| {
                (a.id, a.dtype, a.count) == (b.id, b.dtype, b.count)
                    && a.blocks.len() == b.blocks.len()
                    && a.blocks
                        .iter()
                        .zip(&b.blocks)
                        .all(|(x, y)| x.hash == y.hash)
            })
    };
    src.hashed() && part::read_index(&*d).is_ok_and(|ix| same(&ix)) && part::verify(&*d).is_ok()
}

/// Copy rank `rank`'s part of `name` v`version` from `src` to `dst`, published on `dst` only
/// once complete. A full part in the destination's codec is copied byte for byte, every
/// block's checksum checked as it passes; an incremental part (or one in another codec) is
/// merged with the parts it is based on into a full part, re-encoded, every block checked.
/// At most `limits.buffer` bytes (or one block, if larger) are held in memory.
/// `progress(done, total)` is called as the copy advances; when it returns false the copy
/// stops and nothing is published. Returns the bytes read (0 when an intact copy was
/// already there).
pub fn copy_part(
    src: &dyn Tier,
    dst: &dyn Tier,
    (name, version, rank): (&str, i64, usize),
    limits: Limits,
    recode: Recode,
    progress: &dyn Fn(u64, u64) -> bool,
) -> Result<u64> {
    let key = rank_key(name, version, rank);
    let r = src.open(&key)?;
    let index = part::read_index(&*r)?;
    if index.base.is_none() && recode.same {
        return copy_verified(&*r, index, dst, &key, limits, progress);
    }
    drop(r);
    let chain = part::open_chain(src, name, version, rank, Some(index.world_size as usize))?;
    let total = index.data_bytes();
    if already_merged(&index, dst, &key) {
        let _ = progress(total, total);
        return Ok(0);
    }
    dst.remove_temporaries(&key)?;
    let mut w = dst.create(&key)?;
    let t0 = Instant::now();
    part::rewrite(&chain, &mut w, recode.codecs, &mut |done| {
        let go_on = progress(done, total);
        throttle(t0, done, limits.bandwidth);
        go_on
    })?;
    w.commit()?;
    Ok(total)
}

/// Copy the rank file `key` read by `r` byte for byte, checking every stored block's
/// checksum as it passes.
fn copy_verified(
    r: &dyn ObjectReader,
    index: RankIndex,
    dst: &dyn Tier,
    key: &str,
    limits: Limits,
    progress: &dyn Fn(u64, u64) -> bool,
) -> Result<u64> {
    let total = r.len();
    if already_there(&index, total, dst, key) {
        let _ = progress(total, total);
        return Ok(0);
    }
    // This rank is the only writer of `key`: temporaries under it are a killed flush's.
    dst.remove_temporaries(key)?;
    // Fixed chunks on the alignment the destination needs to write them past its page
    // cache: the bytes are read once into the buffer, checked there while in cache, and
    // written from it without another copy.
    let align = DIRECT_ALIGN as u64;
    let cap = limits.buffer.max(align).div_ceil(align) * align;
    let cap = cap.min(total.div_ceil(align) * align).max(align) as usize;
    let pieces = pieces(r, &index, cap as u64)?;
    let mut backing = vec![0u8; cap + DIRECT_ALIGN];
    let skip = backing.as_ptr().align_offset(DIRECT_ALIGN);
    let buf = &mut backing[skip..skip + cap];
    let mut w = dst.create(key)?;
    let t0 = Instant::now();
    let mut done = 0u64;
    // The block being checked and its checksum so far (a block may span two chunks).
    let mut p = 0;
    let mut sum = BlockSumStream::new(index.format);
    while done < total {
        let n = (total - done).min(cap as u64) as usize;
        r.read_exact_at(&mut buf[..n], done)?;
        let end = done + n as u64;
        let mut at = done;
        while at < end {
            let piece = &pieces[p];
            let upto = piece.end.min(end);
            if piece.sum.is_some() {
                sum.update(&buf[(at - done) as usize..(upto - done) as usize]);
            }
            at = upto;
            if upto == piece.end {
                if let Some(want) = piece.sum {
                    if sum.digest() != want {
                        return Err(Error::new(
                            ErrorKind::Corrupt,
                            format!(
                                "bytes {}..{} of the source fail their checksum; not flushed",
                                piece.start, piece.end
                            ),
                        ));
                    }
                    sum = BlockSumStream::new(index.format);
                }
                p += 1;
            }
        }
        if limits.direct {
            w.write_all_direct(&buf[..n])?;
        } else {
            w.write_all(&buf[..n])?;
        }
        done = end;
        if !progress(done, total) {
            return Err(Error::new(ErrorKind::State, "the copy was cancelled"));
        }
        throttle(t0, done, limits.bandwidth);
    }
    w.commit()?;
    Ok(done)
}

/// Sleep so that `done` bytes since `t0` stay within `bandwidth` bytes per second (0: no
/// limit).
pub fn throttle(t0: Instant, done: u64, bandwidth: u64) {
    if bandwidth == 0 {
        return;
    }
    let due = Duration::from_secs_f64(done as f64 / bandwidth as f64);
    if let Some(wait) = due.checked_sub(t0.elapsed()) {
        std::thread::sleep(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::part::{write_part, PartMeta, Reduction, RegionRef};
    use cairn_format::Dtype;
    use cairn_tier::DirTier;

    /// Copies with chunks far smaller than a block, so blocks span chunks, on a disk
    /// (direct writes) and on tmpfs; a flipped byte in the second half of a block is caught.
    #[test]
    fn copies_are_exact_and_damage_spanning_chunks_is_caught() {
        let data: Vec<u8> = (0..300_001u32).map(|i| (i * 131 + i / 977) as u8).collect();
        let meta = PartMeta {
            name: "c",
            version: 1,
            rank: 0,
            world_size: 1,
            block: 65_536,
        };
        let regions = [RegionRef {
            id: 0,
            dtype: Dtype::Byte,
            bytes: &data,
        }];
        for (dst_dir, direct) in [(std::env::temp_dir(), true), ("/dev/shm".into(), false)] {
            let d = tempfile::tempdir().unwrap();
            let g = tempfile::tempdir_in(&dst_dir).unwrap();
            let src = DirTier::new("local", d.path().join("l"), false).unwrap();
            let dst = DirTier::new("global", g.path().join("g"), true).unwrap();
            let key = rank_key("c", 1, 0);
            write_part(&src, &key, meta, &regions, Reduction::RAW).unwrap();
            let limits = Limits {
                buffer: 4096,
                bandwidth: 0,
                low_priority: false,
                direct,
            };
            let recode = Recode {
                codecs: Reduction::RAW.codecs,
                same: true,
            };
            let id = ("c", 1, 0);
            copy_part(&src, &dst, id, limits, recode, &|_, _| true).unwrap();
            assert_eq!(dst.get(&key).unwrap(), src.get(&key).unwrap());
            dst.remove(&key).unwrap();

            let path = d.path().join("l").join(&key);
            let mut b = std::fs::read(&path).unwrap();
            let at = 16 + 65_536 + 40_000; // second block, its second half
            b[at] ^= 1;
            std::fs::write(&path, &b).unwrap();
            let e = copy_part(&src, &dst, id, limits, recode, &|_, _| true).unwrap_err();
            assert!(e.msg.contains("fail their checksum"), "{}", e.msg);
            assert!(!dst.exists(&key));
        }
    }
}
