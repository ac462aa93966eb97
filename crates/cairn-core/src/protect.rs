//! The PROTECTED step: partner copies streamed while a part is written, xor / rs parity
//! encoded after capture, and the rebuild of lost parts before a restart.
//!
//! Redundancy objects live next to the parts in a node's directory:
//!
//! ```text
//! <name>/v<version>/partner/rank<r>.ckpt   a byte-identical copy of rank r's part (partner)
//! <name>/v<version>/parity/rank<r>.par     the parity shards rank r holds (xor, rs)
//! ```
//!
//! Every exchange here is arranged so that ranks never wait on each other in a cycle: partner
//! streams are ring shifts with an agreed number of steps, set encoding is a ring inside each
//! set, and rebuild transfers run in one global order of receivers. A rank whose own step
//! failed still takes part in every exchange (sending empty messages) and reports the failure
//! afterwards, so a local error never deadlocks the job.

use crate::agree::agree;
use crate::catalog::{self, rank_key, version_dir};
use crate::error::{Error, ErrorKind, Result};
use crate::mapped::MappedObject;
use crate::part::{
    self, encode_part, part_len, FileRegion, PartMeta, PartSink, Reduction, RegionRef,
};
use cairn_comm::{Comm, Op, Topology};
use cairn_format::{Binding, ChecksumStream, Manifest, ParityCodec, ParityHeader, RankIndex};
use cairn_redundancy::stripe::{self, Codec};
use cairn_redundancy::{Plan, Scheme};
use cairn_tier::{ObjectWriter, Tier};
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use tracing::warn;

/// Bytes per exchange step of a partner stream.
const PIECE: usize = 1 << 20;

/// What protection code needs from the engine.
pub(crate) struct Ctx<'a> {
    pub comm: &'a dyn Comm,
    pub topo: &'a Topology,
    /// This node's first tier.
    pub tier: &'a dyn Tier,
    pub plan: &'a Plan,
}

pub(crate) fn partner_key(name: &str, version: i64, rank: usize) -> String {
    format!("{}/partner/rank{rank}.ckpt", version_dir(name, version))
}

pub(crate) fn parity_key(name: &str, version: i64, rank: usize) -> String {
    format!("{}/parity/rank{rank}.par", version_dir(name, version))
}

fn peer_failed(what: String) -> Error {
    Error::new(ErrorKind::Peer, what)
}

// ---- partner: streamed ---------------------------------------------------------------------

/// A writer that could be created (or `None` after an error already recorded).
type Writer = Option<Box<dyn ObjectWriter>>;

/// A sink that cuts the part into pieces, hands each to a writer thread for the local copy and
/// swaps it with the partner, whose pieces go to a second writer thread.
struct Streamer<'a> {
    comm: &'a dyn Comm,
    dest: usize,
    src: usize,
    steps_left: u64,
    buf: Vec<u8>,
    /// The partner's pieces, received into one buffer kept from piece to piece.
    recv: Vec<u8>,
    own_tx: Option<SyncSender<Vec<u8>>>,
    copy_tx: Option<SyncSender<Vec<u8>>>,
    pool: Option<Receiver<Vec<u8>>>,
    /// Writers used on this thread when there are no spare cores for writer threads.
    inline: Option<(Writer, Writer)>,
    err: Option<Error>,
}

impl Streamer<'_> {
    fn step(&mut self) {
        self.steps_left = self.steps_left.saturating_sub(1);
        if let Some((own, copy)) = self.inline.as_mut() {
            // One thread: write this piece, swap it, write the partner's. On a node whose
            // ranks already fill its cores this beats handing pieces to writer threads.
            let mut res: Result<()> = Ok(());
            if let (false, Some(w)) = (self.buf.is_empty(), own.as_mut()) {
                res = w.write_all(&self.buf).map_err(Error::from);
            }
            let got = &mut self.recv;
            match self.comm.sendrecv_into(&self.buf, self.dest, self.src, got) {
                Ok(()) => {
                    if let (false, Some(w), true) = (got.is_empty(), copy.as_mut(), res.is_ok()) {
                        res = w.write_all(got).map_err(Error::from);
                    }
                }
                Err(e) => res = Err(e.into()),
            }
            if let Err(e) = res {
                self.err.get_or_insert(e);
            }
            self.buf.clear();
            return;
        }
        let fresh = self
            .pool
            .as_ref()
            .and_then(|p| p.try_recv().ok())
            .unwrap_or_else(|| Vec::with_capacity(PIECE));
        let piece = std::mem::replace(&mut self.buf, fresh);
        match self.comm.sendrecv(&piece, self.dest, self.src) {
            Ok(got) if !got.is_empty() => {
                if let Some(tx) = &self.copy_tx {
                    let _ = tx.send(got);
                }
            }
            Ok(_) => {}
            Err(e) => self.err = Some(e.into()),
        }
        if !piece.is_empty() {
            if let Some(tx) = &self.own_tx {
                let _ = tx.send(piece);
            }
        }
        self.buf.clear();
    }

    /// Send what is left, then keep exchanging empty pieces until the agreed step count.
    fn finish(&mut self) {
        if !self.buf.is_empty() {
            self.step();
        }
        while self.steps_left > 0 {
            self.step();
        }
    }
}

impl PartSink for Streamer<'_> {
    fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let take = (PIECE - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == PIECE {
                self.step();
            }
        }
        Ok(())
    }
}

/// Run a writer thread's loop: write every piece, recycle buffers, keep the first error.
fn drain_into(
    mut w: Option<Box<dyn ObjectWriter>>,
    rx: Receiver<Vec<u8>>,
    pool: Option<Sender<Vec<u8>>>,
) -> (Option<Box<dyn ObjectWriter>>, Option<Error>) {
    let mut err = None;
    for piece in rx {
        if err.is_none() {
            if let Some(w) = w.as_mut() {
                if let Err(e) = w.write_all(&piece) {
                    err = Some(Error::from(e));
                }
            }
        }
        if let Some(p) = &pool {
            let _ = p.send(piece);
        }
    }
    (w, err)
}

/// Collective over each partner ring: write this rank's part to the first tier and, in the
/// same pass, send it to its partner while receiving the partner's part, the local write,
/// the partner write and the exchange overlapping (the DEEP-ER "buddy" scheme).
pub(crate) fn write_streamed(
    ctx: &Ctx<'_>,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    let rank = ctx.topo.rank;
    let (dest, src) = (ctx.plan.partner_dest[rank], ctx.plan.partner_src[rank]);
    let mut steps = [part_len(meta, regions).div_ceil(PIECE as u64).max(1) as i64];
    ctx.comm.allreduce_i64(&mut steps, Op::Max)?;
    let own_key = rank_key(meta.name, meta.version, rank);
    let copy_key = partner_key(meta.name, meta.version, src);
    let own_w = ctx.tier.create(&own_key);
    let copy_w = ctx.tier.create(&copy_key);
    let mut first_err: Option<Error> = None;
    let own_w = own_w
        .map_err(|e| first_err.get_or_insert(e.into()).clone())
        .ok();
    let copy_w = copy_w
        .map_err(|e| first_err.get_or_insert(e.into()).clone())
        .ok();
    let fail = |e: Error| {
        e.context(format!(
            "rank {rank}: partner copy of {} v{} with rank {dest}/{src}",
            meta.name, meta.version
        ))
    };
    // Writer threads only help when the node has cores to spare for them.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 3 * ctx.topo.node_ranks().len() {
        let mut st = Streamer {
            comm: ctx.comm,
            dest,
            src,
            steps_left: steps[0] as u64,
            buf: Vec::with_capacity(PIECE),
            recv: Vec::new(),
            own_tx: None,
            copy_tx: None,
            pool: None,
            inline: Some((own_w, copy_w)),
            err: first_err,
        };
        let index = encode_part(&mut st, meta, regions, red);
        st.finish();
        let (own, copy) = st.inline.take().expect("inline writers");
        if let Some(e) = st.err {
            return Err(fail(e));
        }
        let index = index?;
        own.expect("writer exists when no error").commit()?;
        copy.expect("writer exists when no error").commit()?;
        return Ok(index);
    }
    let (index, own, copy, stream_err) = std::thread::scope(|s| {
        let (own_tx, own_rx) = sync_channel::<Vec<u8>>(2);
        let (copy_tx, copy_rx) = sync_channel::<Vec<u8>>(2);
        let (pool_tx, pool_rx) = channel::<Vec<u8>>();
        let own_h = s.spawn(move || drain_into(own_w, own_rx, Some(pool_tx)));
        let copy_h = s.spawn(move || drain_into(copy_w, copy_rx, None));
        let mut st = Streamer {
            comm: ctx.comm,
            dest,
            src,
            steps_left: steps[0] as u64,
            buf: Vec::with_capacity(PIECE),
            recv: Vec::new(),
            own_tx: Some(own_tx),
            copy_tx: Some(copy_tx),
            pool: Some(pool_rx),
            inline: None,
            err: None,
        };
        let index = encode_part(&mut st, meta, regions, red);
        st.finish();
        st.own_tx.take();
        st.copy_tx.take();
        let own = own_h.join().expect("writer thread does not panic");
        let copy = copy_h.join().expect("writer thread does not panic");
        (index, own, copy, st.err)
    });
    let index = index?;
    if let Some(e) = [first_err, stream_err, own.1, copy.1]
        .into_iter()
        .flatten()
        .next()
    {
        return Err(fail(e));
    }
    own.0.expect("writer exists when no error").commit()?;
    copy.0.expect("writer exists when no error").commit()?;
    Ok(index)
}

/// Collective over each partner ring: write the part, read it back and send it, then write
/// the partner's. The engine takes this path for a part with adopted files (the file API's
/// routed files: their bytes are in place before the part is written, so there is nothing to
/// stream alongside), and for every part with `[redundancy] partner_mode = "readback"`, the
/// baseline `write_streamed` is measured against.
pub(crate) fn write_readback(
    ctx: &Ctx<'_>,
    meta: PartMeta<'_>,
    regions: &[RegionRef<'_>],
    files: &[FileRegion<'_>],
    red: Reduction<'_>,
) -> Result<RankIndex> {
    let rank = ctx.topo.rank;
    let (dest, src) = (ctx.plan.partner_dest[rank], ctx.plan.partner_src[rank]);
    let own_key = rank_key(meta.name, meta.version, rank);
    let written = part::write_part_files(ctx.tier, &own_key, meta, regions, files, red);
    let reader = written
        .as_ref()
        .ok()
        .and_then(|_| ctx.tier.open(&own_key).ok());
    let len = reader.as_ref().map_or(0, |r| r.len());
    let mut steps = [len.div_ceil(PIECE as u64).max(1) as i64];
    ctx.comm.allreduce_i64(&mut steps, Op::Max)?;
    let mut copy = ctx
        .tier
        .create(&partner_key(meta.name, meta.version, src))
        .map_err(Error::from);
    let mut buf = vec![0u8; PIECE];
    for step in 0..steps[0] as u64 {
        let off = step * PIECE as u64;
        let n = len.saturating_sub(off).min(PIECE as u64) as usize;
        let piece = match &reader {
            Some(r) if n > 0 && r.read_exact_at(&mut buf[..n], off).is_ok() => &buf[..n],
            _ => &buf[..0],
        };
        let got = ctx.comm.sendrecv(piece, dest, src)?;
        if let Ok(w) = copy.as_mut() {
            if let Err(e) = w.write_all(&got) {
                copy = Err(e.into());
            }
        }
    }
    let index = written?;
    copy?.commit()?;
    Ok(index)
}

// ---- xor / rs: encoding after capture ----------------------------------------------------

fn codec(scheme: Scheme) -> (Codec, ParityCodec) {
    if scheme == Scheme::Xor {
        (Codec::Xor, ParityCodec::Xor)
    } else {
        (Codec::ReedSolomon, ParityCodec::ReedSolomon)
    }
}

/// Data-shard index of member `member` in stripe `t`, if it contributes one.
fn data_index(n: usize, m: usize, t: usize, member: usize) -> Option<usize> {
    let i = (member + 2 * n - t - m) % n;
    (i < n - m).then_some(i)
}

/// Bytes of each segment encoded per exchange step: small enough that a step's messages and
/// parity stay in cache, large enough that the steps' synchronisation is noise.
const SLICE: usize = 1 << 20;
const _: () = assert!(SLICE % stripe::SLICE_ALIGN == 0);

/// A message assembled from slices of stored objects, in a buffer kept from step to step:
/// the bytes are read straight into it, and only padding is zeroed.
#[derive(Default)]
struct SliceBuf {
    buf: Vec<u8>,
    used: usize,
}

impl SliceBuf {
    fn clear(&mut self) {
        self.used = 0;
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.used]
    }

    /// Append bytes `[off, off + len)` of an object of `obj_len` bytes, zeros past its end
    /// (parts are padded to the set's segment size) or for an object that could not be
    /// opened.
    fn append(
        &mut self,
        obj: Option<&dyn cairn_tier::ObjectReader>,
        obj_len: u64,
        off: u64,
        len: usize,
    ) -> Result<()> {
        let start = self.used;
        if self.buf.len() < start + len {
            self.buf.resize(start + len, 0);
        }
        self.used += len;
        let have = match obj {
            Some(_) => obj_len.saturating_sub(off).min(len as u64) as usize,
            None => 0,
        };
        let dst = &mut self.buf[start..start + len];
        dst[have..].fill(0);
        if let (Some(r), true) = (obj, have > 0) {
            r.read_exact_at(&mut dst[..have], off)?;
        }
        Ok(())
    }
}

/// Collective within each set: compute and store the parity shards this rank holds.
///
/// The segments are encoded slice by slice: for each slice offset, every member sends every
/// other member the slices of its segments that member needs (a ring of `n - 1` shifts), and
/// each holder encodes the slice of its stripes while the bytes are still in cache and writes
/// it to its parity object. Nothing larger than a slice is held in memory; the part is read
/// once, straight from the tier.
pub(crate) fn encode_parity(ctx: &Ctx<'_>, name: &str, version: i64, own_len: u64) -> Result<()> {
    let rank = ctx.topo.rank;
    let mut err: Option<Error> = None;
    let part = match ctx.tier.open(&rank_key(name, version, rank)) {
        Ok(r) if r.len() == own_len => match part::index_sum(&*r) {
            Ok(_) => Some(r),
            Err(e) => {
                err = Some(e);
                None
            }
        },
        Ok(r) => {
            err = Some(Error::new(
                ErrorKind::Corrupt,
                format!("part is {} bytes, expected {own_len}", r.len()),
            ));
            None
        }
        Err(e) => {
            err = Some(e.into());
            None
        }
    };
    // Every member's length and index checksum: the parity records what it was encoded
    // from, so that it is never used with other rank files.
    let own_sum = part
        .as_deref()
        .and_then(|r| part::index_sum(r).ok())
        .unwrap_or(0);
    let mut mine = own_len.to_le_bytes().to_vec();
    mine.extend_from_slice(&own_sum.to_le_bytes());
    let lens: Vec<(u64, u64)> = ctx
        .comm
        .allgather(&mine)?
        .iter()
        .map(|b| {
            let at = |o: usize| {
                u64::from_le_bytes(
                    b.get(o..o + 8)
                        .and_then(|x| x.try_into().ok())
                        .unwrap_or([0; 8]),
                )
            };
            (at(0), at(8))
        })
        .collect();
    let (set_id, me) = ctx
        .plan
        .set_of(rank)
        .expect("every rank is in a set under xor / rs");
    let set = &ctx.plan.sets[set_id];
    let (n, m) = (set.len(), ctx.plan.parity);
    let k = n - m;
    let s = stripe::segment_size(set.iter().map(|r| lens[*r].0).max().unwrap_or(0), n, m) as usize;
    let view = part.as_deref().and_then(MappedObject::of);
    let (code, pcodec) = codec(ctx.plan.scheme);
    let mut header = ParityHeader {
        codec: pcodec,
        set_id: set_id as u32,
        m: m as u32,
        holder: me as u32,
        segment: s as u64,
        members: set.iter().map(|r| (*r as u32, lens[*r].0)).collect(),
        shard_sums: vec![0; m],
        bound: Some(Binding {
            name: name.to_string(),
            version,
            index_sums: set.iter().map(|r| lens[*r].1).collect(),
        }),
    };
    let base = header.encoded_len() as u64;
    let mut out = match ctx.tier.create(&parity_key(name, version, rank)) {
        Ok(w) => Some(w),
        Err(e) => {
            err.get_or_insert(e.into());
            None
        }
    };
    let mut sums: Vec<ChecksumStream> = (0..m).map(|_| ChecksumStream::new()).collect();
    let mut enc = stripe::SliceEncoder::new(code, k, m);
    // What each member sent this step (index: ring distance), kept from slice to slice.
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut msg = SliceBuf::default();
    // The m parity slices of stripe `me`, which this member encodes.
    let mut parity: Vec<Vec<u8>> = vec![Vec::with_capacity(SLICE); m];
    let mut shard = Vec::new();
    let zeros = vec![0u8; SLICE.min(s)];
    let t = me;
    for off in (0..s).step_by(SLICE) {
        let c = SLICE.min(s - off);
        // Data: stripe t is encoded by its first parity holder, member t, alone; each data
        // member sends it its segment's slice.
        for (d, got_d) in got.iter_mut().enumerate().skip(1) {
            let (to, from) = ((me + d) % n, (me + n - d) % n);
            msg.clear();
            // A slice inside the part is sent from its mapping; one reaching into the
            // padding (or a part that is not in files) is read into `msg`.
            let mut direct = None;
            if let Some(i) = data_index(n, m, to, me) {
                let at = (i * s + off) as u64;
                direct = view
                    .as_ref()
                    .filter(|_| at + c as u64 <= own_len)
                    .and_then(|v| v.get(at, c));
                if direct.is_none() {
                    if let Err(e) = msg.append(part.as_deref(), own_len, at, c) {
                        err.get_or_insert(e);
                    }
                }
            }
            ctx.comm
                .sendrecv_into(direct.unwrap_or(msg.bytes()), set[to], set[from], got_d)?;
            let want = if data_index(n, m, t, from).is_some() {
                c
            } else {
                0
            };
            if got_d.len() != want {
                err.get_or_insert(peer_failed(format!(
                    "rank {} sent no data for parity (see its message)",
                    set[from]
                )));
            }
        }
        let mut encoded = err.is_none();
        if encoded {
            let mut slices: Vec<&[u8]> = vec![&zeros[..c]; k];
            for (d, got_d) in got.iter().enumerate().skip(1) {
                if let Some(i) = data_index(n, m, t, (me + n - d) % n) {
                    slices[i] = got_d;
                }
            }
            if let Err(e) = enc.encode_all(&slices, &mut parity) {
                err = Some(Error::new(ErrorKind::Io, e));
                encoded = false;
            }
        }
        // Parity: shard j of stripe t belongs to member t + j, which keeps it as its shard j.
        // Every member takes part in each shift, sending nothing after a failure.
        for j in 0..m {
            let bytes: &[u8] = if j == 0 {
                if encoded {
                    &parity[0]
                } else {
                    &[]
                }
            } else {
                ctx.comm.sendrecv_into(
                    if encoded { &parity[j] } else { &[] },
                    set[(me + j) % n],
                    set[(me + n - j) % n],
                    &mut shard,
                )?;
                &shard
            };
            if err.is_some() {
                continue;
            }
            if bytes.len() != c {
                err = Some(peer_failed(format!(
                    "rank {} sent no parity (see its message)",
                    set[(me + n - j) % n]
                )));
                continue;
            }
            sums[j].update(bytes);
            let w = out
                .as_mut()
                .expect("a writer exists while there is no error");
            if let Err(e) = w.write_all_at(bytes, base + (j * s + off) as u64) {
                err = Some(e.into());
            }
        }
    }
    let res = match (err, out) {
        (Some(e), _) => Err(e),
        (None, None) => Err(Error::new(ErrorKind::Io, "no parity object".to_string())),
        (None, Some(mut w)) => {
            header.shard_sums = sums.iter().map(|h| h.digest()).collect();
            w.write_all_at(&header.encode(), 0)
                .and_then(|()| w.commit())
                .map_err(Error::from)
        }
    };
    res.map_err(|e| e.context(format!("rank {rank}: encoding parity of {name} v{version}")))
}

// ---- rebuild ---------------------------------------------------------------------------

/// What one rank has of a version, gathered from every rank before a rebuild.
#[derive(Debug, Default, Clone)]
struct Status {
    has_own: bool,
    /// The index checksum of the own part, when it is whole.
    own_sum: u64,
    has_copy: bool,
    manifest: Option<Manifest>,
    /// A parity object whose header and shards check out.
    parity: Option<ParityHeader>,
}

impl Status {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![self.has_own as u8, self.has_copy as u8];
        let m = self
            .manifest
            .as_ref()
            .map(Manifest::encode)
            .unwrap_or_default();
        b.extend_from_slice(&(m.len() as u32).to_le_bytes());
        b.extend_from_slice(&m);
        let p = self
            .parity
            .as_ref()
            .map(ParityHeader::encode)
            .unwrap_or_default();
        b.extend_from_slice(&(p.len() as u32).to_le_bytes());
        b.extend_from_slice(&p);
        b.extend_from_slice(&self.own_sum.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Status {
        let field = |off: usize| -> Option<(&[u8], usize)> {
            let len = u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?) as usize;
            Some((b.get(off + 4..off + 4 + len)?, off + 4 + len))
        };
        let mut st = Status {
            has_own: b.first() == Some(&1),
            has_copy: b.get(1) == Some(&1),
            ..Status::default()
        };
        if let Some((m, next)) = field(2) {
            st.manifest = Manifest::decode(m).ok();
            if let Some((p, next)) = field(next) {
                st.parity = ParityHeader::decode(p).ok();
                st.own_sum = b
                    .get(next..next + 8)
                    .and_then(|x| x.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
            }
        }
        st
    }
}

/// Check this rank's parity object, its header and every shard, reading it slice by slice.
fn read_parity(tier: &dyn Tier, name: &str, version: i64, rank: usize) -> Option<ParityHeader> {
    let r = tier.open(&parity_key(name, version, rank)).ok()?;
    let mut prefix = [0u8; ParityHeader::PREFIX_LEN];
    r.read_exact_at(&mut prefix, 0).ok()?;
    let hlen = ParityHeader::len_from_prefix(&prefix)?;
    if hlen as u64 > r.len() {
        return None;
    }
    let mut head = vec![0u8; hlen];
    r.read_exact_at(&mut head, 0).ok()?;
    let h = ParityHeader::decode(&head).ok()?;
    if let Err(e) = h.protects(name, version, |_| None) {
        warn!("cairn: rank {rank}: its parity object of {name} v{version} is not used: it {e}");
        return None;
    }
    let s = h.segment;
    let start = h.encoded_len() as u64;
    if r.len() != start + s * h.m as u64
        || h.members.get(h.holder as usize).map(|m| m.0 as usize) != Some(rank)
    {
        return None;
    }
    let mut buf = vec![0u8; SLICE.min(s as usize)];
    for (j, sum) in h.shard_sums.iter().enumerate() {
        let mut c = ChecksumStream::new();
        let mut off = 0;
        while off < s {
            let n = (s - off).min(buf.len() as u64) as usize;
            r.read_exact_at(&mut buf[..n], start + j as u64 * s + off)
                .ok()?;
            c.update(&buf[..n]);
            off += n as u64;
        }
        if c.digest() != *sum {
            return None;
        }
    }
    Some(h)
}

/// Check that the part just stored under `key` is a valid, complete rank file of `name`
/// v`version` for `rank`; remove it if it is not, so a bad rebuild never stays behind.
fn check_stored_part(
    tier: &dyn Tier,
    key: &str,
    name: &str,
    version: i64,
    rank: usize,
) -> Result<()> {
    let checked = tier.open(key).map_err(Error::from).and_then(|r| {
        let ix = part::read_index(&*r)?;
        if ix.name != name || ix.version != version || ix.rank as usize != rank {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("holds {} v{} of rank {}", ix.name, ix.version, ix.rank),
            ));
        }
        part::verify(&*r).map(|_| ())
    });
    if checked.is_err() {
        let _ = tier.remove(key);
    }
    checked
}

/// Collective: make version `version` of `name` restorable on every rank again, rebuilding
/// parts and redundancy lost with a node (or damaged) from partner copies or parity, and
/// re-protecting it. Returns a description of what was rebuilt, or `None` if nothing was
/// missing. Fails on every rank, with the reason, when the losses exceed what the scheme
/// tolerates.
pub(crate) fn rebuild(ctx: &Ctx<'_>, name: &str, version: i64) -> Result<Option<String>> {
    let rank = ctx.topo.rank;
    let own_key = rank_key(name, version, rank);
    let manifest = catalog::read_manifest(ctx.tier, name, version)
        .ok()
        .flatten();
    let listed = manifest
        .as_ref()
        .is_some_and(|m| m.ranks.contains(&(rank as u32)));
    // A part counts only if every checksum holds: a damaged one is lost like a missing one,
    // and must never feed a rebuilt part or re-encoded parity.
    let own_sum = listed
        .then(|| ctx.tier.open(&own_key).ok())
        .flatten()
        .filter(|r| {
            part::read_index(&**r)
                .is_ok_and(|ix| part::index_is(&ix, (name, version), rank, None).is_ok())
                && part::verify(&**r).is_ok()
        })
        .and_then(|r| part::index_sum(&*r).ok());
    let has_own = own_sum.is_some();
    let has_copy = ctx.plan.scheme == Scheme::Partner
        && ctx
            .tier
            .exists(&partner_key(name, version, ctx.plan.partner_src[rank]));
    let mine = Status {
        has_own,
        own_sum: own_sum.unwrap_or(0),
        has_copy,
        manifest: manifest.clone(),
        parity: read_parity(ctx.tier, name, version, rank),
    };
    let mut all: Vec<Status> = ctx
        .comm
        .allgather(&mine.encode())?
        .iter()
        .map(|b| Status::decode(b))
        .collect();
    // Parity encoded from other rank files than the members hold now (a copy of another
    // run's) would rebuild garbage: it counts as lost, on every rank alike.
    let sums: Vec<Option<u64>> = all.iter().map(|s| s.has_own.then_some(s.own_sum)).collect();
    for (r, st) in all.iter_mut().enumerate() {
        let Some(h) = &st.parity else { continue };
        let sum_of = |x: u32| sums.get(x as usize).copied().flatten();
        if let Err(e) = h.protects(name, version, sum_of) {
            if rank == 0 {
                warn!("cairn: the parity rank {r} holds of {name} v{version} is not used: it {e}");
            }
            st.parity = None;
        }
    }
    let parity = all[rank].parity.clone();
    let Some(template) = all.iter().find_map(|s| s.manifest.clone()) else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no node holds a manifest of {name} v{version}"),
        ));
    };
    if template.world_size as usize != ctx.topo.size {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "{name} v{version} was written by {} ranks",
                template.world_size
            ),
        ));
    }
    // Rebuilt files go into this job's node directories and follow this job's plan: the
    // checkpoint must have been written with the same layout and scheme.
    if template.nodes as usize != ctx.topo.nodes || template.scheme != ctx.plan.describe() {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "{name} v{version} was written on {} nodes with scheme {}, but this job has {} nodes and scheme {}",
                template.nodes,
                template.scheme,
                ctx.topo.nodes,
                ctx.plan.describe()
            ),
        ));
    }
    let lost: Vec<usize> = (0..all.len()).filter(|r| !all[*r].has_own).collect();
    let scheme = template.scheme.split('(').next().unwrap_or("single");
    let report = match scheme {
        "partner" => rebuild_partner(ctx, name, version, &all, &lost)?,
        "xor" | "rs" => rebuild_sets(ctx, name, version, &all, &lost, parity)?,
        other => {
            if lost.is_empty() {
                None
            } else {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "ranks {lost:?} lost their part and scheme \"{other}\" keeps no copies"
                    ),
                ));
            }
        }
    };
    // A replacement node (or a wiped one) needs its manifest again.
    let leader_needs = ctx.topo.is_node_leader() && manifest.is_none();
    let res = if leader_needs && report.is_some() {
        let m = Manifest {
            node: Some(ctx.topo.node as u32),
            ranks: ctx.topo.node_ranks().iter().map(|r| *r as u32).collect(),
            ..template
        };
        ctx.tier
            .put(
                &catalog::manifest_key(name, version),
                &crate::auth::encode_manifest(&m),
            )
            .map_err(Error::from)
    } else {
        Ok(())
    };
    agree(ctx.comm, res, &format!("re-publish {name} v{version}"))?;
    Ok(report)
}

fn rebuild_partner(
    ctx: &Ctx<'_>,
    name: &str,
    version: i64,
    all: &[Status],
    lost: &[usize],
) -> Result<Option<String>> {
    let rank = ctx.topo.rank;
    let plan = ctx.plan;
    if plan.partner_dest.len() != all.len() {
        return Err(Error::new(
            ErrorKind::Mismatch,
            "this job is not configured with scheme \"partner\"; it cannot rebuild partner copies",
        ));
    }
    let copy_missing: Vec<usize> = (0..all.len())
        .filter(|r| !all[plan.partner_dest[*r]].has_copy)
        .collect();
    if lost.is_empty() && copy_missing.is_empty() {
        return Ok(None);
    }
    if let Some(x) = lost.iter().find(|x| !all[plan.partner_dest[**x]].has_copy) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "rank {x}'s part and its partner copy on rank {} are both lost",
                plan.partner_dest[*x]
            ),
        ));
    }
    let mut err: Option<Error> = None;
    // Lost parts come back from their holders.
    for x in lost {
        let h = plan.partner_dest[*x];
        let res = transfer_part(
            ctx,
            (h, &partner_key(name, version, *x)),
            (*x, &rank_key(name, version, *x)),
            (name, version, *x),
        );
        if let Err(e) = res {
            err.get_or_insert(e.context(format!("rank {rank}: partner copy of rank {x}")));
        }
    }
    // Re-protect: every part whose copy went with a lost node is sent to its partner again.
    for y in &copy_missing {
        let d = plan.partner_dest[*y];
        let res = transfer_part(
            ctx,
            (*y, &rank_key(name, version, *y)),
            (d, &partner_key(name, version, *y)),
            (name, version, *y),
        );
        if let Err(e) = res {
            err.get_or_insert(e.context(format!("rank {rank}: re-protecting rank {y}")));
        }
    }
    agree(
        ctx.comm,
        err.map_or(Ok(()), Err),
        &format!("rebuild {name} v{version}"),
    )?;
    let mut parts = Vec::new();
    if !lost.is_empty() {
        parts.push(format!(
            "rebuilt the parts of ranks {lost:?} from partner copies"
        ));
    }
    parts.push(format!("re-protected ranks {copy_missing:?}"));
    Ok(Some(parts.join("; ")))
}

/// Collective between two ranks (the others return at once): stream the part stored under
/// `from.1` on rank `from.0` to rank `to.0`, which stores it under `to.1` once it checks out as
/// a whole rank file of `part` (name, version, rank). The sender's length goes first
/// (`u64::MAX` when it cannot read it), then [`PIECE`]-sized messages.
fn transfer_part(
    ctx: &Ctx<'_>,
    from: (usize, &str),
    to: (usize, &str),
    part: (&str, i64, usize),
) -> Result<()> {
    let rank = ctx.topo.rank;
    if rank == from.0 {
        let reader = ctx.tier.open(from.1);
        let len = reader.as_ref().map_or(u64::MAX, |r| r.len());
        ctx.comm.send(&len.to_le_bytes(), to.0)?;
        let Ok(r) = reader else {
            return Err(reader.err().expect("failed").into());
        };
        let mut buf = vec![0u8; PIECE.min(len as usize)];
        let mut res = Ok(());
        let mut off = 0;
        while off < len {
            let n = (len - off).min(PIECE as u64) as usize;
            if res.is_ok() {
                res = r.read_exact_at(&mut buf[..n], off).map_err(Error::from);
            }
            // A failed read still sends (zeros, which the receiver's check rejects), so the
            // receiver is never left waiting.
            ctx.comm.send(&buf[..n], to.0)?;
            off += n as u64;
        }
        res
    } else if rank == to.0 {
        let len = ctx.comm.recv(from.0)?;
        let len = len
            .get(..8)
            .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap()));
        if len == u64::MAX {
            return Err(peer_failed(format!(
                "rank {} could not read its copy (see its message)",
                from.0
            )));
        }
        let mut w = ctx.tier.create(to.1).map_err(Error::from);
        let mut off = 0;
        while off < len {
            let piece = ctx.comm.recv(from.0)?;
            if piece.is_empty() {
                return Err(peer_failed(format!("rank {} stopped sending", from.0)));
            }
            if let Ok(x) = w.as_mut() {
                if let Err(e) = x.write_all(&piece) {
                    w = Err(e.into());
                }
            }
            off += piece.len() as u64;
        }
        w?.commit()?;
        let (name, version, owner) = part;
        check_stored_part(ctx.tier, to.1, name, version, owner)
    } else {
        Ok(())
    }
}

fn rebuild_sets(
    ctx: &Ctx<'_>,
    name: &str,
    version: i64,
    all: &[Status],
    lost: &[usize],
    own_parity: Option<ParityHeader>,
) -> Result<Option<String>> {
    let rank = ctx.topo.rank;
    // The sets as recorded by the surviving parity holders (the job's layout may differ).
    let mut sets: BTreeMap<Vec<u32>, ParityHeader> = BTreeMap::new();
    for st in all {
        if let Some(h) = &st.parity {
            sets.entry(h.members.iter().map(|m| m.0).collect())
                .or_insert_with(|| h.clone());
        }
    }
    let set_of = |r: usize| {
        sets.iter()
            .find(|(members, _)| members.contains(&(r as u32)))
            .map(|(_, h)| h)
    };
    let parity_missing: Vec<usize> = (0..all.len())
        .filter(|r| all[*r].parity.is_none())
        .collect();
    if lost.is_empty() && parity_missing.is_empty() {
        return Ok(None);
    }
    for r in lost.iter().chain(&parity_missing) {
        let Some(h) = set_of(*r) else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no parity of rank {r}'s set survives"),
            ));
        };
        let (n, m) = (h.n(), h.m as usize);
        let has_data = |member: usize| all[h.members[member].0 as usize].has_own;
        let has_par = |member: usize| all[h.members[member].0 as usize].parity.is_some();
        for t in 0..n {
            let gone = (0..n - m)
                .filter(|i| !has_data(stripe::data_member(n, m, t, *i)))
                .count()
                + (0..m)
                    .filter(|j| !has_par(stripe::parity_holder(n, t, *j)))
                    .count();
            if gone > m {
                let members: Vec<u32> = h.members.iter().map(|x| x.0).collect();
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("the set of ranks {members:?} lost {gone} shards of a stripe but its code tolerates {m}"),
                ));
            }
        }
    }
    let mut needy: Vec<usize> = lost.iter().chain(&parity_missing).copied().collect();
    needy.sort_unstable();
    needy.dedup();
    // What this rank sends: its part (if whole) and its parity object (if whole), read a
    // slice at a time.
    let own = all[rank]
        .has_own
        .then(|| ctx.tier.open(&rank_key(name, version, rank)).ok())
        .flatten();
    let own_par = own_parity
        .as_ref()
        .and_then(|_| ctx.tier.open(&parity_key(name, version, rank)).ok());
    let mut err: Option<Error> = None;
    let mut job = None;
    if needy.contains(&rank) {
        let h = set_of(rank).expect("checked above");
        match SetRebuild::new(ctx, name, version, h, own.as_deref(), all[rank].has_own) {
            Ok(j) => job = Some(j),
            Err(e) => err = Some(e),
        }
    }
    // Slice by slice, in one global order of (receiver, sender) pairs: every member of a
    // needy member's set sends it its slices of data and parity; the needy member recovers
    // its stripes' slices and writes them while they are in cache.
    let steps = needy
        .iter()
        .map(|x| {
            let h = set_of(*x).expect("checked above");
            (h.segment as usize).div_ceil(rebuild_slice(h))
        })
        .max()
        .unwrap_or(0);
    let mut msg = SliceBuf::default();
    for step in 0..steps {
        for x in &needy {
            let h = set_of(*x).expect("checked above");
            let (s, c) = (h.segment as usize, rebuild_slice(h));
            let off = step * c;
            if off >= s {
                continue;
            }
            let c = c.min(s - off);
            let members: Vec<usize> = h.members.iter().map(|m| m.0 as usize).collect();
            let mut received = Vec::new();
            for (y_idx, y) in members.iter().enumerate().filter(|(_, y)| *y != x) {
                if rank == *y {
                    let recorded = h.members[y_idx].1;
                    let data = own.as_deref().filter(|r| r.len() == recorded);
                    let par = own_par.as_deref();
                    if let Err(e) = rebuild_message(h, data, par, off, c, &mut msg) {
                        err.get_or_insert(e);
                    }
                    ctx.comm.send(msg.bytes(), *x)?;
                } else if rank == *x {
                    received.push((y_idx, ctx.comm.recv(*y)?));
                }
            }
            if rank == *x {
                if let (Some(j), None) = (job.as_mut(), &err) {
                    if let Err(e) = j.step(off, c, &received) {
                        err = Some(e);
                    }
                }
            }
        }
    }
    let result = match (err, job) {
        (Some(e), _) => Err(e),
        (None, Some(j)) => j.finish(ctx, name, version),
        (None, None) => Ok(()),
    };
    agree(ctx.comm, result, &format!("rebuild {name} v{version}"))?;
    let mut parts = Vec::new();
    if !lost.is_empty() {
        parts.push(format!("rebuilt the parts of ranks {lost:?} from parity"));
    }
    parts.push(format!("re-encoded the parity of ranks {needy:?}"));
    Ok(Some(parts.join("; ")))
}

/// Bytes of each segment a rebuild moves per step: a set member sends `n` slices (its data
/// segments and parity shards), so about [`SLICE`] per message.
fn rebuild_slice(h: &ParityHeader) -> usize {
    let a = stripe::SLICE_ALIGN;
    (SLICE / h.n().max(1) / a * a).max(a)
}

const HAS_DATA: u8 = 1;
const HAS_PARITY: u8 = 2;

/// What a set member sends a needy member for the slice `[off, off + c)` of every segment:
/// a flags byte, its `k` data slices and its `m` parity slices (zeros where it has none).
fn rebuild_message(
    h: &ParityHeader,
    data: Option<&dyn cairn_tier::ObjectReader>,
    par: Option<&dyn cairn_tier::ObjectReader>,
    off: usize,
    c: usize,
    msg: &mut SliceBuf,
) -> Result<()> {
    let (n, m, s) = (h.n(), h.m as usize, h.segment as usize);
    let k = n - m;
    msg.clear();
    // The flags byte, set below.
    msg.append(None, 0, 0, 1)?;
    let mut res = Ok(());
    let len = |r: Option<&dyn cairn_tier::ObjectReader>| r.map_or(0, |r| r.len());
    for i in 0..k {
        let at = (i * s + off) as u64;
        if let Err(e) = msg.append(data, len(data), at, c) {
            res = Err(e);
        }
    }
    let base = h.encoded_len() as u64;
    for j in 0..m {
        let at = base + (j * s + off) as u64;
        if let Err(e) = msg.append(par, len(par), at, c) {
            res = Err(e);
        }
    }
    let flags =
        if data.is_some() { HAS_DATA } else { 0 } | if par.is_some() { HAS_PARITY } else { 0 };
    msg.buf[0] = if res.is_ok() { flags } else { 0 };
    res
}

/// A needy member's side of a set rebuild: the part it lost (if it did) and its parity
/// object, written slice by slice as the stripes are recovered.
struct SetRebuild<'a> {
    h: &'a ParityHeader,
    me: usize,
    code: Codec,
    own: Option<&'a dyn cairn_tier::ObjectReader>,
    /// The rebuilt part, when this member lost it.
    part: Option<Box<dyn ObjectWriter>>,
    parity: Box<dyn ObjectWriter>,
    sums: Vec<ChecksumStream>,
    enc: stripe::SliceEncoder,
    buf: SliceBuf,
    out: Vec<u8>,
}

impl<'a> SetRebuild<'a> {
    fn new(
        ctx: &Ctx<'_>,
        name: &str,
        version: i64,
        h: &'a ParityHeader,
        own: Option<&'a dyn cairn_tier::ObjectReader>,
        has_own: bool,
    ) -> Result<SetRebuild<'a>> {
        let rank = ctx.topo.rank;
        let me = h
            .members
            .iter()
            .position(|x| x.0 as usize == rank)
            .expect("member of its set");
        let (n, m) = (h.n(), h.m as usize);
        let code = if h.codec == ParityCodec::Xor {
            Codec::Xor
        } else {
            Codec::ReedSolomon
        };
        let own = own.filter(|r| has_own && r.len() == h.members[me].1);
        let part = match own {
            Some(_) => None,
            None => Some(ctx.tier.create(&rank_key(name, version, rank))?),
        };
        Ok(SetRebuild {
            h,
            me,
            code,
            own,
            part,
            parity: ctx.tier.create(&parity_key(name, version, rank))?,
            sums: (0..m).map(|_| ChecksumStream::new()).collect(),
            enc: stripe::SliceEncoder::new(code, n - m, m),
            buf: SliceBuf::default(),
            out: Vec::new(),
        })
    }

    /// Recover slice `[off, off + c)` of this member's stripes from what the others sent
    /// (`(member index, message)`), write its lost data and re-encode its parity.
    fn step(&mut self, off: usize, c: usize, received: &[(usize, Vec<u8>)]) -> Result<()> {
        let h = self.h;
        let (n, m, s) = (h.n(), h.m as usize, h.segment as usize);
        let k = n - m;
        let me = self.me;
        self.buf.clear();
        if let Some(r) = self.own {
            for i in 0..k {
                self.buf.append(Some(r), r.len(), (i * s + off) as u64, c)?;
            }
        }
        // data[member][i] and parity[member][j] for this slice.
        let mut data: Vec<Option<&[u8]>> = vec![None; n * k];
        let mut parity: Vec<Option<&[u8]>> = vec![None; n * m];
        if self.own.is_some() {
            for i in 0..k {
                data[me * k + i] = Some(&self.buf.bytes()[i * c..(i + 1) * c]);
            }
        }
        for (y, msg) in received {
            if msg.len() != 1 + n * c {
                continue;
            }
            if msg[0] & HAS_DATA != 0 {
                for i in 0..k {
                    data[y * k + i] = Some(&msg[1 + i * c..1 + (i + 1) * c]);
                }
            }
            if msg[0] & HAS_PARITY != 0 {
                for j in 0..m {
                    parity[y * m + j] = Some(&msg[1 + (k + j) * c..1 + (k + j + 1) * c]);
                }
            }
        }
        // Stripes this member needs: those holding its lost data, and those it holds parity of.
        let mut recovered: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
        for t in 0..n {
            let mine_data =
                self.part.is_some() && (0..k).any(|i| stripe::data_member(n, m, t, i) == me);
            let mine_par = (0..m).any(|j| stripe::parity_holder(n, t, j) == me);
            if !(mine_data || mine_par) {
                continue;
            }
            let shards: Vec<Option<Vec<u8>>> = (0..k)
                .map(|i| data[stripe::data_member(n, m, t, i) * k + i].map(<[u8]>::to_vec))
                .collect();
            let pars: Vec<Option<Vec<u8>>> = (0..m)
                .map(|j| parity[stripe::parity_holder(n, t, j) * m + j].map(<[u8]>::to_vec))
                .collect();
            let full = stripe::recover(self.code, &shards, &pars)
                .map_err(|e| Error::new(ErrorKind::Corrupt, format!("stripe {t}: {e}")))?;
            recovered.insert(t, full);
        }
        if let Some(w) = self.part.as_mut() {
            let len = h.members[me].1;
            for (t, full) in &recovered {
                for (i, seg) in full.iter().enumerate() {
                    if stripe::data_member(n, m, *t, i) != me {
                        continue;
                    }
                    let at = (i * s + off) as u64;
                    let keep = len.saturating_sub(at).min(c as u64) as usize;
                    if keep > 0 {
                        w.write_all_at(&seg[..keep], at)?;
                    }
                }
            }
        }
        let base = h.encoded_len() as u64;
        for (t, j) in stripe::held_stripes(n, m, me) {
            let full = &recovered[&t];
            let refs: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
            self.enc
                .encode_one(&refs, j, &mut self.out)
                .map_err(|e| Error::new(ErrorKind::Io, e))?;
            self.sums[j].update(&self.out);
            self.parity
                .write_all_at(&self.out, base + (j * s + off) as u64)?;
        }
        Ok(())
    }

    /// Check the rebuilt part and publish it and the parity object.
    fn finish(mut self, ctx: &Ctx<'_>, name: &str, version: i64) -> Result<()> {
        let rank = ctx.topo.rank;
        if let Some(w) = self.part.take() {
            let key = rank_key(name, version, rank);
            w.commit()?;
            check_stored_part(ctx.tier, &key, name, version, rank)
                .and_then(|()| {
                    // The very rank file the parity was encoded from, not merely a valid one.
                    let want = self.h.bound.as_ref().map(|b| b.index_sums[self.me]);
                    let have = ctx.tier.open(&key).map_err(Error::from)?;
                    match (want, part::index_sum(&*have)?) {
                        (Some(w), h) if w != h => {
                            let _ = ctx.tier.remove(&key);
                            Err(Error::new(
                                ErrorKind::Corrupt,
                                format!(
                                    "its index checksum is {h:016x}, the parity recorded {w:016x}"
                                ),
                            ))
                        }
                        _ => Ok(()),
                    }
                })
                .map_err(|e| e.context(format!("rank {rank}: rebuilt part")))?;
        }
        let header = ParityHeader {
            holder: self.me as u32,
            shard_sums: self.sums.iter().map(ChecksumStream::digest).collect(),
            ..self.h.clone()
        };
        self.parity.write_all_at(&header.encode(), 0)?;
        self.parity.commit()?;
        Ok(())
    }
}
