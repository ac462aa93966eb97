//! Tests of the store through the safe API: layout agreement with C, data round trips over
//! chunk boundaries, spill-over, ENOSPC, names, and a process killed inside the lock.

use super::*;
use std::mem::{offset_of, size_of};
use std::process::{Command, Stdio};

/// A store private to one test, wiped when dropped.
struct Scratch {
    name: String,
    spill: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let name = format!("/cairn-test-{}-{tag}", std::process::id());
        let _ = Store::wipe(&name, None);
        Scratch {
            name,
            spill: None,
            _dir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, size: u64, chunk: u64) -> StoreConfig {
        StoreConfig::new(&self.name, size, chunk)
    }

    fn with_spill(&mut self, cfg: &mut StoreConfig, bytes: u64) {
        let p = self._dir.path().join("store.spill");
        cfg.spill = Some(p.clone());
        cfg.spill_size = bytes;
        self.spill = Some(p);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Store::wipe(&self.name, self.spill.as_deref());
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn layout_matches_c() {
    let mut v = vec![0u64; 128];
    // SAFETY: v has room for 128 values.
    let n = unsafe { raw::cairn_store_layout(v.as_mut_ptr(), v.len()) };
    v.truncate(n);
    type H = raw::StoreHeader;
    type F = raw::FileRecord;
    type M = raw::ChunkMeta;
    let rust: Vec<u64> = vec![
        size_of::<H>(),
        offset_of!(H, magic),
        offset_of!(H, version),
        offset_of!(H, header_size),
        offset_of!(H, segment_size),
        offset_of!(H, chunk_size),
        offset_of!(H, mem_chunks),
        offset_of!(H, spill_chunks),
        offset_of!(H, max_files),
        offset_of!(H, numa_nodes),
        offset_of!(H, files_offset),
        offset_of!(H, link_offset),
        offset_of!(H, free_offset),
        offset_of!(H, data_offset),
        offset_of!(H, spill_id),
        offset_of!(H, creator_pid),
        offset_of!(H, flags),
        offset_of!(H, files_used),
        offset_of!(H, numa_first),
        offset_of!(H, numa_count),
        offset_of!(H, numa_top),
        offset_of!(H, spill_top),
        offset_of!(H, repairs),
        offset_of!(H, generation),
        offset_of!(H, chunk_frees),
        offset_of!(H, lock),
        offset_of!(H, reserved),
        size_of::<F>(),
        offset_of!(F, state),
        offset_of!(F, mode),
        offset_of!(F, size),
        offset_of!(F, first_chunk),
        offset_of!(F, last_chunk),
        offset_of!(F, nchunks),
        offset_of!(F, gen),
        offset_of!(F, mtime_ns),
        offset_of!(F, ctime_ns),
        offset_of!(F, path_hash),
        offset_of!(F, busy),
        offset_of!(F, path),
        size_of::<M>(),
        offset_of!(M, file_offset),
        offset_of!(M, length),
        offset_of!(M, id),
        offset_of!(M, in_spill),
        offset_of!(M, offset),
        size_of::<raw::cairn_store_stat>(),
        size_of::<raw::FileHandle>(),
        size_of::<raw::cairn_store_usage>(),
        size_of::<raw::cairn_store_config>(),
    ]
    .into_iter()
    .map(|x| x as u64)
    .chain([
        raw::STORE_MAGIC,
        raw::STORE_VERSION as u64,
        raw::PATH_MAX as u64,
        raw::MAX_NUMA as u64,
        raw::BUSY_SLOTS as u64,
        raw::SPILL_HEADER,
    ])
    .chain(
        [
            offset_of!(F, writes_started),
            offset_of!(F, writes_done),
            offset_of!(raw::cairn_store_stat, writes_started),
            offset_of!(raw::cairn_store_stat, writes_done),
        ]
        .map(|x| x as u64),
    )
    .collect();
    assert_eq!(v, rust, "store.h and raw.rs disagree (C first)");
}

#[test]
fn names_and_normalisation() {
    assert_eq!(
        store_name(1000, "job 7/x", StoreOwner::Node(3)),
        "/cairn-1000-job_7_x-n3"
    );
    assert_eq!(
        store_name(0, "", StoreOwner::Process(12)),
        "/cairn-0-local-p12"
    );
    assert_eq!(normalize("/a/./b//c/../d/").unwrap(), "a/b/d");
    assert_eq!(normalize("").unwrap(), "");
    assert_eq!(normalize("a/..").unwrap(), "");
    assert_eq!(normalize("../x").unwrap_err().errno, libc::EXDEV);
    assert_eq!(
        normalize(&"x".repeat(300)).unwrap_err().errno,
        libc::ENAMETOOLONG
    );
}

#[test]
fn round_trip_over_chunk_boundaries_and_holes() {
    let sc = Scratch::new("rt");
    let s = Store::open(&sc.config(8 << 20, 64 << 10)).unwrap();
    let h = s.header();
    assert_eq!(h.magic, raw::STORE_MAGIC);
    assert_eq!(h.mem_chunks, 128);
    let f = s.create("d/a", false).unwrap();
    let data = pattern(300_001, 1);
    // Written in uneven pieces that straddle chunk boundaries.
    let mut off = 0;
    for piece in data.chunks(7919) {
        s.write_all_at(f, piece, off).unwrap();
        off += piece.len() as u64;
    }
    let mut back = vec![0u8; data.len()];
    s.read_exact_at(f, &mut back, 0).unwrap();
    assert_eq!(back, data);
    let st = s.fstat(f).unwrap();
    assert_eq!(st.size, data.len() as u64);
    let n = data.chunks(7919).count() as u64;
    assert_eq!(st.writes, (n, n));
    // A read past the end is short, not an error.
    let mut tail = vec![0u8; 100];
    assert_eq!(s.pread(f, &mut tail, data.len() as u64 - 10).unwrap(), 10);
    // A write past the end leaves zeros in between, even where chunks held old bytes.
    s.truncate(f, 1000).unwrap();
    s.write_all_at(f, b"end", 200_000).unwrap();
    let mut all = vec![0u8; 200_003];
    s.read_exact_at(f, &mut all, 0).unwrap();
    assert_eq!(&all[..1000], &data[..1000]);
    assert!(all[1000..200_000].iter().all(|b| *b == 0));
    assert_eq!(&all[200_000..], b"end");
    // Truncation frees chunks.
    let before = s.usage().unwrap().mem_free;
    s.truncate(f, 0).unwrap();
    assert!(s.usage().unwrap().mem_free > before);
}

#[test]
fn a_second_attach_sees_the_files_and_keeps_its_sizes() {
    let sc = Scratch::new("attach");
    let data = pattern(1 << 20, 2);
    {
        let s = Store::open(&sc.config(4 << 20, 64 << 10)).unwrap();
        let f = s.create("x", false).unwrap();
        s.write_all_at(f, &data, 0).unwrap();
    }
    // Other sizes asked: the existing store wins.
    let s = Store::open(&sc.config(64 << 20, 1 << 20)).unwrap();
    assert_eq!(s.header().chunk_size, 64 << 10);
    let f = s.open_existing("x").unwrap();
    let mut back = vec![0u8; data.len()];
    s.read_exact_at(f, &mut back, 0).unwrap();
    assert_eq!(back, data);
    let mut cfg = sc.config(4 << 20, 64 << 10);
    cfg.create = false;
    cfg.name = format!("{}-missing", sc.name);
    let e = Store::open(&cfg).unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    assert!(e.to_string().contains("no store"), "{e}");
}

#[test]
fn the_segment_is_private_to_the_user() {
    let sc = Scratch::new("mode");
    let _s = Store::open(&sc.config(1 << 20, 64 << 10)).unwrap();
    let meta = std::fs::metadata(format!("/dev/shm{}", sc.name)).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), unsafe { libc::getuid() });
}

#[test]
fn spill_over_and_enospc_harm_nothing_stored() {
    let mut sc = Scratch::new("spill");
    let mut cfg = sc.config(4 * 65536, 65536);
    sc.with_spill(&mut cfg, 6 * 65536);
    let s = Store::open(&cfg).unwrap();
    let spill = sc.spill.clone().unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&spill).unwrap().mode() & 0o777, 0o600);
    // 7 chunks: 4 in memory, 3 in the spill file.
    let a = pattern(7 * 65536 - 5, 3);
    let fa = s.create("a", false).unwrap();
    s.write_all_at(fa, &a, 0).unwrap();
    let metas = s.chunks(fa).unwrap();
    assert_eq!(metas.len(), 7);
    assert_eq!(metas.iter().filter(|m| m.in_spill != 0).count(), 3);
    // Zero-copy reads give the same bytes as pread.
    let mut drained = Vec::new();
    for m in &metas {
        let mut buf = vec![0u8; m.length as usize];
        s.read_chunk(m, &mut buf).unwrap();
        drained.extend_from_slice(&buf);
    }
    assert_eq!(drained, a);
    // 3 chunks are left: a 4-chunk write stores 3 and says so; the next one fails.
    let fb = s.create("b", false).unwrap();
    let b = pattern(4 * 65536, 4);
    assert_eq!(s.pwrite(fb, &b, 0).unwrap(), 3 * 65536);
    let e = s.pwrite(fb, &b[3 * 65536..], 3 * 65536).unwrap_err();
    assert_eq!(e.errno, libc::ENOSPC);
    let e = s
        .write_all_at(s.create("c", false).unwrap(), b"x", 0)
        .unwrap_err();
    assert_eq!(e.errno, libc::ENOSPC);
    let mut back = vec![0u8; a.len()];
    s.read_exact_at(fa, &mut back, 0).unwrap();
    assert_eq!(back, a);
    assert_eq!(s.fstat(fb).unwrap().size, 3 * 65536);
    let u = s.usage().unwrap();
    assert_eq!((u.mem_free, u.spill_free), (0, 0));
    // Removing a file gives its chunks back.
    s.unlink("b").unwrap();
    let u = s.usage().unwrap();
    assert_eq!(u.mem_free + u.spill_free, 3);
    // A lost spill file (e.g. a wiped disk): the pool chunks still read, spill chunks are
    // I/O errors, never other bytes.
    drop(s);
    std::fs::remove_file(&spill).unwrap();
    let s = Store::open(&cfg).unwrap();
    let fa = s.open_existing("a").unwrap();
    let mut first = vec![0u8; 4 * 65536];
    s.read_exact_at(fa, &mut first, 0).unwrap();
    assert_eq!(first, a[..4 * 65536]);
    let mut rest = vec![0u8; 65536];
    assert_eq!(
        s.pread(fa, &mut rest, 5 * 65536).unwrap_err().errno,
        libc::EIO
    );
    // And no new chunk is taken from the missing spill file.
    assert_eq!(s.usage().unwrap().spill_free, 0);
}

#[test]
fn names_directories_and_renames() {
    let sc = Scratch::new("names");
    let s = Store::open(&sc.config(2 << 20, 64 << 10)).unwrap();
    let f = s.create("ck/v1/rank0.tmp", false).unwrap();
    s.write_all_at(f, b"part", 0).unwrap();
    // Implied directories.
    assert_eq!(s.stat("ck").unwrap().kind, FileType::Dir);
    assert_eq!(s.stat("ck/v1").unwrap().kind, FileType::Dir);
    assert_eq!(s.stat("").unwrap().kind, FileType::Dir);
    assert_eq!(s.stat("ck/v2").unwrap_err().errno, libc::ENOENT);
    // Atomic publish by rename keeps the handle's data.
    s.rename("ck/v1/rank0.tmp", "ck/v1/rank0").unwrap();
    assert_eq!(
        s.read_dir("ck/v1").unwrap(),
        vec![("rank0".into(), FileType::File)]
    );
    let mut b = [0u8; 4];
    s.read_exact_at(f, &mut b, 0).unwrap();
    assert_eq!(&b, b"part");
    // Replacing rename frees the old file.
    let g = s.create("ck/v1/new", false).unwrap();
    s.write_all_at(g, b"newer", 0).unwrap();
    s.rename("ck/v1/new", "ck/v1/rank0").unwrap();
    assert_eq!(s.fstat(f).unwrap_err().errno, libc::ESTALE);
    assert_eq!(s.stat("ck/v1/rank0").unwrap().size, 5);
    // Directory rename moves everything under it.
    s.mkdir("ck/v1/empty").unwrap();
    s.rename("ck/v1", "ck/v9").unwrap();
    assert_eq!(s.walk("").unwrap(), vec!["ck/v9/rank0".to_string()]);
    assert_eq!(s.stat("ck/v9/empty").unwrap().kind, FileType::Dir);
    let mut names: Vec<String> = s
        .read_dir("ck/v9")
        .unwrap()
        .into_iter()
        .map(|x| x.0)
        .collect();
    names.sort();
    assert_eq!(names, vec!["empty", "rank0"]);
    // Errors name the right condition.
    assert_eq!(s.rmdir("ck/v9").unwrap_err().errno, libc::ENOTEMPTY);
    assert_eq!(s.unlink("ck/v9").unwrap_err().errno, libc::EISDIR);
    assert_eq!(
        s.create("ck/v9/rank0/x", false).unwrap_err().errno,
        libc::ENOTDIR
    );
    assert_eq!(s.mkdir("ck").unwrap_err().errno, libc::EEXIST);
    assert_eq!(
        s.open_file("ck/v9/rank0", raw::O_CREAT | raw::O_EXCL, 0o600)
            .unwrap_err()
            .errno,
        libc::EEXIST
    );
    s.rmdir("ck/v9/empty").unwrap();
    s.unlink("ck/v9/rank0").unwrap();
    assert!(s.walk("").unwrap().is_empty());
    assert_eq!(s.usage().unwrap().files_used, 0);
}

#[test]
fn concurrent_writers_from_threads() {
    let sc = Scratch::new("threads");
    let s = Store::open(&sc.config(32 << 20, 64 << 10)).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let s = &s;
            scope.spawn(move || {
                let f = s.create(&format!("t{t}"), false).unwrap();
                let d = pattern(3 << 20, 10 + t);
                for (i, piece) in d.chunks(100_000).enumerate() {
                    s.write_all_at(f, piece, i as u64 * 100_000).unwrap();
                }
            });
        }
    });
    for t in 0..4u64 {
        let f = s.open_existing(&format!("t{t}")).unwrap();
        let mut back = vec![0u8; 3 << 20];
        s.read_exact_at(f, &mut back, 0).unwrap();
        assert_eq!(back, pattern(3 << 20, 10 + t), "file t{t}");
    }
}

/// Run by `a_process_killed_inside_the_lock_is_repaired` in a child process: create,
/// write and remove files forever (most of the time inside the store's lock).
#[test]
#[ignore = "child process of another test"]
fn child_hammer() {
    let Ok(name) = std::env::var("CAIRN_SHM_HAMMER") else {
        return;
    };
    let s = Store::open(&StoreConfig::new(&name, 4 << 20, 4096)).unwrap();
    println!("ready");
    let mut i = 0u64;
    loop {
        let p = format!("h/{}", i % 50);
        if let Ok(f) = s.create(&p, false) {
            let _ = s.write_all_at(f, &[i as u8; 5000], 0);
        }
        let _ = s.stat("no/such/file");
        if i % 3 == 0 {
            let _ = s.unlink(&p);
        }
        i += 1;
    }
}

#[test]
fn a_process_killed_inside_the_lock_is_repaired() {
    let sc = Scratch::new("kill");
    let mut cfg = sc.config(4 << 20, 4096);
    cfg.max_files = 4096;
    let s = Store::open(&cfg).unwrap();
    let keep = pattern(100_000, 9);
    let f = s.create("keep", false).unwrap();
    s.write_all_at(f, &keep, 0).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut repaired = false;
    for round in 0..20 {
        let mut child = Command::new(&exe)
            .args(["--exact", "tests::child_hammer", "--ignored", "--nocapture"])
            .env("CAIRN_SHM_HAMMER", &sc.name)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("ready") {
            line.clear();
            use std::io::BufRead;
            assert!(out.read_line(&mut line).unwrap() > 0, "child ended");
        }
        std::thread::sleep(std::time::Duration::from_millis(30 + 7 * round));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The next lock finds the mutex of a dead owner and repairs before going on.
        let u = s.usage().unwrap();
        repaired |= u.repairs > 0;
        // Consistency: every chunk is either free or on exactly one file's chain.
        let used: u64 = s
            .walk("")
            .unwrap()
            .iter()
            .map(|p| {
                let st = s.stat(p).unwrap();
                // The killed process's write, if one was in flight, counts as ended.
                assert_eq!(st.writes.0, st.writes.1, "round {round}: {p}");
                st.chunks
            })
            .sum();
        assert_eq!(
            u.mem_free + used,
            u.mem_chunks,
            "round {round}: chunks lost or doubled"
        );
        let mut back = vec![0u8; keep.len()];
        s.read_exact_at(f, &mut back, 0).unwrap();
        assert_eq!(back, keep, "round {round}: a file nobody touched changed");
        if repaired && round >= 3 {
            break;
        }
    }
    assert!(repaired, "no kill landed inside the lock in 20 rounds");
}

/// The NUMA node the kernel reports for the page at `addr`, or the negative errno it gives
/// (`-ENOENT`: the page is not present).
fn page_node(addr: *const u8) -> i32 {
    let pages = [addr as *mut libc::c_void];
    let mut status = [i32::MIN];
    // SAFETY: move_pages with a null node list only reports where the pages are; the arrays
    // hold one entry each.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1usize,
            pages.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    assert_eq!(r, 0, "move_pages: {}", std::io::Error::last_os_error());
    status[0]
}

#[test]
fn pool_pages_are_resident_from_creation_and_on_their_chunks_node() {
    let sc = Scratch::new("numa");
    let s = Store::open(&sc.config(8 << 20, 64 << 10)).unwrap();
    let h = s.header();
    let nodes = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    assert!(
        h.numa_nodes >= 1 && h.numa_nodes as usize <= raw::MAX_NUMA,
        "{nodes}"
    );
    // Every chunk belongs to exactly one node's range.
    let covered: u32 = (0..h.numa_nodes as usize).map(|i| h.numa_count[i]).sum();
    assert_eq!(covered, h.mem_chunks);
    // Nothing was written: every page of the pool must already be in memory (allocated when
    // the store was created: mincore reports the shared-memory pages themselves, mapped in
    // this process or not), and once touched, on the node whose range holds its chunk (with
    // one node, node 0).
    let base = s.chunk_base();
    let pool = h.mem_chunks as usize * h.chunk_size as usize;
    let mut resident = vec![0u8; pool / 4096];
    // SAFETY: the pool range is mapped; the vector has one byte per page.
    let r = unsafe {
        libc::mincore(
            base.add(h.data_offset as usize) as *mut libc::c_void,
            pool,
            resident.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    let absent = resident.iter().filter(|b| **b & 1 == 0).count();
    assert_eq!(
        absent,
        0,
        "{absent} of {} pool pages not in memory",
        resident.len()
    );
    for id in (0..h.mem_chunks).step_by(7) {
        let node = (0..h.numa_nodes as usize)
            .find(|&i| id >= h.numa_first[i] && id < h.numa_first[i] + h.numa_count[i])
            .unwrap();
        for page in [0u64, h.chunk_size - 4096] {
            // SAFETY: the address lies inside the mapped pool; reading maps the page here.
            let at =
                unsafe { base.add((h.data_offset + id as u64 * h.chunk_size + page) as usize) };
            // SAFETY: as above.
            let _ = unsafe { std::ptr::read_volatile(at) };
            assert_eq!(page_node(at), node as i32, "chunk {id} page {page}");
        }
    }
}

/// Page-table entries this process has for the pool, counted with move_pages (-ENOENT: not
/// mapped here).
fn mapped_pages(s: &Store, first: u64, pages: u64) -> usize {
    let h = s.header();
    let base = s.chunk_base();
    (0..pages)
        .filter(|p| {
            // SAFETY: inside the mapped pool.
            let at = unsafe { base.add((h.data_offset + (first + p) * 4096) as usize) };
            page_node(at) >= 0
        })
        .count()
}

#[test]
fn attaching_maps_no_pool_pages_and_a_write_maps_its_chunks_at_once() {
    let sc = Scratch::new("lazy");
    let s = Store::open(&sc.config(8 << 20, 64 << 10)).unwrap();
    let chunk_pages = (64 << 10) / 4096;
    // A fresh attach (another process, here another handle) pays nothing for the pool.
    let t = Store::open(&sc.config(8 << 20, 64 << 10)).unwrap();
    assert_eq!(mapped_pages(&t, 0, 4 * chunk_pages), 0);
    // Writing one byte into a chunk fills the page tables of the whole chunk in one go.
    let f = t.create("x", false).unwrap();
    t.write_all_at(f, b"x", 0).unwrap();
    let id = t.chunks(f).unwrap()[0].id as u64;
    assert_eq!(
        mapped_pages(&t, id * chunk_pages, chunk_pages),
        chunk_pages as usize
    );
    drop(s);
}
